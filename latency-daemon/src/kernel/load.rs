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

/// Each feature: on, off (not asked for), or unavailable (asked for, degraded).
pub fn states(asked: &ProbeOptions, degraded: &[Degraded]) -> Vec<(Feature, &'static str)> {
    Feature::ALL
        .iter()
        .map(|&f| {
            let state = if degraded.iter().any(|d| d.feature == f) {
                "unavailable"
            } else if f.room().wanted(asked) {
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
        d.feature.room().set(&mut options, asked, false);
    }
    let first = match load(&options) {
        Ok(probe) => return Ok((probe, off)),
        Err(e @ (ProbeError::Verify { .. } | ProbeError::ProgramLoad { .. } | ProbeError::WaitScan(_))) => e,
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
            split_stolen: true,
            split_irq: true,
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
    fn a_rejected_core_is_the_error() {
        let result = degrade(&all_on(), Vec::new(), |_| Err::<ProbeOptions, _>(rejected()));
        assert!(matches!(result, Err(ProbeError::Verify { .. })));
        let core = ProbeOptions { clock: Clock::Monotonic, cgroups: false, attribute_ns: 0, ..all_on() };
        assert!(degrade(&core, Vec::new(), |_| Err::<ProbeOptions, _>(rejected())).is_err());
    }
}
