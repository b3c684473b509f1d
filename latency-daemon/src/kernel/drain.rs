//! The loaded probe's maps in, plain data out: a `Snapshot` of every aggregate, the records of a
//! window-maximum slot, the attributed incidents of a window and the waits in progress the wait
//! scan lists. Reads only; what the values mean is `model`'s business.
use aya::maps::{Array, HashMap, MapError, PerCpuArray};
use latency_common::{
    Histogram, Reason, TaskStats,
    maps::{CpuState, FinalRing, IrqClock, RunRing, Seen, names, window_index},
};

use super::{
    feature::{Feature, wait_scan},
    probe::{Probe, ProbeError},
};
use crate::{
    host::clock,
    model::snapshot::{Incidents, Snapshot, WindowSlot, sum_histograms},
};

/// How many CPUs the per-CPU maps hold a value for, so a `Snapshot` of freshly created maps has
/// the right shape.
pub use super::probe::possible_cpus;

/// What to read besides the always-on aggregates (the per-cgroup maps: `cgroups::CgroupTable`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Extras {
    pub tasks: bool,
}

impl Probe {
    /// Whether the irq tracepoints are attached (`IRQ_CLOCKS` holds each CPU's IRQ time).
    pub fn irq_timed(&self) -> bool {
        self.is_on(Feature::IrqTracepoints)
    }

    /// Run the wait scan once (None: not loaded): every task waiting in a run queue with a stamp,
    /// and every task on a CPU, as the kernel saw them during this call.
    pub fn scan_waits(&mut self) -> Result<Option<Vec<Seen>>, ProbeError> {
        if !self.is_on(Feature::WaitScan) {
            return Ok(None);
        }
        wait_scan::scan(self.ebpf_mut()).map(Some)
    }
}

fn map_err(map: &'static str) -> impl Fn(MapError) -> ProbeError {
    move |source| ProbeError::Map { map, source }
}

/// Read every aggregate map.
pub fn snapshot(probe: &Probe, extras: Extras) -> Result<Snapshot, ProbeError> {
    let taken_ns = clock::monotonic_ns();

    let states = cpu_states(probe)?;
    let cpus = states.iter().map(|s| s.stats).collect();
    let mut histograms = [Histogram::ZERO; Reason::COUNT];
    for reason in Reason::ALL {
        let per_cpu: Vec<Histogram> = states.iter().map(|s| s.histograms[reason as usize]).collect();
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

    let irq_ns = if probe.irq_timed() { Some(irq_clocks(probe)?) } else { None };
    Ok(Snapshot { taken_ns, cpus, histograms, tasks, cgroups: Vec::new(), irq_ns, steal_ns: None })
}

/// Each CPU's IRQ time so far (index = CPU), as the irq tracepoints timed it; a handler or
/// softirq in progress is left to the next read.
fn irq_clocks(probe: &Probe) -> Result<Vec<u64>, ProbeError> {
    let map = names::IRQ_CLOCKS;
    let clocks: Array<_, IrqClock> = Array::try_from(probe.map(map)?).map_err(map_err(map))?;
    (0..clocks.len()).map(|cpu| clocks.get(&cpu, 0).map(|c| c.total_ns).map_err(map_err(map))).collect()
}

/// Each CPU's run ring (index = CPU): who ran there lately, for the waits still in progress.
pub fn run_rings(probe: &Probe) -> Result<Vec<RunRing>, ProbeError> {
    per_cpu_entry(probe, names::RUNS)
}

/// Each CPU's ring of the last delays at or above the attribution threshold (index = CPU).
pub fn final_rings(probe: &Probe) -> Result<Vec<FinalRing>, ProbeError> {
    per_cpu_entry(probe, names::FINALS)
}

/// Each CPU's value of a one-entry per-CPU array (index = CPU).
fn per_cpu_entry<T: aya::Pod>(probe: &Probe, map: &'static str) -> Result<Vec<T>, ProbeError> {
    let values: PerCpuArray<_, T> = PerCpuArray::try_from(probe.map(map)?).map_err(map_err(map))?;
    Ok(values.get(&0, 0).map_err(map_err(map))?.to_vec())
}

/// Each CPU's state of the switch path (index = CPU): counters, histograms, window maxima.
fn cpu_states(probe: &Probe) -> Result<Vec<CpuState>, ProbeError> {
    per_cpu_entry(probe, names::CPU_STATS)
}

/// Every record in the window-maximum slot of `epoch`, whatever window wrote it.
pub fn window_slot(probe: &Probe, epoch: u64) -> Result<WindowSlot, ProbeError> {
    let states = cpu_states(probe)?;
    Ok(Reason::ALL
        .into_iter()
        .flat_map(|reason| {
            let slot = window_index(epoch, reason) as usize;
            states.iter().enumerate().map(move |(cpu, s)| (reason, cpu as u32, s.window[slot]))
        })
        .collect())
}

/// The attributed incidents the kernel kept for window `epoch`, one per CPU and reason that saw
/// a delay at or above the attribution threshold.
pub fn incidents(probe: &Probe, epoch: u64) -> Result<Incidents, ProbeError> {
    let mut slot: Incidents = per_cpu_slot(probe, names::INCIDENTS, epoch)?;
    slot.retain(|(_, _, inc)| inc.epoch == epoch && inc.delay_ns > 0);
    Ok(slot)
}

/// Each CPU's value in the slot of `epoch` of a per-CPU array indexed by `window_index`, for
/// every reason: (reason, cpu, value).
fn per_cpu_slot<T: aya::Pod>(
    probe: &Probe,
    map: &'static str,
    epoch: u64,
) -> Result<Vec<(Reason, u32, T)>, ProbeError> {
    let slots: PerCpuArray<_, T> = PerCpuArray::try_from(probe.map(map)?).map_err(map_err(map))?;
    let mut out = Vec::new();
    for reason in Reason::ALL {
        let per_cpu = slots.get(&window_index(epoch, reason), 0).map_err(map_err(map))?;
        out.extend(per_cpu.iter().enumerate().map(|(cpu, v)| (reason, cpu as u32, *v)));
    }
    Ok(out)
}
