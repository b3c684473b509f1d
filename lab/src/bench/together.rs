//! Builds side by side (`cargo xtask bench --together PATH…`): this build of latency-daemon and
//! others (another checkout's `target/release/latency-daemon`) attached *at once*, so every
//! scheduler event runs each build's programs under the same machine, neighbours and drift; the
//! kernel's BPF stats give each build's own time per event. The first program of an event meets
//! the cold cache lines (the task's fields, the tracepoint's arguments) that the later ones find
//! warm, about 20 ns here: so a copy of this build is attached first and not measured, and the
//! order of the measured builds behind it rotates per round. Out: per workload, each build's median ns per event and the median of
//! its per-round differences from this build (with their min … max). What "before → after" claims
//! rest on when the change is smaller than the spread between separate runs (±10–20 ns here).
//! A build may be this one with flags (`--together-flags`, e.g. the capture recorder on): its
//! programs of its own (`capture_*`) count too, so its difference is what the option adds to each
//! scheduler event. The time per event is every per-event program's time (`sched_*`, `capture_*`)
//! over the runs of the core's (`sched_*`): one scheduler event, however many programs it runs.
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use super::median;
use crate::daemon::Daemon;
use crate::oracle::bpftool::{self, ProgStats};

/// Rounds per build and workload: each build is first, second, … equally often.
const ROUNDS_PER_BUILD: usize = 4;

/// A build to attach: a binary and the flags it runs with (besides `--interval 1s`).
#[derive(Debug, Clone)]
pub struct Build {
    pub path: PathBuf,
    pub flags: Vec<String>,
}

impl Build {
    pub fn plain(path: PathBuf) -> Build {
        Build { path, flags: Vec::new() }
    }

    fn start(&self) -> anyhow::Result<Daemon> {
        let args: Vec<&str> = ["--interval", "1s"].into_iter().chain(self.flags.iter().map(String::as_str)).collect();
        Daemon::start_attached(&self.path, &args).with_context(|| format!("starting {}", self.path.display()))
    }
}

/// One build's programs, by the ids that appeared when it attached.
struct Attached {
    _daemon: Daemon,
    ids: HashSet<u64>,
}

/// A per-event program's name: the core's (`sched_*`) or the capture recorder's (`capture_*`).
fn per_event(name: &str) -> bool {
    name.starts_with("sched_") || name.starts_with("capture_")
}

/// Σ run_time_ns over `ids`, and Σ run_cnt over those of them that are the core's (`sched_*`).
fn totals(stats: &[ProgStats], ids: &HashSet<u64>) -> (u64, u64) {
    stats
        .iter()
        .filter(|p| ids.contains(&p.id))
        .fold((0, 0), |(t, c), p| (t + p.run_time_ns, c + if p.name.starts_with("sched_") { p.run_cnt } else { 0 }))
}

fn programs() -> anyhow::Result<Vec<ProgStats>> {
    Ok(bpftool::programs()?.into_iter().filter(|p| per_event(&p.name)).collect())
}

/// Runs the comparison and returns the table. `builds[0]` is this build (the reference).
pub fn measure(builds: &[Build], workloads: &[(&'static str, Vec<&'static str>)]) -> anyhow::Result<String> {
    for b in builds {
        if !b.path.is_file() {
            bail!("{}: no such latency-daemon build", b.path.display());
        }
    }
    let names: Vec<String> = builds
        .iter()
        .map(|b| {
            if b.flags.is_empty() {
                short_name(&b.path)
            } else {
                format!("{} {}", short_name(&b.path), b.flags.join(" "))
            }
        })
        .collect();
    let rounds = ROUNDS_PER_BUILD * builds.len();
    let mut out = format!(
        "{:<22} {:<40} {:>9} {:>22}\n",
        "workload", "build (attached together)", "ns/event", "minus this build"
    );
    for (workload, argv) in workloads {
        let mut per_build: Vec<Vec<f64>> = vec![Vec::new(); builds.len()];
        for round in 0..rounds {
            let order: Vec<usize> = (0..builds.len()).map(|i| (i + round) % builds.len()).collect();
            // Goes first, warms what the first program of an event would find cold; not measured.
            let warm = Build::plain(builds[0].path.clone()).start().context("starting the warm-up copy")?;
            let mut attached: Vec<(usize, Attached)> = Vec::new();
            for &i in &order {
                let before: HashSet<u64> = programs()?.into_iter().map(|p| p.id).collect();
                let daemon = builds[i].start()?;
                let ids = programs()?.into_iter().map(|p| p.id).filter(|id| !before.contains(id)).collect();
                attached.push((i, Attached { _daemon: daemon, ids }));
            }
            let a = programs()?;
            let status = Command::new(argv[0]).args(&argv[1..]).output().context("run the workload")?.status;
            if !status.success() {
                bail!("the workload failed");
            }
            let b = programs()?;
            let mut line = format!("together: {workload}, round {}/{rounds}:", round + 1);
            for (i, build) in &attached {
                let ((t0, c0), (t1, c1)) = (totals(&a, &build.ids), totals(&b, &build.ids));
                if c1 <= c0 {
                    bail!("{}: its programs did not run", builds[*i].path.display());
                }
                let ns = (t1 - t0) as f64 / (c1 - c0) as f64;
                per_build[*i].push(ns);
                line.push_str(&format!(" {} {ns:.1}", names[*i]));
            }
            drop(attached);
            drop(warm);
            println!("{line}");
        }
        for (i, runs) in per_build.iter().enumerate() {
            let diffs: Vec<f64> = runs.iter().zip(&per_build[0]).map(|(x, this)| x - this).collect();
            let (lo, hi) = diffs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), d| (l.min(*d), h.max(*d)));
            let versus =
                if i == 0 { "—".to_owned() } else { format!("{:+.1} ({lo:+.0} … {hi:+.0})", median(&diffs)) };
            out.push_str(&format!("{:<22} {:<40} {:>9.1} {:>22}\n", workload, names[i], median(runs), versus));
        }
    }
    Ok(out)
}

/// A build's name for the table: the checkout it came from (the directory above `target/`), or
/// the path as given.
fn short_name(build: &Path) -> String {
    let checkout = build.ancestors().find(|a| a.file_name().is_some_and(|n| n == "target")).and_then(Path::parent);
    match checkout.and_then(|c| c.file_name()) {
        Some(name) => name.to_string_lossy().into_owned(),
        None => build.display().to_string(),
    }
}
