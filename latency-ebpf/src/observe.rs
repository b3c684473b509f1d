//! The per-event verbs: `stamp` an enqueue, `take` a stamp at switch-in, `record` the delay, and
//! (per-task feature) `task_out` / `task_in`. O(1), one clock read per event.
use aya_ebpf::{helpers::generated::bpf_ktime_get_ns, programs::BtfTracePointContext};
use latency_common::{
    CpuStats, Discard, Lost, Reason, THROTTLE_FROM_OVERLAP, TaskStats, WindowMax,
    buckets::{BUCKETS, bucket_of},
    maps::{
        Cause, CgroupHist, CgroupSlot, CpuState, SPLIT_MIGRATION_BITS, SPLIT_THROTTLE_BITS, STAMP_STOLEN_BITS,
        cgroup_bucket, cgroup_slot, split_part, stamp_age, stamp_pack, stamp_slot, stamp_unpack, window_index,
    },
};

use crate::delay::Delay;
use crate::{
    attribute,
    diag::{self, Rare},
    knobs,
    maps::{CGROUP_RETIRED, CGROUP_SLOTS, CGROUP_USED, CGROUPS, CPU_STATS, FILTER, STAMPS, TASKS},
    task::Task,
};

/// `i` as a value the compiler cannot see through, so the mask that follows stays in the program:
/// an index made from an enum has a range the compiler knows and would drop the mask for, but a
/// verifier (6.1's) that lost the range across a 4-byte spill needs it to bound the offset.
#[inline(always)]
fn opaque(i: u32) -> u32 {
    // SAFETY: a read of a local.
    unsafe { core::ptr::read_volatile(&i) }
}

/// The one clock read of an event: CLOCK_MONOTONIC ns, or with the `clock_rq` knob the clock
/// of `task`'s run queue (what the kernel's run_delay uses); the verifier prunes the other.
#[inline(always)]
pub fn now(task: Task) -> u64 {
    if knobs::clock_rq() {
        return task.rq_clock();
    }
    // SAFETY: a helper without arguments or side effects.
    unsafe { bpf_ktime_get_ns() }
}

/// Whether this task is recorded: always, unless a filter is set and names neither its tid nor
/// its tgid. The branch is pruned by the verifier when filtering is off.
#[inline(always)]
pub fn keep(task: Task, tid: u32) -> bool {
    if !knobs::filter() {
        return true;
    }
    // SAFETY: the values are plain u8 flags, only tested for presence.
    unsafe { FILTER.get(tid).is_some() || FILTER.get(task.tgid()).is_some() }
}

#[inline(always)]
pub fn count_lost(what: Lost) {
    if let Some(cpu) = CPU_STATS.get_ptr_mut(0) {
        // SAFETY: this CPU's slot; see switch.rs.
        unsafe { (*cpu).stats.lost[what as usize] += 1 };
    }
}

const THROTTLE_MASK: u32 = (1 << SPLIT_THROTTLE_BITS) - 1;
const MIGRATION_MASK: u32 = (1 << SPLIT_MIGRATION_BITS) - 1;

/// Remember when `task` (tid `tid`) entered a run queue and why: a single store, plus the
/// queue depth when attribution is on and the cause split's snapshots when it is on.
#[inline(always)]
pub fn stamp(ctx: &BtfTracePointContext, task: Task, tid: u32, now: u64, reason: Reason) {
    if knobs::attribute_ns() != 0 {
        attribute::remember_depth(task, tid);
    }
    let (element, i) = stamp_slot(tid);
    let Some(pair) = STAMPS.get_ptr_mut(element) else {
        count_lost(Lost::Stamps);
        diag::rare(ctx, Rare::LostStamp, tid as u64);
        return;
    };
    // SAFETY: an element of an array map; its two tids' entries are written only for their own
    // tasks' events, and a racing writer for the same tid can only be another event of that
    // task (the last stamp wins either way).
    let pair = unsafe { &mut *pair };
    let mut stolen = 0;
    if knobs::split() {
        let c = task.split_clocks(now, false);
        stolen = c.stolen;
        pair.split[i & 1] =
            (c.throttled as u32 & THROTTLE_MASK) | ((c.migrations as u32 & MIGRATION_MASK) << SPLIT_THROTTLE_BITS);
    }
    pair.stamp[i & 1] = stamp_pack(now, reason, stolen);
}

/// Forget `tid`'s stamp: it may predate a switch-in nobody saw.
#[inline(always)]
pub fn forget(tid: u32) {
    let (element, i) = stamp_slot(tid);
    if let Some(pair) = STAMPS.get_ptr_mut(element) {
        // SAFETY: see `stamp`.
        unsafe { (*pair).stamp[i & 1] = 0 };
    }
}

/// Consume `next`'s stamp (tid `tid`): the delay, its reason and its split, or `None` if there
/// is none (the task was queued before we attached) or it is not believable (counted).
#[inline(always)]
pub fn take(ctx: &BtfTracePointContext, next: Task, tid: u32, now: u64, cpu: &mut CpuStats) -> Option<Delay> {
    let (element, i) = stamp_slot(tid);
    // SAFETY: an element of an array map, see `stamp`.
    let pair = unsafe { &mut *STAMPS.get_ptr_mut(element)? };
    let stamp = pair.stamp[i & 1];
    if stamp == 0 {
        return None;
    }
    pair.stamp[i & 1] = 0;
    let (at, reason, stolen_then) = stamp_unpack(stamp);
    let Some(delay) = stamp_age(at, now) else {
        cpu.discarded[Discard::FutureStamp as usize] += 1;
        diag::rare(ctx, Rare::FutureStamp, tid as u64);
        return None;
    };
    if delay > knobs::ceiling_ns() {
        cpu.discarded[Discard::OverCeiling as usize] += 1;
        return None;
    }
    let mut d = Delay { ns: delay, reason, throttled_ns: 0, stolen_ns: 0 };
    if knobs::split() {
        let then = pair.split[i & 1];
        let c = next.split_clocks(now, true);
        if (c.migrations as u32 & MIGRATION_MASK) != then >> SPLIT_THROTTLE_BITS {
            // The wait began on another CPU, whose clocks these are not: not split (counted).
            cpu.unsplit += 1;
            return Some(d);
        }
        let source = knobs::throttle_source();
        if source != 0 {
            let t = split_part(c.throttled, (then & THROTTLE_MASK) as u64, SPLIT_THROTTLE_BITS);
            d.throttled_ns = if source == THROTTLE_FROM_OVERLAP {
                // A throttle ended during the wait, and nothing says how much of it: all of it,
                // which user space then names `unknown` (nothing else uses the throttled slot).
                if t != 0 { delay } else { 0 }
            } else if t < delay {
                t
            } else {
                // The run queue's clock and the stamps' may differ by a little over a wait.
                delay
            };
        }
        if knobs::split_stolen() || knobs::split_irq() {
            let s = split_part(c.stolen, stolen_then, STAMP_STOLEN_BITS);
            let left = delay - d.throttled_ns;
            d.stolen_ns = if s < left { s } else { left };
        }
    }
    Some(d)
}

/// Add a delay to this CPU's histogram for its reason and to the window maximum; returns
/// `next`'s cgroup v2 id where it was read (0 otherwise). `prev_since` is when `prev` got the CPU
/// (0: unknown); `prev_cgroup` is `prev`'s cgroup where its own switch-in read it (0: read it here
/// if needed).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn record(
    ctx: &BtfTracePointContext,
    d: Delay,
    state: &mut CpuState,
    now: u64,
    prev: Task,
    prev_tid: u32,
    prev_since: u64,
    prev_cgroup: u64,
    next: Task,
    next_tid: u32,
) -> (u64, Cause) {
    let (delay, reason) = (d.ns, d.reason);
    // Find the cgroup's entry first, so the bucket index below is used by both histograms at
    // one spot and dies right after.
    let cgroups = knobs::cgroups();
    let cgroup_id = if cgroups { next.cgroup_id() } else { 0 };
    let cgroup = if cgroups { cgroup_entry(ctx, cgroup_id) } else { None };
    let (holder, holder_cgroup) = holder(prev, prev_tid, prev_cgroup, cgroup_id, cgroups);
    let held = delay - d.throttled_ns - d.stolen_ns;
    // Most waits have neither clock part: a test and a jump instead of a load, add and store.
    let split = d.throttled_ns | d.stolen_ns != 0;
    let cpu = &mut state.stats;
    if split {
        cpu.waited_ns[Cause::Throttled as usize] += d.throttled_ns;
        cpu.waited_ns[Cause::IrqSteal as usize] += d.stolen_ns;
    }
    cpu.waited_ns[holder as usize] += held;
    let bucket = bucket_of(delay) & (BUCKETS - 1);
    let h = &mut state.histograms[(opaque(reason as u32) & 1) as usize];
    h.buckets[bucket] += 1;
    h.sum_ns += delay;
    if let Some(c) = cgroup {
        if let Some(count) = c.buckets.get_mut(cgroup_bucket(bucket)) {
            *count += 1;
        }
        c.sum_ns += delay;
        if split {
            c.waited_ns[Cause::Throttled as usize] += d.throttled_ns;
            c.waited_ns[Cause::IrqSteal as usize] += d.stolen_ns;
        }
        c.waited_ns[holder as usize] += held;
        // The other side of `Cause::Other`: the cgroup that held the CPU is charged the part
        // of the wait it ran, so it can be named. A second slot lookup, only for waits that end
        // on another cgroup's task.
        if holder == Cause::Other && holder_cgroup != 0 {
            if let Some(h) = cgroup_entry(ctx, holder_cgroup) {
                // How long prev ran (since 0: unknown, so the whole wait may be its).
                let prev_ran = if prev_since == 0 { u64::MAX } else { now.saturating_sub(prev_since) };
                h.held_others_ns += if prev_ran < delay { prev_ran } else { delay };
            }
        }
    }
    let epoch = crate::maps::epoch();
    let threshold = knobs::attribute_ns();
    if threshold != 0 && delay >= threshold {
        attribute::incident(d, now, epoch, next, next_tid, cgroup_id);
    }
    // This CPU's slot; user space reads it only after the epoch moved on.
    let w: &mut WindowMax = &mut state.window[(opaque(window_index(epoch, reason)) & 3) as usize];
    {
        if w.epoch != epoch || delay > w.delay_ns {
            w.epoch = epoch;
            w.delay_ns = delay;
            w.end_ns = now;
            w.victim_tid = next_tid;
            w.victim_tgid = next.tgid();
            w.victim_prio = next.prio();
            w.victim_comm = next.comm();
            w.prev_tid = prev_tid;
            w.prev_tgid = prev.tgid();
            w.prev_comm = prev.comm();
            w.reason = reason as u32;
        }
    }
    (cgroup_id, holder)
}

/// Who held the CPU until the waiting task (of cgroup `victim_cgroup`) got it: `prev` at this
/// switch, and its cgroup where that matters (same or another, only with per-cgroup histograms
/// on): `known` if its switch-in read it, else read now.
#[inline(always)]
fn holder(prev: Task, prev_tid: u32, known: u64, victim_cgroup: u64, cgroups: bool) -> (Cause, u64) {
    if prev_tid == 0 {
        return (Cause::Idle, 0);
    }
    if prev.is_kthread() {
        return (Cause::Kernel, 0);
    }
    if !cgroups {
        return (Cause::Other, 0);
    }
    let id = if known != 0 { known } else { prev.cgroup_id() };
    if id == victim_cgroup { (Cause::Same, id) } else { (Cause::Other, id) }
}

/// This CPU's histogram of cgroup `id`: in the common case its slot, an array element (one
/// multiply to find it, one compare to own it); when another cgroup holds the slot on this CPU,
/// the hash map. `None` (counted) only if that is full.
#[inline(always)]
fn cgroup_entry(ctx: &BtfTracePointContext, id: u64) -> Option<&'static mut CgroupHist> {
    let index = cgroup_slot(id, knobs::cgroup_slot_bits());
    if let Some(slot) = CGROUP_SLOTS.get_ptr_mut(index) {
        // SAFETY: this CPU's value of a per-CPU array element; no other writer on this CPU (the
        // daemon never writes it).
        let slot: &mut CgroupSlot = unsafe { &mut *slot };
        // Id 0 (a NULL on the way to it) never owns a slot: a free slot's id is 0 too.
        if id != 0 && slot.id == id {
            return Some(&mut slot.hist);
        }
        if id != 0 && claimable(slot.id, index) {
            slot.hist = CgroupHist::ZERO;
            slot.id = id;
            if let Some(word) = CGROUP_USED.get_ptr_mut(index / 64) {
                // SAFETY: this CPU's word; as above.
                unsafe { *word |= 1u64 << (index % 64) };
            }
            return Some(&mut slot.hist);
        }
    }
    cgroup_overflow(ctx, id)
}

/// A slot may be taken when free, or when it holds the cgroup the daemon retired there (removed,
/// its final counts read). Off the common path: only when the slot's owner differs.
#[inline(always)]
fn claimable(owner: u64, index: u32) -> bool {
    owner == 0 || CGROUP_RETIRED.get(index).is_some_and(|retired| *retired == owner)
}

/// The hash map's entry for cgroup `id` on this CPU, created if needed.
#[inline(always)]
fn cgroup_overflow(ctx: &BtfTracePointContext, id: u64) -> Option<&'static mut CgroupHist> {
    let slot = match CGROUPS.get_ptr_mut(id) {
        Some(h) => h,
        None => {
            // BPF_NOEXIST: another CPU may have created it in between; then it simply exists.
            let _ = CGROUPS.insert(id, CgroupHist::ZERO, 1);
            match CGROUPS.get_ptr_mut(id) {
                Some(h) => h,
                None => {
                    count_lost(Lost::Cgroups);
                    diag::rare(ctx, Rare::FullCgroups, id);
                    return None;
                }
            }
        }
    };
    // SAFETY: this CPU's value of a per-CPU hash entry; no other writer on this CPU.
    Some(unsafe { &mut *slot })
}

/// The per-task entry for `tid`, created if missing; `None` (counted) if the map is full.
#[inline(always)]
fn task_entry(ctx: &BtfTracePointContext, task: Task, tid: u32) -> Option<&'static mut TaskStats> {
    if let Some(t) = TASKS.get_ptr_mut(tid) {
        // SAFETY: a hash map value; one CPU runs a given task at a time, and its switch-out and
        // switch-in happen in order under run-queue locks.
        return Some(unsafe { &mut *t });
    }
    let mut fresh = TaskStats::ZERO;
    fresh.tgid = task.tgid();
    fresh.prio = task.prio();
    fresh.comm = task.comm();
    // BPF_NOEXIST: never overwrite an entry another CPU created in between.
    if TASKS.insert(tid, &fresh, 1).is_err() && TASKS.get_ptr_mut(tid).is_none() {
        count_lost(Lost::Tasks);
        diag::rare(ctx, Rare::FullTasks, tid as u64);
        return None;
    }
    // SAFETY: as above.
    TASKS.get_ptr_mut(tid).map(|t| unsafe { &mut *t })
}

/// `prev` leaves the CPU: close its running period and count the switch.
#[inline(always)]
pub fn task_out(ctx: &BtfTracePointContext, prev: Task, tid: u32, now: u64, involuntary: bool, untraced_in: bool) {
    let Some(t) = task_entry(ctx, prev, tid) else { return };
    if untraced_in {
        // It got this CPU unseen: when is unknown, so this period is not counted.
        t.untraced += 1;
    } else if t.last_in_ns != 0 && now > t.last_in_ns {
        t.runtime_ns += now - t.last_in_ns;
    }
    t.last_in_ns = 0;
    if involuntary {
        t.involuntary += 1;
    } else {
        t.voluntary += 1;
    }
}

/// `tid` left a CPU without a `sched_switch`: mark its entry, if it has one. Its running period
/// stays open: its next traced switch-in replaces it, or its next traced switch-out is itself
/// untraced-in and adds nothing (see `task_out`).
#[inline(always)]
pub fn untraced_out(tid: u32) {
    if tid == 0 {
        return;
    }
    if let Some(t) = TASKS.get_ptr_mut(tid) {
        // SAFETY: see `task_entry`.
        unsafe { (*t).untraced += 1 };
    }
}

/// `next` gets the CPU: open a running period and add its delay, if one was measured.
#[inline(always)]
pub fn task_in(ctx: &BtfTracePointContext, next: Task, tid: u32, now: u64, delay: Option<(Delay, Cause)>) {
    let Some(t) = task_entry(ctx, next, tid) else { return };
    t.last_in_ns = now;
    // comm and prio change (exec, prctl, renice): keep the latest.
    t.comm = next.comm();
    t.prio = next.prio();
    if let Some((d, holder)) = delay {
        let (delay_ns, reason) = (d.ns, d.reason);
        t.waited_ns[Cause::Throttled as usize] += d.throttled_ns;
        t.waited_ns[Cause::IrqSteal as usize] += d.stolen_ns;
        t.waited_ns[holder as usize] += delay_ns - d.throttled_ns - d.stolen_ns;
        t.delays[(opaque(reason as u32) & 1) as usize] += 1;
        t.delay_sum_ns += delay_ns;
        if delay_ns > t.delay_max_ns {
            t.delay_max_ns = delay_ns;
            t.delay_max_at_ns = now;
            t.delay_max_reason = reason as u32;
        }
    }
}
