//! Kernel maps → `Snapshot`: plain data, summed where the per-CPU split carries no meaning, so
//! everything after this stage is testable without root.
use aya::maps::{HashMap, MapError, PerCpuArray};
use latency_common::{
    CpuStats, Histogram, Reason, TaskStats, WindowMax,
    maps::{names, window_index},
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
pub fn snapshot(probe: &Probe, with_tasks: bool) -> Result<Snapshot, ProbeError> {
    let taken_ns = clock::monotonic_ns();

    let map = names::CPU_STATS;
    let stats: PerCpuArray<_, CpuStats> = PerCpuArray::try_from(probe.map(map)?).map_err(map_err(map))?;
    let cpus = stats.get(&0, 0).map_err(map_err(map))?.to_vec();

    let map = names::HISTOGRAMS;
    let hists: PerCpuArray<_, Histogram> = PerCpuArray::try_from(probe.map(map)?).map_err(map_err(map))?;
    let mut histograms = [Histogram::ZERO; Reason::COUNT];
    for reason in Reason::ALL {
        let per_cpu = hists.get(&(reason as u32), 0).map_err(map_err(map))?;
        let total = &mut histograms[reason as usize];
        for h in per_cpu.iter() {
            total.sum_ns += h.sum_ns;
            for (t, c) in total.buckets.iter_mut().zip(h.buckets.iter()) {
                *t += c;
            }
        }
    }

    let mut tasks = Vec::new();
    if with_tasks {
        let map = names::TASKS;
        let table: HashMap<_, u32, TaskStats> = HashMap::try_from(probe.map(map)?).map_err(map_err(map))?;
        for entry in table.iter() {
            // A task that exits while we iterate makes the iterator skip, never fail; any other
            // error is real.
            let (tid, stats) = entry.map_err(map_err(map))?;
            tasks.push((tid, stats));
        }
    }

    Ok(Snapshot { taken_ns, cpus, histograms, tasks })
}

/// The maxima the kernel kept for window `epoch` (one per CPU and reason that saw a delay).
pub fn window_max(probe: &Probe, epoch: u64) -> Result<Vec<(Reason, CpuMax)>, ProbeError> {
    let map = names::WINDOW_MAX;
    let slots: PerCpuArray<_, WindowMax> = PerCpuArray::try_from(probe.map(map)?).map_err(map_err(map))?;
    let mut out = Vec::new();
    for reason in Reason::ALL {
        let per_cpu = slots.get(&window_index(epoch, reason), 0).map_err(map_err(map))?;
        for (cpu, max) in per_cpu.iter().enumerate() {
            if max.epoch == epoch && max.delay_ns > 0 {
                out.push((reason, CpuMax { cpu: cpu as u32, max: *max }));
            }
        }
    }
    Ok(out)
}
