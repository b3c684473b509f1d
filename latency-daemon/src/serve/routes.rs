//! HTTP request → reply for the daemon's endpoints: `/` (the live view, `view`), `/heatmap.svg`,
//! `/metrics` (Prometheus
//! text, OpenMetrics or protobuf with native histograms, by Accept), `/healthz`,
//! `/api/v1/snapshot` (the last window as `record --json` prints it). Everything is encoded from
//! the latest published exposition; nothing here touches the kernel.
use std::{
    fmt,
    sync::{Arc, RwLock},
    time::{SystemTime, UNIX_EPOCH},
};

use tokio::sync::watch;

use super::{
    encode::{Format, Metrics},
    http::{Handler, Reply, Request, StatusCode},
    view,
};
use crate::{config::Config, model::exposition::Exposition};

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
    metrics: Metrics,
    latest: watch::Receiver<Arc<Exposition>>,
    config: RwLock<Arc<Config>>,
}

impl fmt::Debug for Routes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Routes").finish_non_exhaustive()
    }
}

impl Routes {
    pub fn new(metrics: Metrics, latest: watch::Receiver<Arc<Exposition>>, config: Arc<Config>) -> Routes {
        Routes { metrics, latest, config: RwLock::new(config) }
    }

    pub fn set_config(&self, config: Arc<Config>) {
        if let Ok(mut c) = self.config.write() {
            *c = config;
        }
    }

    fn config(&self) -> Option<Arc<Config>> {
        self.config.read().ok().map(|c| c.clone())
    }

    /// Healthy while attached and draining: a drain happened within three intervals.
    fn health(&self) -> (bool, String) {
        let e = self.latest.borrow().clone();
        let interval = self.config().map_or(1.0, |c| c.interval.as_secs_f64());
        if e.drains == 0 {
            return (false, "attached, waiting for the first drain".into());
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let age = now - e.last_drain_unix;
        if age > 3.0 * interval {
            (false, format!("last drain {age:.1} s ago (interval {interval} s)"))
        } else {
            (true, format!("ok: {} drains, last {age:.2} s ago", e.drains))
        }
    }

    /// The live view: the latest exposition and the running configuration.
    fn landing(&self) -> String {
        let config = self.config().unwrap_or_default();
        let json = serde_json::to_string_pretty(&*config).unwrap_or_default();
        view::page(&self.latest.borrow().clone(), &config, &json)
    }

    fn heatmap(&self) -> String {
        let e = self.latest.borrow().clone();
        let windows: Vec<_> = e.timeline.windows().collect();
        view::chart::heatmap(&windows)
    }
}

impl Handler for Routes {
    fn handle(&self, req: &Request<'_>) -> Reply {
        match req.path {
            "/" => Reply::new(StatusCode::OK, "text/html; charset=utf-8", self.landing()),
            "/heatmap.svg" => Reply::new(StatusCode::OK, "image/svg+xml", self.heatmap()),
            "/metrics" => match self.metrics.encode(format_param(req.query).unwrap_or_else(|| negotiate(req.accept))) {
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
}
