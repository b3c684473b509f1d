//! The demo's report: in, every mode's `Summary` and the run-wide checks; out, report.md (what a
//! reader of `perf sched` expects to see, and how far each oracle agrees) and the console table.
//! The tables are here; the prose findings (stall, nice, short answers, tolerances) in `findings`.
use std::fmt::Write as _;

use serde::Serialize;

mod alerted;
mod causes;
mod findings;

pub use self::alerted::stall_alert_line;
pub use self::causes::causes_line;
use self::findings::{answers, nice, stall, tolerances};
use super::analysis::{Check, PERF_MIN_DELAYS, Summary};
use super::causes::Causes;
use super::stall_alert::StallAlert;
use crate::workload::Mode;

#[derive(Debug, Serialize)]
pub struct Report {
    pub kernel: String,
    pub cpus: usize,
    pub hz: u64,
    pub hz_source: String,
    pub secs: f64,
    /// Setup checks and the release build, before the first mode.
    pub prepare_s: f64,
    /// From the first mode to the report.
    pub took_s: f64,
    /// What the run would take at 6 s a mode (the budget: 90 s).
    pub projected_full_s: f64,
    pub summaries: Vec<Summary>,
    /// The stall made exact and alerted on while it lasts (with the stall mode).
    pub stall_alert: Option<StallAlert>,
    /// Why it waited: its own CPU limit or a neighbour (`causes`).
    pub causes: Option<Causes>,
    /// Across modes (ordering), time, cleanup.
    pub checks: Vec<Check>,
}

impl Report {
    pub fn all_checks(&self) -> impl Iterator<Item = &Check> {
        self.summaries.iter().flat_map(|s| &s.checks).chain(&self.checks)
    }

    pub fn failures(&self) -> Vec<&Check> {
        self.all_checks().filter(|c| !c.ok).collect()
    }

    fn summary(&self, mode: Mode) -> Option<&Summary> {
        self.summaries.iter().find(|s| s.mode == mode)
    }
}

pub fn ns(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{:.3} s", v / 1e9),
        v if v >= 1e6 => format!("{:.3} ms", v / 1e6),
        v if v >= 1e3 => format!("{:.1} µs", v / 1e3),
        v => format!("{v:.0} ns"),
    }
}

/// With a sign: `+12.3 µs`, `−4.567 ms`, `0 ns`.
pub fn signed_ns(v: i64) -> String {
    match v {
        0 => "0 ns".to_owned(),
        v if v > 0 => format!("+{}", ns(v as f64)),
        v => format!("−{}", ns(v.unsigned_abs() as f64)),
    }
}

fn behaviour(mode: Mode) -> &'static str {
    match mode {
        Mode::Cpu => "pure spin",
        Mode::Io => "loop `usleep(1000)`",
        Mode::Compete => "pure spin, 4× oversubscribed",
        Mode::Stall => "lat3 clock loop + 2×CPUs spinners",
        Mode::Nice => "spinners at two nice levels, 2× oversubscribed",
    }
}

/// The experiment's table, from our measurements (also printed on the console).
pub fn experiment_table(report: &Report) -> String {
    let mut out = String::from(
        "| mode | threads / CPUs | behaviour | switches (vol / inv) | avg delay | max delay (thread) | \
         runtime per thread | idle % | others' CPU % | all-system switches |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for s in &report.summaries {
        let _ = writeln!(
            out,
            "| {} | {} / {} | {} | {} ({} / {}) | {} | {} ({}) | {} | {:.1} | {:.1} | {} |",
            s.mode.name(),
            s.threads,
            s.cpus,
            behaviour(s.mode),
            s.voluntary + s.involuntary,
            s.voluntary,
            s.involuntary,
            ns(s.avg_ns),
            ns(s.max_ns as f64),
            s.max_thread,
            ns(s.runtime_per_thread_ns),
            s.idle_pct,
            s.others_pct,
            s.system_switches
        );
    }
    out
}

/// One line per mode: how far each oracle is from us.
pub fn agreement_table(report: &Report) -> String {
    let mut out = String::from(
        "| mode | run_delay: ours (rq clock) / kernel, per thread | worst \\|diff\\| / tolerance | \
         monotonic sum / run_delay | perf sched latency: threads compared, avg ratio, max ratio | \
         runqlat: delays ours / runqlat, in a slot our bounds rule out |\n\
         |---|---|---|---|---|---|\n",
    );
    for s in &report.summaries {
        let ratios: Vec<f64> = s.rows.iter().map(|r| r.rq_sum_ns as f64 / r.run_delay_ns.max(1) as f64).collect();
        let worst = s
            .rows
            .iter()
            .map(|r| r.run_delay_diff_ns.unsigned_abs() as f64 / r.run_delay_tolerance_ns.max(1) as f64)
            .fold(0.0, f64::max);
        let mono: f64 = s.rows.iter().map(|r| r.sum_ns).sum::<u64>() as f64
            / s.rows.iter().map(|r| r.run_delay_ns).sum::<u64>().max(1) as f64;
        let compared: Vec<_> = s.rows.iter().filter_map(|r| r.perf.as_ref()).filter(|p| p.skipped.is_none()).collect();
        let range = |v: Vec<f64>| match (v.iter().copied().reduce(f64::min), v.iter().copied().reduce(f64::max)) {
            (Some(lo), Some(hi)) => format!("{lo:.4} … {hi:.4}"),
            _ => "—".to_owned(),
        };
        let perf = if compared.is_empty() {
            format!("none with ≥ {PERF_MIN_DELAYS} delays in perf's view")
        } else {
            format!(
                "{} of {}; avg {}; max {}",
                compared.len(),
                s.rows.len(),
                range(compared.iter().map(|p| p.avg_ratio).collect()),
                range(compared.iter().map(|p| p.max_ratio).collect())
            )
        };
        let (ours, theirs): (u64, u64) = s.histogram.iter().fold((0, 0), |(a, b), r| (a + r.ours, b + r.runqlat));
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} % | {:.4} | {} | {} / {}, {} |",
            s.mode.name(),
            range(ratios),
            100.0 * worst,
            mono,
            perf,
            ours,
            theirs,
            s.histogram_unexplained
        );
    }
    out
}

fn per_thread(out: &mut String, report: &Report) {
    out.push_str(
        "| mode | thread | tid | delays (wakeup / preempt) | avg | max | runtime (ours) | CPU time (own) | \
         rq-clock sum | run_delay | diff (tolerance) | perf delays | perf avg (ours/perf) | perf max (ours/perf) |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for s in &report.summaries {
        for r in &s.rows {
            let perf = match &r.perf {
                Some(p) => {
                    let note = if p.skipped.is_some() { " †" } else { "" };
                    format!(
                        "{}{note} | {:.3} ms ({:.4}) | {:.3} ms ({:.4})",
                        p.delays, p.avg_ms, p.avg_ratio, p.max_ms, p.max_ratio
                    )
                }
                None => "— | — | —".to_owned(),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} ({} / {}) | {} | {} | {} | {} | {} | {} | {} ({}) | {perf} |",
                s.mode.name(),
                r.name,
                r.tid,
                r.delays,
                r.wakeup,
                r.preempt,
                ns(r.avg_ns),
                ns(r.max_ns as f64),
                ns(r.runtime_ns as f64),
                ns(r.cpu_ns as f64),
                ns(r.rq_sum_ns as f64),
                ns(r.run_delay_ns as f64),
                signed_ns(r.run_delay_diff_ns),
                if r.untraced == 0 {
                    format!("±{}", ns(r.run_delay_tolerance_ns as f64))
                } else {
                    format!("±{}; {} untraced ‡", ns(r.run_delay_tolerance_ns as f64), r.untraced)
                }
            );
        }
    }
    let _ = writeln!(
        out,
        "\n† not held to the tolerance: fewer than {PERF_MIN_DELAYS} delays in our view or in perf's (see below why \
         perf \
         sees so few of the sleepers' delays).\n\n\
         ‡ untraced switches: the kernel switched this thread in or out without raising `sched_switch`, so \
         the delay or run around that switch is missing from every tracer (perf sched, runqlat, ours), while the \
         kernel's own run_delay has it. Our program finds each such switch as a break in the CPU's chain of \
         switches (a `prev` that is not the previous `next`) and counts it (`lost.switches` in `record --json`, \
         `runqlat_untraced_switches_total` in /metrics); the run_delay tolerance allows each the thread's largest \
         delay seen."
    );
}

fn histograms(out: &mut String, report: &Report) {
    out.push_str(
        "runqlat prints log2 buckets of whole µs (slot k: ⌊delay in µs⌋ in [2^k, 2^(k+1))); ours are 2^(1/8) s apart \
         (9 % wide), so a few of ours straddle a runqlat bound. *ours* puts each of our buckets at the slot of its \
         geometric midpoint; *(min–max)* is what our buckets allow in that slot (only the straddling ones may go \
         either way); runqlat agrees when its count lies in that range. Both cover the whole workload process \
         (runqlat `-p PID` filters on the tgid; `record --pid PID` keeps a task whose tid or tgid is listed), its \
         main thread included.\n\n",
    );
    let modes: Vec<&Summary> = report.summaries.iter().filter(|s| !s.histogram.is_empty()).collect();
    let mut low: Vec<(u64, u64)> =
        modes.iter().flat_map(|s| s.histogram.iter().map(|r| (r.low_us, r.high_us))).collect();
    low.sort_unstable();
    low.dedup();
    let _ = write!(out, "| µs |");
    for s in &modes {
        let _ = write!(out, " {} ours | {} runqlat |", s.mode.name(), s.mode.name());
    }
    let _ = write!(out, "\n|---:|{}\n", "---:|".repeat(2 * modes.len()));
    for (lo, hi) in low {
        let _ = write!(out, "| {lo} → {hi} |");
        for s in &modes {
            match s.histogram.iter().find(|r| r.low_us == lo) {
                Some(r) if r.ours_min == r.ours_max => {
                    let _ = write!(out, " {} | {} |", r.ours, r.runqlat);
                }
                Some(r) => {
                    let _ = write!(out, " {} ({}–{}) | {} |", r.ours, r.ours_min, r.ours_max, r.runqlat);
                }
                None => out.push_str(" | |"),
            }
        }
        out.push('\n');
    }
}

pub fn markdown(report: &Report) -> String {
    let failures = report.failures();
    let total = report.all_checks().count();
    let mut out = format!(
        "# Run-queue latency: the cpu / io / compete experiment, cross-checked\n\n\
         Kernel {} ({} CPUs, HZ={}), {} s per mode, {:.1} s in all (at 6 s per mode: {:.0} s; setup and build \
         before: {:.1} s). Every mode was watched at \
         once by `latency-daemon record --json` (monotonic clock, the numbers below) and `record --clock run-queue`, \
         `perf sched record -a` → `perf sched latency -p`, libbpf-tools `runqlat -p PID`, and each thread's own \
         `run_delay` with `kernel.task_delayacct=1` for the run (restored afterwards). Regenerate: `cargo xtask \
         demo`.\n\n\
         **{} of {total} agreement figures inside their tolerance.**{}\n\n",
        report.kernel,
        report.cpus,
        report.hz,
        report.secs,
        report.took_s,
        report.projected_full_s,
        report.prepare_s,
        total - failures.len(),
        if failures.is_empty() {
            String::new()
        } else {
            format!(
                " Outside: {}.",
                failures.iter().map(|c| format!("{} {}", c.item, c.subject)).collect::<Vec<_>>().join("; ")
            )
        }
    );
    out.push_str("## The experiment, from our measurements\n\n");
    out.push_str(&experiment_table(report));
    out.push_str(
        "\nSwitches and delays are the workload threads'; idle %, others' CPU % (CPU time of every task outside the \
         workload process — the watchers, and anything else running on the machine) and all-system switches cover \
         the whole machine over the recorder's span (attached right before the threads start, stopped right after \
         the last one is done). A large others' share means the \
         run was disturbed.",
    );
    let steal: Vec<String> =
        report.summaries.iter().map(|s| format!("{} {:.0} ms", s.mode.name(), s.steal_ns as f64 / 1e6)).collect();
    let _ = write!(
        out,
        " Hypervisor steal on our vCPUs during each mode (/proc/stat, 10 ms resolution): {}.\n\n\
         ![delay distributions](delays.svg)\n\n",
        steal.join(", ")
    );
    out.push_str("## Agreement with each oracle\n\n");
    out.push_str(&agreement_table(report));
    out.push_str("\n### Per thread\n\n");
    per_thread(&mut out, report);
    out.push_str("\n### Our histogram beside runqlat's\n\n");
    histograms(&mut out, report);
    out.push_str("\n## stall: lat3's loop gap is a preemption delay\n\n");
    stall(&mut out, report);
    if let Some(a) = &report.stall_alert {
        out.push_str("\n## The stall, alerted on while it lasts\n\n");
        alerted::section(&mut out, a);
    }
    if let Some(c) = &report.causes {
        out.push_str("\n## Why it waited: its own CPU limit or a neighbour\n\n");
        causes::section(&mut out, c);
    }
    out.push_str("\n## nice: CPU share follows the kernel's weights, delay follows the share\n\n");
    nice(&mut out, report);
    out.push_str("\n## Short answers\n\n");
    answers(&mut out, report);
    out.push_str("\n## Tolerances, and why\n\n");
    tolerances(&mut out, report);
    out.push_str("\n## Every check\n\n| | item | subject | figures |\n|---|---|---|---|\n");
    for c in report.all_checks() {
        let _ =
            writeln!(out, "| {} | {} | {} | {} |", if c.ok { "ok" } else { "**FAIL**" }, c.item, c.subject, c.detail);
    }
    out
}
