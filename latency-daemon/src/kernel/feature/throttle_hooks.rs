//! The throttled part of each wait on kernels whose `cfs_rq` keeps no throttle clock of its own
//! (before 6.8): this kernel's BTF and the per-cgroup capacity in; the throttle hooks (fexit on
//! `tg_throttle_down` / `tg_unthrottle_up`, or kprobes at their entry where the kernel has no BPF
//! trampolines, which keep that clock per group and CPU in a map), the
//! map's size and the offsets they and the cause split read out. It stands in for
//! `throttle_split`: where that one is available, this one is not needed.
use latency_common::{Knobs, THROTTLE_FROM_HOOKS, maps::names};

use super::{
    Feature, Room, Sizes,
    run_queue_clock::{self, RqClockLayout},
    throttle_split,
};
use crate::kernel::{
    btf::{Btf, BtfError, Member},
    object::Program,
    options::ProbeOptions,
};

/// What the throttle hooks read (`tg->cfs_rq[rq->cpu]`, its `throttle_count` and `h_nr_running`,
/// `rq->clock`) and the cause split with them (the task's `cfs_rq`, its `throttle_count` and
/// `h_nr_running`, the task's `se.on_rq` and migration count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HooksLayout {
    pub rq: RqClockLayout,
    pub throttle_count: Member,
    pub h_nr_running: Member,
    pub task_group_cfs_rq: Member,
    pub rq_cpu: Member,
    pub se_on_rq: Member,
    pub nr_migrations: Member,
}

/// Offsets for the throttle hooks; an error where this kernel keeps the clock itself (6.8+) or
/// lacks what they read (without CONFIG_CFS_BANDWIDTH, the functions and `throttle_count`).
pub fn layout(btf: &Btf) -> Result<HooksLayout, BtfError> {
    if throttle_split::layout(btf).is_ok() {
        return Err(BtfError::SelfThrottleClock);
    }
    for (_, _, function) in names::THROTTLE_HOOKS {
        btf.function(function)?;
    }
    Ok(HooksLayout {
        rq: run_queue_clock::layout(btf)?,
        throttle_count: btf.sized("cfs_rq", "throttle_count", &[4])?,
        h_nr_running: btf.sized("cfs_rq", "h_nr_running", &[4])?,
        task_group_cfs_rq: btf.sized("task_group", "cfs_rq", &[8])?,
        rq_cpu: btf.sized("rq", "cpu", &[4])?,
        se_on_rq: btf.sized("task_struct", "se.on_rq", &[4])?,
        nr_migrations: btf.sized("task_struct", "se.nr_migrations", &[8])?,
    })
}

/// Entries of the clock map: one per group and CPU the hooks saw throttled with tasks queued,
/// for as many groups as per-cgroup histograms keep, at most 64 Ki (4.5 MiB preallocated); a full
/// map is counted as lost.
const MAX_CLOCKS: u32 = 1 << 16;

/// The two hooks and their map.
pub const ROOM: Room = Room {
    maps: |on, o, sizes: Sizes| {
        let entries = if on { o.max_cgroups.saturating_mul(sizes.cpus).clamp(1, MAX_CLOCKS) } else { 1 };
        vec![(names::THROTTLE_CLOCKS, entries)]
    },
    programs: |_| {
        names::THROTTLE_HOOKS
            .into_iter()
            .map(|(name, kprobe, function)| Program::Fexit { name, function, kprobe: Some(kprobe) })
            .collect()
    },
    stands_in_for: Some(Feature::ThrottleSplit),
    ..Room::new("throttle_hooks", flag!(throttle_hooks), |btf| layout(btf).map(drop), knobs)
};

fn knobs(btf: &Btf, _o: &ProbeOptions, knobs: Knobs) -> Result<Knobs, BtfError> {
    let h = layout(btf)?;
    Ok(Knobs {
        task_se_nr_migrations: h.nr_migrations.offset,
        split_throttle: THROTTLE_FROM_HOOKS,
        cfs_rq_throttle_count: h.throttle_count.offset,
        cfs_rq_h_nr_running: h.h_nr_running.offset,
        task_group_cfs_rq: h.task_group_cfs_rq.offset,
        rq_cpu: h.rq_cpu.offset,
        task_se_on_rq: h.se_on_rq.offset,
        ..run_queue_clock::with_chain(&h.rq, knobs)
    })
}
