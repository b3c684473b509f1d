//! HTTP request → reply for the daemon's endpoints: `/` (landing page), `/metrics` (Prometheus
//! text, OpenMetrics or protobuf with native histograms, by Accept), `/healthz`,
//! `/api/v1/snapshot` (the last window as `record --json` prints it). Everything is encoded from
//! the latest published exposition; nothing here touches the kernel.
use std::{
    fmt,
    sync::{Arc, RwLock},
    time::Instant,
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, NoLabelSet},
    metrics::{MetricType, histogram::Histogram},
    registry::Registry,
};
use tokio::sync::watch;

use crate::{
    clock,
    config::Config,
    export::{Exposition, ExpositionCollector},
    http::{Handler, HttpStats, Reply, Request, StatusCode},
    notify::NotifyStats,
};

const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROTOBUF: &str = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// The exposition formats we can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text 0.0.4: the default, and what promtool and curl read.
    Text,
    OpenMetrics,
    /// Length-delimited `io.prometheus.client.MetricFamily`: the only one carrying native
    /// histograms, which Prometheus asks for first when they are enabled.
    Protobuf,
}

/// `?format=text|openmetrics|protobuf` overrides the Accept header (a Prometheus job can set it
/// with `params`, e.g. to keep classic buckets next to a job that gets native histograms).
pub fn format_param(query: Option<&str>) -> Option<Format> {
    query?.split('&').find_map(|kv| match kv {
        "format=text" => Some(Format::Text),
        "format=openmetrics" => Some(Format::OpenMetrics),
        "format=protobuf" => Some(Format::Protobuf),
        _ => None,
    })
}

/// Picks a format from an Accept header. Prometheus lists protobuf first when it wants native
/// histograms; anyone else gets text unless they name OpenMetrics.
pub fn negotiate(accept: Option<&str>) -> Format {
    let accept = accept.unwrap_or("");
    if accept.contains("application/vnd.google.protobuf") && accept.contains("io.prometheus.client.MetricFamily") {
        Format::Protobuf
    } else if accept.contains("application/openmetrics-text") {
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

pub struct Routes {
    registry: Registry,
    latest: watch::Receiver<Arc<Exposition>>,
    config: RwLock<Arc<Config>>,
    drain: Histogram,
    encode: Histogram,
    http: Arc<HttpStats>,
    notify: Arc<NotifyStats>,
}

impl fmt::Debug for Routes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Routes").finish_non_exhaustive()
    }
}

/// Self-timing buckets: 10 µs … ~1.3 s, doubling.
fn duration_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(1e-5, 2.0, 18))
}

impl Routes {
    pub fn new(latest: watch::Receiver<Arc<Exposition>>, config: Arc<Config>) -> Routes {
        let drain = duration_histogram();
        let encode = duration_histogram();
        let http = Arc::new(HttpStats::default());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ExpositionCollector::new(latest.clone())));
        registry.register(
            "runqlat_drain_duration_seconds",
            "Time to read the kernel maps and publish the result, per drain",
            drain.clone(),
        );
        registry.register(
            "runqlat_scrape_encode_duration_seconds",
            "Time to encode /metrics (all formats), per scrape; the current scrape shows in the next",
            encode.clone(),
        );
        registry.register_collector(Box::new(HttpCollector(http.clone())));
        let notify = Arc::new(NotifyStats::default());
        registry.register_collector(Box::new(NotifyCollector(notify.clone())));
        Routes { registry, latest, config: RwLock::new(config), drain, encode, http, notify }
    }

    /// Observed by the drain thread.
    pub fn drain_histogram(&self) -> Histogram {
        self.drain.clone()
    }

    pub fn http_stats(&self) -> Arc<HttpStats> {
        self.http.clone()
    }

    /// Counted by the alert sinks.
    pub fn notify_stats(&self) -> Arc<NotifyStats> {
        self.notify.clone()
    }

    pub fn set_config(&self, config: Arc<Config>) {
        if let Ok(mut c) = self.config.write() {
            *c = config;
        }
    }

    fn config(&self) -> Option<Arc<Config>> {
        self.config.read().ok().map(|c| c.clone())
    }

    /// Encode every registered metric in `format`.
    pub fn metrics(&self, format: Format) -> Result<(&'static str, Vec<u8>), fmt::Error> {
        let started = Instant::now();
        let out = match format {
            Format::Text => {
                let mut s = String::with_capacity(64 * 1024);
                prometheus_client::encoding::prometheus_text::encode(&mut s, &self.registry)?;
                (TEXT, s.into_bytes())
            }
            Format::OpenMetrics => {
                let mut s = String::with_capacity(64 * 1024);
                prometheus_client::encoding::text::encode(&mut s, &self.registry)?;
                (OPENMETRICS, s.into_bytes())
            }
            Format::Protobuf => {
                let bytes = prometheus_client::encoding::prometheus_protobuf::encode_to_vec(&self.registry)
                    .map_err(|_| fmt::Error)?;
                (PROTOBUF, bytes)
            }
        };
        self.encode.observe(started.elapsed().as_secs_f64());
        Ok(out)
    }

    /// Healthy while attached and draining: a drain happened within three intervals.
    fn health(&self) -> (bool, String) {
        let e = self.latest.borrow().clone();
        let interval = self.config().map_or(1.0, |c| c.interval.as_secs_f64());
        if e.drains == 0 {
            return (false, "attached, waiting for the first drain".into());
        }
        let age = clock::realtime_ns() as f64 / 1e9 - e.last_drain_unix;
        if age > 3.0 * interval {
            (false, format!("last drain {age:.1} s ago (interval {interval} s)"))
        } else {
            (true, format!("ok: {} drains, last {age:.2} s ago", e.drains))
        }
    }

    fn landing(&self) -> String {
        let config = self.config().and_then(|c| serde_json::to_string_pretty(&*c).ok()).unwrap_or_default();
        format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>latency-daemon</title></head><body>\n\
             <h1>latency-daemon {}</h1>\n<p>Run-queue latency (wakeup/preemption to running), measured in the kernel.</p>\n\
             <ul><li><a href=\"/metrics\">/metrics</a></li><li><a href=\"/healthz\">/healthz</a></li>\
             <li><a href=\"/api/v1/snapshot\">/api/v1/snapshot</a> (the last window, as <code>record --json</code>)</li></ul>\n\
             <h2>Effective configuration</h2>\n<pre>{}</pre>\n</body></html>\n",
            env!("CARGO_PKG_VERSION"),
            html_escape(&config)
        )
    }
}

/// Escape for HTML element content (the configuration is shown in a `<pre>`).
fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

impl Handler for Routes {
    fn handle(&self, req: &Request<'_>) -> Reply {
        match req.path {
            "/" => Reply::new(StatusCode::OK, "text/html; charset=utf-8", self.landing()),
            "/metrics" => match self.metrics(format_param(req.query).unwrap_or_else(|| negotiate(req.accept))) {
                Ok((content_type, body)) => Reply::new(StatusCode::OK, content_type, body),
                Err(_) => {
                    Reply::new(StatusCode::INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8", "encoding failed\n")
                }
            },
            "/healthz" => {
                let (ok, why) = self.health();
                let status = if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
                Reply::new(status, "text/plain; charset=utf-8", why + "\n")
            }
            "/api/v1/snapshot" => {
                let e = self.latest.borrow().clone();
                match &e.window {
                    Some(w) => match serde_json::to_vec_pretty(&w.report) {
                        Ok(body) => Reply::new(StatusCode::OK, "application/json", body),
                        Err(_) => Reply::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "text/plain; charset=utf-8",
                            "encoding failed\n",
                        ),
                    },
                    None => Reply::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "text/plain; charset=utf-8",
                        "no window has closed yet\n",
                    ),
                }
            }
            _ => Reply::new(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "not found\n"),
        }
    }
}

/// The HTTP server's own counters as metrics.
#[derive(Debug)]
struct HttpCollector(Arc<HttpStats>);

impl Collector for HttpCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let s = self.0.snapshot();
        let mut family = encoder.encode_descriptor(
            "runqlat_http_requests",
            "HTTP requests by outcome, including those turned away (busy, too large, timeout, malformed).",
            None,
            MetricType::Counter,
        )?;
        for (outcome, n) in [
            ("ok", s.ok),
            ("not_found", s.not_found),
            ("handler_error", s.handler_error),
            ("panicked", s.panicked),
            ("bad_method", s.bad_method),
            ("too_large", s.rejected_too_large),
            ("malformed", s.rejected_malformed),
            ("timeout", s.rejected_timeout),
            ("busy", s.rejected_busy),
            ("accept_error", s.accept_errors),
        ] {
            family.encode_family(&[("outcome", outcome)])?.encode_counter::<NoLabelSet, _, f64>(&n, None)?;
        }
        encoder
            .encode_descriptor(
                "runqlat_http_connections",
                "HTTP connections being served now.",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&s.connections)
    }
}

/// The alert sinks' delivery counters as metrics.
#[derive(Debug)]
struct NotifyCollector(Arc<NotifyStats>);

impl Collector for NotifyCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let rows = self.0.snapshot();
        for (name, help, pick) in [
            ("runqlat_alert_notifications_sent", "Alert notifications delivered, by sink.", 0usize),
            (
                "runqlat_alert_notifications_failed",
                "Alert notifications that failed (refused, timed out, or non-2xx after retries), by sink.",
                1,
            ),
            ("runqlat_alert_notifications_dropped", "Alert notifications dropped because a sink's queue was full.", 2),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (sink, sent, failed, dropped) in &rows {
                let n = [*sent, *failed, *dropped][pick];
                family.encode_family(&[("sink", *sink)])?.encode_counter::<NoLabelSet, _, f64>(&n, None)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation() {
        let prometheus = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.1";
        assert_eq!(negotiate(Some(prometheus)), Format::Protobuf);
        assert_eq!(negotiate(Some("application/openmetrics-text;version=1.0.0")), Format::OpenMetrics);
        assert_eq!(negotiate(Some("*/*")), Format::Text);
        assert_eq!(negotiate(None), Format::Text);
    }

    #[test]
    fn format_parameter_wins() {
        assert_eq!(format_param(Some("format=text")), Some(Format::Text));
        assert_eq!(format_param(Some("a=b&format=protobuf")), Some(Format::Protobuf));
        assert_eq!(format_param(Some("format=xml")), None);
        assert_eq!(format_param(None), None);
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(html_escape("<a href=\"x\">&"), "&lt;a href=\"x\"&gt;&amp;");
    }
}
