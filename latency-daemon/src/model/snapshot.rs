//! What the kernel maps held at one moment, as plain data (`Snapshot`, `CpuMax`), and the pure
//! steps that turn raw per-CPU map values into it: sums over CPUs, the maxima of a window slot,
//! and the writes that arrived after their window was read.
use latency_common::{
    CpuStats, Histogram, Reason, TaskStats, WindowMax,
    maps::{CgroupHist, Incident},
};

/// Everything the kernel holds at one moment (counters are cumulative since load).
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// When it was read (CLOCK_MONOTONIC ns, the kernel program's clock).
    pub taken_ns: u64,
    /// Per possible CPU, index = CPU number.
    pub cpus: Vec<CpuStats>,
    /// Per reason (index = `Reason as usize`), summed over CPUs.
    pub histograms: [Histogram; Reason::COUNT],
    /// Per-task statistics (empty unless the per-task feature is on), keyed by tid.
    pub tasks: Vec<(u32, TaskStats)>,
    /// Per cgroup v2 id, summed over CPUs (empty unless the per-cgroup feature is on).
    pub cgroups: Vec<(u64, CgroupHist)>,
    /// Per possible CPU, the time it spent in device IRQ handlers and softirqs, as the irq
    /// tracepoints timed it (ns; `None` unless `--irq-tracepoints` is in force).
    pub irq_ns: Option<Vec<u64>>,
    /// Per online CPU, (CPU number, the steal time since boot the host's /proc/stat reports, ns),
    /// read by the drain beside the maps; `None` where /proc/stat could not be read.
    pub steal_ns: Option<Vec<(u32, u64)>>,
}

impl Snapshot {
    /// The state of freshly created maps: everything zero, as of `taken_ns`.
    pub fn empty(taken_ns: u64, cpus: usize) -> Snapshot {
        Snapshot {
            taken_ns,
            cpus: vec![CpuStats::default(); cpus],
            histograms: [Histogram::ZERO; Reason::COUNT],
            tasks: Vec::new(),
            cgroups: Vec::new(),
            irq_ns: None,
            steal_ns: None,
        }
    }
}

/// The window maximum of one CPU and reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuMax {
    pub cpu: u32,
    pub max: WindowMax,
}

/// Every record of one `WINDOW_MAX` slot, whatever window wrote it: (reason, cpu, record).
pub type WindowSlot = Vec<(Reason, u32, WindowMax)>;

/// The kernel's attributed incidents of one window: (reason, cpu, incident).
pub type Incidents = Vec<(Reason, u32, Incident)>;

/// One reason's histogram summed over CPUs: the only part of a drain whose cost depends on the
/// machine (CPUs × buckets); none of it depends on how many events happened.
pub fn sum_histograms(per_cpu: &[Histogram]) -> Histogram {
    let mut total = Histogram::ZERO;
    for h in per_cpu {
        total.sum_ns += h.sum_ns;
        for (t, c) in total.buckets.iter_mut().zip(h.buckets.iter()) {
            *t += c;
        }
    }
    total
}

/// One cgroup's coarse histogram summed over CPUs.
pub fn sum_cgroup(per_cpu: &[CgroupHist]) -> CgroupHist {
    let mut total = CgroupHist::ZERO;
    for h in per_cpu {
        add_cgroup(&mut total, h);
    }
    total
}

/// `total += delta`, field by field.
pub fn add_cgroup(total: &mut CgroupHist, delta: &CgroupHist) {
    total.sum_ns += delta.sum_ns;
    for (t, d) in total.waited_ns.iter_mut().zip(delta.waited_ns.iter()) {
        *t += d;
    }
    total.held_others_ns += delta.held_others_ns;
    for (t, d) in total.buckets.iter_mut().zip(delta.buckets.iter()) {
        *t += d;
    }
}

/// The maxima the kernel kept for window `epoch` (one per CPU and reason that saw a delay).
pub fn maxima(slot: &[(Reason, u32, WindowMax)], epoch: u64) -> Vec<(Reason, CpuMax)> {
    slot.iter()
        .filter(|(_, _, m)| m.epoch == epoch && m.delay_ns > 0)
        .map(|(reason, cpu, max)| (*reason, CpuMax { cpu: *cpu, max: *max }))
        .collect()
}

/// Records of window `closed - 2` (this slot's previous use) that changed since we read that
/// window: the kernel wrote them after the read, so that window's maximum missed them.
pub fn late_writes(previous: &[(Reason, u32, WindowMax)], now: &[(Reason, u32, WindowMax)], closed: u64) -> u64 {
    let Some(earlier) = closed.checked_sub(2) else { return 0 };
    now.iter()
        .filter(|(_, _, m)| m.epoch == earlier)
        .filter(|(reason, cpu, m)| !previous.iter().any(|(r, c, p)| r == reason && c == cpu && p == m))
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(epoch: u64, delay_ns: u64) -> WindowMax {
        WindowMax { epoch, delay_ns, ..WindowMax::ZERO }
    }

    #[test]
    fn maxima_keep_only_this_windows_records() {
        let slot =
            vec![(Reason::Wakeup, 0, rec(4, 10)), (Reason::Wakeup, 1, rec(2, 99)), (Reason::Preempt, 0, rec(4, 0))];
        let m = maxima(&slot, 4);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].0, m[0].1.cpu, m[0].1.max.delay_ns), (Reason::Wakeup, 0, 10));
    }

    #[test]
    fn late_writes_are_records_of_the_slots_last_window_that_changed_after_we_read_it() {
        // Read at the close of window 2.
        let then = vec![(Reason::Wakeup, 0, rec(2, 10)), (Reason::Wakeup, 1, rec(0, 5))];
        // At the close of window 4: cpu 0 unchanged (no delay in window 4), cpu 1 now carries a
        // record of window 2 it did not have when we read it: written late.
        let now = vec![(Reason::Wakeup, 0, rec(2, 10)), (Reason::Wakeup, 1, rec(2, 7))];
        assert_eq!(late_writes(&then, &now, 4), 1);
        assert_eq!(late_writes(&now, &now, 4), 0);
        assert_eq!(late_writes(&[], &now, 1), 0);
    }

    #[test]
    fn sums_over_cpus() {
        let mut a = CgroupHist::ZERO;
        a.buckets[1] = 2;
        a.sum_ns = 5;
        let total = sum_cgroup(&[a, a, CgroupHist::ZERO]);
        assert_eq!((total.buckets[1], total.sum_ns), (4, 10));
        let mut h = Histogram::ZERO;
        h.buckets[7] = 3;
        h.sum_ns = 9;
        let total = sum_histograms(&[h, h]);
        assert_eq!((total.buckets[7], total.sum_ns), (6, 18));
    }
}
