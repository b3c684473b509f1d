//! `irq_handler_entry`/`_exit`, `softirq_entry`/`_exit` (attached only with `--irq-tracepoints`)
//! → each CPU's IRQ clock: the time it spent in device IRQ handlers and softirqs, for the cause
//! split on kernels that do not account IRQ time. Two clock reads per handler or softirq run.
use aya_ebpf::{
    helpers::generated::{bpf_get_smp_processor_id, bpf_ktime_get_ns},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use latency_common::maps::IrqClock;

use crate::{knobs, maps::IRQ_CLOCKS};

// TP_PROTO(int irq, struct irqaction *action)
#[btf_tracepoint(function = "irq_handler_entry")]
pub fn irq_handler_entry(_ctx: BtfTracePointContext) -> i32 {
    enter(Level::Hard);
    0
}

// TP_PROTO(int irq, struct irqaction *action, int ret)
#[btf_tracepoint(function = "irq_handler_exit")]
pub fn irq_handler_exit(_ctx: BtfTracePointContext) -> i32 {
    exit(Level::Hard);
    0
}

// TP_PROTO(unsigned int vec_nr)
#[btf_tracepoint(function = "softirq_entry")]
pub fn softirq_entry(_ctx: BtfTracePointContext) -> i32 {
    enter(Level::Soft);
    0
}

// TP_PROTO(unsigned int vec_nr)
#[btf_tracepoint(function = "softirq_exit")]
pub fn softirq_exit(_ctx: BtfTracePointContext) -> i32 {
    exit(Level::Soft);
    0
}

/// This CPU's clock: written only here, in IRQ context on this CPU.
#[inline(always)]
fn this_cpu() -> Option<&'static mut IrqClock> {
    // SAFETY: a helper without arguments.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    // SAFETY: an element of an array map that only this CPU writes (see above).
    IRQ_CLOCKS.get_ptr_mut(cpu).map(|c| unsafe { &mut *c })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// A softirq (it may be interrupted by a hard IRQ, never the other way round).
    Soft,
    /// A device IRQ handler.
    Hard,
}

#[inline(always)]
fn since(c: &mut IrqClock, level: Level) -> &mut u64 {
    match level {
        Level::Soft => &mut c.soft_since_ns,
        Level::Hard => &mut c.hard_since_ns,
    }
}

#[inline(always)]
fn enter(level: Level) {
    let Some(c) = this_cpu() else { return };
    // SAFETY: a helper without arguments or side effects.
    *since(c, level) = unsafe { bpf_ktime_get_ns() };
}

#[inline(always)]
fn exit(level: Level) {
    let Some(c) = this_cpu() else { return };
    // SAFETY: as in `enter`.
    let now = unsafe { bpf_ktime_get_ns() };
    let slot = since(c, level);
    let began = *slot;
    // Cleared first: a reader on another CPU that sees the new total also sees no period open, so
    // a torn read counts one period less, never one twice.
    *slot = 0;
    // 0: attached in the middle of it, so its start is unknown and it is not timed. A handler
    // inside a softirq is already in that softirq's time.
    if began == 0 || now <= began || (level == Level::Hard && c.soft_since_ns != 0) {
        return;
    }
    c.total_ns += now - began;
}

/// CPU `cpu`'s IRQ time so far, ns, at `now` (with the monotonic clock, the handler or softirq in
/// progress counts up to `now`: a task woken inside one waits for the rest of it, not what came
/// before). 0 for a CPU out of range.
#[inline(always)]
pub fn clock(cpu: u32, now: u64) -> u64 {
    let Some(c) = IRQ_CLOCKS.get(cpu) else { return 0 };
    let total = c.total_ns;
    let soft = c.soft_since_ns;
    let open = if soft != 0 { soft } else { c.hard_since_ns };
    if open != 0 && !knobs::clock_rq() && now > open { total + (now - open) } else { total }
}
