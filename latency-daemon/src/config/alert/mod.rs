//! The `alert_*` settings: merged sources in, an [`AlertConfig`] out (problems noted, each naming
//! its key), and from it the engine's [`Rules`] and the kernel's attribution threshold; also which
//! of them a reload may change while the kernel program keeps running.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use latency_common::maps::Reason;
use serde::Serialize;

use super::Problem;
use super::args::{self, RunArgs};
use super::format;
use crate::alert::engine::Rules;
use crate::model::sink_url::{HttpUrl, redact};
use crate::net::credentials::{Auth, Secret};

const FOR_WINDOWS: RangeInclusive<u32> = 1..=100;
const RESOLVE_AFTER: RangeInclusive<u32> = 1..=100;
/// Below this, re-sending is a busy loop against Alertmanager, which only needs to hear from us
/// well within its `resolve_timeout` (5m by default).
const MIN_RESEND: Duration = Duration::from_millis(100);
/// A label value, not a description; Alertmanager routes match on it.
const MAX_SEVERITY_BYTES: usize = 64;

/// Alerting settings. Serialized under the same keys as the file (flattened into `Config`), so
/// the landing page shows what an operator would write.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AlertConfig {
    /// Threshold for any delay; None: only the overrides below apply (if any).
    #[serde(rename = "alert_max_delay", serialize_with = "format::ser_opt_duration")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_delay: Option<Duration>,
    /// Per reason, indexed by `Reason as usize` ([wakeup, preempt]); overrides `max_delay`.
    #[serde(rename = "alert_reason_max_delay", serialize_with = "format::ser_per_reason")]
    #[serde(skip_serializing_if = "none_set")]
    pub per_reason: [Option<Duration>; Reason::COUNT],
    /// Per cgroup v2 path, sorted by path; overrides the others for tasks in that cgroup.
    #[serde(rename = "alert_cgroup_max_delay", serialize_with = "format::ser_per_cgroup")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_cgroup: Vec<(String, Duration)>,
    /// Consecutive windows over a threshold before firing.
    #[serde(rename = "alert_for")]
    pub for_windows: u32,
    /// Consecutive windows under it before resolving.
    #[serde(rename = "alert_resolve_after")]
    pub resolve_after: u32,
    /// After resolving, the same alert does not fire again for this long (zero: at once).
    #[serde(rename = "alert_cooldown", serialize_with = "format::ser_duration")]
    pub cooldown: Duration,
    /// Alertmanager base URLs (`http[s]://[user:password@]host[:port][/path]`); shown redacted.
    #[serde(rename = "alertmanager_url", serialize_with = "ser_redacted")]
    pub alertmanagers: Vec<String>,
    /// Webhook URLs, same form.
    #[serde(rename = "alert_webhook", serialize_with = "ser_redacted")]
    pub webhooks: Vec<String>,
    /// How often active alerts are sent to Alertmanager again.
    #[serde(rename = "alert_resend", serialize_with = "format::ser_duration")]
    pub resend: Duration,
    /// The `severity` label.
    #[serde(rename = "alert_severity")]
    pub severity: String,
    /// PEM file of the CAs of https:// sinks; None: the system bundle.
    #[serde(rename = "alert_ca_file", skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    #[serde(rename = "alert_basic_auth_user", skip_serializing_if = "Option::is_none")]
    pub basic_auth_user: Option<String>,
    #[serde(rename = "alert_basic_auth_password_file", skip_serializing_if = "Option::is_none")]
    pub basic_auth_password_file: Option<PathBuf>,
    #[serde(rename = "alert_bearer_token_file", skip_serializing_if = "Option::is_none")]
    pub bearer_token_file: Option<PathBuf>,
    /// What `ca_file` held, read with the configuration (so a reload re-reads it).
    #[serde(skip)]
    pub ca_pem: Option<String>,
    /// The credentials the files above held. Never shown.
    #[serde(skip)]
    pub auth: Option<Auth>,
}

/// URLs as they may be shown: user information and query hidden.
fn ser_redacted<S: serde::Serializer>(urls: &[String], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(urls.iter().map(|u| redact(u)))
}

fn none_set(per_reason: &[Option<Duration>; Reason::COUNT]) -> bool {
    per_reason.iter().all(Option::is_none)
}

impl Default for AlertConfig {
    fn default() -> Self {
        AlertConfig {
            max_delay: None,
            per_reason: [None; Reason::COUNT],
            per_cgroup: Vec::new(),
            for_windows: 1,
            // One clean window can be luck; two make a resolution that sticks.
            resolve_after: 2,
            cooldown: Duration::from_secs(60),
            alertmanagers: Vec::new(),
            webhooks: Vec::new(),
            // Well inside Alertmanager's default resolve_timeout (5m): a firing alert it has not
            // heard of again by then counts as resolved.
            resend: Duration::from_secs(30),
            severity: "warning".to_owned(),
            ca_file: None,
            basic_auth_user: None,
            basic_auth_password_file: None,
            bearer_token_file: None,
            ca_pem: None,
            auth: None,
        }
    }
}

impl AlertConfig {
    /// Whether any threshold is set.
    pub fn enabled(&self) -> bool {
        self.max_delay.is_some() || self.per_reason.iter().any(Option::is_some) || !self.per_cgroup.is_empty()
    }

    /// The engine's view: the same thresholds and timing, in nanoseconds.
    pub fn rules(&self) -> Rules {
        Rules {
            max_delay_ns: self.max_delay.map(ns),
            per_reason_ns: self.per_reason.map(|d| d.map(ns)),
            per_cgroup_ns: self.per_cgroup.iter().map(|(path, d)| (path.clone(), ns(*d))).collect(),
            for_windows: self.for_windows,
            resolve_after: self.resolve_after,
            cooldown_ns: ns(self.cooldown),
        }
    }

    /// The lowest threshold anywhere in ns, 0 when alerting is off: loaded into the kernel
    /// program, which attributes delays at or above it.
    pub fn attribute_ns(&self) -> u64 {
        self.rules().lowest().unwrap_or(0)
    }

    /// Every threshold with the key that set it and, for overrides, what it applies to.
    fn thresholds(&self) -> impl Iterator<Item = (&'static str, Option<String>, Duration)> + '_ {
        let global = self.max_delay.map(|d| ("alert_max_delay", None, d));
        let reasons = Reason::ALL
            .iter()
            .zip(&self.per_reason)
            .filter_map(|(r, d)| Some(("alert_reason_max_delay", Some(r.name().to_owned()), (*d)?)));
        let cgroups = self.per_cgroup.iter().map(|(p, d)| ("alert_cgroup_max_delay", Some(quote(p)), *d));
        global.into_iter().chain(reasons).chain(cgroups)
    }
}

/// Thresholds are well below `u64::MAX` ns (585 years); only a huge cooldown saturates.
fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Each `alert_*` setting from `merged`, else its default; problems of the file-only tables (keys,
/// duration text) are appended here, everything else is `check`'s.
pub(super) fn resolve(merged: &RunArgs, problems: &mut Vec<Problem>) -> AlertConfig {
    let d = AlertConfig::default();
    let mut per_reason = d.per_reason;
    for (key, text) in merged.alert_reason_max_delay.iter().flatten() {
        let field = "alert_reason_max_delay";
        let Some(&reason) = Reason::ALL.iter().find(|r| r.name() == key) else {
            let names: Vec<&str> = Reason::ALL.iter().map(|r| r.name()).collect();
            let message = format!("unknown reason {}; expected {}", quote(key), names.join(" or "));
            problems.push(Problem::new(field, message));
            continue;
        };
        match args::parse_duration(text) {
            Ok(t) => per_reason[reason as usize] = Some(t),
            Err(e) => problems.push(Problem::new(field, format!("{key}: {e}"))),
        }
    }
    // A BTreeMap: already sorted by path, and TOML forbids a key twice.
    let mut per_cgroup = Vec::new();
    for (path, text) in merged.alert_cgroup_max_delay.iter().flatten() {
        match args::parse_duration(text) {
            Ok(t) => per_cgroup.push((path.clone(), t)),
            Err(e) => problems.push(Problem::new("alert_cgroup_max_delay", format!("{}: {e}", quote(path)))),
        }
    }
    AlertConfig {
        max_delay: merged.alert_max_delay.or(d.max_delay),
        per_reason,
        per_cgroup,
        for_windows: merged.alert_for.unwrap_or(d.for_windows),
        resolve_after: merged.alert_resolve_after.unwrap_or(d.resolve_after),
        cooldown: merged.alert_cooldown.unwrap_or(d.cooldown),
        alertmanagers: merged.alertmanager_url.clone().unwrap_or(d.alertmanagers),
        webhooks: merged.alert_webhook.clone().unwrap_or(d.webhooks),
        resend: merged.alert_resend.unwrap_or(d.resend),
        severity: merged.alert_severity.clone().unwrap_or(d.severity),
        ca_pem: read_file("alert_ca_file", merged.alert_ca_file.as_deref(), problems),
        auth: auth(merged, problems),
        ca_file: merged.alert_ca_file.clone(),
        basic_auth_user: merged.alert_basic_auth_user.clone(),
        basic_auth_password_file: merged.alert_basic_auth_password_file.clone(),
        bearer_token_file: merged.alert_bearer_token_file.clone(),
    }
}

/// A file's text, or a problem naming the key.
fn read_file(field: &'static str, path: Option<&Path>, problems: &mut Vec<Problem>) -> Option<String> {
    match super::file::read(path?) {
        Ok(text) => Some(text),
        Err(e) => {
            problems.push(Problem::new(field, e.to_string()));
            None
        }
    }
}

/// The sinks' credentials from their files: basic auth (user and password file together) or a
/// bearer token, not both. Only the first line counts, without its newline.
fn auth(merged: &RunArgs, problems: &mut Vec<Problem>) -> Option<Auth> {
    let secret = |field, path: Option<&Path>, problems: &mut Vec<Problem>| {
        read_file(field, path, problems).map(|t| Secret(t.lines().next().unwrap_or_default().to_owned()))
    };
    let user = merged.alert_basic_auth_user.clone();
    let password = secret("alert_basic_auth_password_file", merged.alert_basic_auth_password_file.as_deref(), problems);
    let token = secret("alert_bearer_token_file", merged.alert_bearer_token_file.as_deref(), problems);
    let basic_given = user.is_some() || merged.alert_basic_auth_password_file.is_some();
    if basic_given && merged.alert_bearer_token_file.is_some() {
        problems.push(Problem::new("alert_bearer_token_file", "give basic auth or a bearer token, not both"));
        return None;
    }
    match (user, password, token) {
        (_, _, Some(token)) => Some(Auth::Bearer(token)),
        (Some(user), Some(password), None) => Some(Auth::Basic { user, password }),
        (Some(_), None, None) if merged.alert_basic_auth_password_file.is_none() => {
            problems.push(Problem::new(
                "alert_basic_auth_user",
                "needs alert_basic_auth_password_file (passwords are read from files only)",
            ));
            None
        }
        (None, Some(_), None) => {
            problems.push(Problem::new("alert_basic_auth_password_file", "needs alert_basic_auth_user"));
            None
        }
        _ => None,
    }
}

/// Ranges, forms, and each threshold against the (running) `ceiling`.
pub(super) fn check(a: &AlertConfig, ceiling: Duration) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (field, scope, t) in a.thresholds() {
        let scope = scope.map(|s| format!("{s}: ")).unwrap_or_default();
        if t.is_zero() {
            problems.push(Problem::new(field, format!("{scope}must be greater than zero")));
        } else if !ceiling.is_zero() && t >= ceiling {
            // Equal cannot fire either: an alert needs a delay above the threshold, and the
            // kernel discards delays above the ceiling.
            problems.push(Problem::new(
                field,
                format!(
                    "{scope}{} is not below ceiling {}: delays above the ceiling are discarded, \
                     so it could never fire",
                    humantime::format_duration(t),
                    humantime::format_duration(ceiling)
                ),
            ));
        }
    }
    for (path, _) in &a.per_cgroup {
        if let Err(why) = check_cgroup_path(path) {
            problems.push(Problem::new("alert_cgroup_max_delay", why));
        }
    }
    let mut within = |field: &str, value: u32, range: &RangeInclusive<u32>| {
        if !range.contains(&value) {
            problems.push(Problem::new(field, format!("{value} is not in {}..={}", range.start(), range.end())));
        }
    };
    within("alert_for", a.for_windows, &FOR_WINDOWS);
    within("alert_resolve_after", a.resolve_after, &RESOLVE_AFTER);
    for (field, urls) in [("alertmanager_url", &a.alertmanagers), ("alert_webhook", &a.webhooks)] {
        for url in urls {
            if let Err(why) = check_url(url) {
                problems.push(Problem::new(field, format!("{}: {why}", quote(&redact(url)))));
            }
        }
    }
    if let Some(pem) = &a.ca_pem
        && let Err(why) = check_ca(pem)
    {
        problems.push(Problem::new("alert_ca_file", why));
    }
    if a.resend < MIN_RESEND {
        let (resend, min) = (humantime::format_duration(a.resend), humantime::format_duration(MIN_RESEND));
        problems.push(Problem::new("alert_resend", format!("{resend} is below {min}")));
    }
    let severity = &a.severity;
    let severity_problem = if severity.is_empty() {
        Some("must not be empty".to_owned())
    } else if severity.chars().any(char::is_control) {
        Some(format!("{} contains control characters", quote(severity)))
    } else if severity.len() > MAX_SEVERITY_BYTES {
        Some(format!("is {} bytes long; at most {MAX_SEVERITY_BYTES}", severity.len()))
    } else {
        None
    };
    problems.extend(severity_problem.map(|m| Problem::new("alert_severity", m)));
    problems
}

/// Adopts `new` except, when the kernel could not serve them, its thresholds: the kernel program
/// attributes only delays at or above the threshold it was loaded with, so a lower one (or any,
/// if alerting was off at start) would silently miss every delay in between. Sinks, severity and
/// timing apply at once, and so does turning alerting off.
pub(super) fn reload(new: &mut AlertConfig, running: &AlertConfig, needs_restart: &mut Vec<&'static str>) {
    let (loaded, wanted) = (running.attribute_ns(), new.attribute_ns());
    let servable = wanted == 0 || (loaded != 0 && wanted >= loaded);
    if !servable {
        needs_restart.push("alert thresholds");
        new.max_delay = running.max_delay;
        new.per_reason = running.per_reason;
        new.per_cgroup = running.per_cgroup.clone();
    }
}

/// Sink URLs given as command-line flags that carry `user:password@` or a query (`?token=…`): a
/// flag is readable by every user of the host in /proc/<pid>/cmdline, so either is refused (one
/// problem per flag, the URL redacted). The same URL is accepted from the environment or the
/// `--config` file, whose readers the operator controls; for a password there is also
/// `--alert-basic-auth-password-file`.
pub fn secrets_in_flags(flags: &RunArgs) -> Vec<Problem> {
    let sinks = [("alertmanager_url", &flags.alertmanager_url), ("alert_webhook", &flags.alert_webhook)];
    sinks
        .into_iter()
        .flat_map(|(field, urls)| urls.iter().flatten().map(move |url| (field, url)))
        .filter(|(_, url)| HttpUrl::parse(url).is_ok_and(|u| u.userinfo.is_some() || u.path.contains('?')))
        .map(|(field, url)| {
            Problem::new(
                field,
                format!(
                    "'{}': credentials or a query in a flag are readable by every user in /proc/<pid>/cmdline; \
                     give the URL in RUNQLAT_{} or the --config file (a password also with \
                     --alert-basic-auth-password-file)",
                    redact(url),
                    field.to_uppercase()
                ),
            )
        })
        .collect()
}

/// `http://host[:port][/path]`, as notify's client takes it: its own parser decides.
fn check_url(url: &str) -> Result<(), String> {
    HttpUrl::parse(url).map(|_| ()).map_err(|e| e.why)
}

/// The CA file as the sinks' client will take it (`net::ca_roots`, the same call).
fn check_ca(pem: &str) -> Result<(), String> {
    crate::net::ca_roots(pem).map(|_| ())
}

/// A cgroup v2 path as the daemon names cgroups: from the cgroup2 mount, "/" for the root, no
/// trailing or doubled '/' (it is compared as a string, so any other spelling would never match).
fn check_cgroup_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("path {} must start with '/' (a cgroup v2 path, e.g. /system.slice)", quote(path)));
    }
    if path.len() > 1 && path.ends_with('/') {
        return Err(format!("path {} must not end with '/'", quote(path)));
    }
    if path.contains("//") {
        return Err(format!("path {} has an empty component", quote(path)));
    }
    Ok(())
}

/// A value as messages show it: in single quotes, escaped so the message stays one line.
fn quote(s: &str) -> String {
    format!("'{}'", s.escape_debug())
}

#[cfg(test)]
mod tests;
