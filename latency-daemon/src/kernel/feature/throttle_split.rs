//! The throttled part of each wait: this kernel's BTF in; the group's throttle clocks
//! (`cfs_rq.throttled_clock_self`, `_time`: 6.8+, what cgroup v2's `cpu.stat.local` reports),
//! the run queue chain and the migration count as knobs out.
use latency_common::{Knobs, THROTTLE_FROM_SELF_CLOCK};

use super::{
    Room,
    run_queue_clock::{self, RqClockLayout},
};
use crate::kernel::{
    btf::{Btf, BtfError, Member},
    options::ProbeOptions,
};

/// What the throttled part of a wait reads: the task's own group on its CPU,
/// `task->se.cfs_rq`, its throttle clocks and its run queue's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThrottleLayout {
    pub rq: RqClockLayout,
    pub throttled_clock_self: Member,
    pub throttled_clock_self_time: Member,
    pub nr_migrations: Member,
}

/// Offsets for the throttled part of the cause split; an error names what this kernel lacks
/// (before 6.8, the per-group throttle clock; without CONFIG_CFS_BANDWIDTH, all of it).
pub fn layout(btf: &Btf) -> Result<ThrottleLayout, BtfError> {
    Ok(ThrottleLayout {
        rq: run_queue_clock::layout(btf)?,
        throttled_clock_self: btf.sized("cfs_rq", "throttled_clock_self", &[8])?,
        throttled_clock_self_time: btf.sized("cfs_rq", "throttled_clock_self_time", &[8])?,
        nr_migrations: btf.sized("task_struct", "se.nr_migrations", &[8])?,
    })
}

pub const ROOM: Room = Room::new("throttle_split", flag!(split_throttle), |btf| layout(btf).map(drop), knobs);

fn knobs(btf: &Btf, _o: &ProbeOptions, knobs: Knobs) -> Result<Knobs, BtfError> {
    let t = layout(btf)?;
    Ok(Knobs {
        task_se_nr_migrations: t.nr_migrations.offset,
        split_throttle: THROTTLE_FROM_SELF_CLOCK,
        cfs_rq_throttled_clock_self: t.throttled_clock_self.offset,
        cfs_rq_throttled_clock_self_time: t.throttled_clock_self_time.offset,
        ..run_queue_clock::with_chain(&t.rq, knobs)
    })
}
