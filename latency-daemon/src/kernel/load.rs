//! Loading with whichever optional features this kernel gives: in, the options asked for; out, a
//! probe of the core histogram plus every feature of `feature::Feature::ALL` that this kernel's
//! BTF describes and its verifier accepts, and a one-line reason for each that it did not. The
//! core itself failing is the caller's error, unchanged.
use super::{
    btf::Btf,
    feature::Feature,
    options::{ProbeError, ProbeOptions},
    probe::Probe,
};

/// A feature asked for that this kernel did not give, and why (one line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Degraded {
    pub feature: Feature,
    pub why: String,
}

impl Degraded {
    /// Why, and what running without it means where the feature says (one line).
    pub fn reason(&self) -> String {
        match self.feature.room().without() {
            "" => self.why.clone(),
            without => format!("{}; {without}", self.why),
        }
    }
}

/// Whether the stand-in `f` is covered: the feature it stands in for is on (asked for, and not
/// `lacking` in this kernel), or is itself a stand-in covered further up (`throttle_unknown` for
/// `throttle_hooks` for `throttle_split`). A feature that stands in for nothing is never covered.
fn covered(f: Feature, asked: &ProbeOptions, lacking: &dyn Fn(Feature) -> bool) -> bool {
    let Some(other) = f.room().stands_in_for() else { return false };
    let covers_above = covered(other, asked, lacking);
    covers_above || (other.room().wanted(asked) && !lacking(other))
}

/// Each feature: on, off (not asked for, or a stand-in whose feature this kernel gave), or
/// unavailable (asked for, degraded).
pub fn states(asked: &ProbeOptions, degraded: &[Degraded]) -> Vec<(Feature, &'static str)> {
    let is_degraded = |f: Feature| degraded.iter().any(|d| d.feature == f);
    Feature::ALL
        .iter()
        .map(|&f| {
            let not_needed = covered(f, asked, &is_degraded);
            let state = if is_degraded(f) {
                "unavailable"
            } else if f.room().wanted(asked) && !not_needed {
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
    let missing: Vec<Degraded> = Feature::ALL
        .into_iter()
        .filter(|f| f.room().wanted(asked))
        .filter_map(|feature| feature.room().available(&btf).err().map(|e| Degraded { feature, why: e.to_string() }))
        .collect();
    drop(btf);
    let lacking: Vec<Feature> = missing.iter().map(|d| d.feature).collect();
    let (options, missing, not_needed) = stand_ins(asked, missing);
    with_stand_ins(asked, &options, missing, not_needed, &lacking, Probe::load)
}

/// `degrade`, then once more for each stand-in left out because its feature's BTF was here where
/// the kernel then refused that feature (the verifier, or a trampoline it would not attach): the
/// stand-in loads in its place if its own BTF is here (`lacking` says whose is not), so a
/// throttled wait is never charged to whoever held the CPU; one it could not help says why.
fn with_stand_ins<T>(
    asked: &ProbeOptions,
    options: &ProbeOptions,
    missing: Vec<Degraded>,
    not_needed: Vec<Degraded>,
    lacking: &[Feature],
    mut load: impl FnMut(&ProbeOptions) -> Result<T, ProbeError>,
) -> Result<(T, Vec<Degraded>), ProbeError> {
    let (mut probe, mut degraded) = degrade(options, missing, &mut load)?;
    let mut options = options.clone();
    let mut left_out = not_needed;
    // A chain (the detector for the hooks for the self clock) may need a turn per link.
    loop {
        let refused: Vec<Feature> = degraded.iter().map(|d| d.feature).collect();
        let stands_in = |d: &Degraded| d.feature.room().stands_in_for().is_some_and(|other| refused.contains(&other));
        let (now, rest): (Vec<Degraded>, Vec<Degraded>) =
            left_out.into_iter().partition(|d| stands_in(d) && !lacking.contains(&d.feature));
        left_out = rest;
        if now.is_empty() {
            break;
        }
        for d in &now {
            d.feature.room().set(&mut options, asked, true);
        }
        (probe, degraded) = degrade(&options, degraded, &mut load)?;
        for d in &degraded {
            d.feature.room().set(&mut options, asked, false);
        }
    }
    // What stood in for a refused feature and could not load (its own BTF lacking) says why.
    let refused: Vec<Feature> = degraded.iter().map(|d| d.feature).collect();
    degraded.extend(
        left_out.into_iter().filter(|d| d.feature.room().stands_in_for().is_some_and(|other| refused.contains(&other))),
    );
    Ok((probe, degraded))
}

/// `asked` without the stand-ins this kernel does not need (`covered`: what they stand in for is
/// asked for and its BTF is here, whether their own BTF is here or `missing`), the BTF `missing`
/// without them, and them (see `Room::stands_in_for`).
fn stand_ins(asked: &ProbeOptions, missing: Vec<Degraded>) -> (ProbeOptions, Vec<Degraded>, Vec<Degraded>) {
    let lacking: Vec<Feature> = missing.iter().map(|d| d.feature).collect();
    let is_lacking = |f: Feature| lacking.contains(&f);
    let is_covered = |f: Feature| f.room().wanted(asked) && covered(f, asked, &is_lacking);
    let (mut not_needed, missing): (Vec<Degraded>, Vec<Degraded>) =
        missing.into_iter().partition(|d| is_covered(d.feature));
    not_needed.extend(Feature::ALL.into_iter().filter(|&f| is_covered(f) && !is_lacking(f)).map(|feature| {
        let by = feature.room().stands_in_for().map_or("", |o| o.name());
        Degraded { feature, why: format!("not needed: {by} or what it stands in for is on") }
    }));
    let mut options = asked.clone();
    for d in &not_needed {
        d.feature.room().set(&mut options, asked, false);
    }
    (options, missing, not_needed)
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
        d.feature.room().set(&mut options, asked, false);
    }
    let first = match load(&options) {
        Ok(probe) => return Ok((probe, off)),
        Err(
            e @ (ProbeError::Verify { .. }
            | ProbeError::ProgramLoad { .. }
            | ProbeError::Trampoline { .. }
            | ProbeError::Hook { .. }
            | ProbeError::WaitScan(_)),
        ) => e,
        Err(e) => return Err(e),
    };
    let optional: Vec<Feature> =
        Feature::ALL.into_iter().filter(|f| f.room().wanted(&options) && !f.room().best_effort()).collect();
    if optional.is_empty() {
        return Err(first);
    }
    let mut kept = options.clone();
    for &f in &optional {
        f.room().set(&mut kept, asked, false);
    }
    if load(&kept).is_err() {
        return Err(first);
    }
    for f in optional {
        let mut trial = kept.clone();
        f.room().set(&mut trial, asked, true);
        match load(&trial) {
            Ok(_) => kept = trial,
            Err(e) => off.push(Degraded { feature: f, why: e.to_string() }),
        }
    }
    Ok((load(&kept)?, off))
}

#[cfg(test)]
mod tests {
    use latency_common::knobs::Clock;

    use super::*;

    fn all_on() -> ProbeOptions {
        ProbeOptions {
            per_task: true,
            max_tasks: 8,
            ceiling_ns: 1,
            clock: Clock::RunQueue,
            cgroups: true,
            max_cgroups: 8,
            cgroup_removals: true,
            attribute_ns: 5,
            wait_scan: true,
            split_throttle: true,
            throttle_hooks: true,
            throttle_unknown: true,
            split_stolen: true,
            split_irq: true,
            capture_events: 64,
            ..ProbeOptions::default()
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
    fn the_default_is_the_core_alone_and_off_switches_each_feature_off() {
        let core = ProbeOptions::default();
        assert!(Feature::ALL.iter().all(|f| !f.room().wanted(&core)), "{core:?}");
        for f in Feature::ALL {
            let mut off = all_on();
            f.room().set(&mut off, &all_on(), false);
            let mut on = off.clone();
            f.room().set(&mut on, &all_on(), true);
            // A best-effort feature goes with another's switch (the queue depth with attribution).
            assert_eq!(f.room().wanted(&off), f.room().best_effort(), "{}", f.name());
            assert!(f.room().wanted(&on), "{}", f.name());
        }
    }

    #[test]
    fn a_stand_in_is_off_where_its_feature_is_there_and_on_where_it_is_missing() {
        let state =
            |states: &[(Feature, &'static str)], f: Feature| states.iter().find(|(g, _)| *g == f).map(|(_, s)| *s);
        let lacks = |f: Feature| Degraded { feature: f, why: "lacking".into() };
        // 6.8+: the self clock is there, the hooks and the detector are not needed (not loaded, not
        // unavailable: their BTF check says the self clock is here).
        let not_needed = vec![lacks(Feature::ThrottleHooks), lacks(Feature::ThrottleUnknown)];
        let (options, missing, left_out) = stand_ins(&all_on(), not_needed);
        assert!(options.split_throttle && !options.throttle_hooks && !options.throttle_unknown);
        assert!(missing.is_empty() && left_out.len() == 2, "{missing:?} {left_out:?}");
        let now = states(&all_on(), &missing);
        assert_eq!(state(&now, Feature::ThrottleSplit), Some("on"));
        assert_eq!(state(&now, Feature::ThrottleHooks), Some("off"));
        assert_eq!(state(&now, Feature::ThrottleUnknown), Some("off"));
        // Before 6.8: the self clock is missing, the hooks load in its place; the detector, whose
        // BTF is here too, is not needed.
        let (options, missing, left_out) = stand_ins(&all_on(), vec![lacks(Feature::ThrottleSplit)]);
        assert!(options.throttle_hooks && !options.throttle_unknown && missing.len() == 1 && left_out.len() == 1);
        let (got, off) = degrade(&options, missing, |o| Ok(o.clone())).unwrap_or_else(|e| panic!("{e}"));
        assert!(!got.split_throttle && got.throttle_hooks && !got.throttle_unknown);
        let now = states(&all_on(), &off);
        assert_eq!(state(&now, Feature::ThrottleSplit), Some("unavailable"));
        assert_eq!(state(&now, Feature::ThrottleHooks), Some("on"));
        assert_eq!(state(&now, Feature::ThrottleUnknown), Some("off"));
        // Before 6.8 with the hooks switched off (or their functions missing from BTF): the
        // detector loads, so a throttled wait is `unknown`, not the idle task's.
        let no_hooks = ProbeOptions { throttle_hooks: false, ..all_on() };
        let (options, missing, left_out) = stand_ins(&no_hooks, vec![lacks(Feature::ThrottleSplit)]);
        assert!(!options.throttle_hooks && options.throttle_unknown && left_out.is_empty());
        let (got, off) = degrade(&options, missing, |o| Ok(o.clone())).unwrap_or_else(|e| panic!("{e}"));
        assert!(got.throttle_unknown);
        let now = states(&no_hooks, &off);
        assert_eq!(state(&now, Feature::ThrottleHooks), Some("off"));
        assert_eq!(state(&now, Feature::ThrottleUnknown), Some("on"));
        let (options, _, _) = stand_ins(&all_on(), vec![lacks(Feature::ThrottleSplit), lacks(Feature::ThrottleHooks)]);
        assert!(options.throttle_unknown);
    }

    #[test]
    fn a_trampoline_the_kernel_will_not_attach_drops_its_feature() {
        let refused = || ProbeError::Trampoline {
            program: "throttle_down",
            function: "tg_throttle_down",
            source: aya::programs::ProgramError::AlreadyAttached,
        };
        let (got, off) =
            degrade(&all_on(), Vec::new(), |o| if o.throttle_hooks { Err(refused()) } else { Ok(o.clone()) })
                .unwrap_or_else(|e| panic!("{e}"));
        assert!(!got.throttle_hooks && got.split_throttle);
        assert_eq!(off.iter().map(|d| d.feature).collect::<Vec<_>>(), [Feature::ThrottleHooks]);
    }

    #[test]
    fn where_the_kernel_refuses_the_hooks_the_detector_loads_in_their_place() {
        let state =
            |states: &[(Feature, &'static str)], f: Feature| states.iter().find(|(g, _)| *g == f).map(|(_, s)| *s);
        let refused = || ProbeError::Trampoline {
            program: "throttle_down",
            function: "tg_throttle_down",
            source: aya::programs::ProgramError::AlreadyAttached,
        };
        let lacks = |f: Feature| Degraded { feature: f, why: "lacking".into() };
        // Before 6.8, the hooks' functions in BTF but no trampoline to attach them with: the
        // detector, left out at first as not needed, loads in their place.
        let lacking = [Feature::ThrottleSplit];
        let (options, missing, left_out) = stand_ins(&all_on(), vec![lacks(Feature::ThrottleSplit)]);
        let (got, off) = with_stand_ins(&all_on(), &options, missing, left_out, &lacking, |o| {
            if o.throttle_hooks { Err(refused()) } else { Ok(o.clone()) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(!got.throttle_hooks && got.throttle_unknown, "{got:?}");
        let now = states(&all_on(), &off);
        assert_eq!(state(&now, Feature::ThrottleHooks), Some("unavailable"));
        assert_eq!(state(&now, Feature::ThrottleUnknown), Some("on"));
        // With the detector's own BTF lacking too, it cannot help, and says so.
        let lacking = [Feature::ThrottleSplit, Feature::ThrottleUnknown];
        let (options, missing, left_out) =
            stand_ins(&all_on(), vec![lacks(Feature::ThrottleSplit), lacks(Feature::ThrottleUnknown)]);
        let (got, off) = with_stand_ins(&all_on(), &options, missing, left_out, &lacking, |o| {
            if o.throttle_hooks { Err(refused()) } else { Ok(o.clone()) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(!got.throttle_hooks && !got.throttle_unknown, "{got:?}");
        assert_eq!(state(&states(&all_on(), &off), Feature::ThrottleUnknown), Some("unavailable"));
        // Where the hooks load, the detector stays out.
        let lacking = [Feature::ThrottleSplit];
        let (options, missing, left_out) = stand_ins(&all_on(), vec![lacks(Feature::ThrottleSplit)]);
        let (got, _) = with_stand_ins(&all_on(), &options, missing, left_out, &lacking, |o| Ok(o.clone()))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(got.throttle_hooks && !got.throttle_unknown, "{got:?}");
    }

    #[test]
    fn a_rejected_core_is_the_error() {
        let result = degrade(&all_on(), Vec::new(), |_| Err::<ProbeOptions, _>(rejected()));
        assert!(matches!(result, Err(ProbeError::Verify { .. })));
        let core = ProbeOptions { clock: Clock::Monotonic, cgroups: false, attribute_ns: 0, ..all_on() };
        assert!(degrade(&core, Vec::new(), |_| Err::<ProbeOptions, _>(rejected())).is_err());
    }
}
