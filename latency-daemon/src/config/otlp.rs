//! The `otlp_*` settings, with the standard `OTEL_*` variables filling what they leave unset:
//! merged sources and the environment in, an [`OtlpConfig`] out (problems noted, each naming its
//! key). Headers, keys and a URL's credentials are read here and never shown.
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::args::{OtlpCompression, OtlpTemporality, RunArgs};
use super::{Env, Problem, format};
use crate::model::sink_url::{HttpUrl, redact};
use crate::net::credentials::Secret;

const TIMEOUT: std::ops::RangeInclusive<Duration> = Duration::from_millis(100)..=Duration::from_secs(60);
const QUEUE: std::ops::RangeInclusive<usize> = 1..=1000;
/// Headers a user may not set: the client writes them, and a second copy would confuse receivers.
const OWN_HEADERS: [&str; 5] = ["host", "content-length", "content-type", "content-encoding", "connection"];

/// The OTLP exporter's settings (off without an endpoint). Serialized under the file's keys.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OtlpConfig {
    /// The metrics endpoint; shown redacted.
    #[serde(rename = "otlp_endpoint", serialize_with = "ser_redacted", skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// How often to push.
    #[serde(rename = "otlp_interval", serialize_with = "format::ser_duration")]
    pub interval: Duration,
    #[serde(rename = "otlp_timeout", serialize_with = "format::ser_duration")]
    pub timeout: Duration,
    #[serde(rename = "otlp_compression")]
    pub compression: OtlpCompression,
    #[serde(rename = "otlp_temporality")]
    pub temporality: OtlpTemporality,
    #[serde(rename = "otlp_ca_file", skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    #[serde(rename = "otlp_cert_file", skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    #[serde(rename = "otlp_key_file", skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    #[serde(rename = "otlp_queue")]
    pub queue: usize,
    /// Header names only are shown.
    #[serde(rename = "otlp_headers", serialize_with = "ser_header_names", skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, Secret)>,
    /// What the files above held, read with the configuration.
    #[serde(skip)]
    pub ca_pem: Option<String>,
    #[serde(skip)]
    pub identity: Option<(String, Secret)>,
    /// Resource attributes from OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME (the latter as
    /// `service.name`), in the order given.
    #[serde(skip)]
    pub resource: Vec<(String, String)>,
}

fn ser_redacted<S: serde::Serializer>(url: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&url.as_deref().map(redact).unwrap_or_default())
}

fn ser_header_names<S: serde::Serializer>(headers: &[(String, Secret)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(headers.iter().map(|(name, _)| format!("{name}=<hidden>")))
}

impl OtlpConfig {
    pub fn defaults() -> OtlpConfig {
        OtlpConfig {
            interval: super::Config::DEFAULT_WINDOW,
            timeout: Duration::from_secs(10),
            queue: 8,
            ..OtlpConfig::default()
        }
    }
}

/// A variable of the OTLP exporter's own family: the metrics-specific one, else the general one.
fn otel(env: Env<'_>, name: &str) -> Option<String> {
    env(&format!("OTEL_EXPORTER_OTLP_METRICS_{name}"))
        .or_else(|| env(&format!("OTEL_EXPORTER_OTLP_{name}")))
        .filter(|v| !v.trim().is_empty())
}

/// Each `otlp_*` setting from `merged`, else its `OTEL_*` variable, else its default.
pub(super) fn resolve(merged: &RunArgs, env: Env<'_>, problems: &mut Vec<Problem>) -> OtlpConfig {
    let d = OtlpConfig::defaults();
    let endpoint = merged.otlp_endpoint.clone().filter(|e| !e.is_empty()).or_else(|| {
        env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").filter(|v| !v.trim().is_empty()).or_else(|| {
            env("OTEL_EXPORTER_OTLP_ENDPOINT")
                .filter(|v| !v.trim().is_empty())
                .map(|base| format!("{}/v1/metrics", base.trim_end_matches('/')))
        })
    });
    if let Some(url) = &endpoint
        && let Err(e) = HttpUrl::parse(url)
    {
        problems.push(Problem::new("otlp_endpoint", format!("'{}': {}", redact(url), e.why)));
    }
    let timeout = merged.otlp_timeout.or_else(|| {
        let ms = otel(env, "TIMEOUT")?;
        match ms.trim().parse::<u64>() {
            Ok(ms) => Some(Duration::from_millis(ms)),
            Err(_) => {
                problems.push(Problem::new(
                    "otlp_timeout",
                    format!("OTEL_EXPORTER_OTLP_TIMEOUT '{ms}' is not milliseconds"),
                ));
                None
            }
        }
    });
    let compression = merged.otlp_compression.or_else(|| match otel(env, "COMPRESSION")?.trim() {
        "gzip" => Some(OtlpCompression::Gzip),
        "none" => Some(OtlpCompression::None),
        other => {
            problems.push(Problem::new(
                "otlp_compression",
                format!("OTEL_EXPORTER_OTLP_COMPRESSION '{other}' is not gzip or none"),
            ));
            None
        }
    });
    let temporality = merged.otlp_temporality.or_else(|| {
        match env("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE")?.trim().to_ascii_lowercase().as_str() {
            "cumulative" => Some(OtlpTemporality::Cumulative),
            // lowmemory asks for delta sums and histograms: what delta gives.
            "delta" | "lowmemory" => Some(OtlpTemporality::Delta),
            other => {
                problems.push(Problem::new(
                    "otlp_temporality",
                    format!("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE '{other}' is not cumulative, delta or lowmemory"),
                ));
                None
            }
        }
    });
    if let Some(protocol) = otel(env, "PROTOCOL")
        && protocol.trim() != "http/protobuf"
    {
        problems.push(Problem::new(
            "otlp_endpoint",
            format!("OTEL_EXPORTER_OTLP_PROTOCOL '{protocol}': only http/protobuf is spoken (point it at the receiver's HTTP port, 4318 for a Collector)"),
        ));
    }
    let path = |set: &Option<PathBuf>, var: &str| set.clone().or_else(|| otel(env, var).map(PathBuf::from));
    let ca_file = path(&merged.otlp_ca_file, "CERTIFICATE");
    let cert_file = path(&merged.otlp_cert_file, "CLIENT_CERTIFICATE");
    let key_file = path(&merged.otlp_key_file, "CLIENT_KEY");
    let ca_pem = read("otlp_ca_file", ca_file.as_deref(), problems);
    if let Some(pem) = &ca_pem
        && let Err(e) = crate::net::ca_roots(pem)
    {
        problems.push(Problem::new("otlp_ca_file", e));
    }
    let identity = match (cert_file.as_deref(), key_file.as_deref()) {
        (None, None) => None,
        (Some(_), None) => {
            problems.push(Problem::new("otlp_cert_file", "needs otlp_key_file"));
            None
        }
        (None, Some(_)) => {
            problems.push(Problem::new("otlp_key_file", "needs otlp_cert_file"));
            None
        }
        (Some(c), Some(k)) => {
            match (read("otlp_cert_file", Some(c), problems), read("otlp_key_file", Some(k), problems)) {
                (Some(cert), Some(key)) => match crate::net::client_identity(&cert, &key) {
                    Ok(_) => Some((cert, Secret(key))),
                    Err(e) => {
                        problems.push(Problem::new("otlp_cert_file", e));
                        None
                    }
                },
                _ => None,
            }
        }
    };
    let headers_text = merged.otlp_headers.clone().or_else(|| otel(env, "HEADERS"));
    let headers = headers_text.map(|t| headers(&t, problems)).unwrap_or_default();
    OtlpConfig {
        endpoint,
        interval: merged.otlp_interval.unwrap_or(d.interval),
        timeout: timeout.unwrap_or(d.timeout),
        compression: compression.unwrap_or(d.compression),
        temporality: temporality.unwrap_or(d.temporality),
        ca_file,
        cert_file,
        key_file,
        queue: merged.otlp_queue.unwrap_or(d.queue),
        headers,
        ca_pem,
        identity,
        resource: resource(env, problems),
    }
}

/// A file's text, or a problem naming the key.
fn read(field: &'static str, path: Option<&Path>, problems: &mut Vec<Problem>) -> Option<String> {
    match super::file::read(path?) {
        Ok(text) => Some(text),
        Err(e) => {
            problems.push(Problem::new(field, e.to_string()));
            None
        }
    }
}

/// `name=value,…` as the OTel specification writes headers (W3C baggage: values percent-encoded).
/// Problems never quote a value.
fn headers(text: &str, problems: &mut Vec<Problem>) -> Vec<(String, Secret)> {
    let mut out = Vec::new();
    for (n, item) in text.split(',').enumerate().filter(|(_, i)| !i.trim().is_empty()) {
        let Some((name, value)) = item.split_once('=') else {
            problems.push(Problem::new("otlp_headers", format!("item {} is not name=value", n + 1)));
            continue;
        };
        let name = name.trim().to_ascii_lowercase();
        let token =
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        let value = percent_decode(value.trim());
        match value {
            _ if !token => problems.push(Problem::new("otlp_headers", format!("item {}: not a header name", n + 1))),
            _ if OWN_HEADERS.contains(&name.as_str()) => {
                problems.push(Problem::new("otlp_headers", format!("'{name}' is set by the exporter itself")))
            }
            Some(v) if !v.bytes().any(|b| b.is_ascii_control()) => out.push((name, Secret(v))),
            _ => problems.push(Problem::new("otlp_headers", format!("'{name}': the value is not valid in a header"))),
        }
    }
    out
}

/// `%XX` decoded; None when the result is not UTF-8 or an escape is malformed.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// OTEL_RESOURCE_ATTRIBUTES (`key=value,…`, percent-encoded) and OTEL_SERVICE_NAME, which wins
/// for `service.name`.
fn resource(env: Env<'_>, problems: &mut Vec<Problem>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for item in env("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default().split(',').filter(|i| !i.trim().is_empty()) {
        match item.split_once('=').and_then(|(k, v)| Some((k.trim(), percent_decode(v.trim())?))) {
            Some((k, v)) if !k.is_empty() => out.push((k.to_owned(), v)),
            _ => problems
                .push(Problem::new("otlp_endpoint", format!("OTEL_RESOURCE_ATTRIBUTES: '{item}' is not key=value"))),
        }
    }
    if let Some(name) = env("OTEL_SERVICE_NAME").filter(|n| !n.trim().is_empty()) {
        out.retain(|(k, _)| k != "service.name");
        out.push(("service.name".to_owned(), name.trim().to_owned()));
    }
    out
}

/// `otlp_queue`'s range always, as every other setting's: only we read it, so a value out of range
/// is a mistake whether or not an endpoint is set yet. The rest only when an endpoint is set: the
/// timeout may come from an `OTEL_*` variable meant for another program in the same environment,
/// and the default `otlp_interval` need not fit a non-default `interval` when nothing is pushed.
pub(super) fn check(o: &OtlpConfig, interval: Duration) -> Vec<Problem> {
    let mut problems = Vec::new();
    if !QUEUE.contains(&o.queue) {
        problems.push(Problem::new("otlp_queue", format!("{} is not in 1..=1000", o.queue)));
    }
    if o.endpoint.is_none() {
        return problems;
    }
    if !TIMEOUT.contains(&o.timeout) {
        problems.push(Problem::new(
            "otlp_timeout",
            format!("{} is not in 100ms..=1m", humantime::format_duration(o.timeout)),
        ));
    }
    {
        let every = o.interval;
        let whole = !interval.is_zero() && every.as_nanos().is_multiple_of(interval.as_nanos());
        if every < interval || !whole || every > Duration::from_secs(3600) {
            problems.push(Problem::new(
                "otlp_interval",
                format!(
                    "{} must be a whole multiple of the interval ({}), at most 1h",
                    humantime::format_duration(every),
                    humantime::format_duration(interval)
                ),
            ));
        }
    }
    problems
}

/// Flags holding secrets: a URL with credentials or a query, and any header.
pub fn secrets_in_flags(flags: &RunArgs) -> Vec<Problem> {
    let mut problems = Vec::new();
    if let Some(url) = &flags.otlp_endpoint
        && HttpUrl::parse(url).is_ok_and(|u| u.userinfo.is_some() || u.path.contains('?'))
    {
        problems.push(Problem::new(
            "otlp_endpoint",
            format!(
                "'{}': credentials or a query in a flag are readable by every user in /proc/<pid>/cmdline; give the \
                 URL in RUNQLAT_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT or the --config file",
                redact(url)
            ),
        ));
    }
    if flags.otlp_headers.is_some() {
        problems.push(Problem::new(
            "otlp_headers",
            "headers in a flag are readable by every user in /proc/<pid>/cmdline; give them in \
             RUNQLAT_OTLP_HEADERS, OTEL_EXPORTER_OTLP_HEADERS or the --config file",
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn the_otel_variables_fill_what_settings_leave_unset() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "Authorization=Bearer%20S3CRET, x-tenant = a"),
            ("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "Delta"),
            ("OTEL_RESOURCE_ATTRIBUTES", "k8s.node.name=node-1,service.name=x"),
            ("OTEL_SERVICE_NAME", "runqlat"),
        ]);
        let mut problems = Vec::new();
        let o = resolve(&RunArgs::default(), &env, &mut problems);
        assert_eq!(problems, []);
        assert_eq!(o.endpoint.as_deref(), Some("http://collector:4318/v1/metrics"));
        assert_eq!(o.timeout, Duration::from_millis(2500));
        assert_eq!(o.temporality, OtlpTemporality::Delta);
        assert_eq!(
            o.headers,
            [("authorization".into(), Secret("Bearer S3CRET".into())), ("x-tenant".into(), Secret("a".into()))]
        );
        assert_eq!(o.resource, [("k8s.node.name".into(), "node-1".into()), ("service.name".into(), "runqlat".into())]);
        let shown = serde_json::to_string(&o).unwrap();
        assert!(!shown.contains("S3CRET") && shown.contains("authorization=<hidden>"), "{shown}");
    }

    #[test]
    fn bad_values_are_problems_that_never_quote_a_header_value() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "ftp://x"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "novalue,content-type=x,ok=%ZZS3CRET"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]);
        let mut problems = Vec::new();
        resolve(&RunArgs::default(), &env, &mut problems);
        let text: Vec<String> = problems.iter().map(Problem::to_string).collect();
        assert_eq!(text.len(), 5, "{text:?}");
        assert!(!text.join(" ").contains("S3CRET"), "{text:?}");
        let mut o = OtlpConfig { endpoint: Some("http://h/v1/metrics".into()), ..OtlpConfig::defaults() };
        o.interval = Duration::from_millis(1500);
        o.queue = 0;
        assert_eq!(check(&o, Duration::from_secs(1)).len(), 2);
    }

    #[test]
    fn the_queue_is_checked_without_an_endpoint_the_rest_only_with_one() {
        let o = OtlpConfig { queue: 0, timeout: Duration::from_secs(120), ..OtlpConfig::defaults() };
        let text: Vec<String> = check(&o, Duration::from_secs(4)).iter().map(Problem::to_string).collect();
        assert_eq!(text, ["otlp_queue: 0 is not in 1..=1000"]);
        // With an endpoint: the timeout's range and the interval (15s does not fit 4s) as well.
        let o = OtlpConfig { endpoint: Some("http://h/v1/metrics".into()), ..o };
        assert_eq!(check(&o, Duration::from_secs(4)).len(), 3);
    }
}
