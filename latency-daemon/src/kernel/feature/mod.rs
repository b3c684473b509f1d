//! The kernel program's optional features, one file each, and the table that lists them: the
//! options and this kernel's BTF in; for each feature whether it is asked for, whether this kernel
//! describes what it reads, the knobs it writes, the map sizes and programs it adds, out. The
//! probe walks this table after loading the core; `load`'s degrade policy walks it too.
use aya::Ebpf;
use latency_common::Knobs;

use super::{
    btf::{Btf, BtfError},
    object::Program,
    options::{ProbeError, ProbeOptions},
};

pub mod attribution;
pub mod irq_steal_split;
pub mod irq_tracepoints;
pub mod per_cgroup;
pub mod run_queue_clock;
pub mod throttle_split;
pub mod wait_scan;

/// An optional part of the kernel program; `ALL` is the table, in the order metrics, logs and
/// `check` list them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feature {
    /// `--clock run-queue`: `task->se.cfs_rq->rq->clock`.
    RunQueueClock,
    /// Per-cgroup histograms: `task->cgroups->dfl_cgrp->kn->id`.
    PerCgroup,
    /// Alerting's attribution: who ran meanwhile (the run ring).
    Attribution,
    /// Attribution's queue depth: `rq->nr_running`; without it the depth is unknown.
    QueueDepth,
    /// Waits in progress: the task iterator run once per drain (`task_struct.on_rq`, `.on_cpu`).
    WaitScan,
    /// The throttled part of each wait: the group's throttle clock (`cfs_rq.throttled_clock_self_time`, 6.8+).
    ThrottleSplit,
    /// The irq+steal part of each wait: `rq->clock - rq->clock_task` (IRQ time or steal accounting).
    IrqStealSplit,
    /// The irq tracepoints' IRQ time in each wait's irq+steal part (`--irq-tracepoints`), where
    /// the kernel does not account IRQ time.
    IrqTracepoints,
}

impl Feature {
    pub const ALL: [Feature; 8] = [
        Feature::RunQueueClock,
        Feature::PerCgroup,
        Feature::Attribution,
        Feature::QueueDepth,
        Feature::WaitScan,
        Feature::ThrottleSplit,
        Feature::IrqStealSplit,
        Feature::IrqTracepoints,
    ];

    /// The file that says what this feature is.
    pub fn room(self) -> &'static dyn KernelFeature {
        match self {
            Feature::RunQueueClock => &run_queue_clock::RunQueueClock,
            Feature::PerCgroup => &per_cgroup::PerCgroup,
            Feature::Attribution => &attribution::Attribution,
            Feature::QueueDepth => &attribution::QueueDepth,
            Feature::WaitScan => &wait_scan::WaitScan,
            Feature::ThrottleSplit => &throttle_split::ThrottleSplit,
            Feature::IrqStealSplit => &irq_steal_split::IrqStealSplit,
            Feature::IrqTracepoints => &irq_tracepoints::IrqTracepoints,
        }
    }

    /// As in metrics and logs.
    pub fn name(self) -> &'static str {
        self.room().name()
    }
}

/// What a load's map sizes may depend on besides the options, read once per load.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Entries of the stamp array's tids (`kernel.pid_max` at load).
    pub stamps: u32,
    /// Possible CPUs.
    pub cpus: u32,
    /// The page size: the smallest ring buffer.
    pub page: u32,
}

/// One optional feature: data in, data out. It never sees the probe; what it needs of the loaded
/// object it gets as the aya handle.
pub trait KernelFeature: Sync {
    /// As in metrics and logs.
    fn name(&self) -> &'static str;

    /// Whether `o` asks for it.
    fn wanted(&self, o: &ProbeOptions) -> bool;

    /// `o` with this feature as in `from` (on) or off.
    fn set(&self, o: &mut ProbeOptions, from: &ProbeOptions, on: bool);

    /// Whether this kernel's BTF describes everything it reads; the error names what is missing.
    fn available(&self, btf: &Btf) -> Result<(), BtfError>;

    /// Write its knobs for a load with `o` (only called when wanted). Several features write
    /// some of the same knobs (the run queue chain, the task's CPU, its migration count): each
    /// reads them from the same BTF member, so the writes agree whatever the order.
    fn knobs(&self, btf: &Btf, o: &ProbeOptions, knobs: &mut Knobs) -> Result<(), BtfError>;

    /// Whether a kernel without its BTF still loads the rest unchanged (the feature is then
    /// reported unavailable and its knobs stay off) instead of failing the load. Such a feature
    /// goes with another's switch and is never switched by the degrade policy on its own.
    fn best_effort(&self) -> bool {
        false
    }

    /// Its maps' sizes (`on`: in this load; off, the smallest the object takes).
    fn maps(&self, _on: bool, _o: &ProbeOptions, _sizes: Sizes) -> Vec<(&'static str, u32)> {
        Vec::new()
    }

    /// The programs it adds to the core's, when on.
    fn programs(&self, _o: &ProbeOptions) -> Vec<Program> {
        Vec::new()
    }

    /// Once everything is loaded and attached: a check that needs the loaded object (an error
    /// fails the load, so the degrade policy drops the feature).
    fn after_load(&self, _ebpf: &mut Ebpf) -> Result<(), ProbeError> {
        Ok(())
    }
}
