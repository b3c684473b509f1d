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

/// The switch of a feature that is one bool field of `ProbeOptions` (a `Switch::Flag`).
macro_rules! flag {
    ($field:ident) => {
        super::Switch::Flag(|o| o.$field, |o| &mut o.$field)
    };
}

pub mod attribution;
pub mod capture;
pub mod irq_steal_split;
pub mod irq_tracepoints;
pub mod per_cgroup;
pub mod run_queue_clock;
pub mod throttle_hooks;
pub mod throttle_split;
pub mod throttle_unknown;
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
    /// The throttled part where the kernel keeps no group throttle clock (before 6.8): the
    /// throttle hooks keep one (fexit on `tg_throttle_down` / `tg_unthrottle_up`).
    ThrottleHooks,
    /// Where neither gives the throttled part: whether a throttle ended during a wait (the
    /// kernel's own total), such a wait counted as `unknown` rather than by holder.
    ThrottleUnknown,
    /// The irq+steal part of each wait: `rq->clock - rq->clock_task` (IRQ time or steal accounting).
    IrqStealSplit,
    /// The irq tracepoints' IRQ time in each wait's irq+steal part (`--irq-tracepoints`), where
    /// the kernel does not account IRQ time.
    IrqTracepoints,
    /// The capture recorder: the last scheduler events on each CPU, kept for a trace.
    Capture,
}

impl Feature {
    pub const ALL: [Feature; 11] = [
        Feature::RunQueueClock,
        Feature::PerCgroup,
        Feature::Attribution,
        Feature::QueueDepth,
        Feature::WaitScan,
        Feature::ThrottleSplit,
        Feature::ThrottleHooks,
        Feature::ThrottleUnknown,
        Feature::IrqStealSplit,
        Feature::IrqTracepoints,
        Feature::Capture,
    ];

    /// The file that says what this feature is.
    pub fn room(self) -> &'static Room {
        match self {
            Feature::RunQueueClock => &run_queue_clock::ROOM,
            Feature::PerCgroup => &per_cgroup::ROOM,
            Feature::Attribution => &attribution::ATTRIBUTION,
            Feature::QueueDepth => &attribution::QUEUE_DEPTH,
            Feature::WaitScan => &wait_scan::ROOM,
            Feature::ThrottleSplit => &throttle_split::ROOM,
            Feature::ThrottleHooks => &throttle_hooks::ROOM,
            Feature::ThrottleUnknown => &throttle_unknown::ROOM,
            Feature::IrqStealSplit => &irq_steal_split::ROOM,
            Feature::IrqTracepoints => &irq_tracepoints::ROOM,
            Feature::Capture => &capture::ROOM,
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

/// How a feature is switched in `ProbeOptions`.
#[derive(Clone, Copy, Debug)]
pub enum Switch {
    /// A yes/no field: read, and written (on only where the options it is set from ask for it).
    Flag(fn(&ProbeOptions) -> bool, fn(&mut ProbeOptions) -> &mut bool),
    /// Options of its own: whether they ask for it, and `o` with it as in `from` (on) or off.
    Own { wanted: fn(&ProbeOptions) -> bool, set: fn(&mut ProbeOptions, &ProbeOptions, bool) },
    /// Goes with another feature's switch and never has one of its own: a kernel without its BTF
    /// still loads the rest unchanged (the feature is then reported unavailable and its knobs
    /// stay off) instead of failing the load, and the degrade policy never switches it alone.
    With(Feature),
}

/// One optional feature, as plain data and functions: data in, data out. It never sees the
/// probe; what it needs of the loaded object it gets as the aya handle. Each feature's file
/// holds one `ROOM`, built from `Room::new` with what it adds on top.
#[derive(Clone, Copy, Debug)]
pub struct Room {
    name: &'static str,
    switch: Switch,
    /// Whether this kernel's BTF describes everything it reads; the error names what is missing.
    available: fn(&Btf) -> Result<(), BtfError>,
    /// The knobs given with its own written for a load with these options (only when wanted), or
    /// nothing written where BTF lacks them. Several features write some of the same knobs (the
    /// run queue chain, the task's CPU, its migration count): each reads them from the same BTF
    /// member, so the writes agree whatever the order.
    knobs: fn(&Btf, &ProbeOptions, Knobs) -> Result<Knobs, BtfError>,
    /// Its maps' sizes (`on`: in this load; off, the smallest the object takes).
    maps: fn(bool, &ProbeOptions, Sizes) -> Vec<(&'static str, u32)>,
    /// The programs it adds to the core's, when on.
    programs: fn(&ProbeOptions) -> Vec<Program>,
    /// Once everything is loaded and attached: a check that needs the loaded object (an error
    /// fails the load, so the degrade policy drops the feature).
    after_load: fn(&mut Ebpf) -> Result<(), ProbeError>,
    /// The feature it stands in for where this kernel lacks that one: it is needed only there
    /// (elsewhere it stays off and is not reported unavailable), and its `available` says so.
    stands_in_for: Option<Feature>,
    /// What running without it means for the user, where that is not plain from its name (the
    /// log line of an unavailable feature says it); empty otherwise.
    without: &'static str,
}

impl Room {
    /// A feature that only writes knobs: no maps, no programs, nothing to check after the load.
    pub const fn new(
        name: &'static str,
        switch: Switch,
        available: fn(&Btf) -> Result<(), BtfError>,
        knobs: fn(&Btf, &ProbeOptions, Knobs) -> Result<Knobs, BtfError>,
    ) -> Room {
        Room {
            name,
            switch,
            available,
            knobs,
            maps: |_, _, _| Vec::new(),
            programs: |_| Vec::new(),
            after_load: |_| Ok(()),
            stands_in_for: None,
            without: "",
        }
    }

    /// As in metrics and logs.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether `o` asks for it.
    pub fn wanted(&self, o: &ProbeOptions) -> bool {
        match self.switch {
            Switch::Flag(get, _) => get(o),
            Switch::Own { wanted, .. } => wanted(o),
            Switch::With(other) => other.room().wanted(o),
        }
    }

    /// `o` with this feature as in `from` (on) or off.
    pub fn set(&self, o: &mut ProbeOptions, from: &ProbeOptions, on: bool) {
        match self.switch {
            Switch::Flag(get, field) => *field(o) = on && get(from),
            Switch::Own { set, .. } => set(o, from, on),
            Switch::With(_) => {}
        }
    }

    /// Whether this kernel's BTF describes everything it reads; the error names what is missing.
    pub fn available(&self, btf: &Btf) -> Result<(), BtfError> {
        (self.available)(btf)
    }

    /// `knobs` with its own written for a load with `o` (only called when wanted); where this
    /// kernel's BTF lacks them, the error and nothing half written.
    pub fn knobs(&self, btf: &Btf, o: &ProbeOptions, knobs: Knobs) -> Result<Knobs, BtfError> {
        (self.knobs)(btf, o, knobs)
    }

    /// Whether a kernel without its BTF still loads the rest (see `Switch::With`).
    pub fn best_effort(&self) -> bool {
        matches!(self.switch, Switch::With(_))
    }

    /// Its maps' sizes (`on`: in this load; off, the smallest the object takes).
    pub fn maps(&self, on: bool, o: &ProbeOptions, sizes: Sizes) -> Vec<(&'static str, u32)> {
        (self.maps)(on, o, sizes)
    }

    /// The programs it adds to the core's, when on.
    pub fn programs(&self, o: &ProbeOptions) -> Vec<Program> {
        (self.programs)(o)
    }

    /// The feature it stands in for where this kernel lacks that one (see the field).
    pub fn stands_in_for(&self) -> Option<Feature> {
        self.stands_in_for
    }

    /// What running without it means, or "" (see the field).
    pub fn without(&self) -> &'static str {
        self.without
    }

    /// Once everything is loaded and attached (see the field).
    pub fn after_load(&self, ebpf: &mut Ebpf) -> Result<(), ProbeError> {
        (self.after_load)(ebpf)
    }
}

#[cfg(test)]
mod tests {
    use super::Feature;

    #[test]
    fn names_are_in_table_order_and_only_the_queue_depth_goes_with_another_switch() {
        let names: Vec<&str> = Feature::ALL.iter().map(|f| f.name()).collect();
        assert_eq!(
            names,
            [
                "run_queue_clock",
                "per_cgroup",
                "attribution",
                "queue_depth",
                "wait_scan",
                "throttle_split",
                "throttle_hooks",
                "throttle_unknown",
                "irq_steal_split",
                "irq_tracepoints",
                "capture"
            ]
        );
        let best_effort: Vec<Feature> = Feature::ALL.into_iter().filter(|f| f.room().best_effort()).collect();
        assert_eq!(best_effort, [Feature::QueueDepth]);
    }
}
