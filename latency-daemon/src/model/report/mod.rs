//! (earlier `Snapshot`, later `Snapshot`, window maxima) → `Report`: what happened between the
//! two, as plain serialisable data. `record --json` prints it; tables are rendered from it.
use std::collections::BTreeMap;

use latency_common::{
    CpuStats, Discard, Histogram, Lost, Reason, TaskStats, buckets::BUCKETS, knobs::Clock, maps::CgroupHist,
};
use serde::Serialize;

use super::{
    attribution::Attribution,
    causes::Causes,
    clock_name, comm_string,
    container::ContainerLabels,
    distribution::{count, quantiles_ns, upper_seconds},
    ser_opt_reason, ser_reason,
    snapshot::{CpuMax, Snapshot},
    wall::WallClock,
};

/// Version of the JSON document; bump on any incompatible change to field names or meaning.
pub const SCHEMA_VERSION: u32 = 1;

/// Facts about the measurement that are not in the maps.
#[derive(Clone, Debug)]
pub struct Meta {
    pub kernel: String,
    pub wall: WallClock,
    pub filter: Vec<u32>,
    pub clock: Clock,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub version: u32,
    pub kernel: String,
    /// "monotonic" or "run_queue": which clock the kernel program read.
    pub clock: &'static str,
    /// CLOCK_MONOTONIC ns (the clock of every `*_ns` stamp below).
    pub start_ns: u64,
    pub end_ns: u64,
    pub duration_ns: u64,
    /// Wall-clock time of `start_ns`, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// tids/tgids recorded (empty: all tasks).
    pub filter: Vec<u32>,
    pub histograms: Histograms,
    /// Why they waited: the histograms' delay time (both reasons, all CPUs) by cause — `throttled`
    /// (the task's cgroup or a parent hit its CPU limit), `irq_steal` (its CPU was in IRQ or taken
    /// by the hypervisor), then who held the CPU when the wait ended: `same` (a task of its own
    /// cgroup), `other` (another cgroup's task), `kernel` (a kernel thread), `idle` (nothing).
    /// Adds up to `histograms.wakeup.sum_ns + histograms.preempt.sum_ns` exactly.
    pub waited_by_cause_ns: Causes,
    /// Delays not split by cause (the task migrated while it waited): each is counted whole under
    /// who held the CPU at its end.
    pub unsplit: u64,
    /// Sorted by `delay_max_ns`, largest first.
    pub tasks: Vec<TaskReport>,
    pub cpus: Vec<CpuReport>,
    /// The largest delay per CPU and reason in this window, with who ran before the victim.
    pub window_max: Vec<WindowMaxReport>,
    pub lost: BTreeMap<&'static str, u64>,
    pub discarded: BTreeMap<&'static str, u64>,
    /// Delays the kernel attributed (the worst per CPU and reason at or above the attribution
    /// threshold), with the queue depth and who ran meanwhile; largest first.
    pub attributed: Vec<Attribution>,
    /// The cgroups whose tasks waited in this window (`run` only), most delay time first, with the
    /// namespace, pod and container where the cgroup is a container's.
    pub cgroups: Vec<CgroupReport>,
}

/// One cgroup's delays in a window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CgroupReport {
    /// Its cgroup v2 path ("id:N" for an id the daemon could not name).
    pub cgroup: String,
    #[serde(flatten)]
    pub names: ContainerLabels,
    pub count: u64,
    pub sum_ns: u64,
    /// `sum_ns` by cause (see [`Report::waited_by_cause_ns`]): `throttled` is this cgroup's (or a
    /// parent's) own CPU limit.
    pub waited_by_cause_ns: Causes,
}

/// A window's per-cgroup deltas → its `cgroups`, named by `path` (id → cgroup path) and `names`
/// (path → container names), most delay time first.
pub fn cgroup_reports(
    deltas: &[(u64, CgroupHist)],
    mut path: impl FnMut(u64) -> Option<String>,
    mut names: impl FnMut(&str) -> ContainerLabels,
) -> Vec<CgroupReport> {
    let mut out: Vec<CgroupReport> = deltas
        .iter()
        .map(|(id, h)| {
            let cgroup = path(*id).unwrap_or_else(|| format!("id:{id}"));
            CgroupReport {
                names: names(&cgroup),
                cgroup,
                count: h.buckets.iter().sum(),
                sum_ns: h.sum_ns,
                waited_by_cause_ns: Causes(h.waited_ns),
            }
        })
        .collect();
    out.sort_by(|a, b| b.sum_ns.cmp(&a.sum_ns).then_with(|| a.cgroup.cmp(&b.cgroup)));
    out
}

#[derive(Clone, Debug, Serialize)]
pub struct Histograms {
    pub wakeup: HistogramReport,
    pub preempt: HistogramReport,
}

impl Histograms {
    pub fn get(&self, reason: Reason) -> &HistogramReport {
        match reason {
            Reason::Wakeup => &self.wakeup,
            Reason::Preempt => &self.preempt,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct HistogramReport {
    pub count: u64,
    pub sum_ns: u64,
    /// Exact, from the kernel's window maximum.
    pub max_ns: u64,
    /// Estimates from an HDR histogram of the buckets (≤ 9 % off, never above `max_ns`).
    pub p50_ns: Option<u64>,
    pub p90_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub p999_ns: Option<u64>,
    /// Non-cumulative, empty buckets left out. `le_seconds` is the inclusive upper bound
    /// (`2^(i/8)`, Prometheus native schema 3); `null` means the overflow bucket (+Inf).
    pub buckets: Vec<BucketReport>,
    /// The raw kernel bucket counts, for tables and plots; not serialised.
    #[serde(skip)]
    pub raw: Box<[u64; BUCKETS]>,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct BucketReport {
    pub le_seconds: Option<f64>,
    pub count: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TaskReport {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub prio: i32,
    pub runtime_ns: u64,
    pub switches: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    pub delay_count: u64,
    pub delay_wakeup_count: u64,
    pub delay_preempt_count: u64,
    pub delay_sum_ns: u64,
    /// `delay_sum_ns` by cause (see [`Report::waited_by_cause_ns`]).
    pub waited_by_cause_ns: Causes,
    pub delay_avg_ns: u64,
    pub delay_max_ns: u64,
    /// CLOCK_MONOTONIC ns when the maximum delay ended (0 if none).
    pub delay_max_at_ns: u64,
    #[serde(serialize_with = "ser_opt_reason")]
    pub delay_max_reason: Option<Reason>,
    /// Switches of this task the kernel raised no tracepoint for: its run time and delays
    /// miss what happened around them (see `lost.switches`).
    pub untraced: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct CpuReport {
    pub cpu: u32,
    pub switches: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    pub idle_ns: u64,
    /// Time tasks waited for this CPU, by cause (see [`Report::waited_by_cause_ns`]).
    pub waited_by_cause_ns: Causes,
}

#[derive(Clone, Debug, Serialize)]
pub struct TaskRef {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct WindowMaxReport {
    pub cpu: u32,
    #[serde(serialize_with = "ser_reason")]
    pub reason: Reason,
    pub delay_ns: u64,
    /// CLOCK_MONOTONIC ns when the victim got the CPU.
    pub end_ns: u64,
    pub end_unix_ns: u64,
    pub victim: TaskRef,
    pub victim_prio: i32,
    /// The task that ran on this CPU just before the victim.
    pub prev: TaskRef,
}

impl Report {
    /// What happened between `earlier` (all zero for a fresh probe) and `later`.
    pub fn between(earlier: &Snapshot, later: &Snapshot, maxima: &[(Reason, CpuMax)], meta: &Meta) -> Report {
        let histograms = Histograms {
            wakeup: histogram(&earlier.histograms[0], &later.histograms[0], Reason::Wakeup, maxima),
            preempt: histogram(&earlier.histograms[1], &later.histograms[1], Reason::Preempt, maxima),
        };
        let cpus = cpus(earlier, later);
        let mut lost = BTreeMap::new();
        for what in Lost::ALL {
            let n = counter_delta(earlier, later, |c| c.lost[what as usize]);
            lost.insert(what.map(), n);
        }
        let mut discarded = BTreeMap::new();
        for why in Discard::ALL {
            let n = counter_delta(earlier, later, |c| c.discarded[why as usize]);
            discarded.insert(why.name(), n);
        }
        let mut waited_by_cause_ns = Causes::default();
        for c in &cpus {
            waited_by_cause_ns.add(&c.waited_by_cause_ns.0);
        }
        let unsplit = counter_delta(earlier, later, |c| c.unsplit);
        let mut tasks = tasks(earlier, later);
        tasks.sort_by(|a, b| b.delay_max_ns.cmp(&a.delay_max_ns).then(a.tid.cmp(&b.tid)));
        let mut window_max: Vec<WindowMaxReport> = maxima
            .iter()
            .map(|(reason, m)| WindowMaxReport {
                cpu: m.cpu,
                reason: *reason,
                delay_ns: m.max.delay_ns,
                end_ns: m.max.end_ns,
                end_unix_ns: meta.wall.unix_ns(m.max.end_ns),
                victim: TaskRef {
                    tid: m.max.victim_tid,
                    pid: m.max.victim_tgid,
                    comm: comm_string(&m.max.victim_comm),
                },
                victim_prio: m.max.victim_prio,
                prev: TaskRef { tid: m.max.prev_tid, pid: m.max.prev_tgid, comm: comm_string(&m.max.prev_comm) },
            })
            .collect();
        window_max.sort_by_key(|m| std::cmp::Reverse(m.delay_ns));
        Report {
            version: SCHEMA_VERSION,
            kernel: meta.kernel.clone(),
            clock: clock_name(meta.clock),
            start_ns: earlier.taken_ns,
            end_ns: later.taken_ns,
            duration_ns: later.taken_ns.saturating_sub(earlier.taken_ns),
            start_unix_ns: meta.wall.unix_ns(earlier.taken_ns),
            filter: meta.filter.clone(),
            histograms,
            waited_by_cause_ns,
            unsplit,
            tasks,
            cpus,
            window_max,
            lost,
            discarded,
            attributed: Vec::new(),
            cgroups: Vec::new(),
        }
    }
}

fn counter_delta(earlier: &Snapshot, later: &Snapshot, field: impl Fn(&CpuStats) -> u64) -> u64 {
    let sum = |s: &Snapshot| s.cpus.iter().map(&field).sum::<u64>();
    sum(later).saturating_sub(sum(earlier))
}

fn histogram(earlier: &Histogram, later: &Histogram, reason: Reason, maxima: &[(Reason, CpuMax)]) -> HistogramReport {
    let mut raw = Box::new([0u64; BUCKETS]);
    for (k, slot) in raw.iter_mut().enumerate() {
        *slot = later.buckets[k].saturating_sub(earlier.buckets[k]);
    }
    let max_ns = maxima.iter().filter(|(r, _)| *r == reason).map(|(_, m)| m.max.delay_ns).max().unwrap_or(0);
    let max = (max_ns > 0).then_some(max_ns);
    let [p50_ns, p90_ns, p99_ns, p999_ns] = quantiles_ns(&raw, [0.5, 0.9, 0.99, 0.999], max);
    let buckets = raw
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(k, &count)| BucketReport { le_seconds: upper_seconds(k), count })
        .collect();
    HistogramReport {
        count: count(&raw),
        sum_ns: later.sum_ns.saturating_sub(earlier.sum_ns),
        max_ns,
        p50_ns,
        p90_ns,
        p99_ns,
        p999_ns,
        buckets,
        raw,
    }
}

fn cpus(earlier: &Snapshot, later: &Snapshot) -> Vec<CpuReport> {
    // Idle time including a period still open at the snapshot.
    let idle = |s: &Snapshot, c: &CpuStats| {
        let open = if c.idle_since_ns != 0 { s.taken_ns.saturating_sub(c.idle_since_ns) } else { 0 };
        c.idle_ns + open
    };
    later
        .cpus
        .iter()
        .enumerate()
        .map(|(cpu, l)| {
            let zero = CpuStats::default();
            let e = earlier.cpus.get(cpu).unwrap_or(&zero);
            CpuReport {
                cpu: cpu as u32,
                switches: l.switches.saturating_sub(e.switches),
                voluntary: l.voluntary.saturating_sub(e.voluntary),
                involuntary: l.involuntary.saturating_sub(e.involuntary),
                idle_ns: idle(later, l).saturating_sub(idle(earlier, e)),
                waited_by_cause_ns: Causes::between(&e.waited_ns, &l.waited_ns),
            }
        })
        .collect()
}

fn tasks(earlier: &Snapshot, later: &Snapshot) -> Vec<TaskReport> {
    let before: std::collections::HashMap<u32, &TaskStats> = earlier.tasks.iter().map(|(t, s)| (*t, s)).collect();
    let zero = TaskStats::ZERO;
    later
        .tasks
        .iter()
        .map(|(tid, l)| {
            let e = before.get(tid).copied().unwrap_or(&zero);
            // A task still on the CPU at the snapshot has an open running period.
            let running = |s: &Snapshot, t: &TaskStats| {
                let open = if t.last_in_ns != 0 { s.taken_ns.saturating_sub(t.last_in_ns) } else { 0 };
                t.runtime_ns + open
            };
            let wakeups = l.delays[Reason::Wakeup as usize].saturating_sub(e.delays[Reason::Wakeup as usize]);
            let preempts = l.delays[Reason::Preempt as usize].saturating_sub(e.delays[Reason::Preempt as usize]);
            let delay_count = wakeups + preempts;
            let delay_sum_ns = l.delay_sum_ns.saturating_sub(e.delay_sum_ns);
            let voluntary = l.voluntary.saturating_sub(e.voluntary);
            let involuntary = l.involuntary.saturating_sub(e.involuntary);
            // The kernel keeps a lifetime maximum per task; it belongs to this window only if it
            // changed in it.
            let new_max = l.delay_max_at_ns != e.delay_max_at_ns && l.delay_max_ns > 0;
            TaskReport {
                tid: *tid,
                pid: l.tgid,
                comm: comm_string(&l.comm),
                prio: l.prio,
                runtime_ns: running(later, l).saturating_sub(if e.tgid == 0 { 0 } else { running(earlier, e) }),
                switches: voluntary + involuntary,
                voluntary,
                involuntary,
                delay_count,
                delay_wakeup_count: wakeups,
                delay_preempt_count: preempts,
                delay_sum_ns,
                waited_by_cause_ns: Causes::between(&e.waited_ns, &l.waited_ns),
                delay_avg_ns: delay_sum_ns.checked_div(delay_count).unwrap_or(0),
                delay_max_ns: if new_max { l.delay_max_ns } else { 0 },
                delay_max_at_ns: if new_max { l.delay_max_at_ns } else { 0 },
                delay_max_reason: if new_max { Reason::from_u32(l.delay_max_reason) } else { None },
                untraced: u64::from(l.untraced.saturating_sub(e.untraced)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
