//! What must hold in a guest, as pure functions: in, what one configuration produced (`record
//! --json` or a `/metrics` scrape) and what the load's threads say about themselves; out, named
//! checks with the figures behind them. Only exit codes, attachment, counts and the agreement of
//! counts and sums are judged: delay magnitudes under TCG mean nothing.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::oracle::run_delay::{Schedstat, Unseen, run_delay_gap};
use crate::recording::Recording;
use crate::web::{sample, total};
use crate::workload::Done;

/// One judged fact.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Check {
    pub what: String,
    pub ok: bool,
    pub detail: String,
}

impl Check {
    pub fn new(what: &str, ok: bool, detail: String) -> Check {
        Check { what: what.to_owned(), ok, detail }
    }
}

/// The load as its threads reported it.
#[derive(Debug, Clone, Default)]
pub struct Load {
    /// The 1 ms sleepers, and their process.
    pub sleepers: Vec<Done>,
    pub sleepers_pid: u32,
    /// The spinners (2 × vCPUs).
    pub spinners: Vec<Done>,
    /// How often the kernel put each thread on a CPU (schedstat's third field), by tid, read
    /// once it was parked: the kernel's own count of what we count as delays.
    pub runs: BTreeMap<u32, u64>,
    /// Why the thread's own sleep count need not match its wakeups, if it need not: where the
    /// vCPUs outnumber the host's CPUs (a 1 ms timer may fire before the thread got to block), or
    /// the load is emulated (the emulator's own locks block its threads too). Then the kernel's
    /// count of runs is judged, and the wakeups only as no more than the sleeps (2 %) unless
    /// `blocks_elsewhere`.
    pub sleeps_unjudged: Option<&'static str>,
    /// The threads block outside their sleeps too (an emulator's locks).
    pub blocks_elsewhere: bool,
}

impl Load {
    /// From the two crews' `--json` event streams, and `tid cpu_ns run_delay_ns slices` lines
    /// read once every thread was parked and every recorder stopped: those run_delay figures
    /// replace the threads' own (taken before their last report, which may still cost a wait).
    pub fn parse(sleepers: &str, spinners: &str, schedstat: &str) -> Load {
        let (sleepers_pid, sleepers) = crew(sleepers);
        let spinners = crew(spinners).1;
        let mut load = Load {
            sleepers,
            sleepers_pid,
            spinners,
            runs: BTreeMap::new(),
            sleeps_unjudged: None,
            blocks_elsewhere: false,
        };
        for line in schedstat.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let tid = words.first().and_then(|w| w.parse::<u32>().ok());
            let stat = Schedstat::parse(&words.get(1..4).unwrap_or_default().join(" "));
            if let (Some(tid), Some(stat)) = (tid, stat) {
                let thread = load.sleepers.iter_mut().chain(&mut load.spinners).find(|d| d.tid == tid);
                thread.into_iter().for_each(|d| d.run_delay_ns = stat.run_delay_ns);
                load.runs.insert(tid, stat.timeslices);
            }
        }
        load
    }
}

fn crew(events: &str) -> (u32, Vec<Done>) {
    use crate::workload::Event;
    let mut pid = 0;
    let mut done = Vec::new();
    for event in events.lines().filter_map(|l| serde_json::from_str::<Event>(l).ok()) {
        match event {
            Event::Ready { pid: p, .. } => pid = p,
            Event::Done(d) => done.push(d),
            _ => {}
        }
    }
    (pid, done)
}

/// Within 2 %, plus `slack` for what is in flight at the edges.
fn within(measured: f64, expected: f64, slack: f64) -> bool {
    (measured - expected).abs() <= 0.02 * expected + slack
}

/// `record --json`: both reasons counted, nothing lost or discarded, each sleeper's delays one
/// per run the kernel counted and its wakeups one per sleep plus its first run (each within
/// 2 %), every vCPU seen switching.
pub fn recording(rec: &Recording, load: &Load, cpus: usize) -> Vec<Check> {
    let (wakeup, preempt) = (rec.histograms.wakeup.count, rec.histograms.preempt.count);
    let mut checks = vec![
        Check::new("counts", wakeup > 0 && preempt > 0, format!("wakeup {wakeup}, preempt {preempt}")),
        Check::new("nothing lost", rec.losses() == 0, format!("lost {:?}, discarded {:?}", rec.lost, rec.discarded)),
    ];
    let busy = rec.cpus.iter().filter(|c| c.switches > 0).count();
    checks.push(Check::new(
        "every vCPU",
        rec.cpus.len() == cpus && busy == cpus,
        format!("{busy} of {cpus} switching"),
    ));
    // Each time the kernel put a sleeper on a CPU it had waited once, woken or preempted: our
    // count must be the kernel's. Its wakeups are its sleeps and its first run where every sleep
    // blocks; preemptions while it runs (often on PREEMPT_RT) are counted apart.
    let mut bad = Vec::new();
    let (mut sleeps, mut woken, mut preempted, mut runs) = (0, 0, 0, 0);
    for d in &load.sleepers {
        let task = rec.task(d.tid).cloned().unwrap_or_default();
        let ran = load.runs.get(&d.tid).copied();
        sleeps += d.sleeps;
        (woken, preempted, runs) =
            (woken + task.delay_wakeup_count, preempted + task.delay_preempt_count, runs + ran.unwrap_or(0));
        let counted = ran.is_some_and(|r| within(task.delay_count as f64, r as f64, 0.0));
        // Unjudged, a sleep may not block, but no more wakeups come than sleeps (within 2 %: a
        // thread also blocks now and then on its process's memory map lock), unless the threads
        // block elsewhere too.
        let slept = match load.sleeps_unjudged {
            Some(_) => load.blocks_elsewhere || task.delay_wakeup_count as f64 <= (d.sleeps + 1) as f64 * 1.02,
            None => within(task.delay_wakeup_count as f64, d.sleeps as f64 + 1.0, 0.0),
        };
        if !counted || !slept {
            bad.push(format!(
                "{}: {} delays ({} wakeups) for {ran:?} runs and {} sleeps",
                d.name, task.delay_count, task.delay_wakeup_count, d.sleeps
            ));
        }
    }
    let detail = if bad.is_empty() {
        let judged = load.sleeps_unjudged.map_or_else(String::new, |why| format!(" (sleeps not judged: {why})"));
        format!(
            "{} sleepers: {sleeps} sleeps, {woken} wakeup + {preempted} preempt delays, {runs} runs by the kernel's count{judged}",
            load.sleepers.len()
        )
    } else {
        bad.join("; ")
    };
    checks.push(Check::new("sleepers", !load.sleepers.is_empty() && bad.is_empty(), detail));
    checks
}

/// `record --clock run-queue` against each thread's own run_delay, by the lab's rule (2 % + 2 µs
/// per delay + 1 ms, plus what no tracepoint shows), and on our side as well each migration up to
/// the thread's largest wait. None where the kernel keeps no run_delay.
pub fn run_delay(rec: &Recording, load: &Load) -> Option<Check> {
    let threads: Vec<&Done> = load.sleepers.iter().chain(&load.spinners).collect();
    if threads.iter().all(|d| d.run_delay_ns == 0) {
        return None;
    }
    let mut worst: Option<(f64, String)> = None;
    let mut bad = Vec::new();
    let mut apart = Vec::new();
    for d in &threads {
        let t = rec.task(d.tid).cloned().unwrap_or_default();
        // Woken after a switch-out that sched_switch showed as a preemption (seen on 5.10-rt;
        // PREEMPT_RT's sleeping locks are the likely cause): there the tracepoints and
        // run_delay disagree on when the wait began, so the thread is listed, not judged.
        let odd = t.delay_wakeup_count.saturating_sub(t.voluntary + 1);
        if odd > t.delay_wakeup_count / 50 {
            apart.push(format!(
                "{} ({odd} wakeups after preemptions, {:+} ns)",
                d.name,
                t.delay_sum_ns as i64 - d.run_delay_ns as i64
            ));
            continue;
        }
        let unseen = Unseen {
            migrations: d.migrations.unwrap_or(0),
            longest_sleep_ns: d.longest_sleep_ns,
            untraced: t.untraced,
        };
        let gap = run_delay_gap(t.delay_sum_ns, t.delay_count, d.run_delay_ns, unseen);
        // A migration can also change how the wait in progress is measured, by at most that wait,
        // either way: run_delay closes it on the old CPU's rq clock and reopens it on the new
        // one's, our stamp from the old CPU's clock is closed with the new one's, and under TCG
        // the vCPUs' rq clocks drift apart (seen: +35.6 ms on a 6.1-rt sleeper with 3 migrations
        // and a 51 ms wait, its partner within 0.2 ms; −79.6 ms on a 6.12 spinner of 16 on 8
        // vCPUs with 2 migrations and waits of up to 85.7 ms, the other 15 within the 2 %).
        let moved = unseen.migrations.saturating_mul(t.delay_max_ns);
        let tolerance = gap.tolerance_ns.saturating_add(moved);
        let share = gap.diff_ns.unsigned_abs() as f64 / tolerance.max(1) as f64;
        let line = format!("{} {:+} ns of ±{tolerance} ns", d.name, gap.diff_ns);
        if share > 1.0 {
            bad.push(line.clone());
        }
        if worst.as_ref().is_none_or(|(w, _)| share > *w) {
            worst = Some((share, line));
        }
    }
    let compared = threads.len() - apart.len();
    let mut detail = match (bad.is_empty(), worst) {
        (true, Some((_, line))) => format!("{compared} threads; worst {line}"),
        _ => bad.join("; "),
    };
    if !apart.is_empty() {
        detail.push_str(&format!("; not judged: {}", apart.join(", ")));
    }
    Some(Check::new("run_delay", bad.is_empty() && compared > 0, detail))
}

/// A `run` configuration's scrape: both reasons counted, nothing lost or discarded, every vCPU
/// labelled, and (with per-cgroup on) the sleepers' cgroup holding as many delays as `record`
/// saw for the sleepers' process.
pub fn scrape(prom: &str, cpus: usize, sleepers: Option<(&str, u64)>) -> Vec<Check> {
    let reason = |r: &str| sample(prom, &format!("runqlat_delay_seconds_count{{reason=\"{r}\"}}")).unwrap_or(0.0);
    let (wakeup, preempt) = (reason("wakeup"), reason("preempt"));
    let (lost, discarded) = (total(prom, "runqlat_lost_total"), total(prom, "runqlat_discarded_total"));
    let labelled = (0..cpus)
        .filter(|c| {
            sample(prom, &format!("runqlat_context_switches_total{{cpu=\"{c}\",kind=\"voluntary\"}}")).is_some()
        })
        .count();
    // A path this kernel did not give would leave the column untested: it fails here (those a
    // kernel may lack, `JUDGED_APART`, are judged by `feature`).
    let unavailable: Vec<&str> = prom
        .lines()
        .filter(|l| l.starts_with("runqlat_feature_info{") && l.contains("state=\"unavailable\""))
        .filter(|l| !JUDGED_APART.iter().any(|f| l.contains(&format!("feature=\"{f}\""))))
        .collect();
    let mut checks = vec![
        Check::new("counts", wakeup > 0.0 && preempt > 0.0, format!("wakeup {wakeup}, preempt {preempt}")),
        Check::new("nothing lost", lost == 0.0 && discarded == 0.0, format!("lost {lost}, discarded {discarded}")),
        Check::new("every vCPU", labelled == cpus, format!("{labelled} of {cpus} cpus in /metrics")),
        Check::new("every path given", unavailable.is_empty(), format!("unavailable: {unavailable:?}")),
    ];
    if let Some((cgroup, expected)) = sleepers {
        let got = sample(prom, &format!("runqlat_cgroup_delay_seconds_count{{cgroup=\"{cgroup}\"}}")).unwrap_or(0.0);
        let ok = expected > 0 && within(got, expected as f64, 3.0);
        checks.push(Check::new("sleepers", ok, format!("cgroup {cgroup}: {got} delays, record saw {expected}")));
    }
    checks
}

/// The optional paths a kernel may lack, each judged apart (`feature`) rather than as a column's
/// missing path: the wait scan (a task iterator, 5.8+), the throttled part of the cause split
/// (`cfs_rq.throttled_clock_self_time`, 6.8+) and its irq+steal part (IRQ time or steal
/// accounting, which Debian's kernels build without).
pub const JUDGED_APART: [&str; 3] = ["wait_scan", "throttle_split", "irq_steal_split"];

/// Judged like those, in the configuration that asks for it (`--irq-tracepoints`): on where the
/// kernel does not account IRQ time (Debian's), unavailable with the reason where it does.
pub const IRQ_TRACEPOINTS: &str = "irq_tracepoints";

/// A `JUDGED_APART` feature's state in a scrape: on, or unavailable with the daemon's one-line
/// reason in its log (`NAME unavailable on this kernel, running without it: …`). The figure says
/// which; the check is named after the feature (`wait scan`, `throttle split`, …).
pub fn feature(prom: &str, log: &str, name: &str) -> Check {
    let state = super::throttle::feature_state(prom, name);
    let said = format!("{name} unavailable on this kernel");
    let said: Vec<&str> = log.lines().filter(|l| l.contains(&said)).collect();
    let (ok, detail) = match (state.as_deref(), said.as_slice()) {
        (Some("on"), []) => (true, "on".to_owned()),
        (Some("unavailable"), [line]) => (true, format!("unavailable: {}", reason(line))),
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

/// The throttle (`throttle::Throttled`): the loop was throttled (cpu.stat counts it) and the
/// daemon split its cgroup's wait — where `throttle_split` is on, at least 90 % of it throttled and
/// the throttled part the kernel's `throttled_usec` within 25 % or two periods (TCG; and two of
/// the group's tasks waiting through one throttle each count it, cpu.stat once); where
/// unavailable, none of it throttled, all by holder.
pub fn throttle(t: &super::throttle::Throttled) -> Vec<Check> {
    let throttled = t.cause_s("throttled");
    let stat_s = t.throttled_us as f64 / 1e6;
    let local =
        t.local_throttled_us.map_or_else(String::new, |us| format!(", cpu.stat.local {:.3} s", us as f64 / 1e6));
    let limited = Check::new(
        "throttle: limited",
        t.cpu_max == super::throttle::CPU_MAX
            && t.rc == Some(0)
            && t.error.is_none()
            && t.nr_throttled > 0
            && t.throttled_us > 0
            && t.waited_s > 0.0,
        format!(
            "cpu.max `{}`, loop exit {:?}: ran {:.3} s (run_delay {:.3} s); cpu.stat: throttled {} times, \
             {stat_s:.3} s{local}; the cgroup waited {:.3} s{}",
            t.cpu_max,
            t.rc,
            t.spun_ns as f64 / 1e9,
            t.run_delay_ns as f64 / 1e9,
            t.nr_throttled,
            t.waited_s,
            t.error.as_deref().map_or_else(String::new, |e| format!("; {e}"))
        ),
    );
    let share = if t.waited_s > 0.0 { throttled / t.waited_s } else { 0.0 };
    let split = match t.split.as_deref() {
        Some("on") => {
            let slack = (0.25 * stat_s).max(2.0 * t.period_us as f64 / 1e6);
            Check::new(
                "throttle: split",
                share >= 0.9 && (throttled - stat_s).abs() <= slack,
                format!(
                    "throttled {throttled:.3} s = {:.1} % of the cgroup's wait (≥ 90 %); cpu.stat's throttled_usec \
                     {stat_s:.3} s ({:+.3} s, within ±{slack:.3} s); by cause: {}",
                    100.0 * share,
                    throttled - stat_s,
                    t.by_cause()
                ),
            )
        }
        Some("unavailable") => Check::new(
            "throttle: split",
            throttled == 0.0 && t.waited_s > 0.0,
            format!("throttle_split unavailable: nothing throttled, the wait by holder: {}", t.by_cause()),
        ),
        state => Check::new("throttle: split", false, format!("throttle_split state {state:?}")),
    };
    vec![limited, split]
}

/// The stall as the guest's watcher saw it (`watch::Watched`): the victim's wait shown growing
/// past 1 s by the scan before it ran, the wakeup gauge too, its final delay (≥ the last wait
/// shown in progress) counted in the histogram and the window's max, and neither the stopped
/// nor the blocked task of that CPU ever listed as waiting.
pub fn stall(watched: Option<&crate::watch::Watched>, rc: Option<i32>, err: &str) -> Vec<Check> {
    const SECOND: u64 = 1_000_000_000;
    let Some(w) = watched.filter(|w| w.error.is_none() && rc == Some(0)) else {
        let why = watched.and_then(|w| w.error.clone()).unwrap_or_else(|| format!("exit {rc:?}; {}", last(err)));
        return vec![Check::new("stall", false, why)];
    };
    let s = |ns: u64| ns as f64 / 1e9;
    let since = |ns: u64| s(ns.saturating_sub(w.began_ns));
    let longest = w.longest_before_run();
    let shown = longest.map_or(0, |(_, n)| n);
    let seen = longest.map_or_else(
        || "never listed".to_owned(),
        |(l, n)| {
            format!(
                "waited {:.2} s when the scan saw it at {:.2} s (scraped at {:.2} s, run yet: {})",
                s(n),
                since(l.seen_ns.unwrap_or(0)),
                since(l.at_ns),
                l.ran
            )
        },
    );
    let idle = w.looks.iter().map(|l| l.idle_listed).max().unwrap_or(0);
    // Each scan once, before the run: the wait must grow from one to the next.
    let mut scans: Vec<(u64, u64)> =
        w.looks.iter().filter_map(|l| Some((l.seen_ns?, l.waited_ns?))).filter(|(seen, _)| *seen < w.ran_ns).collect();
    scans.dedup();
    let growing = scans.len() >= 2 && scans.windows(2).all(|p| p[1].1 > p[0].1);
    let grew: Vec<String> = scans.iter().map(|(_, n)| format!("{:.2}", s(*n))).collect();
    vec![
        Check::new(
            "stall: seen in progress",
            shown >= SECOND && w.ran_ns > 0 && growing,
            format!(
                "CPU {}: SCHED_FIFO {} spin {:.2} s; victim tid {} woken at {:.2} s, ran at {:.2} s ({:.2} s late); \
                 {seen}; scans before it ran: {} s; {} looks",
                w.cpu,
                w.priority,
                s(w.ends_ns - w.began_ns),
                w.victim_tid,
                since(w.wake_ns),
                since(w.ran_ns),
                s(w.late_ns()),
                grew.join(" → "),
                w.looks.len()
            ),
        ),
        Check::new(
            "stall: gauge",
            w.gauge_before_run() >= SECOND,
            format!(
                "runqlat_wait_in_progress_seconds{{reason=\"wakeup\"}} up to {:.2} s before it ran",
                s(w.gauge_before_run())
            ),
        ),
        Check::new(
            "stall: final delay",
            w.above_after > w.above_before && w.window_max_ns >= shown && shown > 0,
            format!(
                "wakeup delays over {} s: {} → {}; window max {:.3} s ≥ {:.3} s shown in progress (the victim's own {:.3} s)",
                w.floor_s,
                w.above_before,
                w.above_after,
                s(w.window_max_ns),
                s(shown),
                s(w.late_ns())
            ),
        ),
        Check::new("stall: idle not waiting", idle == 0, format!("stopped/blocked tasks listed: {idle}")),
    ]
}

fn last(text: &str) -> &str {
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(name: &str, tid: u32, sleeps: u64, run_delay_ns: u64) -> Done {
        Done {
            name: name.into(),
            tid,
            group: "io".into(),
            nice: 0,
            weight: None,
            sleeps,
            longest_sleep_ns: 1_100_000,
            migrations: Some(0),
            cpu_ns: 1,
            run_delay_ns,
            largest_gap_ns: None,
            largest_gap_end_ns: None,
        }
    }

    fn recording(tasks: &str) -> Recording {
        let json = format!(
            r#"{{"version":1,"clock":"run_queue","duration_ns":1,"histograms":{{"wakeup":{{"count":5,"buckets":[]}},
            "preempt":{{"count":2,"buckets":[]}}}},"tasks":[{tasks}],"cpus":[{{"switches":3,"idle_ns":0}}],
            "lost":{{"switches":4}},"discarded":{{"over_ceiling":0}}}}"#
        );
        Recording::parse(&json, "run_queue").unwrap_or_else(|e| panic!("{e:#}"))
    }

    const TASK: &str = r#"{"tid":7,"pid":6,"comm":"io/0","runtime_ns":1,"voluntary":1000,"involuntary":0,
        "delay_count":1001,"delay_wakeup_count":1001,"delay_preempt_count":0,"delay_sum_ns":5000000,
        "delay_max_ns":9000,"delay_max_at_ns":0}"#;

    #[test]
    fn a_sleeper_has_one_delay_per_run_and_per_sleep() {
        let load = |sleeps, runs| Load {
            sleepers: vec![done("io/0", 7, sleeps, 5_000_000)],
            runs: BTreeMap::from([(7, runs)]),
            sleeps_unjudged: None,
            ..Load::default()
        };
        let checks = super::recording(&recording(TASK), &load(1000, 1001), 1);
        assert!(checks.iter().all(|c| c.ok), "{checks:?}");
        let sleepers = |l: &Load| super::recording(&recording(TASK), l, 1).into_iter().find(|c| c.what == "sleepers");
        assert!(sleepers(&load(1100, 1001)).is_some_and(|c| !c.ok), "100 sleeps short passed");
        assert!(sleepers(&load(1000, 1100)).is_some_and(|c| !c.ok), "100 runs short passed");
        // Where a sleep need not block, the kernel's count of runs alone decides.
        let unjudged = Load { sleeps_unjudged: Some("vCPUs outnumber host CPUs"), ..load(1100, 1001) };
        assert!(sleepers(&unjudged).is_some_and(|c| c.ok && c.detail.contains("not judged: vCPUs")));
        // …but more wakeups than sleeps is still wrong, unless the threads block elsewhere too.
        let woken_unslept = Load { sleeps_unjudged: Some("emulated"), ..load(900, 1001) };
        assert!(sleepers(&woken_unslept).is_some_and(|c| !c.ok), "101 wakeups without a sleep passed");
        let emulated = Load { blocks_elsewhere: true, ..woken_unslept };
        assert!(sleepers(&emulated).is_some_and(|c| c.ok));
        assert!(
            !super::recording(&recording(TASK), &load(1000, 1001), 2).iter().all(|c| c.ok),
            "a missing vCPU passed"
        );
    }

    #[test]
    fn run_delay_agreement_and_its_absence() {
        let agree = Load { sleepers: vec![done("io/0", 7, 1000, 5_100_000)], ..Load::default() };
        assert!(run_delay(&recording(TASK), &agree).is_some_and(|c| c.ok));
        let apart = Load { sleepers: vec![done("io/0", 7, 1000, 9_000_000)], ..Load::default() };
        assert!(run_delay(&recording(TASK), &apart).is_some_and(|c| !c.ok));
        // 4 ms more than run_delay: too much for a thread that stayed on its CPU; allowed to one
        // that migrated twice with waits of up to 1 ms, not with waits of up to 9 µs.
        let over = Load { sleepers: vec![done("io/0", 7, 1000, 1_000_000)], ..Load::default() };
        assert!(run_delay(&recording(TASK), &over).is_some_and(|c| !c.ok));
        let mut moved = done("io/0", 7, 1000, 1_000_000);
        moved.migrations = Some(2);
        let wide = recording(&TASK.replace("\"delay_max_ns\":9000", "\"delay_max_ns\":1000000"));
        assert!(run_delay(&wide, &Load { sleepers: vec![moved.clone()], ..Load::default() }).is_some_and(|c| c.ok));
        assert!(run_delay(&recording(TASK), &Load { sleepers: vec![moved], ..Load::default() }).is_some_and(|c| !c.ok));
        // 4 ms less than run_delay on a thread that never sleeps: allowed to one that migrated
        // twice with waits of up to 3 ms (the new CPU's clock behind the old one's), not with
        // waits of up to 9 µs.
        let mut spinner = done("compete/0", 7, 0, 9_000_000);
        spinner.longest_sleep_ns = 0;
        spinner.migrations = Some(2);
        let long = recording(&TASK.replace("\"delay_max_ns\":9000", "\"delay_max_ns\":3000000"));
        assert!(run_delay(&long, &Load { spinners: vec![spinner.clone()], ..Load::default() }).is_some_and(|c| c.ok));
        assert!(
            run_delay(&recording(TASK), &Load { spinners: vec![spinner], ..Load::default() }).is_some_and(|c| !c.ok)
        );
        let none = Load { sleepers: vec![done("io/0", 7, 1000, 0)], ..Load::default() };
        assert_eq!(run_delay(&recording(TASK), &none), None);
        // Woken more often than it blocked: listed, not judged; with nothing left to judge, a failure.
        let odd = recording(&TASK.replace("\"voluntary\":1000", "\"voluntary\":900"));
        assert!(run_delay(&odd, &apart).is_some_and(|c| !c.ok && c.detail.contains("not judged: io/0")));
    }

    #[test]
    fn a_scrape_is_judged_by_counts_losses_cpus_and_the_sleepers_cgroup() {
        let prom = "runqlat_delay_seconds_count{reason=\"wakeup\"} 900\nrunqlat_delay_seconds_count{reason=\"preempt\"} 80\n\
                    runqlat_context_switches_total{cpu=\"0\",kind=\"voluntary\"} 5\nrunqlat_lost_total{map=\"stamps\"} 0\n\
                    runqlat_discarded_total{why=\"over_ceiling\"} 0\nrunqlat_cgroup_delay_seconds_count{cgroup=\"/s\"} 1001\n";
        assert!(scrape(prom, 1, Some(("/s", 1003))).iter().all(|c| c.ok));
        let degraded = format!("{prom}runqlat_feature_info{{feature=\"attribution\",state=\"unavailable\"}} 1\n");
        assert!(!scrape(&degraded, 1, Some(("/s", 1003))).iter().all(|c| c.ok));
        assert!(!scrape(prom, 1, Some(("/s", 1200))).iter().all(|c| c.ok));
        assert!(!scrape(prom, 2, None).iter().all(|c| c.ok));
        let lossy = prom.replace("{map=\"stamps\"} 0", "{map=\"stamps\"} 3");
        assert!(!scrape(&lossy, 1, None).iter().all(|c| c.ok));
    }

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
        use crate::vmtest::throttle::{CAUSES, Throttled};
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
        let unlimited = Throttled { nr_throttled: 0, throttled_us: 0, ..degraded };
        assert!(throttle(&unlimited).iter().any(|c| c.what == "throttle: limited" && !c.ok));
        assert!(throttle(&Throttled::default()).iter().all(|c| !c.ok));
    }

    #[test]
    fn a_stall_is_seen_growing_before_the_victim_ran() {
        use crate::watch::{Look, Watched};
        const S: u64 = 1_000_000_000;
        let look = |seen_ns: u64, waited_ns: u64| Look {
            at_ns: seen_ns + 1,
            ran: false,
            waited_ns: Some(waited_ns),
            seen_ns: Some(seen_ns),
            gauge_ns: Some(waited_ns),
            window_max_ns: None,
            idle_listed: 0,
        };
        let w = Watched {
            began_ns: 10 * S,
            ends_ns: 13 * S,
            wake_ns: 10 * S + S / 5,
            ran_ns: 13 * S,
            looks: vec![look(11 * S, S * 4 / 5), look(12 * S, S * 9 / 5), look(12 * S, S * 9 / 5)],
            floor_s: 1.5,
            above_before: 0,
            above_after: 1,
            window_max_ns: 2_800_000_000,
            ..Watched::default()
        };
        let all = |w: &Watched| stall(Some(w), Some(0), "");
        assert!(all(&w).iter().all(|c| c.ok), "{:?}", all(&w));
        let short = Watched { looks: vec![look(11 * S, S / 2), look(12 * S, S * 9 / 10)], ..w.clone() };
        assert!(all(&short).iter().any(|c| c.what == "stall: seen in progress" && !c.ok), "0.9 s passed");
        let after = Watched { ran_ns: 11 * S + 1, ..w.clone() };
        assert!(all(&after).iter().any(|c| c.what == "stall: seen in progress" && !c.ok), "seen after the run");
        let uncounted = Watched { above_after: 0, ..w.clone() };
        assert!(all(&uncounted).iter().any(|c| c.what == "stall: final delay" && !c.ok));
        assert!(!stall(Some(&w), Some(1), "boom").iter().all(|c| c.ok));
        assert!(stall(None, Some(0), "").iter().all(|c| !c.ok));
    }

    #[test]
    fn crews_from_their_event_streams() {
        let io = "{\"event\":\"ready\",\"pid\":42,\"mode\":\"io\",\"cpus\":2,\"secs\":3.0}\n\
                  {\"event\":\"finished\",\"wall_ns\":5}\n";
        let load = Load::parse(io, "", "");
        assert_eq!((load.sleepers_pid, load.sleepers.len(), load.spinners.len()), (42, 0, 0));
        let done = serde_json::to_string(&crate::workload::Event::Done(done("io/0", 7, 10, 5))).unwrap_or_default();
        let load = Load::parse(&format!("{done}\n"), "", "7 100 900 12 11\n8 1 2 3 4\n");
        assert_eq!(load.sleepers[0].run_delay_ns, 900);
        assert_eq!(load.runs.get(&7), Some(&12));
    }
}
