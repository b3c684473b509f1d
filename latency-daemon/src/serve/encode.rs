//! A registry of every metric (see `metrics`) and a format in; the encoded body and its content
//! type out, each encode timed into the `encode` instrument.
use std::{fmt, sync::Arc, time::Instant};

use prometheus_client::{metrics::histogram::Histogram, registry::Registry};
use tokio::sync::watch;

use super::{Instruments, ProcessSampler, metrics::registry};
use crate::model::exposition::Exposition;

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

/// Every metric the daemon serves, ready to encode.
pub struct Metrics {
    registry: Registry,
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
        Metrics { registry: registry(latest, instruments, process), encode: instruments.encode.clone() }
    }

    /// Encode every registered metric in `format`: (content type, body).
    pub fn encode(&self, format: Format) -> Result<(&'static str, Vec<u8>), fmt::Error> {
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
}
