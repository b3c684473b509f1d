//! Builds side by side (`cargo xtask bench --together PATH…`): this build of latency-daemon and
//! others (another checkout's `target/release/latency-daemon`) attached *at once*, so every
//! scheduler event runs each build's programs under the same machine, neighbours and drift; the
//! kernel's BPF stats give each build's own time per event. The first program of an event meets
//! the cold cache lines (the task's fields, the tracepoint's arguments) that the later ones find
//! warm, about 20 ns here: so a copy of this build is attached first and not measured, and the
//! order of the measured builds behind it rotates per round. Out: per workload, each build's median ns per event and the median of
//! its per-round differences from this build (with their min … max). What "before → after" claims
//! rest on when the change is smaller than the spread between separate runs (±10–20 ns here).
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use super::median;
use crate::daemon::Daemon;
use crate::oracle::bpftool::{self, ProgStats};

/// Rounds per build and workload: each build is first, second, … equally often.
const ROUNDS_PER_BUILD: usize = 4;

/// One build's programs, by the ids that appeared when it attached.
struct Attached {
    _daemon: Daemon,
    ids: HashSet<u64>,
}

/// Σ run_time_ns and Σ run_cnt over `ids`.
fn totals(stats: &[ProgStats], ids: &HashSet<u64>) -> (u64, u64) {
    stats.iter().filter(|p| ids.contains(&p.id)).fold((0, 0), |(t, c), p| (t + p.run_time_ns, c + p.run_cnt))
}

/// Runs the comparison and returns the table. `builds[0]` is this build (the reference).
pub fn measure(builds: &[PathBuf], workloads: &[(&'static str, Vec<&'static str>)]) -> anyhow::Result<String> {
    for b in builds {
        if !b.is_file() {
            bail!("{}: no such latency-daemon build", b.display());
        }
    }
    let names: Vec<String> = builds.iter().map(|b| short_name(b)).collect();
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
            let warm =
                Daemon::start_attached(&builds[0], &["--interval", "1s"]).context("starting the warm-up copy")?;
            let mut attached: Vec<(usize, Attached)> = Vec::new();
            for &i in &order {
                let before: HashSet<u64> = bpftool::sched_programs()?.into_iter().map(|p| p.id).collect();
                let daemon = Daemon::start_attached(&builds[i], &["--interval", "1s"])
                    .with_context(|| format!("starting {}", builds[i].display()))?;
                let ids =
                    bpftool::sched_programs()?.into_iter().map(|p| p.id).filter(|id| !before.contains(id)).collect();
                attached.push((i, Attached { _daemon: daemon, ids }));
            }
            let a = bpftool::sched_programs()?;
            let status = Command::new(argv[0]).args(&argv[1..]).output().context("run the workload")?.status;
            if !status.success() {
                bail!("the workload failed");
            }
            let b = bpftool::sched_programs()?;
            let mut line = format!("together: {workload}, round {}/{rounds}:", round + 1);
            for (i, build) in &attached {
                let ((t0, c0), (t1, c1)) = (totals(&a, &build.ids), totals(&b, &build.ids));
                if c1 <= c0 {
                    bail!("{}: its programs did not run", builds[*i].display());
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
