//! HTTP request → reply for the daemon's endpoints: `/` (the live view, `view`), `/heatmap.svg`,
//! `/metrics` (Prometheus
//! text, OpenMetrics or protobuf with native histograms, by Accept), `/healthz`,
//! `/api/v1/snapshot` (the last window as `record --json` prints it). Everything is encoded from
//! the latest published exposition, once per exposition (per format) or per window, and served
//! from those bytes to every scrape until the next: a crowd of clients costs copies, not encodes.
//! Nothing here touches the kernel.
use std::{
    fmt,
    sync::{Arc, Mutex, PoisonError, RwLock},
    time::{SystemTime, UNIX_EPOCH},
};

use bytes::Bytes;

use tokio::sync::watch;

use super::{
    http::{Handler, HeaderValue, Reply, Request, StatusCode, header},
    view,
};
use crate::{
    config::Config,
    metrics::{Format, Metrics, encode::gzip},
    model::{capture::Shelf, exposition::Exposition, window::Window},
};

/// The last body made from `K` (compared by identity: a new exposition or window is a new Arc).
/// The lock is held while encoding, so concurrent scrapes of a new exposition wait for one
/// encode instead of each doing their own.
#[derive(Debug)]
struct Memo<K>(Mutex<Option<(Arc<K>, &'static str, Bytes)>>);

impl<K> Default for Memo<K> {
    fn default() -> Self {
        Memo(Mutex::new(None))
    }
}

impl<K> Memo<K> {
    fn clear(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    fn get_or<E>(
        &self,
        key: &Arc<K>,
        make: impl FnOnce() -> Result<(&'static str, Bytes), E>,
    ) -> Result<(&'static str, Bytes), E> {
        let mut memo = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((k, content_type, body)) = memo.as_ref()
            && Arc::ptr_eq(k, key)
        {
            return Ok((content_type, body.clone()));
        }
        let (content_type, body) = make()?;
        *memo = Some((Arc::clone(key), content_type, body.clone()));
        Ok((content_type, body))
    }
}

/// Whether an Accept-Encoding header takes gzip: `gzip` (or `x-gzip`, or `*`) listed with no
/// `q=0`. Absent, or anything else: the body goes as it is (Prometheus sends `gzip`).
fn accepts_gzip(header: Option<&str>) -> bool {
    header.is_some_and(|h| {
        h.split(',').any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .or_else(|| p.strip_prefix("Q="))
                    .is_some_and(|q| q.parse::<f32>().is_ok_and(|q| q <= 0.0))
            });
            ["gzip", "x-gzip", "*"].iter().any(|g| name.eq_ignore_ascii_case(g)) && !refused
        })
    })
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
    metrics: Arc<Metrics>,
    latest: watch::Receiver<Arc<Exposition>>,
    config: RwLock<Arc<Config>>,
    /// /metrics by format: text, OpenMetrics, protobuf.
    /// Per format, plain and gzipped.
    encoded: [Memo<Exposition>; 6],
    snapshot: Memo<Window>,
    heatmap: Memo<Exposition>,
    /// The landing page; forgotten when the configuration changes, since it shows it.
    landing: Memo<Exposition>,
    /// Where captures are kept, with the capture recorder on.
    captures: Option<Arc<dyn Shelf>>,
}

impl fmt::Debug for Routes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Routes").finish_non_exhaustive()
    }
}

impl Routes {
    pub fn new(metrics: Arc<Metrics>, latest: watch::Receiver<Arc<Exposition>>, config: Arc<Config>) -> Routes {
        Routes {
            metrics,
            latest,
            config: RwLock::new(config),
            encoded: Default::default(),
            snapshot: Memo::default(),
            heatmap: Memo::default(),
            landing: Memo::default(),
            captures: None,
        }
    }

    /// Serves the captures on `shelf` at `/api/v1/captures` (a list) and `/api/v1/captures/NAME`.
    pub fn with_captures(self, shelf: Arc<dyn Shelf>) -> Routes {
        Routes { captures: Some(shelf), ..self }
    }

    /// `/api/v1/captures` and `/api/v1/captures/NAME`.
    fn captures(&self, path: &str) -> Reply {
        let Some(shelf) = &self.captures else {
            return Reply::new(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "captures are off (capture_dir)\n");
        };
        let trouble = |e: std::io::Error| {
            log::warn!("captures could not be read: {e}");
            Reply::new(StatusCode::INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8", "captures could not be read\n")
        };
        match path.strip_prefix("/api/v1/captures").unwrap_or("") {
            "" | "/" => match shelf.list() {
                Ok(listed) => {
                    json(serde_json::to_vec_pretty(&serde_json::json!({ "captures": listed })).map(Bytes::from))
                }
                Err(e) => trouble(e),
            },
            name if name.ends_with(".svg") => match shelf.read(name.trim_start_matches('/')) {
                // Drawn here from escaped text, no script; the policy forbids any anyway.
                Ok(Some(bytes)) => Reply::new(StatusCode::OK, "image/svg+xml", bytes).with_header(
                    hyper::header::CONTENT_SECURITY_POLICY,
                    hyper::header::HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'"),
                ),
                Ok(None) => Reply::new(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "no such capture\n"),
                Err(e) => trouble(e),
            },
            name => match shelf.read(name.trim_start_matches('/')) {
                Ok(Some(bytes)) => Reply::new(StatusCode::OK, "application/octet-stream", bytes).with_header(
                    hyper::header::CONTENT_DISPOSITION,
                    hyper::header::HeaderValue::from_static("attachment"),
                ),
                Ok(None) => Reply::new(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "no such capture\n"),
                Err(e) => trouble(e),
            },
        }
    }

    pub fn set_config(&self, config: Arc<Config>) {
        if let Ok(mut c) = self.config.write() {
            *c = config;
        }
        self.landing.clear();
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
    fn landing(&self) -> Bytes {
        let e = self.latest.borrow().clone();
        let made = self.landing.get_or(&e, || {
            let config = self.config().unwrap_or_default();
            let json = serde_json::to_string_pretty(&*config).unwrap_or_default();
            let newest = self.captures.as_ref().and_then(|shelf| shelf.list().ok()?.into_iter().next());
            Ok::<_, ()>(("", Bytes::from(view::page(&e, &config, &json, newest.as_ref()))))
        });
        made.map(|(_, b)| b).unwrap_or_default()
    }

    fn heatmap(&self) -> Bytes {
        let e = self.latest.borrow().clone();
        let made = self.heatmap.get_or(&e, || {
            let windows: Vec<_> = e.timeline.windows().collect();
            Ok::<_, ()>(("", Bytes::from(view::chart::heatmap(&windows))))
        });
        made.map(|(_, b)| b).unwrap_or_default()
    }

    /// /metrics in `format`, encoded once per exposition.
    fn metrics(&self, format: Format, gzipped: bool) -> Result<(&'static str, Bytes), fmt::Error> {
        let e = self.latest.borrow().clone();
        let slot = match format {
            Format::Text => 0,
            Format::OpenMetrics => 1,
            Format::Protobuf => 2,
        };
        let plain =
            self.encoded[slot].get_or(&e, || self.metrics.encode_of(&e, format).map(|(t, b)| (t, Bytes::from(b))))?;
        if !gzipped {
            return Ok(plain);
        }
        self.encoded[slot + 3].get_or(&e, || {
            let (content_type, body) = plain;
            gzip(&body).map(|g| (content_type, Bytes::from(g))).map_err(|_| fmt::Error)
        })
    }
}

impl Handler for Routes {
    /// /healthz, so that probes pass under basic auth; metrics, the snapshot and the live view
    /// stay behind it.
    fn open(&self, path: &str) -> bool {
        path == "/healthz"
    }

    fn handle(&self, req: &Request<'_>) -> Reply {
        match req.path {
            "/" => Reply::new(StatusCode::OK, "text/html; charset=utf-8", self.landing()),
            "/heatmap.svg" => Reply::new(StatusCode::OK, "image/svg+xml", self.heatmap()),
            "/metrics" => {
                let gzipped = accepts_gzip(req.accept_encoding);
                match self.metrics(format_param(req.query).unwrap_or_else(|| negotiate(req.accept)), gzipped) {
                    // Vary: a cache between us and the scraper keys on the encoding too.
                    Ok((content_type, body)) => {
                        let reply = Reply::new(StatusCode::OK, content_type, body)
                            .with_header(header::VARY, HeaderValue::from_static("Accept-Encoding"));
                        if gzipped {
                            reply.with_header(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"))
                        } else {
                            reply
                        }
                    }
                    Err(_) => {
                        Reply::new(StatusCode::INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8", "encoding failed\n")
                    }
                }
            }
            "/healthz" => {
                let (ok, why) = self.health();
                let status = if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
                // Without credentials (a kubelet's probe under basic auth): the status only.
                let body = match (req.authenticated, ok) {
                    (true, _) => why + "\n",
                    (false, true) => "ok\n".to_owned(),
                    (false, false) => "unhealthy\n".to_owned(),
                };
                Reply::new(status, "text/plain; charset=utf-8", body)
            }
            "/api/v1/snapshot" => {
                let e = self.latest.borrow().clone();
                match &e.window {
                    Some(w) => json(
                        self.snapshot
                            .get_or(w, || {
                                serde_json::to_vec_pretty(&w.report).map(|b| ("application/json", Bytes::from(b)))
                            })
                            .map(|(_, body)| body),
                    ),
                    None => unavailable("no window has closed yet\n"),
                }
            }
            "/api/v1/waits" => {
                let e = self.latest.borrow().clone();
                match &e.waits {
                    Some(w) => json(serde_json::to_vec_pretty(&**w).map(Bytes::from)),
                    None => {
                        unavailable("waits in progress are not scanned (runqlat_feature_info{feature=\"wait_scan\"})\n")
                    }
                }
            }
            path if path == "/api/v1/captures" || path.starts_with("/api/v1/captures/") => self.captures(path),
            _ => Reply::new(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "not found\n"),
        }
    }
}

/// A JSON body, or 500 if it could not be encoded.
fn json<E>(body: Result<Bytes, E>) -> Reply {
    match body {
        Ok(body) => Reply::new(StatusCode::OK, "application/json", body),
        Err(_) => Reply::new(StatusCode::INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8", "encoding failed\n"),
    }
}

/// 503 with why, one line.
fn unavailable(why: &'static str) -> Reply {
    Reply::new(StatusCode::SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_taken_where_listed_without_q_0() {
        for yes in ["gzip", "gzip, deflate", "deflate, gzip;q=0.5", "x-gzip", "*", "GZIP", " gzip ; q=1"] {
            assert!(accepts_gzip(Some(yes)), "{yes}");
        }
        for no in ["", "deflate", "identity", "gzip;q=0", "gzip; q=0.0, identity", "gzipx", "br"] {
            assert!(!accepts_gzip(Some(no)), "{no}");
        }
        assert!(!accepts_gzip(None));
    }

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
