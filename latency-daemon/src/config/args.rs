//! The settings of `run` as every source writes them: [`RunArgs`] is at once the `run` flags, the
//! `RUNQLAT_*` variables and the `--config` file's schema, with the parsers each value goes through
//! (so a value means the same in all three). Plain clap/serde types; `config` merges and checks.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use clap::builder::BoolishValueParser;
use serde::Deserialize;

/// Settings of `run` from one source. The same struct is the schema of the `--config` file
/// (key = field name) and of the `RUNQLAT_<FIELD>` variables (see `config`), so a flag, its key
/// and its variable cannot drift apart. No field has a clap default: "not given" must stay visible
/// so that the environment, the file or the built-in default can fill it, in that order.
#[derive(Clone, Debug, Default, Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[command(after_help = "Every setting except --config can also be given in the environment as \
    RUNQLAT_<NAME> (e.g. RUNQLAT_TOP_CGROUPS=50) or in the --config file as <name> (e.g. top_cgroups = 50). \
    A flag wins over the environment, which wins over the file.")]
pub struct RunArgs {
    /// TOML file with any of the settings below (env RUNQLAT_CONFIG)
    #[arg(long, value_name = "PATH")]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Where to serve /metrics; `:PORT` means every IPv4 interface [default: 0.0.0.0:9954]
    #[arg(long, visible_alias = "web.listen-address", value_name = "ADDR:PORT", value_parser = parse_listen)]
    #[serde(deserialize_with = "super::format::de_listen")]
    pub listen: Option<SocketAddr>,

    /// exporter-toolkit web configuration (YAML: tls_server_config, basic_auth_users,
    /// http_server_config.headers) for every endpoint; re-read on SIGHUP; without it, plain HTTP and no auth [default: off]
    #[arg(long, visible_alias = "web.config.file", value_name = "PATH")]
    pub web_config_file: Option<PathBuf>,

    /// Requests handled at once, all endpoints together; more are answered 503 at once [default: 40]
    #[arg(long, visible_alias = "web.max-requests", value_name = "N")]
    pub web_max_requests: Option<usize>,

    /// Connections open at once (idle, slow or busy); more are answered 503 [default: 1024]
    #[arg(long, visible_alias = "web.max-connections", value_name = "N")]
    pub web_max_connections: Option<usize>,

    /// How often to read the kernel's counters [default: 1s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "super::format::de_duration")]
    pub interval: Option<Duration>,

    /// Span of the window maximum and quantiles; a whole multiple of --interval [default: 15s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "super::format::de_duration")]
    pub window: Option<Duration>,

    /// Cgroups exported individually, the slowest first [default: 20]
    #[arg(long, value_name = "N")]
    pub top_cgroups: Option<usize>,

    /// Capacity of the kernel's per-cgroup histogram maps (slots and overflow) [default: 1024]
    #[arg(long, value_name = "N")]
    pub max_cgroups: Option<u32>,

    /// Upper bounds (seconds) of the classic histogram, each a bucket boundary 2^(i/8)
    /// [default: 2^-20, 2^-19, …, 2^6]
    #[arg(long, value_name = "SECONDS,…", value_delimiter = ',')]
    pub classic_buckets: Option<Vec<f64>>,

    /// Upper bounds (seconds) of the per-cgroup histograms, from 2^-20, 2^-18, …, 2^6
    /// [default: all 14]
    #[arg(long, value_name = "SECONDS,…", value_delimiter = ',')]
    pub cgroup_buckets: Option<Vec<f64>>,

    /// Keep a histogram per cgroup v2 of the task that waited (an array store per delay)
    /// [default: true]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_parser = BoolishValueParser::new())]
    pub per_cgroup: Option<bool>,

    /// Keep per-task statistics in the kernel (a hash update per context switch) [default: false]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_parser = BoolishValueParser::new())]
    pub per_task: Option<bool>,

    /// Capacity of the kernel's per-task map, used with --per-task [default: 32768]
    #[arg(long, value_name = "N")]
    pub max_tasks: Option<u32>,

    /// Delays above this are discarded and counted instead of recorded [default: 10m]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "super::format::de_duration")]
    pub ceiling: Option<Duration>,

    /// Clock for stamps, as for `record` (see `record --help`) [default: monotonic]
    #[arg(long, value_enum, value_name = "CLOCK")]
    #[serde(deserialize_with = "super::format::de_clock")]
    pub clock: Option<ClockArg>,

    /// Alert when a run-queue delay exceeds this (e.g. 20ms); the file can also set it per reason
    /// (alert_reason_max_delay) and per cgroup (alert_cgroup_max_delay) [default: off]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "super::format::de_duration")]
    pub alert_max_delay: Option<Duration>,

    /// File only: thresholds per reason, over alert_max_delay, e.g. { wakeup = "20ms", preempt = "5ms" }
    #[arg(skip)]
    pub alert_reason_max_delay: Option<std::collections::BTreeMap<String, String>>,

    /// File only: thresholds per cgroup v2 path, over the others, e.g. { "/system.slice" = "50ms" }
    #[arg(skip)]
    pub alert_cgroup_max_delay: Option<std::collections::BTreeMap<String, String>>,

    /// Consecutive windows (each --window long) with a delay over the threshold before an alert
    /// fires, 1 to 100 [default: 1]
    #[arg(long, value_name = "N")]
    pub alert_for: Option<u32>,

    /// Consecutive windows without one before a firing alert resolves, 1 to 100 [default: 2]
    #[arg(long, value_name = "N")]
    pub alert_resolve_after: Option<u32>,

    /// After an alert resolves, it cannot fire again for this long; 0s turns this off [default: 1m]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_or_zero)]
    #[serde(deserialize_with = "super::format::de_duration_or_zero")]
    pub alert_cooldown: Option<Duration>,

    /// Alertmanager to send alerts to, as http[s]://HOST:PORT; repeatable or comma-separated.
    /// Shown with user information and query hidden
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    #[serde(deserialize_with = "super::format::de_urls")]
    pub alertmanager_url: Option<Vec<String>>,

    /// URL to POST each alert's firing and resolution to as JSON, http[s]://; repeatable or
    /// comma-separated. Shown with user information and query hidden
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    #[serde(deserialize_with = "super::format::de_urls")]
    pub alert_webhook: Option<Vec<String>>,

    /// How often active alerts are sent to Alertmanager again, at least 100ms [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    #[serde(deserialize_with = "super::format::de_duration")]
    pub alert_resend: Option<Duration>,

    /// The alerts' `severity` label [default: warning]
    #[arg(long, value_name = "TEXT")]
    pub alert_severity: Option<String>,

    /// Least severe log events written: debug, info, warn or error [default: info]
    #[arg(long, visible_alias = "log.level", value_enum, value_name = "LEVEL")]
    #[serde(deserialize_with = "super::format::de_choice")]
    pub log_level: Option<LogLevel>,

    /// How log events are written to stderr, one per line: logfmt or json [default: logfmt]
    #[arg(long, visible_alias = "log.format", value_enum, value_name = "FORMAT")]
    #[serde(deserialize_with = "super::format::de_choice")]
    pub log_format: Option<LogFormat>,

    /// PEM file of the CAs that sign https:// sinks' certificates; without it, the system bundle
    /// [default: off]
    #[arg(long, value_name = "PATH")]
    pub alert_ca_file: Option<PathBuf>,

    /// User name of HTTP basic auth for every sink (with --alert-basic-auth-password-file)
    /// [default: off]
    #[arg(long, value_name = "NAME")]
    pub alert_basic_auth_user: Option<String>,

    /// File holding the basic auth password (its first line); never a flag's value [default: off]
    #[arg(long, value_name = "PATH")]
    pub alert_basic_auth_password_file: Option<PathBuf>,

    /// File holding a bearer token sent to every sink (its first line) [default: off]
    #[arg(long, value_name = "PATH")]
    pub alert_bearer_token_file: Option<PathBuf>,

    /// procfs of the host's PID namespace (hostPID in a container): pid_max, kernel release, host
    /// name, this process's mount table [default: /proc]
    #[arg(long, visible_alias = "path.procfs", value_name = "PATH")]
    pub path_procfs: Option<PathBuf>,

    /// sysfs mount point: the kernel's BTF (kernel/btf/vmlinux) [default: /sys]
    #[arg(long, visible_alias = "path.sysfs", value_name = "PATH")]
    pub path_sysfs: Option<PathBuf>,

    /// cgroupfs mount point: the cgroup2 mount at or below it in this process's mount table names
    /// the cgroups [default: /sys/fs/cgroup]
    #[arg(long, visible_alias = "path.cgroupfs", value_name = "PATH")]
    pub path_cgroupfs: Option<PathBuf>,

    /// The host's root: container runtimes' state (run/containerd, var/lib/containers, …) is read
    /// below it [default: /]
    #[arg(long, visible_alias = "path.rootfs", value_name = "PATH")]
    pub path_rootfs: Option<PathBuf>,
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
