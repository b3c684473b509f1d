//! Names and `#[repr(C)]` value layouts of every map the kernel program writes and the daemon
//! reads, plus the enums that index their counter slots (so slot order is defined once): one file
//! per concern, every item re-exported here so `latency_common::maps::X` names it.

/// `aya::Pod` for map values, in the user-space build: only for the `#[repr(C)]` layouts of plain
/// integers and integer arrays with no padding that each file's size asserts pin.
macro_rules! pod {
    ($($layout:ty),+) => {$(
        #[cfg(feature = "user")]
        // SAFETY: the callers name only #[repr(C)] plain integers and integer arrays with no
        // padding (their size asserts), so every bit pattern is a valid value.
        unsafe impl aya::Pod for $layout {}
    )+};
}
use pod;

mod attribution;
mod capture;
mod cause;
mod cgroup;
mod counters;
mod finals;
mod histogram;
mod irq;
pub mod names;
mod scan;
mod stamp;
mod task;
mod throttle;
mod window;

pub use attribution::{DEPTH_UNKNOWN, Incident, RUNS_KEPT, Run, RunRing};
pub use capture::{
    CAPTURE_IDLE, CAPTURE_IDLE_EXIT, CAPTURE_IRQ, CAPTURE_IRQ_EXIT, CAPTURE_MIGRATE, CAPTURE_SOFTIRQ,
    CAPTURE_SOFTIRQ_EXIT, CAPTURE_SWITCH, CAPTURE_WAKING, CaptureRecord,
};
pub use cause::{Cause, Reason};
pub use cgroup::{CGROUP_BUCKETS, CgroupHist, CgroupSlot, REMOVED_BYTES, cgroup_bucket, cgroup_slot, cgroup_slot_bits};
pub use counters::{CpuStats, Discard, Lost};
pub use finals::{FINALS_KEPT, Final, FinalRing};
pub use histogram::Histogram;
pub use irq::IrqClock;
pub use scan::{SEEN_RUNNING, SEEN_WAITING_PREEMPT, SEEN_WAITING_WAKEUP, Seen};
pub use stamp::{
    MAX_CEILING_NS, SPLIT_MIGRATION_BITS, SPLIT_THROTTLE_BITS, SPLIT_UNIT_SHIFT, STAMP_PREEMPT_BIT, STAMP_STOLEN_BITS,
    STAMP_STOLEN_SHIFT, STAMP_TIME_BITS, STAMP_TIME_MASK, StampPair, split_part, stamp_age, stamp_pack, stamp_slot,
    stamp_unpack,
};
pub use task::TaskStats;
pub use throttle::ThrottleClock;
pub use window::{Control, CpuState, WINDOW_SLOTS, WindowMax, window_index};
