//! A delay measured at a switch-in, as the verbs of observe.rs hand it to attribution.
use latency_common::Reason;

/// A delay with the parts of it the kernel's clocks account for (see latency-common's `Cause`):
/// both 0 when the split is off or the task migrated meanwhile.
#[derive(Clone, Copy)]
pub struct Delay {
    pub ns: u64,
    pub reason: Reason,
    pub throttled_ns: u64,
    pub stolen_ns: u64,
}
