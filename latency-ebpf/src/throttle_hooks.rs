//! `tg_throttle_down` / `tg_unthrottle_up` (attached only with the throttle hooks: the throttled
//! part on kernels before 6.8) → each group's throttle clock on each CPU in `THROTTLE_CLOCKS`, the
//! two numbers 6.8+ keeps in the `cfs_rq` itself; and the clock as the cause split reads it. The
//! kernel calls them for a throttled or unthrottled group and each of its descendants on that
//! CPU, under that run queue's lock: never on the per-switch path. Each is an fexit program, or
//! where the kernel has no BPF trampolines (arm64 before 6.4) a kprobe at its entry: the same
//! arguments, `throttle_count` before the function moves it.
use aya_ebpf::{
    macros::{fexit, kprobe},
    programs::{FExitContext, ProbeContext},
};
use latency_common::{Lost, maps::ThrottleClock};

use crate::{knobs, maps::THROTTLE_CLOCKS, observe::count_lost, task::Group};

// static int tg_throttle_down(struct task_group *tg, void *data)        since 2.6.39
// `throttle_count++` (0 → 1: this group's throttle begins)
#[fexit(function = "tg_throttle_down")]
pub fn throttle_down(ctx: FExitContext) -> i32 {
    if knobs::throttle_hooks()
        && let Some(group) = Group::at(ctx.arg(0), ctx.arg(1))
    {
        began(group, 1);
    }
    0
}

#[kprobe]
pub fn kp_throttle(ctx: ProbeContext) -> u32 {
    if knobs::throttle_hooks()
        && let (Some(tg), Some(rq)) = (ctx.arg(0), ctx.arg(1))
        && let Some(group) = Group::at(tg, rq)
    {
        began(group, 0);
    }
    0
}

// static int tg_unthrottle_up(struct task_group *tg, void *data)        since 2.6.39
// `throttle_count--` (1 → 0: it ends)
#[fexit(function = "tg_unthrottle_up")]
pub fn unthrottle_up(ctx: FExitContext) -> i32 {
    if knobs::throttle_hooks()
        && let Some(group) = Group::at(ctx.arg(0), ctx.arg(1))
    {
        ended(group, 0);
    }
    0
}

#[kprobe]
pub fn kp_unthrottle(ctx: ProbeContext) -> u32 {
    if knobs::throttle_hooks()
        && let (Some(tg), Some(rq)) = (ctx.arg(0), ctx.arg(1))
        && let Some(group) = Group::at(tg, rq)
    {
        ended(group, 1);
    }
    0
}

/// The group entered the throttled state (its `throttle_count` went 0 → 1, which reads `first`
/// where the hook runs: 1 after the function, 0 at its entry; more is an ancestor's throttle on
/// top of one in force): its clock starts.
#[inline(always)]
fn began(g: Group, first: i32) {
    if g.throttle_count != first {
        return;
    }
    if let Some(c) = THROTTLE_CLOCKS.get_ptr_mut(g.cfs_rq) {
        // SAFETY: an element of a preallocated hash map; this group's entry is written only
        // under its run queue's lock (here and in `ended`).
        unsafe { (*c).since_ns = g.clock };
        return;
    }
    let clock = ThrottleClock { since_ns: g.clock, total_ns: 0 };
    if THROTTLE_CLOCKS.insert(g.cfs_rq, clock, 0).is_err() {
        count_lost(Lost::ThrottleClocks);
    }
}

/// The group left the throttled state (`throttle_count` back to 0, which reads `last` where the
/// hook runs: 0 after the function, 1 at its entry): its clock stops. With no task queued in it,
/// no wait reads its clock before the next throttle starts a new one, so the entry goes (groups
/// are freed with nothing queued: this is what keeps the map from filling).
#[inline(always)]
fn ended(g: Group, last: i32) {
    if g.throttle_count != last {
        return;
    }
    let Some(c) = THROTTLE_CLOCKS.get_ptr_mut(g.cfs_rq) else { return };
    if g.h_nr_running == 0 {
        let _ = THROTTLE_CLOCKS.remove(g.cfs_rq);
        return;
    }
    // SAFETY: as in `began`.
    let c = unsafe { &mut *c };
    if c.since_ns != 0 && g.clock > c.since_ns {
        c.total_ns += g.clock - c.since_ns;
    }
    c.since_ns = 0;
}
