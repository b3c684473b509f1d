//! The kernel program's optional paths, and loading with whichever of them this kernel gives:
//! in, the options asked for; out, a probe of the core histogram plus every optional path that
//! this kernel's BTF describes and its verifier accepts, and a one-line reason for each that it
//! did not. The core itself failing is the caller's error, unchanged.
use latency_common::knobs::Clock;

use super::btf::Btf;
use super::probe::{Probe, ProbeError, ProbeOptions};

/// An optional part of the kernel program.
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

    /// As in metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Feature::RunQueueClock => "run_queue_clock",
            Feature::PerCgroup => "per_cgroup",
            Feature::Attribution => "attribution",
            Feature::QueueDepth => "queue_depth",
            Feature::WaitScan => "wait_scan",
            Feature::ThrottleSplit => "throttle_split",
            Feature::IrqStealSplit => "irq_steal_split",
            Feature::IrqTracepoints => "irq_tracepoints",
        }
    }

    fn wanted(self, o: &ProbeOptions) -> bool {
        match self {
            Feature::RunQueueClock => o.clock == Clock::RunQueue,
            Feature::PerCgroup => o.cgroups,
            Feature::Attribution | Feature::QueueDepth => o.attribute_ns != 0,
            Feature::WaitScan => o.wait_scan,
            Feature::ThrottleSplit => o.split_throttle,
            Feature::IrqStealSplit => o.split_stolen,
            Feature::IrqTracepoints => o.split_irq,
        }
    }

    /// `o` with this feature as in `from` (on) or off.
    fn set(self, o: &mut ProbeOptions, from: &ProbeOptions, on: bool) {
        match self {
            Feature::RunQueueClock => o.clock = if on { from.clock } else { Clock::Monotonic },
            Feature::PerCgroup => o.cgroups = on && from.cgroups,
            Feature::Attribution => o.attribute_ns = if on { from.attribute_ns } else { 0 },
            // Probe::load reads the depth only if BTF has it; nothing to switch here.
            Feature::QueueDepth => {}
            Feature::WaitScan => o.wait_scan = on && from.wait_scan,
            Feature::ThrottleSplit => o.split_throttle = on && from.split_throttle,
            Feature::IrqStealSplit => o.split_stolen = on && from.split_stolen,
            Feature::IrqTracepoints => o.split_irq = on && from.split_irq,
        }
    }
}

/// A feature asked for that this kernel did not give, and why (one line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Degraded {
    pub feature: Feature,
    pub why: String,
}

/// Each feature: on, off (not asked for), or unavailable (asked for, degraded).
pub fn states(asked: &ProbeOptions, degraded: &[Degraded]) -> Vec<(Feature, &'static str)> {
    Feature::ALL
        .iter()
        .map(|&f| {
            let state = if degraded.iter().any(|d| d.feature == f) {
                "unavailable"
            } else if f.wanted(asked) {
                "on"
            } else {
                "off"
            };
            (f, state)
        })
        .collect()
}

/// Loads the probe with what this kernel gives; see `degrade`.
pub fn load(asked: &ProbeOptions) -> Result<(Probe, Vec<Degraded>), ProbeError> {
    let btf = Btf::from_sys_fs()?;
    let described = |f: Feature| match f {
        Feature::RunQueueClock => btf.rq_clock_layout().map(drop),
        Feature::PerCgroup => btf.cgroup_layout().map(drop),
        Feature::Attribution => Ok(()),
        Feature::QueueDepth => btf.depth_layout().map(drop),
        Feature::WaitScan => btf.wait_layout().map(drop),
        Feature::ThrottleSplit => btf.throttle_layout().map(drop),
        Feature::IrqStealSplit => btf.stolen_layout().map(drop),
        Feature::IrqTracepoints => btf.irq_layout().map(drop),
    };
    let missing: Vec<Degraded> = Feature::ALL
        .iter()
        .filter(|f| f.wanted(asked))
        .filter_map(|&feature| described(feature).err().map(|e| Degraded { feature, why: e.to_string() }))
        .collect();
    drop(btf);
    degrade(asked, missing, Probe::load)
}

/// First drops the features whose BTF is `missing`; then, if the verifier rejects the program,
/// loads the core alone and, if that passes, adds the features back one at a time, keeping those
/// it accepts. A core the verifier rejects returns the first error.
pub fn degrade<T>(
    asked: &ProbeOptions,
    missing: Vec<Degraded>,
    mut load: impl FnMut(&ProbeOptions) -> Result<T, ProbeError>,
) -> Result<(T, Vec<Degraded>), ProbeError> {
    let mut off = missing;
    let mut options = asked.clone();
    for d in &off {
        d.feature.set(&mut options, asked, false);
    }
    let first = match load(&options) {
        Ok(probe) => return Ok((probe, off)),
        Err(e @ (ProbeError::Verify { .. } | ProbeError::ProgramLoad { .. } | ProbeError::WaitScan(_))) => e,
        Err(e) => return Err(e),
    };
    let optional: Vec<Feature> =
        Feature::ALL.into_iter().filter(|f| f.wanted(&options) && *f != Feature::QueueDepth).collect();
    if optional.is_empty() {
        return Err(first);
    }
    let mut kept = options.clone();
    for &f in &optional {
        f.set(&mut kept, asked, false);
    }
    if load(&kept).is_err() {
        return Err(first);
    }
    for f in optional {
        let mut trial = kept.clone();
        f.set(&mut trial, asked, true);
        match load(&trial) {
            Ok(_) => kept = trial,
            Err(e) => off.push(Degraded { feature: f, why: e.to_string() }),
        }
    }
    Ok((load(&kept)?, off))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_on() -> ProbeOptions {
        ProbeOptions {
            per_task: true,
            max_tasks: 8,
            filter: Vec::new(),
            ceiling_ns: 1,
            clock: Clock::RunQueue,
            cgroups: true,
            max_cgroups: 8,
            cgroup_removals: true,
            attribute_ns: 5,
            wait_scan: true,
            split_throttle: true,
            split_stolen: true,
            split_irq: true,
        }
    }

    fn rejected() -> ProbeError {
        ProbeError::Verify {
            program: "sched_switch",
            errno: "EACCES".into(),
            verdict: "R1 invalid".into(),
            kept: String::new(),
        }
    }

    #[test]
    fn a_feature_the_verifier_rejects_is_dropped_and_the_rest_kept() {
        let (got, off) =
            degrade(&all_on(), Vec::new(), |o| if o.attribute_ns != 0 { Err(rejected()) } else { Ok(o.clone()) })
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((got.clock, got.cgroups, got.attribute_ns), (Clock::RunQueue, true, 0));
        assert_eq!(off.len(), 1);
        assert_eq!(off[0].feature, Feature::Attribution);
        assert!(off[0].why.contains("R1 invalid"), "{}", off[0].why);
        let states = states(&all_on(), &off);
        assert!(
            states.contains(&(Feature::Attribution, "unavailable")) && states.contains(&(Feature::PerCgroup, "on"))
        );
    }

    #[test]
    fn missing_btf_switches_a_feature_off_before_loading() {
        let missing =
            vec![Degraded { feature: Feature::RunQueueClock, why: "struct cfs_rq has no member `rq`".into() }];
        let mut loads = 0;
        let (got, off) = degrade(&all_on(), missing, |o| {
            loads += 1;
            Ok(o.clone())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((got.clock, loads, off.len()), (Clock::Monotonic, 1, 1));
    }

    #[test]
    fn a_rejected_core_is_the_error() {
        let result = degrade(&all_on(), Vec::new(), |_| Err::<ProbeOptions, _>(rejected()));
        assert!(matches!(result, Err(ProbeError::Verify { .. })));
        let core = ProbeOptions { clock: Clock::Monotonic, cgroups: false, attribute_ns: 0, ..all_on() };
        assert!(degrade(&core, Vec::new(), |_| Err::<ProbeOptions, _>(rejected())).is_err());
    }
}
