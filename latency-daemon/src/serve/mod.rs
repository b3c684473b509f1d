//! Serving what the drain loop published: `metrics` names and encodes every metric family,
//! `encode` turns the registry into a scrape body, `routes` answers each endpoint, `view` draws the
//! live page (and the heatmap `record --svg` writes), and `http` is
//! the hardened HTTP/1.1 transport underneath. `Instruments` are what the daemon measures about
//! itself while serving.
pub mod encode;
pub mod exemplars;
pub mod http;
pub mod metrics;
pub mod push;
pub mod routes;
pub mod view;

use std::sync::Arc;

use prometheus_client::metrics::histogram::Histogram;

use self::http::HttpStats;
use self::push::PushStats;
use crate::{alert::notify::NotifyStats, model::exposition::ProcessSample};

/// Reads this process's own cost at scrape time (`host::procstat::sample` in the daemon).
pub type ProcessSampler = fn() -> Option<ProcessSample>;

/// What the daemon measures about itself, created once by `cmd::run` and shared with whoever
/// observes it: the drain thread (drain), the HTTP server (http), the alert sinks (notify), the
/// OTLP exporter (push).
#[derive(Clone, Debug)]
pub struct Instruments {
    pub drain: Histogram,
    pub encode: Histogram,
    pub http: Arc<HttpStats>,
    pub notify: Arc<NotifyStats>,
    pub push: Arc<PushStats>,
}

impl Default for Instruments {
    fn default() -> Self {
        Instruments {
            drain: duration_histogram(),
            encode: duration_histogram(),
            http: Arc::default(),
            notify: Arc::default(),
            push: Arc::default(),
        }
    }
}

/// Self-timing buckets: 10 µs … ~1.3 s, doubling.
fn duration_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(1e-5, 2.0, 18))
}
