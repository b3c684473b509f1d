//! The irq tracepoints' per-CPU IRQ clock.

/// One CPU's IRQ clock, kept by the irq tracepoints when `--irq-tracepoints` is on (written only on
/// that CPU, read by the cause split on any): `total_ns` is the time spent in device IRQ handlers
/// and softirqs so far, not counting the softirq or handler in progress, which began at
/// `soft_since_ns` / `hard_since_ns` (0: none). A handler that runs inside a softirq is part of
/// that softirq's time, so it is counted once. No nesting count: an entry always starts its level
/// afresh, so one missed exit (attaching in between) costs at most one period. A cache line each,
/// so CPUs do not share one.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IrqClock {
    pub total_ns: u64,
    pub soft_since_ns: u64,
    pub hard_since_ns: u64,
    pub _pad: [u64; 5],
}

const _: () = assert!(core::mem::size_of::<IrqClock>() == 64);

super::pod!(IrqClock);
