//! What `summarize` finds for one mode, as plain serialisable data: the experiment's row, the
//! per-thread agreement, runqlat's histogram beside ours, the stall and nice findings, the checks.
use serde::Serialize;

use crate::demo::histogram::SlotRow;
use crate::demo::session::Gap;
use crate::recording::{Attribution, Bucket};
use crate::workload::Mode;

/// One thing checked against a tolerance.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Which acceptance item: "run_delay", "perf avg", "perf max", "stall", "ordering", …
    pub item: &'static str,
    pub subject: String,
    /// The figures and the tolerance, in words.
    pub detail: String,
    pub ok: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct PerfRow {
    pub delays: u64,
    pub avg_ms: f64,
    pub max_ms: f64,
    /// Ours / perf's.
    pub avg_ratio: f64,
    pub max_ratio: f64,
    /// Why it was not held to the tolerance, if it was not.
    pub skipped: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThreadRow {
    pub name: String,
    pub tid: u32,
    pub group: String,
    pub nice: i32,
    pub delays: u64,
    pub wakeup: u64,
    pub preempt: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    pub sum_ns: u64,
    pub avg_ns: f64,
    pub max_ns: u64,
    pub max_reason: Option<String>,
    pub runtime_ns: u64,
    /// The thread's own CLOCK_THREAD_CPUTIME_ID at its end.
    pub cpu_ns: u64,
    /// Our sum on the run queue's clock, and the kernel's run_delay.
    pub rq_sum_ns: u64,
    pub rq_delays: u64,
    pub run_delay_ns: u64,
    /// (ours on the rq clock − run_delay) and its tolerance: 2 % + 2 µs per delay + the allowance.
    pub run_delay_diff_ns: i64,
    pub run_delay_tolerance_ns: u64,
    /// The part of the tolerance allowed for the kernel's delayed-dequeue artifact (see `run_delay_gap`).
    pub run_delay_allowance_ns: u64,
    /// Switches of this thread the kernel raised no tracepoint for (then run_delay is not held).
    pub untraced: u64,
    /// `se.nr_migrations` of the thread, and its longest sleep (`io`).
    pub migrations: Option<u64>,
    pub longest_sleep_ns: u64,
    pub perf: Option<PerfRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Stall {
    pub largest_gap_ns: u64,
    /// When the largest gap and our largest delay of the loop thread ended (CLOCK_MONOTONIC):
    /// a few µs apart when they are the same event (the gap = the delay plus the switch out
    /// and back to user space).
    pub largest_gap_end_ns: u64,
    pub seconds: Vec<Gap>,
    pub our_max_ns: u64,
    pub our_max_at_ns: u64,
    pub our_max_reason: Option<String>,
    pub tolerance_ns: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct NiceGroup {
    pub group: String,
    pub nice: i32,
    pub threads: usize,
    /// From the table (kernel/sched/core.c) and as the kernel showed it for these threads.
    pub table_weight: u64,
    pub kernel_weight: Option<u64>,
    pub cpu_ns: u64,
    pub runtime_ns: u64,
    pub delays: u64,
    pub avg_ns: f64,
    pub max_ns: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Nice {
    pub groups: Vec<NiceGroup>,
    /// CPU time of the first group / the second; the weights' ratio.
    pub cpu_ratio: f64,
    pub weight_ratio: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub mode: Mode,
    pub threads: usize,
    pub cpus: usize,
    pub secs: f64,
    /// Over the workload threads, from our monotonic recorder.
    pub delays: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    pub avg_ns: f64,
    pub max_ns: u64,
    pub max_thread: String,
    pub runtime_per_thread_ns: f64,
    /// Over the recorder's span (machine-wide, as `record` reports CPUs), and that span.
    pub idle_pct: f64,
    /// CPU time of everything else (other users of the machine, the watchers), same span.
    pub others_pct: f64,
    pub system_switches: u64,
    pub recorded_ns: u64,
    pub workload_ns: u64,
    pub steal_ns: u64,
    pub rows: Vec<ThreadRow>,
    /// The whole workload process (its main thread too), ours re-binned beside runqlat's.
    pub histogram: Vec<SlotRow>,
    /// Delays runqlat has in a slot none of ours could be in (see `histogram::unexplained`).
    pub histogram_unexplained: f64,
    /// Ours for the whole process, both reasons, in our own buckets (the figure's input).
    pub buckets: Vec<Bucket>,
    pub worst: Option<Attribution>,
    pub stall: Option<Stall>,
    pub nice: Option<Nice>,
    pub perf_data_bytes: u64,
    pub perf_idle_switches: Vec<(u32, u64, u64)>,
    pub took_s: f64,
    pub checks: Vec<Check>,
}
