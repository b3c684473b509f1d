//! The latest published `Exposition` (pinned per encode), this process's sampler and the
//! daemon's `Instruments` in; the prometheus-client `Registry` every format is encoded from out.
use std::{
    fmt,
    sync::{Arc, Mutex, PoisonError},
};

use prometheus_client::{collector::Collector, encoding::DescriptorEncoder, registry::Registry};

use super::families;
use super::instruments::{Instruments, ProcessSampler};
use crate::model::exposition::Exposition;

/// Every metric the daemon serves: the latest exposition and process figures at scrape time,
/// the instruments, the HTTP server's and the alert sinks' counters.
pub fn registry(pinned: Pinned, instruments: &Instruments, process: ProcessSampler) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ExpositionCollector { pinned, process }));
    families::instruments::register(&mut registry, instruments);
    registry
}

/// The exposition an encode is of: `encode::Metrics` sets it before each encode, so that one
/// encode (and the exemplars added after it) shows one drain, whatever the drain loop publishes
/// meanwhile.
pub type Pinned = Arc<Mutex<Arc<Exposition>>>;

/// Adds the pinned exposition, and this process's own cost, to every encode.
struct ExpositionCollector {
    pinned: Pinned,
    process: ProcessSampler,
}

impl fmt::Debug for ExpositionCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpositionCollector").finish_non_exhaustive()
    }
}

impl Collector for ExpositionCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        // Clone the Arc and let go of the lock at once.
        let e = self.pinned.lock().unwrap_or_else(PoisonError::into_inner).clone();
        families::exposition(&e, &mut encoder)?;
        families::process((self.process)(), &mut encoder)
    }
}
