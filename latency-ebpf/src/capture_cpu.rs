//! `cpu_idle` (attached with the capture recorder) and `irq_handler_entry`/`_exit`,
//! `softirq_entry`/`_exit` (attached when the IRQ tracepoints are on too) → one `CaptureRecord`
//! each in this CPU's ring: which idle state the CPU entered and when it left it, which IRQ
//! handlers and softirqs ran and whom they interrupted. Separate programs from the IRQ clock's
//! (irq.rs), so the recorder off costs those tracepoints nothing more. Softirqs run with
//! interrupts on: `capture::write` takes care that a record written inside another keeps both.
use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use latency_common::maps::{
    CAPTURE_IDLE, CAPTURE_IRQ, CAPTURE_IRQ_EXIT, CAPTURE_SOFTIRQ, CAPTURE_SOFTIRQ_EXIT, CaptureRecord,
};

use crate::{
    capture::{current, write},
    task::IrqAction,
};

// TP_PROTO(unsigned int state, unsigned int cpu_id)                  since 2.6.38
#[btf_tracepoint(function = "cpu_idle")]
pub fn capture_idle(ctx: BtfTracePointContext) -> i32 {
    let state = ctx.arg::<u64>(0) as u32;
    let cpu_id = ctx.arg::<u64>(1) as u32;
    write(|r| {
        r.kind = CAPTURE_IDLE;
        no_task(r);
        r.other_pid = 0;
        r.other_tgid = 0;
        r.other_comm = [0; 16];
        r.arg = state;
        r.other_arg = cpu_id;
    });
    0
}

// TP_PROTO(int irq, struct irqaction *action)
#[btf_tracepoint(function = "irq_handler_entry")]
pub fn capture_irq(ctx: BtfTracePointContext) -> i32 {
    let irq = ctx.arg::<u64>(0) as u32;
    let action = IrqAction::arg(&ctx, 1);
    write(|r| {
        r.kind = CAPTURE_IRQ;
        no_task(r);
        action.name_into(&mut r.comm);
        r.arg = irq;
        current(r);
    });
    0
}

// TP_PROTO(int irq, struct irqaction *action, int ret)
#[btf_tracepoint(function = "irq_handler_exit")]
pub fn capture_irq_end(ctx: BtfTracePointContext) -> i32 {
    let irq = ctx.arg::<u64>(0) as u32;
    let ret = ctx.arg::<u64>(2) as u32;
    write(|r| {
        r.kind = CAPTURE_IRQ_EXIT;
        no_task(r);
        r.arg = irq;
        r.other_arg = ret;
        current(r);
    });
    0
}

// TP_PROTO(unsigned int vec_nr)
#[btf_tracepoint(function = "softirq_entry")]
pub fn capture_softirq(ctx: BtfTracePointContext) -> i32 {
    softirq(CAPTURE_SOFTIRQ, ctx.arg::<u64>(0) as u32);
    0
}

// TP_PROTO(unsigned int vec_nr)
#[btf_tracepoint(function = "softirq_exit")]
pub fn capture_softend(ctx: BtfTracePointContext) -> i32 {
    softirq(CAPTURE_SOFTIRQ_EXIT, ctx.arg::<u64>(0) as u32);
    0
}

#[inline(always)]
fn softirq(kind: u32, vec: u32) {
    write(|r| {
        r.kind = kind;
        no_task(r);
        r.arg = vec;
        current(r);
    });
}

/// The fields of a record's first task cleared: these events name no task but the one running,
/// which goes on the `other_*` side, as a waking's waker.
#[inline(always)]
fn no_task(r: &mut CaptureRecord) {
    r.pid = 0;
    r.tgid = 0;
    r.prio = 0;
    r.other_prio = 0;
    r.comm = [0; 16];
}
