//! Kernel maps → `Snapshot`: plain data, summed where the per-CPU split carries no meaning, so
//! everything after this stage is testable without root.
use aya::maps::{HashMap, MapError, PerCpuArray, PerCpuHashMap};
use latency_common::{
    CpuStats, Histogram, Reason, TaskStats, WindowMax,
    maps::{CgroupHist, Incident, names, window_index},
};

use crate::{
    clock,
    probe::{Probe, ProbeError},
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
        }
    }
}

/// What to read besides the always-on aggregates.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extras {
    pub tasks: bool,
    pub cgroups: bool,
}

/// The window maximum of one CPU and reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuMax {
    pub cpu: u32,
    pub max: WindowMax,
}

fn map_err(map: &'static str) -> impl Fn(MapError) -> ProbeError {
    move |source| ProbeError::Map { map, source }
}

/// Read every aggregate map.
pub fn snapshot(probe: &Probe, extras: Extras) -> Result<Snapshot, ProbeError> {
    let taken_ns = clock::monotonic_ns();

    let map = names::CPU_STATS;
    let stats: PerCpuArray<_, CpuStats> = PerCpuArray::try_from(probe.map(map)?).map_err(map_err(map))?;
    let cpus = stats.get(&0, 0).map_err(map_err(map))?.to_vec();

    let map = names::HISTOGRAMS;
    let hists: PerCpuArray<_, Histogram> = PerCpuArray::try_from(probe.map(map)?).map_err(map_err(map))?;
    let mut histograms = [Histogram::ZERO; Reason::COUNT];
    for reason in Reason::ALL {
        let per_cpu = hists.get(&(reason as u32), 0).map_err(map_err(map))?;
        histograms[reason as usize] = sum_histograms(&per_cpu);
    }

    let mut tasks = Vec::new();
    if extras.tasks {
        let map = names::TASKS;
        let table: HashMap<_, u32, TaskStats> = HashMap::try_from(probe.map(map)?).map_err(map_err(map))?;
        for entry in table.iter() {
            // A task that exits while we iterate makes the iterator skip, never fail; any other
            // error is real.
            let (tid, stats) = entry.map_err(map_err(map))?;
            tasks.push((tid, stats));
        }
    }

    let mut cgroups = Vec::new();
    if extras.cgroups {
        let map = names::CGROUPS;
        let table: PerCpuHashMap<_, u64, CgroupHist> =
            PerCpuHashMap::try_from(probe.map(map)?).map_err(map_err(map))?;
        for entry in table.iter() {
            let (id, per_cpu) = entry.map_err(map_err(map))?;
            cgroups.push((id, sum_cgroup(&per_cpu)));
        }
        cgroups.sort_unstable_by_key(|(id, _)| *id);
    }

    Ok(Snapshot { taken_ns, cpus, histograms, tasks, cgroups })
}

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
        total.sum_ns += h.sum_ns;
        for (t, c) in total.buckets.iter_mut().zip(h.buckets.iter()) {
            *t += c;
        }
    }
    total
}

/// Every record in the `WINDOW_MAX` slot of `epoch`, whatever window wrote it: (reason, cpu,
/// record).
pub fn window_slot(probe: &Probe, epoch: u64) -> Result<Vec<(Reason, u32, WindowMax)>, ProbeError> {
    let map = names::WINDOW_MAX;
    let slots: PerCpuArray<_, WindowMax> = PerCpuArray::try_from(probe.map(map)?).map_err(map_err(map))?;
    let mut out = Vec::new();
    for reason in Reason::ALL {
        let per_cpu = slots.get(&window_index(epoch, reason), 0).map_err(map_err(map))?;
        for (cpu, max) in per_cpu.iter().enumerate() {
            out.push((reason, cpu as u32, *max));
        }
    }
    Ok(out)
}

/// The attributed incidents the kernel kept for window `epoch`: (reason, cpu, incident), one per
/// CPU and reason that saw a delay at or above the attribution threshold.
pub fn incidents(probe: &Probe, epoch: u64) -> Result<Vec<(Reason, u32, Incident)>, ProbeError> {
    let map = names::INCIDENTS;
    let slots: PerCpuArray<_, Incident> = PerCpuArray::try_from(probe.map(map)?).map_err(map_err(map))?;
    let mut out = Vec::new();
    for reason in Reason::ALL {
        let per_cpu = slots.get(&window_index(epoch, reason), 0).map_err(map_err(map))?;
        for (cpu, inc) in per_cpu.iter().enumerate() {
            if inc.epoch == epoch && inc.delay_ns > 0 {
                out.push((reason, cpu as u32, *inc));
            }
        }
    }
    Ok(out)
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
}
