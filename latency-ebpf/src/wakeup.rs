//! `sched_wakeup` / `sched_wakeup_new` → stamp the woken task with reason `wakeup`.
use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use latency_common::Reason;

use crate::{knobs, observe, task::Task};

// TP_PROTO(struct task_struct *p)
#[btf_tracepoint(function = "sched_wakeup")]
pub fn sched_wakeup(ctx: BtfTracePointContext) -> i32 {
    on_wakeup(&ctx);
    0
}

// TP_PROTO(struct task_struct *p)
#[btf_tracepoint(function = "sched_wakeup_new")]
pub fn sched_wakeup_new(ctx: BtfTracePointContext) -> i32 {
    on_wakeup(&ctx);
    0
}

#[inline(always)]
fn on_wakeup(ctx: &BtfTracePointContext) {
    let task = Task::arg(ctx, 0);
    let tid = task.tid();
    // pid 0 is the idle task of every CPU; it is never queued. A task woken while still on its
    // CPU (it was about to sleep) keeps running: it does not wait, and a stamp would only go stale.
    if tid == 0 || (knobs::wakeup_running_known() && task.on_cpu()) || !observe::keep(task, tid) {
        return;
    }
    observe::stamp(ctx, task, tid, observe::now(task), Reason::Wakeup);
}
