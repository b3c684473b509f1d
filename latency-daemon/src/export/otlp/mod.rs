//! The OTLP/HTTP exporter: its settings and the published expositions in; every `interval`, one
//! `ExportMetricsServiceRequest` (protobuf, gzip) of the latest drain POSTed to the endpoint out.
//! One task makes batches (encode, translate, compress on a blocking worker) into a bounded queue
//! (full: the oldest is dropped and counted); another sends them in order, retrying what may
//! succeed later (connection failures, timeouts, 429, 502, 503, 504) with exponential backoff
//! from 1 s to 30 s, longer if `Retry-After` asks (at most 5 min), never shorter (`retry`), and
//! refusing for good what cannot (other statuses; logged at most every 10 min, `refusals`). The
//! transport, its time limits and its redaction are `alert::notify`'s.
pub mod proto;
mod refusals;
mod retry;
pub mod translate;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prost::Message as _;
use tokio::sync::{Notify, watch};

use self::proto::{
    ExportMetricsServiceRequest, InstrumentationScope, KeyValue, Resource, ResourceMetrics, ScopeMetrics,
};
use self::refusals::Refusals;
use self::translate::{Deltas, Times};
use crate::config::{
    OtlpConfig,
    args::{OtlpCompression, OtlpTemporality},
};
use crate::metrics::{Metrics, instruments::push::PushStats};
use crate::model::{exposition::Exposition, sink_url::HttpUrl, wall::now_unix_ns};
use crate::net::{Client, PostError, Request, send};

const CONTENT_TYPE: &str = "application/x-protobuf";
/// The instrumentation scope every metric is reported under.
const SCOPE: &str = "runqlat";

/// What the exporter needs, from the configuration and the host.
#[derive(Clone, Debug)]
pub struct Settings {
    pub url: HttpUrl,
    pub every: Duration,
    pub timeout: Duration,
    pub gzip: bool,
    pub delta: bool,
    pub queue: usize,
    /// Sent with every request; the values are secrets (never logged).
    pub headers: Vec<(String, String)>,
    pub client: Client,
    pub resource: Vec<(String, String)>,
}

impl Settings {
    /// From the checked configuration: None when no endpoint is set. `host`: the host name for
    /// `host.name` and `service.instance.id`.
    pub fn of(o: &OtlpConfig, host: &str) -> Result<Option<Settings>, String> {
        let Some(endpoint) = &o.endpoint else { return Ok(None) };
        let url = HttpUrl::parse(endpoint).map_err(|e| e.to_string())?;
        let identity = o.identity.as_ref().map(|(cert, key)| (cert.as_str(), key.0.as_str()));
        let client = Client::with_identity(o.ca_pem.as_deref(), identity, None)?;
        Ok(Some(Settings {
            url,
            every: o.interval,
            timeout: o.timeout,
            gzip: o.compression == OtlpCompression::Gzip,
            delta: o.temporality == OtlpTemporality::Delta,
            queue: o.queue,
            headers: o.headers.iter().map(|(n, v)| (n.clone(), v.0.clone())).collect(),
            client,
            resource: resource(&o.resource, host),
        }))
    }
}

/// The resource's attributes: what OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME gave over our
/// defaults (service.name, service.version, service.instance.id and host.name as the host name,
/// os.type).
pub fn resource(given: &[(String, String)], host: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = [
        ("service.name", "latency-daemon"),
        ("service.version", env!("CARGO_PKG_VERSION")),
        ("service.instance.id", host),
        ("host.name", host),
        ("os.type", "linux"),
    ]
    .into_iter()
    .filter(|(k, _)| !given.iter().any(|(g, _)| g == k))
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    out.extend(given.iter().cloned());
    out
}

/// A request body ready to send.
#[derive(Debug)]
struct Batch {
    body: Vec<u8>,
}

/// Batches between the two tasks.
#[derive(Debug, Default)]
struct Queue {
    batches: Mutex<VecDeque<Batch>>,
    ready: Notify,
}

/// Starts both tasks on the current runtime; they run until the runtime stops.
pub fn spawn(
    settings: Settings,
    metrics: Arc<Metrics>,
    latest: watch::Receiver<Arc<Exposition>>,
    stats: Arc<PushStats>,
) {
    stats.enable();
    let queue = Arc::new(Queue::default());
    let start_ns = now_unix_ns();
    log::info!(
        "pushing metrics over OTLP to {} every {} ({}, {})",
        settings.url,
        humantime::format_duration(settings.every),
        if settings.delta { "delta" } else { "cumulative" },
        if settings.gzip { "gzip" } else { "uncompressed" }
    );
    tokio::spawn(batches(settings.clone(), metrics, latest, Arc::clone(&queue), Arc::clone(&stats), start_ns));
    tokio::spawn(sender(settings, queue, stats));
}

/// Every `settings.every`: the latest drain (if new) as a batch at the queue's end.
async fn batches(
    settings: Settings,
    metrics: Arc<Metrics>,
    latest: watch::Receiver<Arc<Exposition>>,
    queue: Arc<Queue>,
    stats: Arc<PushStats>,
    start_ns: u64,
) {
    let resource: Vec<KeyValue> =
        settings.resource.iter().map(|(k, v)| KeyValue::string(k.clone(), v.clone())).collect();
    let mut deltas = settings.delta.then(Deltas::default);
    let mut last_drain = None;
    let mut tick = tokio::time::interval(settings.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let e = latest.borrow().clone();
        if e.snapshot.is_none() || last_drain == Some(e.last_drain_unix.to_bits()) {
            continue;
        }
        last_drain = Some(e.last_drain_unix.to_bits());
        let (metrics, resource, gzip) = (Arc::clone(&metrics), resource.clone(), settings.gzip);
        let mut d = deltas.take();
        let made = tokio::task::spawn_blocking(move || {
            let body = body(&metrics, &e, resource, start_ns, d.as_mut(), gzip);
            (body, d)
        })
        .await;
        let body = match made {
            Ok((body, d)) => {
                deltas = d;
                body
            }
            Err(e) => {
                log::error!("OTLP: making a batch failed: {e}");
                continue;
            }
        };
        let body = match body {
            Ok(body) => body,
            Err(e) => {
                log::error!("OTLP: encoding the metrics failed: {e}");
                continue;
            }
        };
        let waiting = {
            let mut batches = queue.batches.lock().unwrap_or_else(PoisonError::into_inner);
            if batches.len() >= settings.queue {
                batches.pop_front();
                stats.dropped();
            }
            batches.push_back(Batch { body });
            batches.len()
        };
        stats.set_queued(waiting);
        queue.ready.notify_one();
    }
}

/// One export of `e`: the request, encoded and (if `gzip`) compressed (also the pipeline bench's).
pub fn body(
    metrics: &Metrics,
    e: &Arc<Exposition>,
    resource: Vec<KeyValue>,
    start_ns: u64,
    deltas: Option<&mut Deltas>,
    gzip: bool,
) -> Result<Vec<u8>, String> {
    let families = metrics.families(e).map_err(|_| "the registry did not encode".to_owned())?;
    let time_ns = (e.last_drain_unix * 1e9) as u64;
    let request = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource { attributes: resource }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: SCOPE.to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                }),
                metrics: translate::metrics(&families, Times { start_ns, time_ns }, deltas),
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    };
    let raw = request.encode_to_vec();
    if !gzip {
        return Ok(raw);
    }
    crate::metrics::encode::gzip(&raw).map_err(|e| format!("gzip: {e}"))
}

/// Sends the queue's batches in order, each until it is taken or refused for good.
async fn sender(settings: Settings, queue: Arc<Queue>, stats: Arc<PushStats>) {
    let mut headers = settings.headers.clone();
    if settings.gzip {
        headers.push(("Content-Encoding".to_owned(), "gzip".to_owned()));
    }
    let mut failing = false;
    let mut refusals = Refusals::default();
    loop {
        let batch = loop {
            let next = queue.batches.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
            match next {
                Some(b) => break b,
                None => queue.ready.notified().await,
            }
        };
        stats.set_queued(queue.batches.lock().unwrap_or_else(PoisonError::into_inner).len());
        let request =
            Request { path: &settings.url.path, content_type: CONTENT_TYPE, headers: &headers, body: &batch.body };
        let mut backoff = retry::FIRST_BACKOFF;
        loop {
            let wait = match send(&settings.url, &request, settings.timeout, &settings.client).await {
                Ok(r) if (200..300).contains(&r.status) => {
                    stats.sent(batch.body.len() as u64, now_unix_ns() / 1_000_000);
                    if failing {
                        log::info!("OTLP: {} takes pushes again", settings.url);
                        failing = false;
                    }
                    if let Some(n) = refusals.taken(Instant::now()) {
                        log::warn!("OTLP: {} refused batches since the last report: {n}; dropped", settings.url);
                    }
                    break;
                }
                Ok(r) if matches!(r.status, 429 | 502 | 503 | 504) => {
                    stats.failed(3);
                    if !failing {
                        log::warn!("OTLP: {} answered {}; retrying with backoff", settings.url, r.status);
                        failing = true;
                    }
                    retry::wait(r.retry_after, backoff)
                }
                Ok(r) => {
                    stats.rejected();
                    match refusals.refused(Instant::now()) {
                        Some(1) => log::warn!(
                            "OTLP: {} refused a batch with status {}; dropped (further refusals: one line per {})",
                            settings.url,
                            r.status,
                            humantime::format_duration(refusals::EVERY)
                        ),
                        Some(n) => log::warn!(
                            "OTLP: {} refused batches since the last report: {n}, the last with status {}; dropped",
                            settings.url,
                            r.status
                        ),
                        None => {}
                    }
                    break;
                }
                Err(e) => {
                    stats.failed(failure(&e));
                    if !failing {
                        log::warn!("OTLP: pushing to {} failed: {e}; retrying with backoff", settings.url);
                        failing = true;
                    }
                    backoff
                }
            };
            tokio::time::sleep(retry::jitter(wait)).await;
            backoff = retry::next(backoff);
        }
    }
}

/// Index into `metrics::instruments::push::FAILURES` of a failed attempt.
fn failure(e: &PostError) -> usize {
    match e {
        PostError::Connect { .. } => 0,
        PostError::Tls { .. } | PostError::ServerName { .. } => 1,
        PostError::Timeout { .. } => 2,
        PostError::Status { .. } => 3,
        // TLS 1.3 ends the handshake before the server checks a client certificate: its alert
        // arrives as a read error.
        PostError::Io { source, .. } if source.get_ref().is_some_and(|e| e.is::<rustls::Error>()) => 1,
        PostError::Io { .. } | PostError::NoResponse | PostError::BadStatusLine { .. } => 4,
    }
}
