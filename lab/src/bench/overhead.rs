//! Tracers × workloads in, the time each tracer adds per scheduler event out: for each pair,
//! one run without the tracer and one with it, in alternating order so drift cancels; medians.
use std::{
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::{Binaries, median};
use crate::daemon::Daemon;
use crate::guard::{Proc, Stream, spawn_until_line};
use crate::oracle::runqlat::Runqlat;
use crate::web;

/// How long a tracer may take to say it is attached.
pub(super) const ATTACH_LIMIT: Duration = Duration::from_secs(30);

/// A scheduler-heavy command and how to read its elapsed time.
#[derive(Clone, Debug)]
pub struct Workload {
    pub name: &'static str,
    argv: Vec<&'static str>,
}

#[derive(Clone, Debug)]
pub enum Tracer {
    /// An empty program on the same three tracepoints.
    Floor,
    /// The floor plus one `bpf_ktime_get_ns` per event: what timing a wait costs at the least.
    ClockOnly,
    /// libbpf-tools runqlat.
    Runqlat,
    /// `latency-daemon run` with these extra arguments, scraped every second.
    Ours { name: &'static str, extra: Vec<&'static str> },
    /// Our program with the daemon's default options, loaded by the floor's loader alone (no
    /// drains): the daemon's own object, or another build of it (`object`), so two builds
    /// compare like with like.
    Loader { name: &'static str, object: Option<std::path::PathBuf> },
}

impl Tracer {
    pub fn name(&self) -> &'static str {
        match self {
            Tracer::Floor => "floor (empty program)",
            Tracer::ClockOnly => CLOCK_ONLY,
            Tracer::Runqlat => "runqlat",
            Tracer::Ours { name, .. } | Tracer::Loader { name, .. } => name,
        }
    }
}

/// The clock-only tracer's name (not starting with "floor": tables find the floor by prefix).
pub const CLOCK_ONLY: &str = "clock read only";

pub struct Plan {
    workloads: Vec<Workload>,
    tracers: Vec<Tracer>,
    pairs: usize,
}

/// The worst case: both ends of the pipe on one CPU, every op a wakeup and a switch each way.
pub fn pipe_pinned_argv() -> Vec<&'static str> {
    vec!["taskset", "-c", "1", "perf", "bench", "sched", "pipe", "-l", "200000"]
}

fn pipe_pinned() -> Workload {
    Workload { name: "pipe, pinned to cpu 1", argv: pipe_pinned_argv() }
}

fn hackbench() -> Workload {
    // Pipes and threads: the most switches per second of hackbench's modes.
    Workload { name: "hackbench", argv: vec!["hackbench", "-p", "-T", "-g", "2", "-l", "2000"] }
}

/// The workloads, by name and command line.
pub fn workloads() -> Vec<(&'static str, Vec<&'static str>)> {
    [pipe_pinned(), pipe_unpinned(), hackbench()].into_iter().map(|w| (w.name, w.argv)).collect()
}

fn pipe_unpinned() -> Workload {
    Workload { name: "pipe, unpinned", argv: vec!["perf", "bench", "sched", "pipe", "-l", "200000"] }
}

pub fn ours_default() -> Tracer {
    Tracer::Ours { name: "ours (default)", extra: Vec::new() }
}

/// Every tracer the benchmark knows: the floor, runqlat, and ours in each configuration whose
/// cost is worth knowing.
pub fn all_tracers() -> Vec<Tracer> {
    vec![
        Tracer::Floor,
        Tracer::ClockOnly,
        Tracer::Runqlat,
        ours_default(),
        Tracer::Ours { name: "ours, no per-cgroup", extra: vec!["--per-cgroup=false"] },
        Tracer::Ours { name: "ours, run-queue clock", extra: vec!["--clock", "run-queue"] },
        Tracer::Ours { name: "ours + alerting", extra: vec!["--alert-max-delay", "10ms"] },
        Tracer::Ours { name: "ours + per-task", extra: vec!["--per-task"] },
    ]
}

pub fn full_plan(pairs: usize) -> Plan {
    Plan { workloads: vec![pipe_pinned(), pipe_unpinned(), hackbench()], tracers: all_tracers(), pairs: pairs.max(1) }
}

/// One workload × tracer: per pair, the added ns per event and the workload's time alone.
#[derive(Debug)]
pub struct Row {
    pub workload: &'static str,
    pub tracer: &'static str,
    pub added_ns: Vec<f64>,
    pub base_s: Vec<f64>,
    pub events_per_s: Vec<f64>,
}

/// Context switches so far, machine-wide (/proc/stat `ctxt`).
fn context_switches() -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    stat.lines()
        .find_map(|l| l.strip_prefix("ctxt "))
        .and_then(|v| v.trim().parse().ok())
        .context("no ctxt line in /proc/stat")
}

/// Run the workload once: (seconds it reports, scheduler events meanwhile). Each switch comes
/// with a wakeup in these workloads, so events ≈ 2 × switches (perf's pipe op: 2 + 2).
fn run_workload(w: &Workload) -> anyhow::Result<(f64, u64)> {
    let before = context_switches()?;
    let out =
        Command::new(w.argv[0]).args(&w.argv[1..]).output().with_context(|| format!("run {}", w.argv.join(" ")))?;
    let switches = context_switches()?.saturating_sub(before);
    if !out.status.success() {
        bail!("{} failed: {}", w.argv.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let secs = text
        .lines()
        .find_map(|l| {
            let l = l.trim();
            // perf: "Total time: 0.845 [sec]"; hackbench: "Time: 1.099".
            l.strip_prefix("Total time:").or_else(|| l.strip_prefix("Time:"))?.split_whitespace().next()?.parse().ok()
        })
        .with_context(|| format!("no time in the output of {}: {text}", w.name))?;
    Ok((secs, 2 * switches))
}

/// A tracer attached and running (the one it is; the others None); detached when dropped, the
/// scraper stopped first.
#[derive(Default)]
pub(super) struct Running {
    _scraper: Option<Scraper>,
    _floor: Option<Proc>,
    _runqlat: Option<Runqlat>,
    _daemon: Option<Daemon>,
}

/// GET /metrics every second, as a Prometheus would, until dropped.
struct Scraper(Arc<AtomicBool>);

impl Scraper {
    fn start(addr: String) -> Scraper {
        let stop = Arc::new(AtomicBool::new(false));
        let done = stop.clone();
        thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let _ = web::get(&addr, "/metrics", &[]);
                thread::sleep(Duration::from_secs(1));
            }
        });
        Scraper(stop)
    }
}

impl Drop for Scraper {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

pub(super) fn start(tracer: &Tracer, binaries: &Binaries) -> anyhow::Result<Running> {
    match tracer {
        Tracer::Floor => {
            let mut c = Command::new(binaries.floor()?);
            let floor = spawn_until_line(&mut c, "the floor", Stream::Stderr, "floor attached", ATTACH_LIMIT)?;
            Ok(Running { _floor: Some(floor), ..Running::default() })
        }
        Tracer::ClockOnly => {
            let mut c = Command::new(binaries.floor()?);
            c.arg("--clock");
            let floor =
                spawn_until_line(&mut c, "the clock-only floor", Stream::Stderr, "floor attached", ATTACH_LIMIT)?;
            Ok(Running { _floor: Some(floor), ..Running::default() })
        }
        Tracer::Runqlat => {
            // A report interval longer than any run: it only traces, printing nothing.
            let mut runqlat = Runqlat::start(&["100000"])?;
            runqlat.wait_ready(Instant::now() + ATTACH_LIMIT)?;
            Ok(Running { _runqlat: Some(runqlat), ..Running::default() })
        }
        Tracer::Loader { object, .. } => {
            let mut c = Command::new(binaries.floor()?);
            match object {
                None => c.arg("--ours"),
                Some(path) => c.arg("--object").arg(path),
            };
            let ours = spawn_until_line(&mut c, "the loader", Stream::Stderr, "attached", ATTACH_LIMIT)?;
            Ok(Running { _floor: Some(ours), ..Running::default() })
        }
        Tracer::Ours { extra, .. } => {
            let mut args = vec!["--interval", "1s"];
            args.extend(extra);
            let ours = Daemon::start_attached(&binaries.daemon, &args)?;
            Ok(Running { _scraper: Some(Scraper::start(ours.addr.clone())), _daemon: Some(ours), ..Running::default() })
        }
    }
}

pub fn measure(binaries: &Binaries, plan: &Plan) -> anyhow::Result<Vec<Row>> {
    let total = plan.workloads.len() * plan.tracers.len() * plan.pairs;
    let mut done = 0;
    let started = Instant::now();
    let mut rows = Vec::new();
    for w in &plan.workloads {
        for t in &plan.tracers {
            let mut row = Row {
                workload: w.name,
                tracer: t.name(),
                added_ns: Vec::new(),
                base_s: Vec::new(),
                events_per_s: Vec::new(),
            };
            for pair in 0..plan.pairs {
                // Alternate which run comes first, so a drifting machine favours neither.
                let off_first = pair % 2 == 0;
                let mut off = None;
                if off_first {
                    off = Some(run_workload(w)?);
                }
                let on = {
                    let _tracer = start(t, binaries)?;
                    run_workload(w)?
                };
                if !off_first {
                    off = Some(run_workload(w)?);
                }
                let (off_s, events) = off.context("no run without the tracer")?;
                let added = (on.0 - off_s) * 1e9 / events.max(1) as f64;
                row.added_ns.push(added);
                row.base_s.push(off_s);
                row.events_per_s.push(events as f64 / off_s);
                done += 1;
                println!(
                    "bench: [{done}/{total}] {} · {}: {:+.0} ns/event ({:.0} s so far)",
                    w.name,
                    t.name(),
                    added,
                    started.elapsed().as_secs_f64()
                );
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

pub fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<22} {:<22} {:>10} {:>17} {:>9} {:>9} {:>12}\n",
        "workload", "tracer", "ns/event", "min … max", "/runqlat", "/floor", "events/s"
    );
    for r in rows {
        let m = median(&r.added_ns);
        let same = |name: &str| rows.iter().find(|o| o.workload == r.workload && o.tracer.starts_with(name));
        let ratio =
            |name: &str| same(name).map(|o| median(&o.added_ns)).filter(|d| *d > 0.0).map_or(f64::NAN, |d| m / d);
        let lo = r.added_ns.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = r.added_ns.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        out.push_str(&format!(
            "{:<22} {:<22} {:>10.0} {:>8.0} … {:>6.0} {:>9.2} {:>9.2} {:>12.0}\n",
            r.workload,
            r.tracer,
            m,
            lo,
            hi,
            ratio("runqlat"),
            ratio("floor"),
            median(&r.events_per_s)
        ));
    }
    out
}

pub fn json(rows: &[Row]) -> String {
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            let list = |v: &[f64]| v.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>().join(",");
            format!(
                "{{\"workload\":\"{}\",\"tracer\":\"{}\",\"median_ns_per_event\":{:.3},\"added_ns_per_event\":[{}],\"base_seconds\":[{}]}}",
                r.workload,
                r.tracer,
                median(&r.added_ns),
                list(&r.added_ns),
                list(&r.base_s)
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}
