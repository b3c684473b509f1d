//! The value types and parsers of the settings (`args`' table names them per setting): the enums
//! a setting takes, durations, the ceiling's limit and listen addresses, each parsed the same way
//! from a flag, a variable or the file.
use std::net::SocketAddr;
use std::time::Duration;

/// `--otlp.compression`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OtlpCompression {
    #[default]
    Gzip,
    None,
}

/// `--otlp.temporality`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OtlpTemporality {
    #[default]
    Cumulative,
    Delta,
}

/// `--log.level`: events below it are not written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Debug,
    #[default]
    Info,
    Warn,
    Error,
}

/// `--log.format`: logfmt (`key=value`, as Prometheus and its exporters write) or one JSON object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Logfmt,
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClockArg {
    Monotonic,
    RunQueue,
}

impl From<ClockArg> for latency_common::knobs::Clock {
    fn from(c: ClockArg) -> Self {
        match c {
            ClockArg::Monotonic => latency_common::knobs::Clock::Monotonic,
            ClockArg::RunQueue => latency_common::knobs::Clock::RunQueue,
        }
    }
}

/// `alert_cooldown`'s parser: any duration in humantime syntax, zero included ("0s": no cooldown).
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| format!("'{s}': {e}"))
}

/// A positive duration in humantime syntax ("6s", "250ms", "1m30s").
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim()).map_err(|e| format!("'{s}': {e}"))?;
    if d.is_zero() {
        return Err(format!("'{s}': must be greater than zero"));
    }
    Ok(d)
}

/// The largest `ceiling`: the kernel's stamps keep time modulo twice it (2^40 ns, about 18
/// minutes), and it is below the top native bucket (2^(94/8) s, about 57 minutes), so every delay
/// recorded is exact and exportable.
pub const MAX_CEILING: Duration = Duration::from_nanos(latency_common::maps::MAX_CEILING_NS - 1);

/// Why `ceiling` cannot be this long, if it cannot.
pub fn ceiling_problem(d: Duration) -> Option<String> {
    if d.is_zero() {
        Some("must be greater than zero".to_owned())
    } else if d > MAX_CEILING {
        Some(format!(
            "{} is above the longest delay the kernel's stamps can hold, {:.0} s (about 18 minutes)",
            humantime::format_duration(d),
            MAX_CEILING.as_secs_f64()
        ))
    } else {
        None
    }
}

/// `ceiling`'s parser: a duration from 1 ns up to [`MAX_CEILING`].
pub fn parse_ceiling(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    ceiling_problem(d).map_or(Ok(d), |problem| Err(format!("'{s}': {problem}")))
}

/// An address to listen on; `:PORT` means every IPv4 interface, as node_exporter users type it
/// (IPv6 needs `[::]:PORT`, which fails where IPv6 is disabled, so it is not the default).
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    let full = if s.starts_with(':') { format!("0.0.0.0{s}") } else { s.to_owned() };
    full.parse().map_err(|_| format!("'{s}' is not IP:PORT or :PORT (e.g. 127.0.0.1:9954, [::]:9954, :9954)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("0s").unwrap_err().contains("greater than zero"));
        assert!(parse_duration("soon").unwrap_err().contains("'soon'"));
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(parse_listen(":9954"), Ok(SocketAddr::from(([0, 0, 0, 0], 9954))));
        assert_eq!(parse_listen("127.0.0.1:1"), Ok(SocketAddr::from(([127, 0, 0, 1], 1))));
        assert_eq!(parse_listen("[::]:9954"), Ok(SocketAddr::from(([0u16; 8], 9954))));
        assert!(parse_listen("localhost:9954").unwrap_err().contains("not IP:PORT"));
        assert!(parse_listen("9954").is_err());
    }
}
