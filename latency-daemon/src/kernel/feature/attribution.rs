//! Alerting's attribution (who ran meanwhile) and its queue depth: the threshold and this
//! kernel's BTF in; the threshold knob, the depth chain (`task->se.cfs_rq->rq->nr_running`, or
//! unknown where the BTF lacks it) and the depth array's size out.
use latency_common::{Knobs, maps::names};

use super::{KernelFeature, Sizes, run_queue_clock};
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
#[derive(Debug)]
pub struct Attribution;

impl KernelFeature for Attribution {
    fn name(&self) -> &'static str {
        "attribution"
    }

    fn wanted(&self, o: &ProbeOptions) -> bool {
        o.attribute_ns != 0
    }

    fn set(&self, o: &mut ProbeOptions, from: &ProbeOptions, on: bool) {
        o.attribute_ns = if on { from.attribute_ns } else { 0 };
    }

    fn available(&self, _btf: &Btf) -> Result<(), BtfError> {
        Ok(())
    }

    fn knobs(&self, _btf: &Btf, o: &ProbeOptions, knobs: &mut Knobs) -> Result<(), BtfError> {
        knobs.attribute_ns = o.attribute_ns;
        Ok(())
    }

    fn maps(&self, on: bool, _o: &ProbeOptions, sizes: Sizes) -> Vec<(&'static str, u32)> {
        vec![(names::DEPTHS, if on { sizes.stamps } else { 1 })]
    }
}

/// The queue depth of an attributed delay: goes with attribution, unknown where this kernel's
/// BTF lacks the chain.
#[derive(Debug)]
pub struct QueueDepth;

impl KernelFeature for QueueDepth {
    fn name(&self) -> &'static str {
        "queue_depth"
    }

    fn wanted(&self, o: &ProbeOptions) -> bool {
        o.attribute_ns != 0
    }

    /// Switched with attribution: the load reads the depth only if BTF has it.
    fn set(&self, _o: &mut ProbeOptions, _from: &ProbeOptions, _on: bool) {}

    fn available(&self, btf: &Btf) -> Result<(), BtfError> {
        depth_layout(btf).map(drop)
    }

    fn knobs(&self, btf: &Btf, _o: &ProbeOptions, knobs: &mut Knobs) -> Result<(), BtfError> {
        let d = depth_layout(btf)?;
        knobs.depth_known = 1;
        knobs.rq_nr_running = d.rq_nr_running.offset;
        knobs.task_se_cfs_rq = d.task_se_cfs_rq.offset;
        knobs.cfs_rq_rq = d.cfs_rq_rq.offset;
        Ok(())
    }

    fn best_effort(&self) -> bool {
        true
    }
}
