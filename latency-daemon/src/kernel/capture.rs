//! The capture recorder's rings, read: the loaded probe and the slots per CPU in; every CPU's
//! records still in its ring, oldest first, and for each CPU how many it wrote, how many the ring
//! no longer holds and how many were being rewritten as they were read, out. Reading does not
//! stop the recorder: a record is kept only if both its sequence numbers agree with its slot.
//! `batch` reads the ring's map in a few calls instead of one per slot.
pub mod batch;

use aya::maps::{Map, MapData, MapError, PerCpuArray};
use latency_common::maps::{CaptureRecord, names};

use self::batch::BatchError;
use super::{object::possible_cpus, options::ProbeError, probe::Probe};

/// The most one call of a batched read copies: 5,461 slots on 2 CPUs, 42 on 256 (a record per
/// possible CPU each), a call of a millisecond or two (0.2–0.3 µs a slot, 0.2–0.4 ms a MiB on a
/// 2-vCPU VM; docs/cost.md); the kernel may reschedule between slots.
pub const BATCH_BYTES: usize = 1 << 20;

/// One CPU's ring as read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuRing {
    pub cpu: u32,
    /// Events written on this CPU since the recorder was attached.
    pub written: u64,
    /// Records read back.
    pub kept: u64,
    /// Written but no longer in the ring (older than its last `slots`).
    pub overwritten: u64,
    /// Being rewritten while read: dropped.
    pub torn: u64,
    /// Given up by the recorder since it was attached: no free slot (records of nested
    /// interrupts took every one it tried).
    pub given_up: u64,
}

/// Every CPU's ring.
#[derive(Clone, Debug, Default)]
pub struct Rings {
    /// By time.
    pub records: Vec<CaptureRecord>,
    pub cpus: Vec<CpuRing>,
}

/// How the ring's slots come out of the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// `BPF_MAP_LOOKUP_BATCH`, at most this many bytes a call (Linux 5.6+).
    Batched { bytes: usize },
    /// One lookup per slot, every CPU's record of it (any kernel).
    PerSlot,
}

/// Reads every CPU's ring of `slots` records (the power of two the probe was loaded with), in
/// batches of at most [`BATCH_BYTES`]; by slot where this kernel has no batched lookup.
pub fn read(probe: &Probe, slots: u32) -> Result<Rings, ProbeError> {
    let heads = heads(probe)?;
    let records = match batch::lookup(ring(probe)?, slots, possible_cpus(), BATCH_BYTES) {
        Err(BatchError::Unsupported(_)) => per_slot(probe, slots)?,
        other => other.map_err(batch_error)?,
    };
    Ok(sort(&heads, &records, slots))
}

/// Every slot of every CPU's ring as the map holds it, `[slot * cpus + cpu]` over the possible
/// CPUs; `Lookup::Batched` fails where this kernel has no batched lookup.
pub fn read_slots(probe: &Probe, slots: u32, lookup: Lookup) -> Result<Vec<CaptureRecord>, ProbeError> {
    match lookup {
        Lookup::Batched { bytes } => batch::lookup(ring(probe)?, slots, possible_cpus(), bytes).map_err(batch_error),
        Lookup::PerSlot => per_slot(probe, slots),
    }
}

/// Each CPU's count of events written, and of those it gave up.
fn heads(probe: &Probe) -> Result<Vec<(u64, u64)>, ProbeError> {
    let map_err = |source| ProbeError::Map { map: names::CAPTURE_HEAD, source };
    let heads: PerCpuArray<_, u64> = PerCpuArray::try_from(probe.map(names::CAPTURE_HEAD)?).map_err(map_err)?;
    let written = heads.get(&0, 0).map_err(map_err)?;
    let given_up = heads.get(&1, 0).map_err(map_err)?;
    Ok(written.iter().zip(given_up.iter()).map(|(w, g)| (*w, *g)).collect())
}

/// The rings' map.
fn ring(probe: &Probe) -> Result<&MapData, ProbeError> {
    match probe.map(names::CAPTURE)? {
        Map::PerCpuArray(data) => Ok(data),
        _ => Err(ProbeError::MissingMap { map: names::CAPTURE }),
    }
}

fn batch_error(e: BatchError) -> ProbeError {
    let io_error = match e {
        BatchError::Unsupported(source) => source,
        BatchError::Lookup { ref source, .. } => std::io::Error::new(source.kind(), e),
        e @ BatchError::OutOfOrder { .. } => std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    };
    let source = MapError::SyscallError(aya::sys::SyscallError { call: "bpf_map_lookup_batch", io_error });
    ProbeError::Map { map: names::CAPTURE, source }
}

fn per_slot(probe: &Probe, slots: u32) -> Result<Vec<CaptureRecord>, ProbeError> {
    let map_err = |source| ProbeError::Map { map: names::CAPTURE, source };
    let ring: PerCpuArray<_, CaptureRecord> = PerCpuArray::try_from(probe.map(names::CAPTURE)?).map_err(map_err)?;
    let mut records = Vec::with_capacity(slots as usize * possible_cpus());
    for slot in 0..slots {
        records.extend(ring.get(&slot, 0).map_err(map_err)?.iter());
    }
    Ok(records)
}

/// The rings from each CPU's head and count given up, and each slot's records
/// (`records[slot * cpus + cpu]`, a record for each CPU of `heads`).
fn sort(heads: &[(u64, u64)], records: &[CaptureRecord], slots: u32) -> Rings {
    let mask = u64::from(slots.max(1) - 1);
    let cpus = heads.len().max(1);
    let mut rings = Rings::default();
    for (cpu, &(head, given_up)) in heads.iter().enumerate() {
        let mut ring = CpuRing { cpu: cpu as u32, given_up, ..CpuRing::default() };
        let mut newest = head;
        for (slot, records) in records.chunks(cpus).enumerate() {
            let Some(r) = records.get(cpu) else { continue };
            if r.seq == 0 && r.seq_end == 0 {
                continue;
            }
            if r.seq != r.seq_end || r.seq & mask != slot as u64 {
                ring.torn += 1;
                continue;
            }
            newest = newest.max(r.seq);
            ring.kept += 1;
            rings.records.push(*r);
        }
        ring.written = newest;
        ring.overwritten = newest.saturating_sub(u64::from(slots)).max(newest.saturating_sub(ring.kept + ring.torn));
        rings.cpus.push(ring);
    }
    rings.records.sort_by_key(|r| (r.ts_ns, r.cpu, r.seq));
    rings
}

/// Two readings of the rings as one, by time: a record in both (the same CPU and sequence
/// number) once.
pub fn merge(earlier: Vec<CaptureRecord>, later: Vec<CaptureRecord>) -> Vec<CaptureRecord> {
    let mut all = earlier;
    all.extend(later);
    all.sort_by_key(|r| (r.cpu, r.seq));
    all.dedup_by_key(|r| (r.cpu, r.seq));
    all.sort_by_key(|r| (r.ts_ns, r.cpu, r.seq));
    all
}

/// At most `per_cpu` records of each CPU: of one that has more, its first half and its last (by
/// sequence number). A capture merged from the readings of a wait that lasts minutes keeps how its
/// CPUs' work began and how it ended in twice a reading's memory, not a record for every event of
/// the wait; what it leaves out in between is missing from the sequence, as [`gaps`] counts it.
pub fn bound(records: Vec<CaptureRecord>, per_cpu: usize) -> Vec<CaptureRecord> {
    let mut by_cpu: std::collections::BTreeMap<u32, Vec<CaptureRecord>> = std::collections::BTreeMap::new();
    for r in records {
        by_cpu.entry(r.cpu).or_default().push(r);
    }
    let mut all = Vec::new();
    for (_, mut own) in by_cpu {
        if own.len() > per_cpu {
            own.sort_by_key(|r| r.seq);
            let head = per_cpu / 2;
            let tail = own.split_off(own.len() - (per_cpu - head));
            own.truncate(head);
            own.extend(tail);
        }
        all.extend(own);
    }
    all.sort_by_key(|r| (r.ts_ns, r.cpu, r.seq));
    all
}

/// Records missing from inside `records` (as [`merge`] leaves them): on each CPU, the sequence
/// numbers between its first and last that are not there — the ring wrapped between readings.
pub fn gaps(records: &[CaptureRecord]) -> u64 {
    crate::model::capture::gaps(records).iter().map(|g| g.missing).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(cpu: u32, seq: u64, ts_ns: u64) -> CaptureRecord {
        CaptureRecord { seq, seq_end: seq, cpu, ts_ns, ..CaptureRecord::default() }
    }

    #[test]
    fn a_wrapped_ring_keeps_its_last_slots_and_counts_the_rest() {
        // Four slots; CPU 0 wrote six events (1, 2 overwritten by 5, 6), CPU 1 two, and slot 3
        // of CPU 0 was being rewritten (7 begun, 3's end still there).
        let mut torn = record(0, 7, 70);
        torn.seq_end = 3;
        let per_slot = [
            [record(0, 4, 40), CaptureRecord::default()],
            [record(0, 5, 50), record(1, 1, 15)],
            [record(0, 6, 60), record(1, 2, 25)],
            [torn, CaptureRecord::default()],
        ];
        let rings = sort(&[(6, 0), (2, 1)], per_slot.as_flattened(), 4);
        let seqs: Vec<(u32, u64)> = rings.records.iter().map(|r| (r.cpu, r.seq)).collect();
        assert_eq!(seqs, [(1, 1), (1, 2), (0, 4), (0, 5), (0, 6)], "by time");
        assert_eq!(rings.cpus[0], CpuRing { cpu: 0, written: 6, kept: 3, overwritten: 2, torn: 1, given_up: 0 });
        assert_eq!(rings.cpus[1], CpuRing { cpu: 1, written: 2, kept: 2, overwritten: 0, torn: 0, given_up: 1 });
    }

    #[test]
    fn a_long_waits_capture_keeps_each_cpus_beginning_and_end_and_counts_the_rest() {
        let records: Vec<CaptureRecord> =
            (1..=10).map(|seq| record(0, seq, seq * 10)).chain((1..=3).map(|seq| record(1, seq, seq * 10))).collect();
        let kept = bound(records, 4);
        let seqs = |cpu: u32| kept.iter().filter(|r| r.cpu == cpu).map(|r| r.seq).collect::<Vec<_>>();
        assert_eq!(seqs(0), [1, 2, 9, 10]);
        assert_eq!(seqs(1), [1, 2, 3], "a CPU under the bound keeps everything");
        assert_eq!(gaps(&kept), 6, "what the bound left out is counted as missing");
        assert!(kept.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns), "in time order");
    }

    #[test]
    fn two_readings_merge_without_repeats() {
        let merged =
            merge(vec![record(0, 1, 10), record(0, 2, 20)], vec![record(0, 2, 20), record(0, 3, 30), record(1, 1, 15)]);
        let seqs: Vec<(u32, u64)> = merged.iter().map(|r| (r.cpu, r.seq)).collect();
        assert_eq!(seqs, [(0, 1), (1, 1), (0, 2), (0, 3)]);
        assert_eq!(gaps(&merged), 0);
        assert_eq!(gaps(&merge(merged, vec![record(0, 9, 90), record(1, 3, 35)])), 5 + 1, "4..=8 on CPU 0, 2 on CPU 1");
    }
}
