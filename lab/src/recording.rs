//! `latency-daemon record --json` as the demo reads it: in, the document (schema version 1, see
//! the README); out, the fields the demo's report uses. Unknown fields are ignored, missing ones
//! fail.
use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize)]
pub struct Recording {
    pub version: u32,
    pub clock: String,
    pub duration_ns: u64,
    pub histograms: Histograms,
    pub tasks: Vec<Task>,
    pub cpus: Vec<Cpu>,
    pub lost: BTreeMap<String, u64>,
    pub discarded: BTreeMap<String, u64>,
    #[serde(default)]
    pub attributed: Vec<Attribution>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Histograms {
    pub wakeup: Histogram,
    pub preempt: Histogram,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Histogram {
    #[serde(default)]
    pub count: u64,
    pub buckets: Vec<Bucket>,
}

/// Non-cumulative; `le_seconds` is 2^(i/8) for native bucket i, None for the overflow bucket.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq)]
pub struct Bucket {
    pub le_seconds: Option<f64>,
    pub count: u64,
}

/// `record`'s name for switches the kernel did not trace (`lost.switches`).
const UNTRACED: &str = "switches";
/// The discard of a delay whose stamp is later than the clock that ends it.
const FUTURE_STAMP: &str = "future_stamp";

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct Task {
    pub tid: u32,
    /// The thread's process (tgid).
    #[serde(default)]
    pub pid: u32,
    pub comm: String,
    pub runtime_ns: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    pub delay_count: u64,
    pub delay_wakeup_count: u64,
    pub delay_preempt_count: u64,
    pub delay_sum_ns: u64,
    pub delay_max_ns: u64,
    pub delay_max_at_ns: u64,
    pub delay_max_reason: Option<String>,
    /// Switches of this task the kernel raised no tracepoint for.
    #[serde(default)]
    pub untraced: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Cpu {
    pub switches: u64,
    pub idle_ns: u64,
}

/// The worst delay per CPU and reason, with who ran on that CPU meanwhile.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Attribution {
    pub reason: String,
    pub delay_ns: u64,
    pub cpu: u32,
    pub victim_tid: u32,
    pub victim_comm: String,
    pub queue_depth: Option<u64>,
    pub culprits: Vec<Culprit>,
    pub culprits_truncated: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Culprit {
    pub tid: u32,
    pub comm: String,
    pub ran_ns: u64,
}

impl Recording {
    pub fn parse(json: &str, clock: &str) -> anyhow::Result<Recording> {
        let recording: Recording = serde_json::from_str(json)
            .with_context(|| format!("record --json printed no readable document: {:.300}", json))?;
        if recording.version != 1 || recording.clock != clock {
            bail!("expected record schema 1 with clock {clock}, got {} / {}", recording.version, recording.clock);
        }
        Ok(recording)
    }

    pub fn task(&self, tid: u32) -> Option<&Task> {
        self.tasks.iter().find(|t| t.tid == tid)
    }

    /// Delays lost to full maps or discarded as unbelievable (all should be 0). Switches the
    /// kernel never showed are not ours to lose (`lost.switches`; see `Task::untraced`), and with
    /// the run queue's clock a few `future_stamp` discards are not a fault (see `skewed`).
    pub fn losses(&self) -> u64 {
        let discarded: u64 = self.discarded.values().sum();
        self.lost.iter().filter(|(k, _)| *k != UNTRACED).map(|(_, n)| n).sum::<u64>() + discarded - self.skewed()
    }

    /// What was lost and discarded, naming the discards `skewed` explains.
    pub fn loss_detail(&self) -> String {
        let skewed = self.skewed();
        let explained =
            if skewed > 0 { format!(" ({skewed} future_stamp across CPUs' run-queue clocks)") } else { String::new() };
        format!("lost {:?}, discarded {:?}{explained}", self.lost, self.discarded)
    }

    /// `future_stamp` discards explained by the run queues' clocks: each CPU's `rq->clock`
    /// advances only when that CPU updates it (and where sched_clock is unstable it is the CPU's
    /// own), so a wait that moved to another CPU's queue can end, by the other clock, before it
    /// began. On one CPU the clock never goes back, so this is rare: up to one per thousand
    /// delays (at least one) is that; more is a fault, and all of them count then. The monotonic
    /// clock is one clock: none is explained.
    pub fn skewed(&self) -> u64 {
        let future = self.discarded.get(FUTURE_STAMP).copied().unwrap_or(0);
        let delays = self.histograms.wakeup.count + self.histograms.preempt.count;
        if self.clock == "run_queue" && future <= 1 + delays / 1000 { future } else { 0 }
    }

    /// Both reasons' buckets, merged by bound.
    pub fn buckets(&self) -> Vec<Bucket> {
        let mut merged: Vec<Bucket> = Vec::new();
        for b in self.histograms.wakeup.buckets.iter().chain(&self.histograms.preempt.buckets) {
            match merged.iter_mut().find(|m| m.le_seconds == b.le_seconds) {
                Some(m) => m.count += b.count,
                None => merged.push(*b),
            }
        }
        merged.sort_by(|a, b| {
            let key = |x: &Bucket| x.le_seconds.unwrap_or(f64::INFINITY);
            key(a).total_cmp(&key(b))
        });
        merged
    }

    /// The share of all CPU time in the span that went to tasks this recording did not keep
    /// (with `--pid`: everything but the workload, the watchers themselves included).
    pub fn others_fraction(&self) -> f64 {
        let capacity = self.duration_ns as f64 * self.cpus.len().max(1) as f64;
        let idle: u64 = self.cpus.iter().map(|c| c.idle_ns).sum();
        let kept: u64 = self.tasks.iter().map(|t| t.runtime_ns).sum();
        ((capacity - idle as f64 - kept as f64) / capacity.max(1.0)).max(0.0)
    }

    pub fn idle_fraction(&self) -> f64 {
        let idle: u64 = self.cpus.iter().map(|c| c.idle_ns).sum();
        idle as f64 / (self.duration_ns.max(1) as f64 * self.cpus.len().max(1) as f64)
    }
}
