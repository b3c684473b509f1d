//! The per-cgroup maps in, `(cgroup id, histogram)` pairs out: the slot table (claimed slots
//! only, found from the per-CPU bitmap) plus its overflow hash map; and removed cgroups retired,
//! so the kernel may reuse their slots (docs/design.md, "Per-cgroup slots").
use std::collections::{BTreeMap, HashMap};

use aya::maps::{Array, MapError, PerCpuArray, PerCpuHashMap};
use latency_common::maps::{CgroupHist, CgroupSlot, REMOVED_KEPT, RemovedRing, cgroup_slot, names};

use super::probe::{Probe, ProbeError};
use crate::model::snapshot::add_cgroup;

fn map_err(map: &'static str) -> impl Fn(MapError) -> ProbeError {
    move |source| ProbeError::Map { map, source }
}

/// The number of slots (a power of two, at least 64 so the bitmap has whole words) for a
/// per-cgroup capacity of `max_cgroups`, as log2.
pub fn slot_bits(max_cgroups: u32) -> u32 {
    max_cgroups.max(64).next_power_of_two().trailing_zeros()
}

/// What the daemon knows about the slot table between drains.
#[derive(Debug, Default)]
pub struct CgroupTable {
    bits: u32,
    /// Who held each claimed slot at the last read, on any CPU.
    owners: HashMap<u32, Vec<u64>>,
    /// Our copy of `CGROUP_RETIRED`: per slot, the cgroup last retired there.
    retired: HashMap<u32, u64>,
    /// Removed cgroups whose slot still waits for an earlier retiree to leave it.
    waiting: Vec<u64>,
    /// Cgroups with an entry in the overflow map at the last read.
    overflowed: std::collections::HashSet<u64>,
    /// Final counts of retired cgroups, reported in place of the maps until the window closes.
    finals: BTreeMap<u64, CgroupHist>,
    /// How far each CPU's ring of removed cgroups has been read.
    heads: Vec<u64>,
    /// Removals a ring overwrote before we read them (the directory walk finds those later).
    pub removals_missed: u64,
    /// Removed cgroups retired so far.
    pub retired_total: u64,
}

impl CgroupTable {
    pub fn new(max_cgroups: u32) -> CgroupTable {
        CgroupTable { bits: slot_bits(max_cgroups), ..CgroupTable::default() }
    }

    /// The v2 cgroups removed since the last call (from `cgroup_rmdir`'s per-CPU rings).
    pub fn removed(&mut self, probe: &Probe) -> Result<Vec<u64>, ProbeError> {
        let map = names::CGROUP_REMOVED;
        let rings: PerCpuArray<_, RemovedRing> = PerCpuArray::try_from(probe.map(map)?).map_err(map_err(map))?;
        let per_cpu = rings.get(&0, 0).map_err(map_err(map))?;
        self.heads.resize(per_cpu.len(), 0);
        let mut ids = Vec::new();
        for (ring, seen) in per_cpu.iter().zip(self.heads.iter_mut()) {
            let kept = REMOVED_KEPT as u64;
            if ring.head - *seen > kept {
                self.removals_missed += ring.head - *seen - kept;
                *seen = ring.head - kept;
            }
            ids.extend((*seen..ring.head).map(|n| ring.ids[(n % kept) as usize]));
            *seen = ring.head;
        }
        Ok(ids)
    }

    /// Every cgroup's histogram, summed over CPUs and over both maps, sorted by id; a retired
    /// cgroup's final counts instead of whatever its slots still hold.
    pub fn read(&mut self, probe: &Probe) -> Result<Vec<(u64, CgroupHist)>, ProbeError> {
        let mut sums: BTreeMap<u64, CgroupHist> = BTreeMap::new();
        self.owners.clear();
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
                let owners = self.owners.entry(index).or_default();
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
        self.overflowed.clear();
        for entry in table.iter() {
            let (id, per_cpu) = entry.map_err(map_err(map))?;
            self.overflowed.insert(id);
            let sum = sums.entry(id).or_insert(CgroupHist::ZERO);
            for h in per_cpu.iter() {
                add_cgroup(sum, h);
            }
        }
        for (id, last) in &self.finals {
            sums.insert(*id, *last);
        }
        Ok(sums.into_iter().collect())
    }

    /// Retire `removed` cgroups, whose counts in `read` (taken after they were removed) are final:
    /// keep those, drop their overflow entries, and tell the kernel their slots are free.
    pub fn retire(
        &mut self,
        probe: &mut Probe,
        removed: Vec<u64>,
        read: &[(u64, CgroupHist)],
    ) -> Result<(), ProbeError> {
        let removed: Vec<u64> = removed.into_iter().filter(|id| !self.finals.contains_key(id)).collect();
        self.retired_total += removed.len() as u64;
        for id in &removed {
            let last = read.binary_search_by_key(id, |(i, _)| *i).map_or(CgroupHist::ZERO, |at| read[at].1);
            self.finals.entry(*id).or_insert(last);
            if self.overflowed.contains(id) {
                probe.delete_cgroup(*id)?;
            }
        }
        let mut queue = std::mem::take(&mut self.waiting);
        queue.extend(removed);
        let map = names::CGROUP_RETIRED;
        let mut retired: Array<_, u64> = Array::try_from(probe.map_mut(map)?).map_err(map_err(map))?;
        for id in queue {
            let index = cgroup_slot(id, self.bits);
            // An earlier retiree still in its slot on some CPU would stay there for good if we
            // replaced it here: then this one waits (its slot, if any, is simply not reused yet).
            let held = |other: u64| self.owners.get(&index).is_some_and(|o| o.contains(&other));
            match self.retired.get(&index) {
                // Bounded: past one per slot, the oldest waiters give up; their slots stay held
                // (new cgroups there use the overflow map, whose entries are always reclaimed).
                Some(&earlier) if earlier != id && held(earlier) => {
                    if self.waiting.len() >= 1 << self.bits {
                        self.waiting.remove(0);
                    }
                    self.waiting.push(id);
                }
                _ => {
                    retired.set(index, id, 0).map_err(map_err(map))?;
                    self.retired.insert(index, id);
                }
            }
        }
        Ok(())
    }

    /// A window closed: retired cgroups' final counts are in its end snapshot, so from the next
    /// window on they are gone (a cgroup missing from a window's end adds nothing).
    pub fn window_closed(&mut self) {
        self.finals.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_a_power_of_two_of_whole_words() {
        assert_eq!(slot_bits(16), 6);
        assert_eq!(slot_bits(1024), 10);
        assert_eq!(slot_bits(1025), 11);
        assert_eq!(slot_bits(65536), 16);
    }
}
