//! `--clock run-queue`: this kernel's BTF in; the pointer chain to a task's run queue clock
//! (`task->se.cfs_rq->rq->clock`, what the kernel's own `run_delay` reads) and its knobs out.
use latency_common::{Knobs, knobs::Clock};

use super::{Room, Switch};
use crate::kernel::{
    btf::{Btf, BtfError, Member},
    options::ProbeOptions,
};

/// The pointer chain from a task to its run queue's clock: `task->se.cfs_rq->rq->clock`. The
/// cause split and the queue depth walk the same chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RqClockLayout {
    pub task_se_cfs_rq: Member,
    pub cfs_rq_rq: Member,
    pub rq_clock: Member,
}

/// Offsets to reach `rq->clock` from a task; needs CONFIG_FAIR_GROUP_SCHED (`cfs_rq.rq`).
pub fn layout(btf: &Btf) -> Result<RqClockLayout, BtfError> {
    Ok(RqClockLayout {
        task_se_cfs_rq: btf.sized("task_struct", "se.cfs_rq", &[8])?,
        cfs_rq_rq: btf.sized("cfs_rq", "rq", &[8])?,
        rq_clock: btf.sized("rq", "clock", &[8])?,
    })
}

/// `knobs` with the chain's written (shared by every feature that walks it).
pub fn with_chain(rq: &RqClockLayout, knobs: Knobs) -> Knobs {
    Knobs {
        task_se_cfs_rq: rq.task_se_cfs_rq.offset,
        cfs_rq_rq: rq.cfs_rq_rq.offset,
        rq_clock: rq.rq_clock.offset,
        ..knobs
    }
}

/// The run-queue clock instead of the monotonic one.
pub const ROOM: Room = Room::new(
    "run_queue_clock",
    Switch::Own {
        wanted: |o| o.clock == Clock::RunQueue,
        set: |o, from, on| o.clock = if on { from.clock } else { Clock::Monotonic },
    },
    |btf| layout(btf).map(drop),
    knobs,
);

fn knobs(btf: &Btf, _o: &ProbeOptions, knobs: Knobs) -> Result<Knobs, BtfError> {
    Ok(Knobs { clock_rq: 1, ..with_chain(&layout(btf)?, knobs) })
}
