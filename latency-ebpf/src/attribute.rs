//! Attribution, on only when a threshold is set (the verifier prunes all of it otherwise):
//! `remember_run` at every switch (who ran on this CPU, from when to when), `remember_depth` at
//! every enqueue (how many tasks were runnable on its CPU), and `incident` when a delay reaches
//! the threshold: the worst such delay per reason, CPU and window, with the runs meanwhile, and
//! every such delay in a per-CPU ring of the last few (`FINALS`: the end of a wait alerted on while
//! in progress).
use latency_common::maps::{DEPTH_UNKNOWN, FINALS_KEPT, Incident, RUNS_KEPT, Run, window_index};

use crate::{
    delay::Delay,
    knobs,
    maps::{DEPTHS, FINALS, INCIDENTS, RUNS},
    task::Task,
};

const RING_MASK: u64 = RUNS_KEPT as u64 - 1;
const FINALS_MASK: u64 = FINALS_KEPT as u64 - 1;

/// `prev` leaves this CPU: append its run to the CPU's ring.
#[inline(always)]
pub fn remember_run(prev: Task, prev_tid: u32, now: u64) {
    let Some(ring) = RUNS.get_ptr_mut(0) else { return };
    // SAFETY: this CPU's ring; sched_switch does not nest on one CPU.
    let ring = unsafe { &mut *ring };
    let slot = &mut ring.runs[(ring.head & RING_MASK) as usize];
    slot.tid = prev_tid;
    slot.tgid = prev.tgid();
    slot.start_ns = ring.running_since_ns;
    slot.end_ns = now;
    slot.comm = prev.comm();
    ring.head += 1;
    ring.running_since_ns = now;
}

/// `task` (tid `tid`) was just enqueued: remember how many others were runnable on its CPU.
#[inline(always)]
pub fn remember_depth(task: Task, tid: u32) {
    let depth = if knobs::depth_known() {
        // The run queue already counts the task itself (woken: activated; preempted: still on it).
        task.rq_nr_running().map_or(DEPTH_UNKNOWN, |n| n.saturating_sub(1))
    } else {
        DEPTH_UNKNOWN
    };
    if let Some(slot) = DEPTHS.get_ptr_mut(tid) {
        // SAFETY: an element of an array map, written only for this tid's own events.
        unsafe { *slot = depth };
    }
}

/// A delay that reached the threshold: keep it if it is this window's worst of its reason on
/// this CPU, with the runs on this CPU since the victim was enqueued, most recent first.
#[inline(always)]
pub fn incident(d: Delay, now: u64, epoch: u64, next: Task, next_tid: u32, cgroup: u64) {
    let (delay, reason) = (d.ns, d.reason);
    if let Some(ring) = FINALS.get_ptr_mut(0) {
        // SAFETY: this CPU's ring; sched_switch does not nest on one CPU.
        let ring = unsafe { &mut *ring };
        let slot = &mut ring.finals[(ring.head & FINALS_MASK) as usize];
        slot.tid = next_tid;
        slot.reason = reason as u32;
        slot.delay_ns = delay;
        slot.end_ns = now;
        ring.head += 1;
    }
    let Some(inc) = INCIDENTS.get_ptr_mut(window_index(epoch, reason)) else { return };
    // SAFETY: this CPU's slot; user space reads it only after the epoch moved on.
    let inc: &mut Incident = unsafe { &mut *inc };
    if inc.epoch == epoch && delay <= inc.delay_ns {
        return;
    }
    inc.epoch = epoch;
    inc.delay_ns = delay;
    inc.end_ns = now;
    inc.cgroup = cgroup;
    inc.throttled_ns = d.throttled_ns;
    inc.stolen_ns = d.stolen_ns;
    inc.victim_tid = next_tid;
    inc.victim_tgid = next.tgid();
    inc.victim_prio = next.prio();
    inc.victim_comm = next.comm();
    inc.reason = reason as u32;
    // SAFETY: an element of an array map.
    inc.queue_depth = match DEPTHS.get(next_tid) {
        Some(d) => *d,
        None => DEPTH_UNKNOWN,
    };
    let waited_from = now - delay;
    let mut kept = 0u32;
    let mut truncated = 0u32;
    if let Some(ring) = RUNS.get(0) {
        let mut i = 0u64;
        while i < RUNS_KEPT as u64 {
            let run: &Run = &ring.runs[(ring.head.wrapping_sub(1 + i) & RING_MASK) as usize];
            // Runs that ended before the victim was enqueued are not culprits; neither are
            // slots never written.
            if run.end_ns <= waited_from || run.end_ns == 0 {
                break;
            }
            inc.runs[(kept as usize) & (RUNS_KEPT - 1)] = *run;
            kept += 1;
            // The oldest run we keep began after the wait began: someone before it ran too.
            if i == RING_MASK && run.start_ns > waited_from {
                truncated = 1;
            }
            i += 1;
        }
    }
    inc.culprits = kept;
    inc.truncated = truncated;
}
