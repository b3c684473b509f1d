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
    /// How often the kernel saw each thread block (voluntary context switches), by tid, read
    /// once it was parked.
    pub blocked: BTreeMap<u32, u64>,
}

impl Load {
    /// From the two crews' `--json` event streams, and `tid cpu_ns run_delay_ns slices` lines
    /// read once every thread was parked and every recorder stopped: those run_delay figures
    /// replace the threads' own (taken before their last report, which may still cost a wait).
    pub fn parse(sleepers: &str, spinners: &str, schedstat: &str) -> Load {
        let (sleepers_pid, sleepers) = crew(sleepers);
        let mut load = Load { sleepers, sleepers_pid, spinners: crew(spinners).1, blocked: BTreeMap::new() };
        for line in schedstat.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let tid = words.first().and_then(|w| w.parse::<u32>().ok());
            let stat = Schedstat::parse(&words.get(1..4).unwrap_or_default().join(" "));
            if let (Some(tid), Some(stat)) = (tid, stat) {
                let thread = load.sleepers.iter_mut().chain(&mut load.spinners).find(|d| d.tid == tid);
                thread.into_iter().for_each(|d| d.run_delay_ns = stat.run_delay_ns);
                if let Some(blocked) = words.get(4).and_then(|w| w.parse().ok()) {
                    load.blocked.insert(tid, blocked);
                }
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

/// `record --json`: both reasons counted, nothing lost or discarded, each sleeper's wakeup
/// delays one per time it blocked (within 2 %), every vCPU seen switching.
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
    // A sleeper waits once per time it blocked (the kernel's voluntary switches: its sleeps, and
    // its final park, whose wakeup comes after the recording) and once for its first run. Under
    // an overcommitted host a 1 ms sleep's timer may fire before the thread got to block: a
    // sleep without a wait, so the sleeps themselves are only an upper bound. Preemptions while
    // it runs (often on PREEMPT_RT, by threaded interrupts) are counted apart.
    let mut bad = Vec::new();
    let (mut preempted, mut blocks, mut woken) = (0, 0, 0);
    for d in &load.sleepers {
        let task = rec.task(d.tid).cloned().unwrap_or_default();
        let blocked = load.blocked.get(&d.tid).copied().unwrap_or(d.sleeps + 1);
        (preempted, blocks, woken) =
            (preempted + task.delay_preempt_count, blocks + blocked, woken + task.delay_wakeup_count);
        // It blocks a few times besides its sleeps (its park, now and then a fault or a lock).
        if !within(task.delay_wakeup_count as f64, blocked as f64, 0.0) || !within(blocked as f64, d.sleeps as f64, 5.0)
        {
            bad.push(format!(
                "{}: {} wakeup delays, blocked {blocked} times, {} sleeps",
                d.name, task.delay_wakeup_count, d.sleeps
            ));
        }
    }
    let sleeps: u64 = load.sleepers.iter().map(|d| d.sleeps).sum();
    let detail = if bad.is_empty() {
        format!(
            "{} sleepers: {sleeps} sleeps, blocked {blocks} times, {woken} wakeup delays, {preempted} preemptions",
            load.sleepers.len()
        )
    } else {
        bad.join("; ")
    };
    checks.push(Check::new("sleepers", !load.sleepers.is_empty() && bad.is_empty(), detail));
    checks
}

/// `record --clock run-queue` against each thread's own run_delay, by the lab's rule (2 % + 2 µs
/// per delay + 1 ms, plus what no tracepoint shows). None where the kernel keeps no run_delay.
pub fn run_delay(rec: &Recording, load: &Load) -> Option<Check> {
    let threads: Vec<&Done> = load.sleepers.iter().chain(&load.spinners).collect();
    if threads.iter().all(|d| d.run_delay_ns == 0) {
        return None;
    }
    let mut worst: Option<(f64, String)> = None;
    let mut bad = Vec::new();
    for d in &threads {
        let t = rec.task(d.tid).cloned().unwrap_or_default();
        let unseen = Unseen {
            migrations: d.migrations.unwrap_or(0),
            longest_sleep_ns: d.longest_sleep_ns,
            untraced: t.untraced,
            largest_delay_ns: t.delay_max_ns,
        };
        let gap = run_delay_gap(t.delay_sum_ns, t.delay_count, d.run_delay_ns, unseen);
        let share = gap.diff_ns.unsigned_abs() as f64 / gap.tolerance_ns.max(1) as f64;
        let line = format!("{} {:+} ns of ±{} ns", d.name, gap.diff_ns, gap.tolerance_ns);
        if share > 1.0 {
            bad.push(line.clone());
        }
        if worst.as_ref().is_none_or(|(w, _)| share > *w) {
            worst = Some((share, line));
        }
    }
    let detail = match (bad.is_empty(), worst) {
        (true, Some((_, line))) => format!("{} threads; worst {line}", threads.len()),
        _ => bad.join("; "),
    };
    Some(Check::new("run_delay", bad.is_empty(), detail))
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
    // A path this kernel did not give would leave the column untested: it fails here.
    let unavailable: Vec<&str> = prom
        .lines()
        .filter(|l| l.starts_with("runqlat_feature_info{") && l.contains("state=\"unavailable\""))
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

    const TASK: &str = r#"{"tid":7,"pid":6,"comm":"io/0","runtime_ns":1,"voluntary":1,"involuntary":0,
        "delay_count":1001,"delay_wakeup_count":1001,"delay_preempt_count":0,"delay_sum_ns":5000000,
        "delay_max_ns":9000,"delay_max_at_ns":0}"#;

    #[test]
    fn a_sleeper_has_one_delay_per_sleep_and_one_more() {
        let load = Load { sleepers: vec![done("io/0", 7, 1000, 5_000_000)], ..Load::default() };
        let checks = super::recording(&recording(TASK), &load, 1);
        assert!(checks.iter().all(|c| c.ok), "{checks:?}");
        // Untraced switches are not losses of ours.
        let short = Load { sleepers: vec![done("io/0", 7, 1100, 0)], ..Load::default() };
        let checks = super::recording(&recording(TASK), &short, 1);
        assert!(!checks.iter().find(|c| c.what == "sleepers").is_some_and(|c| c.ok), "{checks:?}");
        assert!(!super::recording(&recording(TASK), &load, 2).iter().all(|c| c.ok), "a missing vCPU passed");
    }

    #[test]
    fn run_delay_agreement_and_its_absence() {
        let agree = Load { sleepers: vec![done("io/0", 7, 1000, 5_100_000)], ..Load::default() };
        assert!(run_delay(&recording(TASK), &agree).is_some_and(|c| c.ok));
        let apart = Load { sleepers: vec![done("io/0", 7, 1000, 9_000_000)], ..Load::default() };
        assert!(run_delay(&recording(TASK), &apart).is_some_and(|c| !c.ok));
        let none = Load { sleepers: vec![done("io/0", 7, 1000, 0)], ..Load::default() };
        assert_eq!(run_delay(&recording(TASK), &none), None);
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
    fn crews_from_their_event_streams() {
        let io = "{\"event\":\"ready\",\"pid\":42,\"mode\":\"io\",\"cpus\":2,\"secs\":3.0}\n\
                  {\"event\":\"finished\",\"wall_ns\":5}\n";
        let load = Load::parse(io, "", "");
        assert_eq!((load.sleepers_pid, load.sleepers.len(), load.spinners.len()), (42, 0, 0));
        let done = serde_json::to_string(&crate::workload::Event::Done(done("io/0", 7, 10, 5))).unwrap_or_default();
        let load = Load::parse(&format!("{done}\n"), "", "7 100 900 12 11\n8 1 2 3 4\n");
        assert_eq!(load.sleepers[0].run_delay_ns, 900);
        assert_eq!(load.blocked.get(&7), Some(&11));
    }
}
