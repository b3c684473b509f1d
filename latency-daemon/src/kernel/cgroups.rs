//! The per-cgroup maps in, `(cgroup id, histogram)` pairs out: the slot table (claimed slots
//! only, found from the per-CPU bitmap) plus its overflow hash map (`CgroupTable`, at each
//! drain); and removed cgroups retired as they are reported, so the kernel may reuse their slots
//! (`Retirer`, on the removal reader's thread, with handles of its own). The two share a
//! `Ledger` (docs/design.md, "Per-cgroup slots").
use std::collections::{BTreeMap, HashMap};
use std::os::fd::AsFd as _;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use aya::maps::{Array, Map, MapData, MapError, PerCpuArray, PerCpuHashMap};
use latency_common::maps::{CgroupHist, CgroupSlot, cgroup_slot, cgroup_slot_bits, names};

use super::probe::{Probe, ProbeError};
use crate::model::snapshot::add_cgroup;

fn map_err(map: &'static str) -> impl Fn(MapError) -> ProbeError {
    move |source| ProbeError::Map { map, source }
}

/// A lookup or delete that found nothing is fine: the entry is gone either way.
fn gone(result: Result<(), MapError>) -> Result<(), MapError> {
    match result {
        Err(MapError::KeyNotFound) => Ok(()),
        Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}

/// What the daemon knows about the slot table, shared by the drain and the retirer.
#[derive(Debug, Default)]
struct Ledger {
    /// Who held each claimed slot when last read, on any CPU.
    owners: HashMap<u32, Vec<u64>>,
    /// Our copy of `CGROUP_RETIRED`: per slot, the cgroup last retired there.
    retired: HashMap<u32, u64>,
    /// Removed cgroups whose slot still waits for an earlier retiree to leave it.
    waiting: Vec<u64>,
    /// Final counts of retired cgroups, reported in place of the maps until a window closes.
    finals: BTreeMap<u64, CgroupHist>,
    /// The retired cgroups the last `read` reported: a closing window has their final counts.
    reported: Vec<u64>,
    /// Removed cgroups retired so far.
    retired_total: u64,
    /// Retirements that failed on a map error (the cgroup's slot stays held).
    errors: u64,
}

type Shared = Arc<Mutex<Ledger>>;

fn lock(ledger: &Shared) -> MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The drain's side: reads every cgroup's counts.
#[derive(Debug)]
pub struct CgroupTable {
    bits: u32,
    ledger: Shared,
}

impl CgroupTable {
    pub fn new(max_cgroups: u32) -> CgroupTable {
        CgroupTable { bits: cgroup_slot_bits(max_cgroups), ledger: Shared::default() }
    }

    /// A retirer with handles of its own on the per-cgroup maps, for another thread.
    pub fn retirer(&self, probe: &Probe) -> Result<Retirer, ProbeError> {
        let own = |map: &'static str| -> Result<Map, ProbeError> {
            let data = match probe.map(map)? {
                Map::PerCpuArray(d) | Map::PerCpuHashMap(d) | Map::Array(d) => d,
                _ => return Err(ProbeError::MissingMap { map }),
            };
            let fd = data.fd().as_fd().try_clone_to_owned().map_err(|e| ProbeError::Map {
                map,
                source: MapError::SyscallError(aya::sys::SyscallError { call: "dup", io_error: e }),
            })?;
            let data = MapData::from_fd(fd).map_err(map_err(map))?;
            Map::from_map_data(data).map_err(map_err(map))
        };
        let (s, o, r) = (names::CGROUP_SLOTS, names::CGROUPS, names::CGROUP_RETIRED);
        Ok(Retirer {
            bits: self.bits,
            slots: PerCpuArray::try_from(own(s)?).map_err(map_err(s))?,
            overflow: PerCpuHashMap::try_from(own(o)?).map_err(map_err(o))?,
            retired: Array::try_from(own(r)?).map_err(map_err(r))?,
            ledger: Arc::clone(&self.ledger),
        })
    }

    /// Every cgroup's histogram, summed over CPUs and over both maps, sorted by id; a retired
    /// cgroup's final counts instead of whatever its slots still hold.
    pub fn read(&mut self, probe: &Probe) -> Result<Vec<(u64, CgroupHist)>, ProbeError> {
        let mut sums: BTreeMap<u64, CgroupHist> = BTreeMap::new();
        let mut owners: HashMap<u32, Vec<u64>> = HashMap::new();
        let map = names::CGROUP_USED;
        let used: PerCpuArray<_, u64> = PerCpuArray::try_from(probe.map(map)?).map_err(map_err(map))?;
        let slots_map = names::CGROUP_SLOTS;
        let slots: PerCpuArray<_, CgroupSlot> =
            PerCpuArray::try_from(probe.map(slots_map)?).map_err(map_err(slots_map))?;
        for word in 0..(1u32 << self.bits) / 64 {
            let any = used.get(&word, 0).map_err(map_err(map))?.iter().fold(0u64, |a, w| a | w);
            let mut bits = any;
            while bits != 0 {
                let index = word * 64 + bits.trailing_zeros();
                bits &= bits - 1;
                let per_cpu = slots.get(&index, 0).map_err(map_err(slots_map))?;
                let owners = owners.entry(index).or_default();
                for slot in per_cpu.iter().filter(|s| s.id != 0) {
                    add_cgroup(sums.entry(slot.id).or_insert(CgroupHist::ZERO), &slot.hist);
                    if !owners.contains(&slot.id) {
                        owners.push(slot.id);
                    }
                }
            }
        }
        let map = names::CGROUPS;
        let table: PerCpuHashMap<_, u64, CgroupHist> =
            PerCpuHashMap::try_from(probe.map(map)?).map_err(map_err(map))?;
        // Held while walking the hash map: a delete under a walk would restart it (the kernel
        // goes back to the first key when the current one is gone) and count entries twice.
        let mut ledger = lock(&self.ledger);
        for entry in table.iter() {
            let (id, per_cpu) = entry.map_err(map_err(map))?;
            let sum = sums.entry(id).or_insert(CgroupHist::ZERO);
            for h in per_cpu.iter() {
                add_cgroup(sum, h);
            }
        }
        for (id, last) in &ledger.finals {
            sums.insert(*id, *last);
        }
        ledger.reported = ledger.finals.keys().copied().collect();
        // Older than what a retirement since may have read, but only ever in the safe direction:
        // a removed cgroup that has left a slot never comes back to it.
        ledger.owners = owners;
        Ok(sums.into_iter().collect())
    }

    /// Removed cgroups retired so far, and retirements that failed.
    pub fn retired(&self) -> (u64, u64) {
        let ledger = lock(&self.ledger);
        (ledger.retired_total, ledger.errors)
    }

    /// Removed cgroups still waiting for their slot (retried at each `retire`).
    pub fn waiting(&self) -> usize {
        lock(&self.ledger).waiting.len()
    }

    /// A window closed: the retired cgroups its end reported are gone from the next window on (a
    /// cgroup missing from a window's end adds nothing); those retired since stay for it.
    pub fn window_closed(&mut self) {
        let mut ledger = lock(&self.ledger);
        for id in std::mem::take(&mut ledger.reported) {
            ledger.finals.remove(&id);
        }
    }
}

/// The retiring side: frees removed cgroups' slots and overflow entries.
pub struct Retirer {
    bits: u32,
    slots: PerCpuArray<MapData, CgroupSlot>,
    overflow: PerCpuHashMap<MapData, u64, CgroupHist>,
    retired: Array<MapData, u64>,
    ledger: Shared,
}

impl std::fmt::Debug for Retirer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retirer").field("bits", &self.bits).finish_non_exhaustive()
    }
}

impl Retirer {
    /// Retire `removed` cgroups (reported removed, so no task is left to add to their counts):
    /// read their slots and overflow entries once more and keep that as their final counts, drop
    /// the overflow entries, and tell the kernel their slots are free. Cgroups waiting for their
    /// slot (see below) are retried too. A failure is counted and logged once; the cgroup's slot
    /// then stays held (new cgroups there use the overflow map).
    pub fn retire(&mut self, removed: &[u64]) {
        self.retire_some(removed, false);
    }

    /// As `retire`, for cgroups found gone by a walk rather than reported by the kernel: only
    /// those that still hold a slot or an overflow entry (the others were retired before).
    /// Returns those it retired.
    pub fn retire_found(&mut self, removed: &[u64]) -> Vec<u64> {
        self.retire_some(removed, true)
    }

    fn retire_some(&mut self, removed: &[u64], held_only: bool) -> Vec<u64> {
        let shared = Arc::clone(&self.ledger);
        let mut ledger = lock(&shared);
        let mut retired = Vec::new();
        if let Err(e) = self.retire_locked(&mut ledger, removed, held_only, &mut retired) {
            if ledger.errors == 0 {
                log::error!("retiring removed cgroups failed (counted in runqlat_drain_errors_total): {e}");
            }
            ledger.errors += 1;
        }
        retired
    }

    fn retire_locked(
        &mut self,
        ledger: &mut Ledger,
        removed: &[u64],
        held_only: bool,
        retired: &mut Vec<u64>,
    ) -> Result<(), ProbeError> {
        let (slots_map, overflow_map) = (names::CGROUP_SLOTS, names::CGROUPS);
        let mut queue = std::mem::take(&mut ledger.waiting);
        for &id in removed {
            let index = cgroup_slot(id, self.bits);
            // Retired before (a sweep of the maps after the ring lost removals finds those too).
            let done = ledger.retired.get(&index) == Some(&id) || queue.contains(&id);
            if id == 0 || done || ledger.finals.contains_key(&id) {
                continue;
            }
            let mut last = CgroupHist::ZERO;
            let per_cpu = self.slots.get(&index, 0).map_err(map_err(slots_map))?;
            let owners = ledger.owners.entry(index).or_default();
            owners.clear();
            let mut held = false;
            for slot in per_cpu.iter().filter(|s| s.id != 0) {
                if slot.id == id {
                    add_cgroup(&mut last, &slot.hist);
                    held = true;
                }
                if !owners.contains(&slot.id) {
                    owners.push(slot.id);
                }
            }
            match self.overflow.get(&id, 0) {
                Ok(per_cpu) => {
                    for h in per_cpu.iter() {
                        add_cgroup(&mut last, h);
                    }
                    gone(self.overflow.remove(&id)).map_err(map_err(overflow_map))?;
                    held = true;
                }
                result => gone(result.map(|_| ())).map_err(map_err(overflow_map))?,
            }
            if held_only && !held {
                continue;
            }
            ledger.finals.insert(id, last);
            ledger.retired_total += 1;
            retired.push(id);
            queue.push(id);
        }
        let map = names::CGROUP_RETIRED;
        for id in queue {
            let index = cgroup_slot(id, self.bits);
            // An earlier retiree still in its slot on some CPU would stay there for good if we
            // replaced it here: then this one waits (its slot, if any, is simply not reused yet).
            let held = |other: u64| ledger.owners.get(&index).is_some_and(|o| o.contains(&other));
            match ledger.retired.get(&index) {
                // Bounded: past one per slot, the oldest waiters give up; their slots stay held
                // (new cgroups there use the overflow map, whose entries are always reclaimed).
                Some(&earlier) if earlier != id && held(earlier) => {
                    if ledger.waiting.len() >= 1 << self.bits {
                        ledger.waiting.remove(0);
                    }
                    ledger.waiting.push(id);
                }
                _ => {
                    self.retired.set(index, id, 0).map_err(map_err(map))?;
                    ledger.retired.insert(index, id);
                }
            }
        }
        Ok(())
    }
}
