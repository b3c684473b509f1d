//! How settings are written as text, both ways: the `--config` file's strings in (through the
//! flags' own parsers, so a value means the same everywhere), `Config` out as the landing page and
//! the file show it (durations in humantime, clocks by name, bucket bounds in seconds).

use std::net::SocketAddr;
use std::time::Duration;

use clap::ValueEnum;
use latency_common::knobs::Clock;
use latency_common::maps::Reason;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serializer};

use super::args::{self, ClockArg};
use super::buckets::CGROUP;
use crate::model::distribution::native_bound;

pub fn de_listen<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    parsed(d, args::parse_listen)
}

pub fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    parsed(d, args::parse_duration)
}

pub fn de_duration_or_zero<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    parsed(d, args::parse_duration_or_zero)
}

/// An array of URLs, or one string of comma-separated URLs as the flag and the variable take them.
/// Their checks are `check`'s, so that every bad URL is reported, from any source, at once.
pub fn de_urls<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged, expecting = "a URL string or an array of them")]
    enum Urls {
        One(String),
        Many(Vec<String>),
    }
    Ok(Some(match Urls::deserialize(d)? {
        Urls::One(s) => s.split(',').map(str::to_owned).collect(),
        Urls::Many(v) => v,
    }))
}

pub fn de_clock<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ClockArg>, D::Error> {
    parsed(d, |s| {
        ClockArg::from_str(s, false).map_err(|_| format!("'{s}' is not a clock; expected one of {}", clock_names()))
    })
}

/// Any clap value enum (`log_level`, `log_format`) by the name its flag takes.
pub fn de_choice<'de, D: Deserializer<'de>, T: ValueEnum>(d: D) -> Result<Option<T>, D::Error> {
    parsed(d, |s| {
        T::from_str(s, false).map_err(|_| {
            let names: Vec<String> =
                T::value_variants().iter().filter_map(|v| Some(v.to_possible_value()?.get_name().to_owned())).collect();
            format!("'{s}' is not one of {}", names.join(", "))
        })
    })
}

/// A string, then `parse`; TOML has no null, so a present key is always `Some`.
fn parsed<'de, D: Deserializer<'de>, T>(
    d: D,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, D::Error> {
    let s = String::deserialize(d)?;
    parse(&s).map(Some).map_err(D::Error::custom)
}

fn clock_names() -> String {
    let names: Vec<String> = ClockArg::value_variants()
        .iter()
        .filter_map(|c| c.to_possible_value())
        .map(|v| v.get_name().to_owned())
        .collect();
    names.join(", ")
}

pub fn ser_duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_duration(*d))
}

/// The name the flag and the file take (`run-queue`), from cli's enum so there is one spelling.
pub fn ser_clock<S: Serializer>(clock: &Clock, s: S) -> Result<S::Ok, S::Error> {
    let arg = ClockArg::value_variants().iter().find(|&&c| Clock::from(c) == *clock);
    match arg.and_then(|c| c.to_possible_value()) {
        Some(value) => s.serialize_str(value.get_name()),
        None => Err(serde::ser::Error::custom(format!("clock {clock:?} has no name"))),
    }
}

/// TOML has no null: an unset optional duration is left out (and so reads back unset).
pub fn ser_opt_duration<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => ser_duration(d, s),
        None => s.serialize_none(),
    }
}

/// Per-reason thresholds as the file writes them: `{ wakeup = "20ms", preempt = "5ms" }`, unset
/// reasons left out.
pub fn ser_per_reason<S: Serializer>(per_reason: &[Option<Duration>; Reason::COUNT], s: S) -> Result<S::Ok, S::Error> {
    let set = Reason::ALL.iter().zip(per_reason).filter_map(|(r, d)| Some((r.name(), (*d)?)));
    s.collect_map(set.map(|(name, d)| (name, humantime::format_duration(d).to_string())))
}

/// Per-cgroup thresholds as the file writes them: `{ "/system.slice" = "50ms" }`.
pub fn ser_per_cgroup<S: Serializer>(per_cgroup: &[(String, Duration)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(per_cgroup.iter().map(|(path, d)| (path, humantime::format_duration(*d).to_string())))
}

pub fn ser_classic_buckets<S: Serializer>(indices: &[i32], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(indices.iter().map(|&i| native_bound(i)))
}

pub fn ser_cgroup_buckets<S: Serializer>(steps: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(steps.iter().map(|&m| CGROUP.bound(i32::from(m))))
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    #[test]
    fn landing_page_shape() {
        let json = serde_json::to_value(Config::default()).unwrap();
        assert_eq!(json["listen"], "0.0.0.0:9954");
        assert_eq!(json["interval"], "1s");
        assert_eq!(json["window"], "15s");
        assert_eq!(json["ceiling"], "10m");
        assert_eq!(json["clock"], "monotonic");
        assert_eq!(json["classic_buckets"][0], 2f64.powi(-20));
        assert_eq!(json["classic_buckets"][26], 64.0);
        assert_eq!(json["cgroup_buckets"].as_array().unwrap().len(), 14);
        assert!(json.get("config_file").is_none());
        // Alerting, under the file's keys; unset thresholds are left out, as the file leaves them.
        assert_eq!(json["alert_for"], 1);
        assert_eq!(json["alert_resolve_after"], 2);
        assert_eq!(json["alert_cooldown"], "1m");
        assert_eq!(json["alertmanager_url"], serde_json::json!([]));
        assert_eq!(json["alert_resend"], "30s");
        assert_eq!(json["alert_severity"], "warning");
        for unset in ["alert_max_delay", "alert_reason_max_delay", "alert_cgroup_max_delay", "alert"] {
            assert!(json.get(unset).is_none(), "{unset}");
        }
        let run_queue = Config { clock: latency_common::knobs::Clock::RunQueue, ..Config::default() };
        assert_eq!(serde_json::to_value(run_queue).unwrap()["clock"], "run-queue");
    }
}
