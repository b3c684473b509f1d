//! Alerting's attribution (who ran meanwhile) and its queue depth: the threshold and this
//! kernel's BTF in; the threshold knob, the depth chain (`task->se.cfs_rq->rq->nr_running`, or
//! unknown where the BTF lacks it) and the depth array's size out.
use latency_common::{Knobs, maps::names};

use super::{Feature, Room, Switch, run_queue_clock};
use crate::kernel::{
    btf::{Btf, BtfError, Member},
    options::ProbeOptions,
};

/// The chain from a task to the number of runnable tasks on its CPU:
/// `task->se.cfs_rq->rq->nr_running`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DepthLayout {
    pub task_se_cfs_rq: Member,
    pub cfs_rq_rq: Member,
    pub rq_nr_running: Member,
}

/// Offsets to read a run queue's depth from a task; an error where this kernel's BTF lacks
/// them (no `cfs_rq.rq` without CONFIG_FAIR_GROUP_SCHED), and the depth is then unknown.
pub fn depth_layout(btf: &Btf) -> Result<DepthLayout, BtfError> {
    let rq = run_queue_clock::layout(btf)?;
    Ok(DepthLayout {
        task_se_cfs_rq: rq.task_se_cfs_rq,
        cfs_rq_rq: rq.cfs_rq_rq,
        rq_nr_running: btf.sized("rq", "nr_running", &[4])?,
    })
}

/// Attribution: the run ring, and the incidents of delays at or above the threshold.
pub const ATTRIBUTION: Room = Room {
    maps: |on, _, sizes| vec![(names::DEPTHS, if on { sizes.stamps } else { 1 })],
    ..Room::new(
        "attribution",
        Switch::Own {
            wanted: |o| o.attribute_ns != 0,
            set: |o, from, on| o.attribute_ns = if on { from.attribute_ns } else { 0 },
        },
        |_| Ok(()),
        |_, o, knobs| Ok(Knobs { attribute_ns: o.attribute_ns, ..knobs }),
    )
};

/// The queue depth of an attributed delay: goes with attribution, unknown where this kernel's
/// BTF lacks the chain (the load reads the depth only if BTF has it).
pub const QUEUE_DEPTH: Room =
    Room::new("queue_depth", Switch::With(Feature::Attribution), |btf| depth_layout(btf).map(drop), depth_knobs);

fn depth_knobs(btf: &Btf, _o: &ProbeOptions, knobs: Knobs) -> Result<Knobs, BtfError> {
    let d = depth_layout(btf)?;
    let (rq_nr_running, task_se_cfs_rq, cfs_rq_rq) =
        (d.rq_nr_running.offset, d.task_se_cfs_rq.offset, d.cfs_rq_rq.offset);
    Ok(Knobs { depth_known: 1, rq_nr_running, task_se_cfs_rq, cfs_rq_rq, ..knobs })
}
