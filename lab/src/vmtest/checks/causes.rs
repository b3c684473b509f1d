//! The optional features and the wait's causes in a guest: in, a scrape and the daemon's log, or
//! what the throttle guest wrote; out, checks: each feature on or unavailable with its reason, the
//! causes adding up to the delays, a CPU limit's wait split as the kernel counted it.
use std::collections::BTreeMap;

use super::Check;
use crate::vmtest::throttle::{self, Throttled};
use crate::web::total;

/// The optional paths a kernel may lack, each judged apart (`feature`) rather than as a column's
/// missing path: the wait scan (a task iterator, 5.8+), the throttled part of the cause split
/// (`cfs_rq.throttled_clock_self_time`, 6.8+, or before that the throttle hooks, fexit programs a
/// kernel may not attach) and its irq+steal part (IRQ time or steal accounting, which Debian's
/// kernels build without).
pub const JUDGED_APART: [&str; 4] = ["wait_scan", "throttle_split", "throttle_hooks", "irq_steal_split"];

/// Features that stand in for another where the kernel lacks it, and that one: off (not needed)
/// where it is on.
const STAND_INS: [(&str, &str); 1] = [("throttle_hooks", "throttle_split")];

/// Judged like those, in the configuration that asks for it (`--irq-tracepoints`): on where the
/// kernel does not account IRQ time (Debian's), unavailable with the reason where it does.
pub const IRQ_TRACEPOINTS: &str = "irq_tracepoints";

/// A `JUDGED_APART` feature's state in a scrape: on, or unavailable with the daemon's one-line
/// reason in its log (`NAME unavailable on this kernel, running without it: …`). The figure says
/// which; the check is named after the feature (`wait scan`, `throttle split`, …).
pub fn feature(prom: &str, log: &str, name: &str) -> Check {
    let state = throttle::feature_state(prom, name);
    let said = format!("{name} unavailable on this kernel");
    let said: Vec<&str> = log.lines().filter(|l| l.contains(&said)).collect();
    let (ok, detail) = match (state.as_deref(), said.as_slice()) {
        (Some("on"), []) => (true, "on".to_owned()),
        (Some("unavailable"), [line]) => (true, format!("unavailable: {}", reason(line))),
        (Some("off"), [])
            if STAND_INS
                .iter()
                .any(|(s, of)| *s == name && throttle::feature_state(prom, of).as_deref() == Some("on")) =>
        {
            (true, "not needed".to_owned())
        }
        (state, lines) => (false, format!("state {state:?}; the log's reasons: {lines:?}")),
    };
    Check::new(&name.replace('_', " "), ok, detail)
}

/// The reason in a daemon's log line (logfmt: `msg="… running without it: WHY" feature=NAME`).
fn reason(line: &str) -> &str {
    let line = line.trim();
    let why = line.split_once("running without it: ").map_or(line, |(_, why)| why);
    why.split("\" feature=").next().unwrap_or(why).trim_end_matches('"')
}

/// A scrape's causes add up: `runqlat_wait_cause_seconds_total` over its six causes to
/// `runqlat_delay_seconds_sum` over both reasons, and each cgroup's
/// `runqlat_cgroup_wait_cause_seconds_total` to its `runqlat_cgroup_delay_seconds_sum` (one
/// exposition: the same drain), within what printing seconds as f64 loses. None where the daemon
/// exports no cause (`--wait-causes=false`).
pub fn causes(prom: &str) -> Option<Check> {
    const CAUSE: &str = "runqlat_wait_cause_seconds_total{";
    const CGROUP_CAUSE: &str = "runqlat_cgroup_wait_cause_seconds_total{";
    const CGROUP_SUM: &str = "runqlat_cgroup_delay_seconds_sum{";
    if !prom.lines().any(|l| l.starts_with(CAUSE)) {
        return None;
    }
    // 1 ns per term, and f64's relative precision many times over.
    let close = |a: f64, b: f64, terms: f64| (a - b).abs() <= terms * 1e-9 + 1e-12 * a.abs().max(b.abs());
    let (split, delayed) = (total(prom, CAUSE), total(prom, "runqlat_delay_seconds_sum{"));
    let value = |l: &str| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
    // Each cgroup's series by its labels without `cause` (cgroup first, cause last).
    let mut by_cgroup: BTreeMap<&str, (f64, Option<f64>)> = BTreeMap::new();
    for l in prom.lines() {
        if let Some((labels, _)) = l.strip_prefix(CGROUP_CAUSE).and_then(|r| r.rsplit_once(",cause=\"")) {
            by_cgroup.entry(labels).or_default().0 += value(l);
        } else if let Some((labels, _)) = l.strip_prefix(CGROUP_SUM).and_then(|r| r.rsplit_once("} ")) {
            by_cgroup.entry(labels).or_default().1 = Some(value(l));
        }
    }
    let apart: Vec<String> = by_cgroup
        .iter()
        .filter(|(_, (causes, sum))| !sum.is_some_and(|sum| close(*causes, sum, 6.0)))
        .map(|(labels, (causes, sum))| format!("{{{labels}}}: causes {causes} s, delays {sum:?} s"))
        .collect();
    let ok = close(split, delayed, 6.0) && apart.is_empty();
    let mut detail = format!(
        "all CPUs: causes {split:.9} s, delays {delayed:.9} s ({:+.1e}); {} cgroups",
        split - delayed,
        by_cgroup.len()
    );
    if !apart.is_empty() {
        detail.push_str(&format!(" — apart: {}", apart.join("; ")));
    }
    Some(Check::new("causes add up", ok, detail))
}

/// A throttle scene (`throttle::Throttled`): the loop was throttled (cpu.stat counts it) and the
/// daemon split its cgroup's wait. Where the throttled part is on (`throttle_split`, or
/// `throttle_hooks` in its place), the throttled part is the kernel's `throttled_usec` within 25 %
/// or two periods (TCG; and two of the group's tasks waiting through one throttle each count it,
/// cpu.stat once), and it is at least 90 % of the wait — beside a busy neighbour, where the loop
/// also waits its turn between throttles, the rest is the neighbour's (`other`) and at most 5 %
/// is `idle`: the CPU never was. Where neither is on, none of it is throttled, all by holder.
pub fn throttle(t: &Throttled) -> Vec<Check> {
    let scene = throttle::SCENES.iter().find(|s| s.name == t.scene);
    let name = |what: &str| format!("{}: {what}", t.scene);
    let throttled = t.cause_s("throttled");
    let stat_s = t.throttled_us as f64 / 1e6;
    let local =
        t.local_throttled_us.map_or_else(String::new, |us| format!(", cpu.stat.local {:.3} s", us as f64 / 1e6));
    let limited = Check::new(
        &name("limited"),
        scene.is_some()
            && t.cpu_max == throttle::CPU_MAX
            && t.rc == Some(0)
            && t.error.is_none()
            && t.nr_throttled > 0
            && t.throttled_us > 0
            && t.waited_s > 0.0,
        format!(
            "{}: cpu.max `{}` on {}, loop exit {:?}: ran {:.3} s (run_delay {:.3} s); cpu.stat: throttled {} times, \
             {stat_s:.3} s{local}; the cgroup waited {:.3} s{}",
            scene.map_or("an unknown scene", |s| s.title()),
            t.cpu_max,
            scene.map_or("?", |s| s.limited),
            t.rc,
            t.spun_ns as f64 / 1e9,
            t.run_delay_ns as f64 / 1e9,
            t.nr_throttled,
            t.waited_s,
            t.error.as_deref().map_or_else(String::new, |e| format!("; {e}"))
        ),
    );
    let share = if t.waited_s > 0.0 { throttled / t.waited_s } else { 0.0 };
    let beside = scene.is_some_and(|s| s.beside);
    let split = match (t.source(), t.split.as_deref(), t.hooks.as_deref()) {
        (Some(source), _, _) => {
            let slack = (0.25 * stat_s).max(2.0 * t.period_us as f64 / 1e6);
            let idle = t.cause_s("idle");
            let (ok_share, rule) = if beside {
                let by_holder = throttled + t.cause_s("other");
                (by_holder >= 0.9 * t.waited_s && idle <= 0.05 * t.waited_s, "with `other` ≥ 90 %, idle ≤ 5 %")
            } else {
                (share >= 0.9, "≥ 90 %")
            };
            Check::new(
                &name("split"),
                ok_share && (throttled - stat_s).abs() <= slack,
                format!(
                    "{source}: throttled {throttled:.3} s = {:.1} % of the cgroup's wait ({rule}); cpu.stat's \
                     throttled_usec {stat_s:.3} s ({:+.3} s, within ±{slack:.3} s); by cause: {}",
                    100.0 * share,
                    throttled - stat_s,
                    t.by_cause()
                ),
            )
        }
        (None, Some("unavailable"), hooks @ (Some("unavailable") | None)) => Check::new(
            &name("split"),
            throttled == 0.0 && t.waited_s > 0.0,
            format!(
                "throttle_split unavailable, throttle_hooks {}: nothing throttled, the wait by holder: {}",
                hooks.unwrap_or("absent"),
                t.by_cause()
            ),
        ),
        (None, split, hooks) => {
            Check::new(&name("split"), false, format!("throttle_split state {split:?}, throttle_hooks state {hooks:?}"))
        }
    };
    vec![limited, split]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vmtest::checks::scrape;

    #[test]
    fn a_feature_is_on_or_says_why_not() {
        let on = "runqlat_feature_info{feature=\"wait_scan\",state=\"on\"} 1\n\
                  runqlat_feature_info{feature=\"wait_scan\",state=\"off\"} 0\n";
        assert!(feature(on, "", "wait_scan").ok && feature(on, "", "wait_scan").detail == "on");
        assert_eq!(feature(on, "", "wait_scan").what, "wait scan");
        let off = "runqlat_feature_info{feature=\"throttle_split\",state=\"unavailable\"} 1\n";
        let said = "time=1 level=warn target=x msg=\"throttle_split unavailable on this kernel, running without it: \
                    no cfs_rq.throttled_clock_self_time\" feature=throttle_split";
        let c = feature(off, said, "throttle_split");
        assert!(c.ok && c.detail == "unavailable: no cfs_rq.throttled_clock_self_time", "{c:?}");
        assert!(!feature(off, "", "throttle_split").ok, "unavailable without a reason passed");
        assert!(!feature(off, said, "wait_scan").ok, "no state passed");
        assert!(!feature("", "", "irq_steal_split").ok, "no state passed");
        // Unavailable, it is no longer a missing path of the column; another path still is.
        let prom = format!("runqlat_delay_seconds_count{{reason=\"wakeup\"}} 1\n{off}");
        assert!(scrape(&prom, 0, None).iter().any(|c| c.what == "every path given" && c.ok));
        let prom = format!("{prom}runqlat_feature_info{{feature=\"per_cgroup\",state=\"unavailable\"}} 1\n");
        assert!(scrape(&prom, 0, None).iter().any(|c| c.what == "every path given" && !c.ok));
        // A stand-in is off where the feature it stands in for is on, and only there.
        let hooks_off = "runqlat_feature_info{feature=\"throttle_hooks\",state=\"off\"} 1\n";
        let split_on = "runqlat_feature_info{feature=\"throttle_split\",state=\"on\"} 1\n";
        let c = feature(&format!("{split_on}{hooks_off}"), "", "throttle_hooks");
        assert!(c.ok && c.detail == "not needed", "{c:?}");
        assert!(!feature(&format!("{off}{hooks_off}"), said, "throttle_hooks").ok, "both missing passed");
        assert!(!feature(&format!("{split_on}{hooks_off}"), "", "wait_scan").ok, "off passed for a feature");
    }

    #[test]
    fn causes_add_up_to_the_delays_machine_wide_and_per_cgroup() {
        let prom = "runqlat_delay_seconds_sum{reason=\"wakeup\"} 0.1\nrunqlat_delay_seconds_sum{reason=\"preempt\"} 0.2\n\
                    runqlat_wait_cause_seconds_total{cause=\"throttled\"} 0.25\n\
                    runqlat_wait_cause_seconds_total{cause=\"idle\"} 0.05\n\
                    runqlat_wait_unsplit_total 2\n\
                    runqlat_cgroup_delay_seconds_sum{cgroup=\"/a\"} 0.3\n\
                    runqlat_cgroup_wait_cause_seconds_total{cgroup=\"/a\",cause=\"throttled\"} 0.25\n\
                    runqlat_cgroup_wait_cause_seconds_total{cgroup=\"/a\",cause=\"idle\"} 0.05\n";
        let c = causes(prom);
        assert!(c.as_ref().is_some_and(|c| c.ok && c.detail.contains("1 cgroups")), "{c:?}");
        let short =
            prom.replace("cause=\"idle\"} 0.05\nrunqlat_wait_unsplit", "cause=\"idle\"} 0.049\nrunqlat_wait_unsplit");
        assert!(causes(&short).is_some_and(|c| !c.ok), "machine-wide 1 ms apart passed");
        let cgroup = prom.replace("{cgroup=\"/a\"} 0.3", "{cgroup=\"/a\"} 0.31");
        assert!(causes(&cgroup).is_some_and(|c| !c.ok && c.detail.contains("cgroup=\"/a\"")));
        assert_eq!(causes("runqlat_delay_seconds_sum{reason=\"wakeup\"} 0.1\n"), None);
    }

    #[test]
    fn a_throttle_is_split_where_the_kernel_can_and_by_holder_where_not() {
        use crate::vmtest::throttle::CAUSES;
        let of = |throttled: f64, idle: f64| {
            CAUSES
                .iter()
                .map(|c| {
                    (
                        (*c).to_owned(),
                        if *c == "throttled" {
                            throttled
                        } else if *c == "idle" {
                            idle
                        } else {
                            0.0
                        },
                    )
                })
                .collect()
        };
        let t = Throttled {
            scene: "throttle".into(),
            cpu_max: "10000 100000".into(),
            period_us: 100_000,
            nr_throttled: 24,
            throttled_us: 2_180_000,
            split: Some("on".into()),
            causes_s: of(2.2, 0.05),
            waited_s: 2.25,
            rc: Some(0),
            ..Throttled::default()
        };
        assert!(throttle(&t).iter().all(|c| c.ok), "{:?}", throttle(&t));
        let diluted = Throttled { causes_s: of(1.9, 0.35), ..t.clone() };
        assert!(throttle(&diluted).iter().any(|c| c.what == "throttle: split" && !c.ok), "84 % passed");
        let apart = Throttled { throttled_us: 1_500_000, ..t.clone() };
        assert!(throttle(&apart).iter().any(|c| c.what == "throttle: split" && !c.ok), "0.7 s off cpu.stat passed");
        let degraded = Throttled { split: Some("unavailable".into()), causes_s: of(0.0, 2.25), ..t.clone() };
        assert!(throttle(&degraded).iter().all(|c| c.ok), "{:?}", throttle(&degraded));
        let leaked = Throttled { split: Some("unavailable".into()), ..t.clone() };
        assert!(throttle(&leaked).iter().any(|c| !c.ok), "a throttled part without the split passed");
        // Before 6.8: the throttle hooks give the throttled part in the self clock's place.
        let hooked = Throttled { split: Some("unavailable".into()), hooks: Some("on".into()), ..t.clone() };
        assert!(throttle(&hooked).iter().all(|c| c.ok), "{:?}", throttle(&hooked));
        let hooked_short = Throttled { causes_s: of(0.0, 2.25), ..hooked.clone() };
        assert!(throttle(&hooked_short).iter().any(|c| !c.ok), "the hooks on and nothing throttled passed");
        let both_off = Throttled { hooks: Some("unavailable".into()), ..degraded.clone() };
        assert!(throttle(&both_off).iter().all(|c| c.ok), "{:?}", throttle(&both_off));
        let unlimited = Throttled { nr_throttled: 0, throttled_us: 0, ..degraded };
        assert!(throttle(&unlimited).iter().any(|c| c.what == "throttle: limited" && !c.ok));
        assert!(throttle(&Throttled::default()).iter().all(|c| !c.ok));
        // A pod's limit: judged as its own.
        let pod = Throttled { scene: "pod".into(), ..t.clone() };
        assert!(throttle(&pod).iter().all(|c| c.ok && c.what.starts_with("pod: ")), "{:?}", throttle(&pod));
        let unknown = Throttled { scene: "elsewhere".into(), ..t.clone() };
        assert!(throttle(&unknown).iter().any(|c| !c.ok), "an unknown scene passed");
    }

    #[test]
    fn beside_a_neighbour_the_rest_is_the_neighbours_and_never_idle() {
        use crate::vmtest::throttle::CAUSES;
        let of = |parts: &[(&str, f64)]| {
            CAUSES
                .iter()
                .map(|c| ((*c).to_owned(), parts.iter().find(|(p, _)| p == c).map_or(0.0, |(_, s)| *s)))
                .collect()
        };
        let t = Throttled {
            scene: "beside".into(),
            cpu_max: "10000 100000".into(),
            period_us: 100_000,
            nr_throttled: 18,
            throttled_us: 1_500_000,
            hooks: Some("on".into()),
            split: Some("unavailable".into()),
            causes_s: of(&[("throttled", 1.52), ("other", 0.3), ("idle", 0.02)]),
            waited_s: 1.84,
            rc: Some(0),
            ..Throttled::default()
        };
        assert!(throttle(&t).iter().all(|c| c.ok), "{:?}", throttle(&t));
        let idle = Throttled { causes_s: of(&[("throttled", 1.52), ("idle", 0.32)]), ..t.clone() };
        assert!(throttle(&idle).iter().any(|c| c.what == "beside: split" && !c.ok), "an idle CPU passed");
        let as_other = Throttled { causes_s: of(&[("other", 1.82), ("idle", 0.02)]), ..t.clone() };
        assert!(throttle(&as_other).iter().any(|c| !c.ok), "the throttle charged to the neighbour passed");
    }
}
