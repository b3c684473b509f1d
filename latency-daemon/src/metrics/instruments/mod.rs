//! What the daemon counts about itself, created once by `cmd::run` and shared with whoever
//! observes it: the drain thread (drain), the HTTP server (`http`), the alert sinks (`notify`),
//! the OTLP exporter (`push`), the capture
//! trigger (`capture`); a scrape reads them (`families::instruments`). Plain atomics and
//! histograms: no counting side waits on a scrape, nor a scrape on it.
pub mod capture;
pub mod http;
pub mod notify;
pub mod push;

use std::sync::Arc;

use prometheus_client::metrics::histogram::Histogram;

use self::capture::CaptureStats;
use self::http::HttpStats;
use self::notify::NotifyStats;
use self::push::PushStats;
use crate::model::exposition::ProcessSample;

/// Reads this process's own cost at scrape time (`host::procstat::sample` in the daemon).
pub type ProcessSampler = fn() -> Option<ProcessSample>;

/// The daemon's instruments: the drain and encode durations, and each service's counters.
#[derive(Clone, Debug)]
pub struct Instruments {
    pub drain: Histogram,
    pub encode: Histogram,
    pub http: Arc<HttpStats>,
    pub notify: Arc<NotifyStats>,
    pub push: Arc<PushStats>,
    pub capture: Arc<CaptureStats>,
}

impl Default for Instruments {
    fn default() -> Self {
        Instruments {
            drain: duration_histogram(),
            encode: duration_histogram(),
            http: Arc::default(),
            notify: Arc::default(),
            push: Arc::default(),
            capture: Arc::default(),
        }
    }
}

/// Self-timing buckets: 10 µs … ~1.3 s, doubling.
fn duration_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(1e-5, 2.0, 18))
}
