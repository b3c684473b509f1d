//! Time spent inside each tracer's BPF programs per scheduler event, from the kernel's own
//! accounting (`kernel.bpf_stats_enabled`: run_time_ns and run_cnt per program), while pinned
//! `perf bench sched pipe` runs. Far less noisy than wall-clock pairs; the floor (an empty
//! program) carries the accounting's own cost and the dispatch, so "− floor" is the tracer's
//! logic alone.
use std::{collections::HashSet, process::Command};

use anyhow::{Context as _, bail};

use super::overhead::{CLOCK_ONLY, Tracer, start};
use super::{Binaries, median};
use crate::guard::Sysctl;
use crate::oracle::bpftool::{self, ProgStats};

/// The in-program rows that compare builds: ours loaded alone, and without diagnostics.
pub const LOADER: &str = "ours, loader only";
pub const NO_DIAG: &str = "ours, no diagnostics";

#[derive(Debug)]
pub struct InProgram {
    pub workload: &'static str,
    pub tracer: &'static str,
    /// Median over runs of Σ run_time_ns / Σ run_cnt of the tracer's programs.
    pub ns_per_event: f64,
    pub runs: Vec<f64>,
}

/// For each workload, `rounds` rounds over all tracers (round-robin, so drift spreads evenly).
pub fn measure(
    binaries: &Binaries,
    workloads: &[(&'static str, Vec<&'static str>)],
    tracers: &[Tracer],
    rounds: usize,
) -> anyhow::Result<Vec<InProgram>> {
    let _stats = Sysctl::set("kernel.bpf_stats_enabled", "1")?;
    let mut all = Vec::new();
    for (workload, argv) in workloads {
        let mut rows = measure_one(binaries, workload, argv, tracers, rounds)?;
        all.append(&mut rows);
    }
    Ok(all)
}

fn measure_one(
    binaries: &Binaries,
    workload: &'static str,
    argv: &[&str],
    tracers: &[Tracer],
    rounds: usize,
) -> anyhow::Result<Vec<InProgram>> {
    let mut results: Vec<InProgram> = tracers
        .iter()
        .map(|t| InProgram { workload, tracer: t.name(), ns_per_event: f64::NAN, runs: Vec::new() })
        .collect();
    for round in 0..rounds.max(1) {
        for (t, result) in tracers.iter().zip(results.iter_mut()) {
            let before: HashSet<u64> = bpftool::sched_programs()?.into_iter().map(|p| p.id).collect();
            let running = start(t, binaries)?;
            let mine = |ps: Vec<ProgStats>| -> Vec<(u64, u64, u64)> {
                ps.into_iter().filter(|p| !before.contains(&p.id)).map(|p| (p.id, p.run_time_ns, p.run_cnt)).collect()
            };
            let a = mine(bpftool::sched_programs()?);
            let status = Command::new(argv[0]).args(&argv[1..]).output().context("run the workload")?.status;
            if !status.success() {
                bail!("the workload failed");
            }
            let b = mine(bpftool::sched_programs()?);
            drop(running);
            let (mut time, mut count) = (0u64, 0u64);
            for (id, t1, c1) in &b {
                let (t0, c0) = a.iter().find(|p| p.0 == *id).map_or((0, 0), |p| (p.1, p.2));
                time += t1.saturating_sub(t0);
                count += c1.saturating_sub(c0);
            }
            if count == 0 {
                bail!("{}: no program of the tracer ran", t.name());
            }
            let ns = time as f64 / count as f64;
            result.runs.push(ns);
            println!(
                "bench: in-program {workload}, round {}/{} · {}: {ns:.0} ns/event",
                round + 1,
                rounds.max(1),
                t.name()
            );
        }
    }
    for r in &mut results {
        r.ns_per_event = median(&r.runs);
    }
    Ok(results)
}

pub fn table(rows: &[InProgram]) -> String {
    let mut out =
        format!("{:<22} {:<24} {:>10} {:>10} {:>10}\n", "workload", "tracer", "ns/event", "− floor", "/runqlat");
    for r in rows {
        let same = |prefix: &str| rows.iter().find(|o| o.workload == r.workload && o.tracer.starts_with(prefix));
        let floor = same("floor").map_or(0.0, |f| f.ns_per_event);
        let runqlat = same("runqlat").map(|q| q.ns_per_event - floor);
        let logic = r.ns_per_event - floor;
        let ratio = runqlat.filter(|d| *d > 0.0).map_or(f64::NAN, |d| logic / d);
        out.push_str(&format!(
            "{:<22} {:<24} {:>10.0} {:>10.0} {:>10.2}\n",
            r.workload, r.tracer, r.ns_per_event, logic, ratio
        ));
    }
    out
}

/// Each switchable feature's measured effect: its configuration minus the default, per workload
/// (ns per scheduler event inside the programs). The choices that cannot be switched off (array
/// stamps, per-CPU maps, one clock read, direct loads) are in the default row as a whole,
/// against runqlat's (hash map of start times, a probe read per field).
pub fn effects(rows: &[InProgram]) -> String {
    let steps: [(&str, &str, f64); 4] = [
        ("ours, no per-cgroup", "per-cgroup histograms (on by default)", -1.0),
        ("ours, run-queue clock", "rq->clock instead of bpf_ktime_get_ns", 1.0),
        ("ours + alerting", "alerting attribution (threshold set)", 1.0),
        ("ours + per-task", "per-task statistics (record)", 1.0),
    ];
    let mut out = format!("{:<22} {:<40} {:>12}\n", "workload", "change against the default", "ns/event");
    let workloads: Vec<&str> = rows.iter().fold(Vec::new(), |mut v, r| {
        if !v.contains(&r.workload) {
            v.push(r.workload);
        }
        v
    });
    for w in workloads {
        let of = |tracer: &str| rows.iter().find(|r| r.workload == w && r.tracer == tracer).map(|r| r.ns_per_event);
        let Some(default) = of("ours (default)") else { continue };
        if let (Some(floor), Some(runqlat)) = (of("floor (empty program)"), of("runqlat")) {
            out.push_str(&format!(
                "{w:<22} {:<40} {:>+12.0}\n",
                "all default choices vs runqlat's logic",
                (default - floor) - (runqlat - floor)
            ));
            if let Some(clock) = of(CLOCK_ONLY) {
                out.push_str(&format!(
                    "{w:<22} {:<40} {:>+12.0}\n",
                    "one bpf_ktime_get_ns (vs the floor)",
                    clock - floor
                ));
                out.push_str(&format!(
                    "{w:<22} {:<40} {:>+12.0}\n",
                    "the default beyond one clock read",
                    default - clock
                ));
            }
        }
        for (tracer, what, sign) in steps {
            if let Some(v) = of(tracer) {
                out.push_str(&format!("{w:<22} {what:<40} {:>+12.0}\n", sign * (v - default)));
            }
        }
        // Two builds loaded the same way, interleaved: what compiling the diagnostics in costs.
        if let (Some(with), Some(without)) = (of(LOADER), of(NO_DIAG)) {
            out.push_str(&format!("{w:<22} {:<40} {:>+12.0}\n", "aya-log diagnostics (compiled in)", with - without));
        }
    }
    out
}

pub fn json(rows: &[InProgram]) -> String {
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            let runs = r.runs.iter().map(|x| format!("{x:.1}")).collect::<Vec<_>>().join(",");
            format!(
                "{{\"workload\":\"{}\",\"tracer\":\"{}\",\"ns_per_event\":{:.1},\"runs\":[{runs}]}}",
                r.workload, r.tracer, r.ns_per_event
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}
