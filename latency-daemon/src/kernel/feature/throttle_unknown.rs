//! Where the kernel keeps no throttle clock the daemon can read (before 6.8, with the throttle
//! hooks off or not attachable): this kernel's BTF in; the kernel's own total of each group's
//! throttled time (`cfs_rq.throttled_clock_pelt_time`, 5.12+, or `throttled_clock_task_time`
//! before), the run queue chain and the migration count as knobs out. That total is on a clock
//! the daemon cannot trust for an amount (the PELT clock is scaled by CPU capacity and frequency),
//! but whether it moved during a wait is exact: a throttle of the group (or an ancestor) ended
//! while the task waited. Such a wait is counted as `Cause::Unknown` instead of being charged to
//! whoever held the CPU when it ended (usually nobody: the idle task). It stands in for
//! `throttle_hooks`, which stands in for `throttle_split`: it is needed only where neither is on.
use std::sync::atomic::{AtomicBool, Ordering};

use latency_common::{Knobs, THROTTLE_FROM_OVERLAP};

use super::{
    Feature, Room,
    run_queue_clock::{self, RqClockLayout},
    throttle_split,
};
use crate::kernel::{
    btf::{Btf, BtfError, Member},
    options::ProbeOptions,
};

/// The kernel's own throttled-time totals per `cfs_rq`, newest name first.
const TOTALS: [&str; 2] = ["throttled_clock_pelt_time", "throttled_clock_task_time"];

/// What the detector reads: the task's group on its CPU, `task->se.cfs_rq`, and its total.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverlapLayout {
    pub rq: RqClockLayout,
    pub total: Member,
    pub nr_migrations: Member,
}

/// Offsets for the detector; an error where the kernel keeps a throttle clock itself (6.8+) or has
/// no CPU limits (without CONFIG_CFS_BANDWIDTH there are no totals and nothing to throttle).
pub fn layout(btf: &Btf) -> Result<OverlapLayout, BtfError> {
    if throttle_split::layout(btf).is_ok() {
        return Err(BtfError::SelfThrottleClock);
    }
    let total = TOTALS
        .iter()
        .map(|name| btf.sized("cfs_rq", name, &[8]))
        .find(Result::is_ok)
        .unwrap_or_else(|| btf.sized("cfs_rq", TOTALS[0], &[8]))?;
    Ok(OverlapLayout {
        rq: run_queue_clock::layout(btf)?,
        total,
        nr_migrations: btf.sized("task_struct", "se.nr_migrations", &[8])?,
    })
}

pub const ROOM: Room = Room {
    stands_in_for: Some(Feature::ThrottleHooks),
    ..Room::new("throttle_unknown", flag!(throttle_unknown), |btf| layout(btf).map(drop), knobs)
};

static ANNOUNCED: AtomicBool = AtomicBool::new(false);

/// Logs why the throttled waits are `unknown` where the final load has this feature `on`, once
/// per process: not from `knobs`, which runs for each load `load::degrade` tries, nor again at a
/// reload. (vmtest's `checks::unknown_warning` counts the line in each daemon's log.)
pub fn announce(on: bool) {
    if first(on, &ANNOUNCED) {
        log::warn!(
            feature = ROOM.name();
            "this kernel keeps no throttle clock the daemon can read (no cfs_rq.throttled_clock_self, throttle \
             hooks off or not attachable): waits that overlapped a CPU-limit throttle are counted as cause=\"unknown\", \
             not by who held the CPU"
        );
    }
}

/// Whether `on` is true for the first time, `said` remembering it.
fn first(on: bool, said: &AtomicBool) -> bool {
    on && !said.swap(true, Ordering::Relaxed)
}

fn knobs(btf: &Btf, _o: &ProbeOptions, knobs: Knobs) -> Result<Knobs, BtfError> {
    let l = layout(btf)?;
    Ok(Knobs {
        task_se_nr_migrations: l.nr_migrations.offset,
        split_throttle: THROTTLE_FROM_OVERLAP,
        cfs_rq_throttled_clock_self_time: l.total.offset,
        ..run_queue_clock::with_chain(&l.rq, knobs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warning_is_said_once_and_only_where_on() {
        let said = AtomicBool::new(false);
        assert!(!first(false, &said));
        // The first load with it on, then another (a reload, or a later try of the process).
        assert_eq!((first(true, &said), first(true, &said), first(false, &said)), (true, false, false));
    }
}
