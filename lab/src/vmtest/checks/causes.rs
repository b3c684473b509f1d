//! The optional features and the wait's causes in a guest: in, a scrape and the daemon's log, or
//! what the throttle guest wrote; out, checks: each feature on or unavailable with its reason, the
//! causes adding up to the delays, a CPU limit's wait split as the kernel counted it.
use std::collections::BTreeMap;

use super::Check;
use crate::vmtest::throttle::{self, Throttled};
use crate::web::total;

/// The optional paths a kernel may lack, each judged apart (`feature`) rather than as a column's
/// missing path: the wait scan (a task iterator, 5.8+), the throttled part of the cause split
/// (`cfs_rq.throttled_clock_self_time`, 6.8+, or before that the throttle hooks, programs a
/// kernel may not attach, or where neither is there the overlap of waits with throttles) and its
/// irq+steal part (IRQ time or steal accounting, which Debian's kernels build without).
pub const JUDGED_APART: [&str; 5] =
    ["wait_scan", "throttle_split", "throttle_hooks", "throttle_unknown", "irq_steal_split"];

/// Features that stand in for another where the kernel lacks it, and those: off (not needed)
/// where one of them is on.
const STAND_INS: [(&str, &str); 3] = [
    ("throttle_hooks", "throttle_split"),
    ("throttle_unknown", "throttle_hooks"),
    ("throttle_unknown", "throttle_split"),
];

/// Judged like those, in the configuration that asks for it (`--irq-tracepoints`): on where the
/// kernel does not account IRQ time (Debian's), unavailable with the reason where it does.
pub const IRQ_TRACEPOINTS: &str = "irq_tracepoints";

/// A `JUDGED_APART` feature's state in a scrape: on, or unavailable with the daemon's one-line
/// reason in its log (`NAME unavailable on this kernel, running without it: …`), or `off` where
/// the configuration switched it off (`switched_off`). The figure says which; the check is named
/// after the feature (`wait scan`, `throttle split`, …).
pub fn feature(prom: &str, log: &str, name: &str, switched_off: bool) -> Check {
    let state = throttle::feature_state(prom, name);
    let said = format!("{name} unavailable on this kernel");
    let said: Vec<&str> = log.lines().filter(|l| l.contains(&said)).collect();
    let (ok, detail) = match (state.as_deref(), said.as_slice()) {
        (Some("off"), []) if switched_off => (true, "off (switched off)".to_owned()),
        (state, _) if switched_off => (false, format!("switched off, but state {state:?}")),
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

/// Where `throttle_unknown` is on, its warning (the throttled waits are counted as `unknown`) is in
/// the daemon's log once, however many loads it tried; where it is not, never.
pub fn unknown_warning(prom: &str, log: &str) -> Check {
    // Quote-free: logfmt escapes the quotes around `unknown`, JSON too.
    const SAID: &str = "a CPU-limit throttle are counted as cause=";
    let state = throttle::feature_state(prom, "throttle_unknown");
    let lines = log.lines().filter(|l| l.contains(SAID)).count();
    let want = usize::from(state.as_deref() == Some("on"));
    Check::new(
        "throttle unknown said once",
        lines == want,
        format!("throttle_unknown {}: the warning logged {lines} times", state.as_deref().unwrap_or("absent")),
    )
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

/// Where no source of the throttled part is on: `throttle_unknown` on and the cgroup's throttled
/// waits counted as `unknown` — at least 90 % of its wait, or beside a busy neighbour with
/// `other` at least 90 % and `idle` at most 5 % — and nothing `throttled`; and the detail.
fn unknown_share(causes_s: &[(String, f64)], waited: f64, state: Option<&str>, beside: bool) -> (bool, String) {
    let of = |c: &str| causes_s.iter().find(|(n, _)| n == c).map_or(0.0, |(_, s)| *s);
    let (unknown, idle) = (of("unknown"), of("idle"));
    let (share_ok, rule) = if beside {
        (unknown + of("other") >= 0.9 * waited && idle <= 0.05 * waited, "with `other` ≥ 90 %, idle ≤ 5 %")
    } else {
        (unknown >= 0.9 * waited, "≥ 90 %")
    };
    let ok = state == Some("on") && of("throttled") == 0.0 && waited > 0.0 && share_ok;
    let detail = format!(
        "throttle_unknown {}; unknown {unknown:.3} s = {:.1} % of the cgroup's wait {waited:.3} s ({rule}); by \
         cause: {}",
        state.unwrap_or("absent"),
        if waited > 0.0 { 100.0 * unknown / waited } else { 0.0 },
        throttle::by_cause(causes_s)
    );
    (ok, detail)
}

/// A throttle scene (`throttle::Throttled`): the loop was throttled (cpu.stat counts it) and the
/// daemon split its cgroup's wait. Where the throttled part is on (`throttle_split`, or
/// `throttle_hooks` in its place), it agrees with the kernel's `throttled_usec` (`agreement`: at
/// least it, at most it times the threads that waited, each bounded by its own wait), and it is
/// at least 90 % of the wait — beside a busy neighbour, where the loop also waits its turn
/// between throttles, with the neighbour's `other`. Where neither is on, none of it is throttled
/// and the throttled waits are `unknown` (`unknown_share`); `run --throttle-hooks=false` must say
/// the same before 6.8, and have no `unknown` from 6.8. In both, hardly any of it is `idle`
/// (`never_idle`).
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
            let (ok_share, rule) = if beside {
                (throttled + t.cause_s("other") >= 0.9 * t.waited_s, "with `other` ≥ 90 %")
            } else {
                (share >= 0.9, "≥ 90 %")
            };
            let (ok_stat, against) = agreement(t, throttled);
            Check::new(
                &name("split"),
                ok_share && ok_stat,
                format!(
                    "{source}: throttled {throttled:.3} s = {:.1} % of the cgroup's wait ({rule}); {against}; by \
                     cause: {}",
                    100.0 * share,
                    t.by_cause()
                ),
            )
        }
        (None, Some("unavailable"), hooks @ (Some("unavailable") | None)) => {
            let (ok, detail) = unknown_share(&t.causes_s, t.waited_s, t.unknown.as_deref(), beside);
            Check::new(
                &name("split"),
                throttled == 0.0 && ok,
                format!("throttle_split unavailable, throttle_hooks {}: {detail}", hooks.unwrap_or("absent")),
            )
        }
        (None, split, hooks) => {
            Check::new(&name("split"), false, format!("throttle_split state {split:?}, throttle_hooks state {hooks:?}"))
        }
    };
    let blind = &t.blind;
    let unknown = blind.cause_s("unknown");
    let without_hooks = if t.split.as_deref() == Some("on") {
        Check::new(
            &name("without hooks"),
            blind.unknown.as_deref() == Some("off") && unknown == 0.0,
            format!(
                "throttle_split on, throttle_unknown {} (not needed): unknown {unknown:.3} s",
                blind.unknown.as_deref().unwrap_or("absent")
            ),
        )
    } else {
        let (ok, detail) = unknown_share(&blind.causes_s, blind.waited_s, blind.unknown.as_deref(), beside);
        Check::new(&name("without hooks"), ok, format!("`run --throttle-hooks=false`: {detail}"))
    };
    vec![limited, split, without_hooks, never_idle(t)]
}

/// What a throttled scene may call idle, as a share of the cgroup's wait: the loop's own wakeups
/// on an idle CPU (its main thread's, at the scene's start and end) and nothing of a throttle.
const IDLE_SHARE: f64 = 0.05;

/// No throttled wait reported as `idle`, in `run` and in `run --throttle-hooks=false` alike: at
/// most `IDLE_SHARE` of either's wait is `idle` (the throttles took ~90 % of each period, so a
/// throttle charged to the holder would make `idle` most of it).
fn never_idle(t: &Throttled) -> Check {
    let (idle, blind_idle) = (t.cause_s("idle"), t.blind.cause_s("idle"));
    let share = |idle: f64, waited: f64| if waited > 0.0 { idle / waited } else { 1.0 };
    let (run, blind) = (share(idle, t.waited_s), share(blind_idle, t.blind.waited_s));
    Check::new(
        &format!("{}: never idle", t.scene),
        run <= IDLE_SHARE && blind <= IDLE_SHARE,
        format!(
            "idle {idle:.3} s of {:.3} s ({:.1} %), without the hooks {blind_idle:.3} s of {:.3} s ({:.1} %): at most \
             {:.0} % each",
            t.waited_s,
            100.0 * run,
            t.blind.waited_s,
            100.0 * blind,
            100.0 * IDLE_SHARE
        ),
    )
}

/// The throttled part against the kernel's count: (ok, the words). cpu.stat's `throttled_usec`
/// is the time the group was throttled with a task queued (the kernel starts its clock only
/// then), on the run queue's clock, which is what both sources of the part read; every such
/// throttle is waited through whole by a queued task, so ours is at least that — less only by
/// the clocks at each wait's edges (the part is the run queue's clock over the throttle, capped at
/// the wait as the stamps' clock timed it): under a millisecond per throttle (`EDGE_S`; measured,
/// 5.10 13 ms short over 22 throttles, 6.1 and 6.12 at most 3 ms). It is more only where two
/// of the loop's threads wait through one throttle, each rightly counting it: each thread's part
/// is at most the group's throttled time and at most its own wait (`Throttled::throttled_bound_s`,
/// from their run_delay while in the cgroup, which covers the scene from the loop's first run
/// there to its last: it moves in and out asleep, so no throttle of its falls outside), with the
/// same allowance for the edges (run_delay and the waits are timed on different clocks) and no
/// period's. On 6.8+ the group's own clock (`cpu.stat.local`) is the figure.
fn agreement(t: &Throttled, throttled: f64) -> (bool, String) {
    const EDGE_S: f64 = 0.001;
    let stat_s = t.local_throttled_us.unwrap_or(t.throttled_us) as f64 / 1e6;
    let of = if t.local_throttled_us.is_some() { "cpu.stat.local's" } else { "cpu.stat's" };
    let edges = EDGE_S * t.nr_throttled as f64;
    let bound = t.throttled_bound_s() + edges;
    let waited: Vec<String> = t.tasks.iter().map(|(tid, ns)| format!("{tid} {:.3} s", *ns as f64 / 1e9)).collect();
    // A group that runs out of quota as its last runnable thread goes to sleep is throttled with
    // nobody waiting until the next period, and the kernel counts that too: proven when its count
    // is more than every thread's wait in the cgroup together; then one period of it is allowed.
    let all_waited = t.tasks.iter().map(|(_, ns)| *ns as f64 / 1e9).sum::<f64>();
    let empty = if stat_s > all_waited + edges { t.period_us as f64 / 1e6 } else { 0.0 };
    let least = stat_s - edges - empty;
    let ok = !t.tasks.is_empty() && throttled >= least && throttled <= bound;
    let words = format!(
        "{of} throttled_usec {stat_s:.3} s ({:+.3} s; at least {least:.3} s{}, at most {bound:.3} s: {} of {} threads \
         waited in the cgroup, {})",
        throttled - stat_s,
        if empty > 0.0 { ", a period less: more than every thread waited, a throttle with nobody waiting" } else { "" },
        t.waiters(),
        t.tasks.len(),
        if waited.is_empty() { "none listed".to_owned() } else { waited.join(", ") }
    );
    (ok, words)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vmtest::checks::scrape;

    #[test]
    fn a_feature_is_on_or_says_why_not() {
        let on = "runqlat_feature_info{feature=\"wait_scan\",state=\"on\"} 1\n\
                  runqlat_feature_info{feature=\"wait_scan\",state=\"off\"} 0\n";
        assert!(feature(on, "", "wait_scan", false).ok && feature(on, "", "wait_scan", false).detail == "on");
        assert_eq!(feature(on, "", "wait_scan", false).what, "wait scan");
        let off = "runqlat_feature_info{feature=\"throttle_split\",state=\"unavailable\"} 1\n";
        let said = "time=1 level=warn target=x msg=\"throttle_split unavailable on this kernel, running without it: \
                    no cfs_rq.throttled_clock_self_time\" feature=throttle_split";
        let c = feature(off, said, "throttle_split", false);
        assert!(c.ok && c.detail == "unavailable: no cfs_rq.throttled_clock_self_time", "{c:?}");
        assert!(!feature(off, "", "throttle_split", false).ok, "unavailable without a reason passed");
        assert!(!feature(off, said, "wait_scan", false).ok, "no state passed");
        assert!(!feature("", "", "irq_steal_split", false).ok, "no state passed");
        // Unavailable, it is no longer a missing path of the column; another path still is.
        let prom = format!("runqlat_delay_seconds_count{{reason=\"wakeup\"}} 1\n{off}");
        assert!(scrape(&prom, 0, None).iter().any(|c| c.what == "every path given" && c.ok));
        let prom = format!("{prom}runqlat_feature_info{{feature=\"per_cgroup\",state=\"unavailable\"}} 1\n");
        assert!(scrape(&prom, 0, None).iter().any(|c| c.what == "every path given" && !c.ok));
        // A stand-in is off where the feature it stands in for is on, and only there.
        let hooks_off = "runqlat_feature_info{feature=\"throttle_hooks\",state=\"off\"} 1\n";
        let split_on = "runqlat_feature_info{feature=\"throttle_split\",state=\"on\"} 1\n";
        let c = feature(&format!("{split_on}{hooks_off}"), "", "throttle_hooks", false);
        assert!(c.ok && c.detail == "not needed", "{c:?}");
        assert!(!feature(&format!("{off}{hooks_off}"), said, "throttle_hooks", false).ok, "both missing passed");
        assert!(!feature(&format!("{split_on}{hooks_off}"), "", "wait_scan", false).ok, "off passed for a feature");
        // Switched off by the configuration (`--throttle-hooks=false`): off, and nothing else.
        let off_hooks = feature(&format!("{off}{hooks_off}"), "", "throttle_hooks", true);
        assert!(off_hooks.ok && off_hooks.detail == "off (switched off)", "{off_hooks:?}");
        let hooks_on = "runqlat_feature_info{feature=\"throttle_hooks\",state=\"on\"} 1\n";
        assert!(!feature(&format!("{off}{hooks_on}"), "", "throttle_hooks", true).ok, "on though switched off passed");
        // Where the hooks are on, the detector is not needed.
        let unknown_off = "runqlat_feature_info{feature=\"throttle_unknown\",state=\"off\"} 1\n";
        assert!(feature(&format!("{off}{hooks_on}{unknown_off}"), "", "throttle_unknown", false).ok);
        assert!(!feature(&format!("{off}{hooks_off}{unknown_off}"), "", "throttle_unknown", false).ok);
    }

    #[test]
    fn the_unknown_warning_is_logged_once_where_on() {
        let on = "runqlat_feature_info{feature=\"throttle_unknown\",state=\"on\"} 1\n";
        let off = "runqlat_feature_info{feature=\"throttle_unknown\",state=\"off\"} 1\n";
        let line = "time=1 level=warn msg=\"this kernel keeps no throttle clock …: waits that overlapped a CPU-limit \
                    throttle are counted as cause=\\\"unknown\\\", not by who held the CPU\" feature=throttle_unknown\n";
        let said = |prom: &str, times: usize| unknown_warning(prom, &line.repeat(times)).ok;
        assert!(said(on, 1) && said(off, 0));
        assert!(!said(on, 0), "on and not said passed");
        assert!(!said(on, 2), "said twice passed");
        assert!(!said(off, 1), "said while off passed");
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
    fn a_throttle_is_split_where_the_kernel_can_and_unknown_where_not() {
        use crate::vmtest::throttle::{Blind, CAUSES};
        let of = |parts: &[(&str, f64)]| -> Vec<(String, f64)> {
            CAUSES
                .iter()
                .map(|c| ((*c).to_owned(), parts.iter().find(|(p, _)| p == c).map_or(0.0, |(_, s)| *s)))
                .collect()
        };
        // 6.8+: `run` splits it with the self clock; without the hooks nothing changes.
        let t = Throttled {
            scene: "throttle".into(),
            cpu_max: "10000 100000".into(),
            period_us: 100_000,
            nr_throttled: 24,
            throttled_us: 2_180_000,
            split: Some("on".into()),
            unknown: Some("off".into()),
            causes_s: of(&[("throttled", 2.2), ("idle", 0.05)]),
            waited_s: 2.25,
            // The spinning thread, and the main thread that never waited.
            tasks: vec![(9, 2_250_000_000), (8, 0)],
            blind: Blind {
                unknown: Some("off".into()),
                causes_s: of(&[("throttled", 2.2), ("idle", 0.05)]),
                waited_s: 2.25,
            },
            rc: Some(0),
            ..Throttled::default()
        };
        let all_ok = |t: &Throttled| throttle(t).iter().all(|c| c.ok);
        let fails = |t: &Throttled, what: &str| throttle(t).iter().any(|c| c.what == what && !c.ok);
        assert!(all_ok(&t), "{:?}", throttle(&t));
        let diluted = Throttled { causes_s: of(&[("throttled", 1.9), ("idle", 0.05), ("same", 0.3)]), ..t.clone() };
        assert!(fails(&diluted, "throttle: split"), "84 % passed");
        let apart = Throttled { throttled_us: 1_500_000, ..t.clone() };
        assert!(fails(&apart, "throttle: split"), "0.7 s off cpu.stat passed");
        // One thread waited: never more than cpu.stat, beyond a millisecond per throttle at its
        // edges; a throttle missed is never made up by them.
        let over = Throttled { causes_s: of(&[("throttled", 2.21), ("idle", 0.04)]), ..t.clone() };
        assert!(fails(&over, "throttle: split"), "30 ms over cpu.stat with one thread waiting passed");
        let under = Throttled { causes_s: of(&[("throttled", 2.15), ("same", 0.1)]), ..t.clone() };
        assert!(fails(&under, "throttle: split"), "30 ms under cpu.stat passed");
        // cpu.stat above every thread's wait together: a throttle that had nobody waiting (the
        // last thread slept out of quota), up to a period of it; not allowed otherwise.
        let empty = Throttled { throttled_us: 2_300_000, ..t.clone() };
        assert!(all_ok(&empty), "{:?}", throttle(&empty));
        let not_proven = Throttled { throttled_us: 2_260_000, ..t.clone() };
        assert!(fails(&not_proven, "throttle: split"), "60 ms under cpu.stat passed without proof");
        // Two waited: up to cpu.stat plus the other's own wait, which it may have spent throttled.
        let two = Throttled {
            causes_s: of(&[("throttled", 2.25)]),
            tasks: vec![(9, 2_150_000_000), (8, 100_000_000)],
            ..t.clone()
        };
        assert!(all_ok(&two), "{:?}", throttle(&two));
        let more = Throttled { causes_s: of(&[("throttled", 2.35)]), waited_s: 2.35, ..two.clone() };
        assert!(fails(&more, "throttle: split"), "more than the other thread waited passed");
        assert!(fails(&Throttled { tasks: Vec::new(), ..t.clone() }, "throttle: split"), "no threads listed passed");
        // 6.8+: the group's own clock (cpu.stat.local) is the figure.
        let local = Throttled { local_throttled_us: Some(2_100_000), ..t.clone() };
        assert!(fails(&local, "throttle: split"), "100 ms over cpu.stat.local passed");
        // Idle is judged in both configurations.
        let idle = Throttled { causes_s: of(&[("throttled", 2.2), ("idle", 0.15)]), waited_s: 2.35, ..t.clone() };
        assert!(fails(&idle, "throttle: never idle"), "6 % idle passed");
        let blind_idle = Blind { causes_s: of(&[("throttled", 2.0), ("idle", 0.25)]), ..t.blind.clone() };
        assert!(fails(&Throttled { blind: blind_idle, ..t.clone() }, "throttle: never idle"), "11 % idle passed");
        let blind_unknown = Blind { unknown: Some("on".into()), ..t.blind.clone() };
        assert!(fails(&Throttled { blind: blind_unknown, ..t.clone() }, "throttle: without hooks"));
        // Before 6.8: the throttle hooks give the throttled part in the self clock's place; without
        // them the throttled waits are `unknown`.
        let blind =
            Blind { unknown: Some("on".into()), causes_s: of(&[("unknown", 2.2), ("idle", 0.05)]), waited_s: 2.25 };
        let hooked = Throttled {
            split: Some("unavailable".into()),
            hooks: Some("on".into()),
            blind: blind.clone(),
            ..t.clone()
        };
        assert!(all_ok(&hooked), "{:?}", throttle(&hooked));
        let hooked_short = Throttled { causes_s: of(&[("idle", 2.25)]), ..hooked.clone() };
        assert!(fails(&hooked_short, "throttle: split"), "the hooks on and nothing throttled passed");
        let idle = Blind { causes_s: of(&[("idle", 2.25)]), ..blind.clone() };
        assert!(fails(&Throttled { blind: idle, ..hooked.clone() }, "throttle: without hooks"), "idle passed");
        // Neither: `run` itself counts them `unknown`.
        let neither = Throttled {
            hooks: Some("unavailable".into()),
            unknown: Some("on".into()),
            causes_s: of(&[("unknown", 2.2), ("idle", 0.05)]),
            ..hooked.clone()
        };
        assert!(all_ok(&neither), "{:?}", throttle(&neither));
        let by_holder = Throttled { causes_s: of(&[("idle", 2.25)]), ..neither.clone() };
        assert!(fails(&by_holder, "throttle: split"), "a throttled wait charged to idle passed");
        let unlimited = Throttled { nr_throttled: 0, throttled_us: 0, ..neither };
        assert!(fails(&unlimited, "throttle: limited"));
        assert!(throttle(&Throttled::default()).iter().all(|c| !c.ok));
        // A pod's limit: judged as its own.
        let pod = Throttled { scene: "pod".into(), ..t.clone() };
        assert!(throttle(&pod).iter().all(|c| c.ok && c.what.starts_with("pod: ")), "{:?}", throttle(&pod));
        let elsewhere = Throttled { scene: "elsewhere".into(), ..t.clone() };
        assert!(throttle(&elsewhere).iter().any(|c| !c.ok), "an unknown scene passed");
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
            causes_s: of(&[("throttled", 1.51), ("other", 0.31), ("idle", 0.02)]),
            waited_s: 1.84,
            tasks: vec![(9, 1_840_000_000)],
            blind: crate::vmtest::throttle::Blind {
                unknown: Some("on".into()),
                causes_s: of(&[("unknown", 1.7), ("other", 0.12), ("idle", 0.02)]),
                waited_s: 1.84,
            },
            rc: Some(0),
            ..Throttled::default()
        };
        assert!(throttle(&t).iter().all(|c| c.ok), "{:?}", throttle(&t));
        let idle = Throttled { causes_s: of(&[("throttled", 1.51), ("idle", 0.33)]), ..t.clone() };
        assert!(throttle(&idle).iter().any(|c| c.what == "beside: split" && !c.ok), "an idle CPU passed");
        assert!(throttle(&idle).iter().any(|c| c.what == "beside: never idle" && !c.ok), "an idle CPU passed");
        let as_other = Throttled { causes_s: of(&[("other", 1.82), ("idle", 0.02)]), ..t.clone() };
        assert!(throttle(&as_other).iter().any(|c| !c.ok), "the throttle charged to the neighbour passed");
        let blind_idle =
            crate::vmtest::throttle::Blind { causes_s: of(&[("unknown", 1.5), ("idle", 0.34)]), ..t.blind.clone() };
        let t_idle = Throttled { blind: blind_idle, ..t.clone() };
        assert!(
            throttle(&t_idle).iter().any(|c| c.what == "beside: without hooks" && !c.ok),
            "idle without hooks passed"
        );
    }
}
