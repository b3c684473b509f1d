//! Reading the capture recorder's rings with `BPF_MAP_LOOKUP_BATCH` against reading them slot by
//! slot, on the real kernel program's maps: the recorder attached with the daemon's rings of 4,096
//! slots, filled past wrapping by `perf bench sched pipe`, is read slot by slot, then batched (the
//! daemon's bound, a slot a call, seven slots a call, everything in one call), then slot by slot
//! again; every slot of every CPU that did not change between the two slot-by-slot readings must
//! be the same in each batched one, and one that changed must hold a record written in between.
//! That reading, with a stretch of one CPU's records left out and encoded as a capture, reads
//! back with Perfetto's own classes with the gap marked where it was (`gap_marked`).
//! A standalone per-CPU array filled from here must read back exactly, with values as wide as a
//! host of 64 and 256 CPUs gives each slot. A map without batches (a queue) says so, which is
//! what makes the daemon read slot by slot; and a batched reading needs no capability where a
//! lookup needs none (the daemon drops them all then). And the cost of each way (medians of 21
//! interleaved readings at 4,096 and 65,536 slots, alone and while `perf bench sched pipe` runs),
//! printed, run by hand (`--ignored`): a benchmark, not a timed assertion.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use aya::maps::{IterableMap as _, MapData, PerCpuArray, PerCpuValues};
use latency_common::maps::CaptureRecord;
use latency_daemon::kernel::{
    capture::{self, BATCH_BYTES, Lookup, batch},
    load, privileges,
    probe::{Probe, ProbeOptions, possible_cpus},
};
use latency_lab::guard::Proc;

/// One kernel program at a time: the two tests load one each, and the timings want the machine
/// to themselves.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The recorder alone (the core with it), rings of `slots`.
fn recorder(slots: u32) -> Probe {
    let options = ProbeOptions { capture_events: slots, ..ProbeOptions::default() };
    let (probe, degraded) = load::load(&options).unwrap_or_else(|e| panic!("loading the recorder: {e}"));
    assert!(degraded.is_empty(), "this kernel left out {degraded:?}");
    probe
}

/// `perf bench sched pipe` run after run until dropped (the guard kills the shell and its runs).
fn storm() -> Proc {
    let mut sh = Command::new("sh");
    sh.args(["-c", "while :; do perf bench sched pipe -l 200000 >/dev/null 2>&1; done"]).stdin(Stdio::null());
    Proc::spawn(&mut sh, "perf bench sched pipe").unwrap()
}

/// Runs `perf bench sched pipe` to the end: about 400,000 switches and as many wakeups, enough
/// to wrap a ring of 65,536 on a CPU.
fn fill() {
    let out = Command::new("perf").args(["bench", "sched", "pipe", "-l", "200000"]).output().expect("perf bench");
    assert!(out.status.success(), "perf bench sched pipe: {}", String::from_utf8_lossy(&out.stderr));
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

#[test]
fn batched_reads_hold_what_slot_by_slot_reads_hold() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cpus = possible_cpus();
    let record = size_of::<CaptureRecord>();
    // The daemon's default ring; the batch sizes below split it into many calls and into one.
    // (65,536 slots read the same way, only longer: `reading_costs` times them.)
    for slots in [4096u32] {
        let probe = recorder(slots);
        fill();
        let rings = capture::read(&probe, slots).unwrap();
        let wrapped = rings.cpus.iter().filter(|c| c.written > u64::from(slots)).count();
        assert!(wrapped > 0, "{slots} slots: no ring wrapped: {:?}", rings.cpus);
        let ways = [
            Lookup::Batched { bytes: BATCH_BYTES },
            Lookup::Batched { bytes: 1 },
            Lookup::Batched { bytes: 7 * record * cpus },
            Lookup::Batched { bytes: usize::MAX },
        ];
        let before = capture::read_slots(&probe, slots, Lookup::PerSlot).unwrap();
        let batched: Vec<Vec<CaptureRecord>> =
            ways.iter().map(|&way| capture::read_slots(&probe, slots, way).unwrap()).collect();
        let after = capture::read_slots(&probe, slots, Lookup::PerSlot).unwrap();
        assert_eq!(before.len(), slots as usize * cpus);
        assert_eq!(after.len(), before.len());
        let mut unchanged = 0;
        for (i, (a, c)) in before.iter().zip(&after).enumerate() {
            let (slot, cpu) = (i / cpus, i % cpus);
            for (way, b) in ways.iter().zip(&batched) {
                assert_eq!(b.len(), before.len(), "{way:?}");
                if a == c {
                    assert_eq!(&b[i], a, "{slots} slots, {way:?}: slot {slot} of CPU {cpu} unchanged, read otherwise");
                } else {
                    // `seq` is written first: even a torn record's is between the two readings'.
                    assert!(
                        a.seq <= b[i].seq && b[i].seq <= c.seq,
                        "{slots} slots, {way:?}: slot {slot} of CPU {cpu} went from {} to {} but read {}",
                        a.seq,
                        c.seq,
                        b[i].seq
                    );
                }
            }
            unchanged += usize::from(a == c);
        }
        let written = before.iter().filter(|r| r.seq != 0).count();
        println!(
            "{slots} slots × {cpus} CPUs: {unchanged} of {} unchanged across the readings ({written} written); \
             {wrapped} ring(s) wrapped",
            before.len()
        );
        assert!(unchanged * 10 >= before.len() * 9, "too few slots held still to compare: {unchanged}");
        assert!(written * 2 >= before.len(), "the rings are mostly empty: {written} records");
        gap_marked(rings.records);
    }
}

/// A reading with a stretch of one CPU's records left out (as a ring wrapped between two
/// readings leaves it), encoded as the daemon encodes a capture and read back with Perfetto's own
/// classes: the gap is a slice on that CPU's own track from the record before it to the one after
/// it, counting those left out; that CPU's events after it are a bundle marked `lost_events`;
/// nothing of the stretch is there, and every other event is.
fn gap_marked(mut records: Vec<CaptureRecord>) {
    const LEFT_OUT: u64 = 100;
    let cpu = (0..possible_cpus() as u32).max_by_key(|&c| records.iter().filter(|r| r.cpu == c).count()).unwrap();
    let mut seqs: Vec<u64> = records.iter().filter(|r| r.cpu == cpu).map(|r| r.seq).collect();
    seqs.sort_unstable();
    // A stretch in the middle that the reading held whole.
    let mid = seqs.len() / 2;
    let first = seqs[mid];
    assert!(seqs[mid..].windows(2).take(LEFT_OUT as usize + 1).all(|p| p[1] == p[0] + 1), "no whole stretch");
    let (before, after) = (first - 1, first + LEFT_OUT);
    let at = |seq: u64| records.iter().find(|r| r.cpu == cpu && r.seq == seq).unwrap().ts_ns;
    let (from, to) = (at(before), at(after));
    records.retain(|r| r.cpu != cpu || !(first..after).contains(&r.seq));
    let host = latency_daemon::model::perfetto::Host { release: "test".into(), machine: "x86_64".into(), cpus: 2 };
    let dir = latency_lab::guard::Scratch::new("runqlat-capture-gap").unwrap();
    let file = dir.join("gap.pftrace");
    std::fs::write(&file, latency_daemon::model::perfetto::trace(&records, &host, None)).unwrap();
    let read = latency_lab::oracle::perfetto::read(&file).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(read.gaps(cpu), [(from, to, LEFT_OUT)], "the gap as Perfetto's classes read it");
    let lost: Vec<&(u32, u64)> = read.lost.iter().filter(|(c, _)| *c == cpu).collect();
    assert_eq!(lost.len(), 1, "one bundle of CPU {cpu} after a loss: {:?}", read.lost);
    assert!(lost[0].1 >= to, "the bundle after the gap begins at {} before its end {to}", lost[0].1);
    let inside = read.switches.iter().filter(|s| s.cpu == cpu && s.ts_ns > from && s.ts_ns < to).count();
    let kept = records.iter().filter(|r| r.kind == latency_common::maps::CAPTURE_SWITCH).count();
    assert_eq!((inside, read.switches.len()), (0, kept), "switches inside the gap, and in all");
    println!("a gap of {LEFT_OUT} records on CPU {cpu} ({} µs) marked where it was", (to - from) / 1000);
}

/// A standalone per-CPU array of `entries` values of `V`, each value's first word its key and
/// second its CPU, the rest a pattern of both.
fn standalone<V: aya::Pod>(entries: u32) -> PerCpuArray<MapData, V> {
    let mut map = PerCpuArray::<MapData, V>::create(entries, 0).expect("a per-CPU array");
    let words = size_of::<V>() / 8;
    for key in 0..entries {
        let values: Vec<V> = (0..possible_cpus())
            .map(|cpu| {
                let w: Vec<u64> =
                    (0..words as u64).map(|i| (u64::from(key) << 32) | ((cpu as u64) << 16) | i).collect();
                // SAFETY: `V` is `Pod` of `words` 8-byte words; `w` holds that many.
                unsafe { std::ptr::read_unaligned(w.as_ptr().cast::<V>()) }
            })
            .collect();
        map.set(key, PerCpuValues::try_from(values).unwrap(), 0).unwrap();
    }
    map
}

/// `map` read key by key.
fn by_key<V: aya::Pod>(map: &PerCpuArray<MapData, V>, entries: u32) -> Vec<V> {
    (0..entries).flat_map(|k| map.get(&k, 0).unwrap().to_vec()).collect()
}

/// The batched readings of `map` are its key-by-key one, whatever the bound on a call.
fn exact<V: aya::Pod + PartialEq>(map: &PerCpuArray<MapData, V>, entries: u32) {
    let cpus = possible_cpus();
    let expected = by_key(map, entries);
    for bytes in [BATCH_BYTES, 1, 3 * size_of::<V>() * cpus + 5, usize::MAX] {
        let got: Vec<V> = batch::lookup(map.map(), entries, cpus, bytes).unwrap();
        assert!(got == expected, "{bytes} bytes a call, {} bytes a value: the batched reading differs", size_of::<V>());
    }
}

/// The medians of 21 interleaved readings of `map`, batched (the daemon's bound) and key by key.
fn time<V: aya::Pod>(map: &PerCpuArray<MapData, V>, entries: u32) -> (Duration, Duration) {
    let (mut batched, mut keyed) = (Vec::new(), Vec::new());
    for round in 0..21 {
        let mut time_batched = || {
            let t = Instant::now();
            std::hint::black_box(batch::lookup::<V>(map.map(), entries, possible_cpus(), BATCH_BYTES).unwrap());
            batched.push(t.elapsed());
        };
        let mut time_keyed = || {
            let t = Instant::now();
            std::hint::black_box(by_key(map, entries));
            keyed.push(t.elapsed());
        };
        if round % 2 == 0 {
            time_batched();
            time_keyed();
        } else {
            time_keyed();
            time_batched();
        }
    }
    (median(batched), median(keyed))
}

#[test]
fn a_standalone_array_reads_back_exactly() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // A record's width, a word, and an odd number of keys.
    exact(&standalone::<[u64; 12]>(4096), 4096);
    exact(&standalone::<u64>(1001), 1001);
    let got: Vec<[u64; 12]> = batch::lookup(standalone::<[u64; 12]>(5).map(), 5, possible_cpus(), 100).unwrap();
    for (i, v) in got.iter().enumerate() {
        let (key, cpu) = (i / possible_cpus(), i % possible_cpus());
        assert_eq!(v[0], ((key as u64) << 32) | ((cpu as u64) << 16), "value {i}: key {key}, CPU {cpu}");
        assert_eq!(v[11], ((key as u64) << 32) | ((cpu as u64) << 16) | 11);
    }
    // Asking past the map's end is an error, not a short reading.
    let short = batch::lookup::<u64>(standalone::<u64>(10).map(), 11, possible_cpus(), BATCH_BYTES);
    assert!(matches!(short, Err(batch::BatchError::Lookup { read: 10, entries: 11, .. })), "{short:?}");
}

/// A map without a batched lookup: a queue (BPF_MAP_TYPE_QUEUE) of four words.
fn queue() -> MapData {
    // union bpf_attr for BPF_MAP_CREATE: map_type, key_size, value_size, max_entries; the rest 0.
    let mut attr = [0u32; 16];
    attr[..4].copy_from_slice(&[22, 0, 8, 4]);
    // SAFETY: bpf(2) reads `size` bytes of `attr`, which lives for the call.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, 0, attr.as_mut_ptr(), size_of_val(&attr)) };
    assert!(fd >= 0, "BPF_MAP_CREATE (a queue): {}", std::io::Error::last_os_error());
    // SAFETY: the kernel just returned this descriptor, ours alone.
    MapData::from_fd(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) }).unwrap()
}

#[test]
fn a_map_without_batches_is_unsupported_and_a_reading_needs_what_a_lookup_needs() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // What makes the daemon fall back to a slot at a time, on a map here that has no batches.
    let unsupported = batch::lookup::<u64>(&queue(), 4, possible_cpus(), BATCH_BYTES);
    assert!(matches!(unsupported, Err(batch::BatchError::Unsupported(_))), "{unsupported:?}");
    // The daemon drops every capability after attaching where a lookup needs none: a batched
    // reading must need no more, from a thread that dropped its own.
    let map = standalone::<[u64; 12]>(64);
    let needs = privileges::bpf_needs_capability();
    let read = std::thread::scope(|s| {
        s.spawn(|| {
            privileges::drop_this_thread();
            let effective = privileges::Sets::current().unwrap().effective;
            (effective, batch::lookup::<[u64; 12]>(map.map(), 64, possible_cpus(), BATCH_BYTES).map(|v| v.len()))
        })
        .join()
        .unwrap()
    });
    println!("a lookup needs a capability: {needs}; batched without any: {read:?}");
    assert_eq!(read.0, 0, "the reading thread kept capabilities");
    if !needs {
        assert_eq!(read.1.unwrap(), 64 * possible_cpus(), "a lookup needs no capability here, a batched one must not");
    }
}

/// The medians of 21 interleaved readings of the recorder's rings: batched (the daemon's bound),
/// slot by slot, and the daemon's whole `read` (the counts, batched, sorted).
fn time_rings(probe: &Probe, slots: u32) -> [Duration; 3] {
    let (mut batched, mut per_slot, mut whole) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..21 {
        let time = |way, into: &mut Vec<Duration>| {
            let t = Instant::now();
            let records = capture::read_slots(probe, slots, way).unwrap();
            into.push(t.elapsed());
            assert_eq!(records.len(), slots as usize * possible_cpus());
        };
        if round % 2 == 0 {
            time(Lookup::Batched { bytes: BATCH_BYTES }, &mut batched);
            time(Lookup::PerSlot, &mut per_slot);
        } else {
            time(Lookup::PerSlot, &mut per_slot);
            time(Lookup::Batched { bytes: BATCH_BYTES }, &mut batched);
        }
        let t = Instant::now();
        let rings = capture::read(probe, slots).unwrap();
        whole.push(t.elapsed());
        assert!(!rings.records.is_empty());
    }
    [median(batched), median(per_slot), median(whole)]
}

/// The median of 21 fillings of a fresh buffer of `bytes` (what a reading's memory costs it).
fn time_fresh(bytes: usize) -> Duration {
    median(
        (0..21)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(vec![1u8; bytes]);
                t.elapsed()
            })
            .collect(),
    )
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// A measurement for docs/cost.md, not a check: `cargo test -p latency-daemon --test capture_read
/// reading_costs -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement for docs/cost.md; run by hand"]
fn reading_costs() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cpus = possible_cpus();
    for slots in [4096u32, 65_536] {
        let probe = recorder(slots);
        fill();
        let quiet = time_rings(&probe, slots);
        let storm = storm();
        std::thread::sleep(Duration::from_secs(1));
        let busy = time_rings(&probe, slots);
        drop(storm);
        let bytes = slots as usize * cpus * size_of::<CaptureRecord>();
        for (when, [b, p, w]) in [("alone", quiet), ("beside perf bench sched pipe", busy)] {
            println!(
                "capture read, {slots} slots × {cpus} CPUs ({:.2} MiB), {when}, medians of 21: batched {} ({:.0} MiB/s), \
                 slot by slot {}, the daemon's whole read (counts, batched, sorted) {}",
                mib(bytes),
                ms(b),
                mib(bytes) / b.as_secs_f64(),
                ms(p),
                ms(w)
            );
        }
    }

    // A slot of a host with more CPUs, as bytes: values as wide as 64 and 256 CPUs' records
    // together, on this host's CPUs (possible CPUs are the host's; the width is not).
    if cpus != 2 {
        println!("per-CPU widths here are for 2 possible CPUs; this host has {cpus}: no wide figures");
        return;
    }
    let entries = 4096;
    let wide = |name: &str, value: usize, time: &dyn Fn() -> (Duration, Duration)| {
        let quiet = time();
        let storm = storm();
        std::thread::sleep(Duration::from_secs(1));
        let busy = time();
        drop(storm);
        let bytes = entries as usize * value * cpus;
        for (when, (b, k)) in [("alone", quiet), ("beside perf bench sched pipe", busy)] {
            println!(
                "per-CPU array of {entries} keys, {} bytes a key ({name}, {:.0} MiB), {when}: batched {} ({:.0} MiB/s), \
                 key by key {}",
                value * cpus,
                mib(bytes),
                ms(b),
                mib(bytes) / b.as_secs_f64(),
                ms(k),
            );
        }
        println!("  filling a fresh buffer of {:.0} MiB: {}", mib(bytes), ms(time_fresh(bytes)));
    };
    let map = standalone::<[u64; 384]>(entries);
    exact(&map, entries);
    wide("as 64 CPUs' records", 3072, &|| time(&map, entries));
    drop(map);
    let map = standalone::<[u64; 1536]>(entries);
    exact(&map, entries);
    wide("as 256 CPUs' records", 12_288, &|| time(&map, entries));
}
