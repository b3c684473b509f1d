//! The metrics floor: the latest `Exposition` and the daemon's own instruments in; every metric
//! family (`families`, each `runqlat_*` named once), encoded as Prometheus text, OpenMetrics or
//! protobuf (`encode`, with the worst waits as `exemplars`), out, for a scrape (`serve`) or a push
//! (`export`). Nothing here touches the kernel or a socket; on `model` only.
pub mod encode;
pub mod exemplars;
pub mod families;
pub mod instruments;
pub mod registry;

pub use self::encode::{Format, Metrics};
pub use self::instruments::{Instruments, ProcessSampler};
