//! A registry of every metric (see `families`), an `Exposition` and a format in; the encoded body
//! and its content type out (each scrape encode timed into the `encode` instrument), or the
//! protobuf families themselves for a push exporter. Exemplars are added after the registry's
//! encode (`exemplars`).
use std::{
    fmt,
    sync::{Arc, Mutex, PoisonError},
    time::Instant,
};

use prometheus_client::{
    encoding::prometheus_protobuf::{self, prometheus_data_model::MetricFamily},
    metrics::histogram::Histogram,
    registry::Registry,
};
use prost::Message as _;
use tokio::sync::watch;

use super::{
    exemplars,
    instruments::{Instruments, ProcessSampler},
    registry::{Pinned, registry},
};
use crate::model::exposition::Exposition;

const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROTOBUF: &str = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// The exposition formats we can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text 0.0.4: the default, and what promtool and curl read.
    Text,
    /// OpenMetrics 1.0: the classic buckets with exemplars.
    OpenMetrics,
    /// Length-delimited `io.prometheus.client.MetricFamily`: the only one carrying native
    /// histograms, which Prometheus asks for first when they are enabled.
    Protobuf,
}

/// Every metric the daemon serves, ready to encode.
pub struct Metrics {
    registry: Registry,
    latest: watch::Receiver<Arc<Exposition>>,
    /// What the registry's collector encodes, set per encode while `one` is held.
    pinned: Pinned,
    /// One encode at a time, so that `pinned` stays what that encode set.
    one: Mutex<()>,
    encode: Histogram,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    pub fn new(
        latest: watch::Receiver<Arc<Exposition>>,
        instruments: &Instruments,
        process: ProcessSampler,
    ) -> Metrics {
        let pinned: Pinned = Arc::new(Mutex::new(latest.borrow().clone()));
        Metrics {
            registry: registry(Arc::clone(&pinned), instruments, process),
            latest,
            pinned,
            one: Mutex::new(()),
            encode: instruments.encode.clone(),
        }
    }

    /// Encode every registered metric of the latest exposition in `format`: (content type, body).
    pub fn encode(&self, format: Format) -> Result<(&'static str, Vec<u8>), fmt::Error> {
        let e = self.latest.borrow().clone();
        self.encode_of(&e, format)
    }

    /// Encode every registered metric of `e` in `format`: (content type, body), timed.
    pub fn encode_of(&self, e: &Arc<Exposition>, format: Format) -> Result<(&'static str, Vec<u8>), fmt::Error> {
        let started = Instant::now();
        let out = match format {
            Format::Text => {
                let mut s = String::with_capacity(64 * 1024);
                self.pinned(e, || prometheus_client::encoding::prometheus_text::encode(&mut s, &self.registry))?;
                (TEXT, s.into_bytes())
            }
            Format::OpenMetrics => {
                let mut s = String::with_capacity(64 * 1024);
                self.pinned(e, || prometheus_client::encoding::text::encode(&mut s, &self.registry))?;
                (OPENMETRICS, exemplars::openmetrics(s, e).into_bytes())
            }
            Format::Protobuf => {
                let families = self.families(e)?;
                let mut bytes = Vec::with_capacity(families.iter().map(|f| f.encoded_len() + 4).sum());
                for family in families {
                    family.encode_length_delimited(&mut bytes).map_err(|_| fmt::Error)?;
                }
                (PROTOBUF, bytes)
            }
        };
        self.encode.observe(started.elapsed().as_secs_f64());
        Ok(out)
    }

    /// Every registered metric of `e` as protobuf families, with exemplars (not timed: a push
    /// exporter's encodes are not scrapes).
    pub fn families(&self, e: &Arc<Exposition>) -> Result<Vec<MetricFamily>, fmt::Error> {
        let mut families = self.pinned(e, || prometheus_protobuf::encode(&self.registry))?;
        exemplars::protobuf(&mut families, e);
        Ok(families)
    }

    /// Runs `encode` with the registry's collector pointed at `e`.
    fn pinned<T>(&self, e: &Arc<Exposition>, encode: impl FnOnce() -> T) -> T {
        let _one = self.one.lock().unwrap_or_else(PoisonError::into_inner);
        *self.pinned.lock().unwrap_or_else(PoisonError::into_inner) = Arc::clone(e);
        encode()
    }
}

/// `raw` gzipped at the fastest level (a scrape's body or an OTLP batch: a few tens of KB, well
/// under a millisecond; text expositions shrink about tenfold).
pub fn gzip(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::with_capacity(raw.len() / 4), flate2::Compression::fast());
    encoder.write_all(raw)?;
    encoder.finish()
}
