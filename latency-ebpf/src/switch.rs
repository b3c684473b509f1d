//! `sched_switch` → re-stamp a `prev` that stays runnable (reason `preempt`), count the switch,
//! account idle time, and take `next`'s stamp: that is the delay.
use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use latency_common::{Lost, Reason, maps::CpuState};

use crate::{attribute, knobs, maps::CPU_STATS, observe, task::Task};

/// `TASK_RUNNING`: a `prev` in this state was switched out but stays on the run queue.
const TASK_RUNNING: u32 = 0;

// TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
//          unsigned int prev_state)            since 5.18; before, without prev_state.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    on_switch(&ctx);
    0
}

#[inline(always)]
fn on_switch(ctx: &BtfTracePointContext) {
    let prev = Task::arg(ctx, 1);
    // prev is current on this CPU, so its run queue is this CPU's. Read first: the helper call
    // clobbers the argument registers, so nothing loaded before it would survive it unspilled.
    let now = observe::now(prev);
    let Some(state) = CPU_STATS.get_ptr_mut(0) else { return };
    // SAFETY: a per-CPU array slot of this CPU; tracepoint programs do not nest on one CPU
    // for the same tracepoint, and sched_switch runs with the run-queue lock held.
    let state: &mut CpuState = unsafe { &mut *state };
    let cpu = &mut state.stats;
    let preempt = ctx.arg::<u64>(0) & 0xff != 0;
    let next = Task::arg(ctx, 2);
    // Each knob read is a load (see knobs.rs): once per event.
    let per_task = knobs::per_task();
    cpu.switches += 1;

    let prev_tid = prev.tid();
    // Each switch's prev is the previous switch's next, unless the kernel switched without
    // raising the tracepoint (seen on some kernels): count it, never guess what was lost.
    let last_next = cpu.last_next;
    let untraced = last_next != 0 && last_next != prev_tid as u64 + 1;
    if untraced {
        cpu.lost[Lost::Switches as usize] += 1;
        // An idle period open or starting around the unseen switch has an unknown bound.
        cpu.idle_since_ns = 0;
        if per_task {
            observe::untraced_out((last_next - 1) as u32);
        }
    }
    let next_tid = next.tid();
    cpu.last_next = next_tid as u64 + 1;
    // Since when prev ran: unknown (0) after an unseen switch (then the whole of a wait may be
    // its). How long is worked out only for the waits that need it.
    let prev_since = if untraced { 0 } else { cpu.running_since_ns };
    cpu.running_since_ns = now;
    let prev_cgroup = if untraced { 0 } else { cpu.running_cgroup };
    cpu.running_cgroup = 0;
    if knobs::attribute_ns() != 0 {
        attribute::remember_run(prev, prev_tid, now);
    }
    if prev_tid == 0 {
        if cpu.idle_since_ns != 0 && now > cpu.idle_since_ns {
            cpu.idle_ns += now - cpu.idle_since_ns;
        }
        cpu.idle_since_ns = 0;
    } else {
        let prev_state = if knobs::switch_has_prev_state() { ctx.arg::<u64>(3) as u32 } else { prev.state() };
        // Still runnable: it stays queued and waits to get a CPU back. Exactly the kernel's
        // own rule for run_delay (sched_info_depart re-queues iff TASK_RUNNING).
        let queued = prev_state == TASK_RUNNING;
        if queued || preempt {
            cpu.involuntary += 1;
        } else {
            cpu.voluntary += 1;
        }
        let kept = observe::keep(prev, prev_tid);
        if queued && kept {
            observe::stamp(ctx, prev, prev_tid, now, Reason::Preempt);
        } else if untraced {
            // Its stamp was never taken: without this, a second unseen switch could turn it into
            // a delay that includes run time.
            observe::forget(prev_tid);
        }
        if per_task && kept {
            observe::task_out(ctx, prev, prev_tid, now, queued || preempt, untraced);
        }
    }

    if next_tid == 0 {
        cpu.idle_since_ns = now;
        return;
    }
    let delay = observe::take(ctx, next, next_tid, now, cpu);
    let mut split = None;
    if let Some(d) = delay {
        let (cgroup, holder) =
            observe::record(ctx, d, state, now, prev, prev_tid, prev_since, prev_cgroup, next, next_tid);
        state.stats.running_cgroup = cgroup;
        split = Some((d, holder));
    }
    if per_task && observe::keep(next, next_tid) {
        observe::task_in(ctx, next, next_tid, now, split);
    }
}
