//! A capture as Perfetto's native trace: the recorder's records, the kernel release and the CPU
//! count in; the bytes of a `perfetto.protos.Trace` out — the scheduler events as ftrace events
//! in one bundle per CPU (so ui.perfetto.dev and trace_processor show CPU tracks, thread states
//! and wakeup arrows; a gap in a CPU's sequence splits its bundle, marked `lost_events`, and is
//! a slice on a track of that CPU's), and the threads and processes by name. Only the fields written here are
//! declared; their tags are those of Perfetto's own protos (checked by reading captures back with
//! Perfetto's generated classes, which refuse nothing they do not know).
use std::collections::BTreeMap;

use latency_common::maps::{
    CAPTURE_IDLE, CAPTURE_IRQ, CAPTURE_IRQ_EXIT, CAPTURE_MIGRATE, CAPTURE_SOFTIRQ, CAPTURE_SOFTIRQ_EXIT,
    CAPTURE_SWITCH, CAPTURE_WAKING, CaptureRecord,
};
use prost::Message as _;

use super::{
    capture::{Gap, Wait, gaps},
    comm_string,
    units::fmt_ns,
};

#[derive(Clone, PartialEq, prost::Message)]
struct Trace {
    #[prost(message, repeated, tag = "1")]
    packet: Vec<TracePacket>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    timestamp: Option<u64>,
    #[prost(message, optional, tag = "1")]
    ftrace_events: Option<FtraceEventBundle>,
    #[prost(message, optional, tag = "2")]
    process_tree: Option<ProcessTree>,
    #[prost(uint32, optional, tag = "10")]
    trusted_packet_sequence_id: Option<u32>,
    #[prost(message, optional, tag = "45")]
    system_info: Option<SystemInfo>,
    #[prost(message, optional, tag = "11")]
    track_event: Option<TrackEvent>,
    #[prost(message, optional, tag = "60")]
    track_descriptor: Option<TrackDescriptor>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    uuid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    name: Option<String>,
    #[prost(message, optional, tag = "4")]
    thread: Option<ThreadDescriptor>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ThreadDescriptor {
    #[prost(int32, optional, tag = "1")]
    pid: Option<i32>,
    #[prost(int64, optional, tag = "2")]
    tid: Option<i64>,
    #[prost(string, optional, tag = "5")]
    thread_name: Option<String>,
}

/// `TrackEvent.Type`: TYPE_SLICE_BEGIN, TYPE_SLICE_END.
const SLICE_BEGIN: i32 = 1;
const SLICE_END: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
struct TrackEvent {
    #[prost(message, repeated, tag = "4")]
    debug_annotations: Vec<DebugAnnotation>,
    #[prost(int32, optional, tag = "9")]
    r#type: Option<i32>,
    #[prost(uint64, optional, tag = "11")]
    track_uuid: Option<u64>,
    #[prost(string, repeated, tag = "22")]
    categories: Vec<String>,
    #[prost(string, optional, tag = "23")]
    name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct DebugAnnotation {
    #[prost(uint64, optional, tag = "3")]
    uint_value: Option<u64>,
    #[prost(string, optional, tag = "6")]
    string_value: Option<String>,
    #[prost(string, optional, tag = "10")]
    name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SystemInfo {
    #[prost(message, optional, tag = "1")]
    utsname: Option<Utsname>,
    #[prost(uint32, optional, tag = "8")]
    num_cpus: Option<u32>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Utsname {
    #[prost(string, optional, tag = "1")]
    sysname: Option<String>,
    #[prost(string, optional, tag = "3")]
    release: Option<String>,
    #[prost(string, optional, tag = "4")]
    machine: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct FtraceEventBundle {
    #[prost(uint32, optional, tag = "1")]
    cpu: Option<u32>,
    #[prost(message, repeated, tag = "2")]
    event: Vec<FtraceEvent>,
    /// Events of this CPU were lost between the bundle before and this one.
    #[prost(bool, optional, tag = "3")]
    lost_events: Option<bool>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct FtraceEvent {
    #[prost(uint64, optional, tag = "1")]
    timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "2")]
    pid: Option<u32>,
    #[prost(message, optional, tag = "4")]
    sched_switch: Option<SchedSwitch>,
    #[prost(message, optional, tag = "20")]
    sched_waking: Option<SchedWaking>,
    #[prost(message, optional, tag = "491")]
    sched_migrate_task: Option<SchedMigrateTask>,
    #[prost(message, optional, tag = "13")]
    cpu_idle: Option<CpuIdle>,
    #[prost(message, optional, tag = "36")]
    irq_handler_entry: Option<IrqHandlerEntry>,
    #[prost(message, optional, tag = "37")]
    irq_handler_exit: Option<IrqHandlerExit>,
    #[prost(message, optional, tag = "24")]
    softirq_entry: Option<Softirq>,
    #[prost(message, optional, tag = "25")]
    softirq_exit: Option<Softirq>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SchedSwitch {
    #[prost(string, optional, tag = "1")]
    prev_comm: Option<String>,
    #[prost(int32, optional, tag = "2")]
    prev_pid: Option<i32>,
    #[prost(int32, optional, tag = "3")]
    prev_prio: Option<i32>,
    #[prost(int64, optional, tag = "4")]
    prev_state: Option<i64>,
    #[prost(string, optional, tag = "5")]
    next_comm: Option<String>,
    #[prost(int32, optional, tag = "6")]
    next_pid: Option<i32>,
    #[prost(int32, optional, tag = "7")]
    next_prio: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SchedWaking {
    #[prost(string, optional, tag = "1")]
    comm: Option<String>,
    #[prost(int32, optional, tag = "2")]
    pid: Option<i32>,
    #[prost(int32, optional, tag = "3")]
    prio: Option<i32>,
    #[prost(int32, optional, tag = "4")]
    success: Option<i32>,
    #[prost(int32, optional, tag = "5")]
    target_cpu: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SchedMigrateTask {
    #[prost(string, optional, tag = "1")]
    comm: Option<String>,
    #[prost(int32, optional, tag = "2")]
    pid: Option<i32>,
    #[prost(int32, optional, tag = "3")]
    prio: Option<i32>,
    #[prost(int32, optional, tag = "4")]
    orig_cpu: Option<i32>,
    #[prost(int32, optional, tag = "5")]
    dest_cpu: Option<i32>,
}

/// power.proto's `CpuIdleFtraceEvent`.
#[derive(Clone, PartialEq, prost::Message)]
struct CpuIdle {
    #[prost(uint32, optional, tag = "1")]
    state: Option<u32>,
    #[prost(uint32, optional, tag = "2")]
    cpu_id: Option<u32>,
}

/// irq.proto's `IrqHandlerEntryFtraceEvent` (without `handler`, the function's address).
#[derive(Clone, PartialEq, prost::Message)]
struct IrqHandlerEntry {
    #[prost(int32, optional, tag = "1")]
    irq: Option<i32>,
    #[prost(string, optional, tag = "2")]
    name: Option<String>,
}

/// irq.proto's `IrqHandlerExitFtraceEvent`.
#[derive(Clone, PartialEq, prost::Message)]
struct IrqHandlerExit {
    #[prost(int32, optional, tag = "1")]
    irq: Option<i32>,
    #[prost(int32, optional, tag = "2")]
    ret: Option<i32>,
}

/// irq.proto's `SoftirqEntryFtraceEvent` and `SoftirqExitFtraceEvent` (the same one field).
#[derive(Clone, PartialEq, prost::Message)]
struct Softirq {
    #[prost(uint32, optional, tag = "1")]
    vec: Option<u32>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ProcessTree {
    #[prost(message, repeated, tag = "1")]
    processes: Vec<Process>,
    #[prost(message, repeated, tag = "2")]
    threads: Vec<Thread>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Process {
    #[prost(int32, optional, tag = "1")]
    pid: Option<i32>,
    #[prost(string, repeated, tag = "3")]
    cmdline: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Thread {
    #[prost(int32, optional, tag = "1")]
    tid: Option<i32>,
    #[prost(string, optional, tag = "2")]
    name: Option<String>,
    #[prost(int32, optional, tag = "3")]
    tgid: Option<i32>,
}

/// The one sequence every packet of a capture is on.
const SEQUENCE: u32 = 1;

/// What the trace says about where it was taken.
#[derive(Clone, Debug, Default)]
pub struct Host {
    /// `uname -r`.
    pub release: String,
    /// `uname -m`.
    pub machine: String,
    pub cpus: u32,
}

fn pid(tid: u32) -> Option<i32> {
    Some(i32::try_from(tid).unwrap_or(i32::MAX))
}

fn signed(n: u32) -> Option<i32> {
    Some(i32::try_from(n).unwrap_or(-1))
}

/// The ftrace event of one record, or none for a kind this build does not know.
fn event(r: &CaptureRecord) -> Option<FtraceEvent> {
    let mut e = FtraceEvent { timestamp: Some(r.ts_ns), ..FtraceEvent::default() };
    match r.kind {
        CAPTURE_SWITCH => {
            e.pid = Some(r.pid);
            e.sched_switch = Some(SchedSwitch {
                prev_comm: Some(comm_string(&r.comm)),
                prev_pid: pid(r.pid),
                prev_prio: Some(r.prio),
                prev_state: Some(i64::from(r.arg)),
                next_comm: Some(comm_string(&r.other_comm)),
                next_pid: pid(r.other_pid),
                next_prio: Some(r.other_prio),
            });
        }
        CAPTURE_WAKING => {
            e.pid = Some(r.other_pid);
            e.sched_waking = Some(SchedWaking {
                comm: Some(comm_string(&r.comm)),
                pid: pid(r.pid),
                prio: Some(r.prio),
                success: Some(1),
                target_cpu: signed(r.arg),
            });
        }
        CAPTURE_MIGRATE => {
            e.pid = Some(r.other_pid);
            e.sched_migrate_task = Some(SchedMigrateTask {
                comm: Some(comm_string(&r.comm)),
                pid: pid(r.pid),
                prio: Some(r.prio),
                orig_cpu: signed(r.arg),
                dest_cpu: signed(r.other_arg),
            });
        }
        CAPTURE_IDLE => {
            e.pid = Some(r.other_pid);
            e.cpu_idle = Some(CpuIdle { state: Some(r.arg), cpu_id: Some(r.other_arg) });
        }
        CAPTURE_IRQ => {
            e.pid = Some(r.other_pid);
            e.irq_handler_entry = Some(IrqHandlerEntry { irq: signed(r.arg), name: Some(comm_string(&r.comm)) });
        }
        CAPTURE_IRQ_EXIT => {
            e.pid = Some(r.other_pid);
            e.irq_handler_exit = Some(IrqHandlerExit { irq: signed(r.arg), ret: signed(r.other_arg) });
        }
        CAPTURE_SOFTIRQ => {
            e.pid = Some(r.other_pid);
            e.softirq_entry = Some(Softirq { vec: Some(r.arg) });
        }
        CAPTURE_SOFTIRQ_EXIT => {
            e.pid = Some(r.other_pid);
            e.softirq_exit = Some(Softirq { vec: Some(r.arg) });
        }
        _ => return None,
    }
    Some(e)
}

/// The threads the records name (tid → (tgid, comm), the latest comm each), idle tasks left out.
fn threads(records: &[CaptureRecord]) -> BTreeMap<u32, (u32, String)> {
    let mut threads = BTreeMap::new();
    for r in records {
        let mut seen = |tid: u32, tgid: u32, comm: &[u8; 16]| {
            if tid != 0 {
                threads.insert(tid, (tgid, comm_string(comm)));
            }
        };
        seen(r.pid, r.tgid, &r.comm);
        if r.kind != CAPTURE_MIGRATE || r.other_pid != 0 {
            seen(r.other_pid, r.other_tgid, &r.other_comm);
        }
    }
    threads
}

/// The victim's thread track: a uuid no thread track of another producer is likely to take.
fn wait_track(tid: u32) -> u64 {
    0x7275_6e71_6c61_0000_u64 ^ u64::from(tid) << 16
}

/// The wait as a slice on its thread's track (merged by Perfetto with the thread's scheduling
/// states), named by its length, annotated with its reason, cause split, cgroup and pod.
fn wait_packets(w: &Wait) -> [TracePacket; 3] {
    let uuid = wait_track(w.tid);
    let text = |name: &str, value: &str| DebugAnnotation {
        name: Some(name.to_owned()),
        string_value: Some(value.to_owned()),
        ..DebugAnnotation::default()
    };
    let number = |name: &str, value: u64| DebugAnnotation {
        name: Some(name.to_owned()),
        uint_value: Some(value),
        ..DebugAnnotation::default()
    };
    let mut annotations =
        vec![text("reason", &w.reason), number("cpu", u64::from(w.cpu)), number("delay_ns", w.delay_ns())];
    annotations.extend(w.parts.iter().map(|(part, ns)| number(&format!("{}_ns", part.replace('+', "_")), *ns)));
    annotations.push(text("cgroup", &w.cgroup));
    if !w.pod.is_empty() {
        annotations.push(text("pod", &w.pod));
    }
    if w.waiting {
        annotations.push(text("state", "still waiting when captured"));
    }
    let name = format!("run-queue wait {}{}", fmt_ns(w.delay_ns()), if w.waiting { " (still waiting)" } else { "" });
    [
        TracePacket {
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(uuid),
                name: Some(w.comm.clone()),
                thread: Some(ThreadDescriptor {
                    pid: pid(w.pid),
                    tid: Some(i64::from(w.tid)),
                    thread_name: Some(w.comm.clone()),
                }),
            }),
            ..TracePacket::default()
        },
        TracePacket {
            timestamp: Some(w.start_ns),
            track_event: Some(TrackEvent {
                debug_annotations: annotations,
                r#type: Some(SLICE_BEGIN),
                track_uuid: Some(uuid),
                categories: vec!["runqlat".into()],
                name: Some(name),
            }),
            ..TracePacket::default()
        },
        TracePacket {
            timestamp: Some(w.end_ns),
            track_event: Some(TrackEvent { r#type: Some(SLICE_END), track_uuid: Some(uuid), ..TrackEvent::default() }),
            ..TracePacket::default()
        },
    ]
}

/// A CPU's gaps' track: a uuid no thread's track (`wait_track`) or another producer's takes.
fn gap_track(cpu: u32) -> u64 {
    0x7275_6e71_6c61_0000_u64 ^ 1 << 63 ^ u64::from(cpu)
}

/// Each gap as a slice on a track of its CPU's own ("CPU 1: events missing"), from the last event
/// before it to the first after, named and annotated with how many are missing.
fn gap_packets(gaps: &[Gap]) -> Vec<TracePacket> {
    let mut packets = Vec::new();
    let mut described = std::collections::BTreeSet::new();
    for g in gaps {
        let uuid = gap_track(g.cpu);
        if described.insert(g.cpu) {
            packets.push(TracePacket {
                track_descriptor: Some(TrackDescriptor {
                    uuid: Some(uuid),
                    name: Some(format!("CPU {}: events missing", g.cpu)),
                    thread: None,
                }),
                ..TracePacket::default()
            });
        }
        let number = |name: &str, value: u64| DebugAnnotation {
            name: Some(name.to_owned()),
            uint_value: Some(value),
            ..DebugAnnotation::default()
        };
        packets.push(TracePacket {
            timestamp: Some(g.from_ns),
            track_event: Some(TrackEvent {
                debug_annotations: vec![number("cpu", u64::from(g.cpu)), number("missing", g.missing)],
                r#type: Some(SLICE_BEGIN),
                track_uuid: Some(uuid),
                categories: vec!["runqlat".into()],
                name: Some(format!("{} event{} missing", g.missing, if g.missing == 1 { "" } else { "s" })),
            }),
            ..TracePacket::default()
        });
        packets.push(TracePacket {
            timestamp: Some(g.to_ns),
            track_event: Some(TrackEvent { r#type: Some(SLICE_END), track_uuid: Some(uuid), ..TrackEvent::default() }),
            ..TracePacket::default()
        });
    }
    packets
}

/// The trace of `records` (by time, as the rings are read) taken on `host`, the `wait` it was
/// taken for (if one) marked on its thread. Where a CPU's sequence has a gap, its events after it
/// are a bundle of their own marked `lost_events`, and the gap a slice on a track of that CPU's.
pub fn trace(records: &[CaptureRecord], host: &Host, wait: Option<&Wait>) -> Vec<u8> {
    let first = records.first().map_or(0, |r| r.ts_ns);
    let packet = |p: TracePacket| TracePacket { trusted_packet_sequence_id: Some(SEQUENCE), ..p };
    let mut packets = vec![packet(TracePacket {
        timestamp: Some(first),
        system_info: Some(SystemInfo {
            utsname: Some(Utsname {
                sysname: Some("Linux".into()),
                release: Some(host.release.clone()),
                machine: Some(host.machine.clone()),
            }),
            num_cpus: Some(host.cpus),
        }),
        ..TracePacket::default()
    })];
    let threads = threads(records);
    let mut processes: BTreeMap<u32, String> = BTreeMap::new();
    for (&tid, (tgid, comm)) in &threads {
        // A process by its main thread's name where the records name it, else any thread's.
        if tid == *tgid || !processes.contains_key(tgid) {
            processes.insert(*tgid, comm.clone());
        }
    }
    packets.push(packet(TracePacket {
        timestamp: Some(first),
        process_tree: Some(ProcessTree {
            processes: processes
                .into_iter()
                .map(|(tgid, comm)| Process { pid: pid(tgid), cmdline: vec![comm] })
                .collect(),
            threads: threads
                .into_iter()
                .map(|(tid, (tgid, comm))| Thread { tid: pid(tid), name: Some(comm), tgid: pid(tgid) })
                .collect(),
        }),
        ..TracePacket::default()
    }));
    let gaps = gaps(records);
    let mut by_cpu: BTreeMap<u32, Vec<FtraceEvent>> = BTreeMap::new();
    for r in records {
        if let Some(e) = event(r) {
            by_cpu.entry(r.cpu).or_default().push(e);
        }
    }
    for (cpu, mut events) in by_cpu {
        // Split at each gap's end, the last part first: every bundle after a gap is marked.
        let mut parts = Vec::new();
        for g in gaps.iter().rev().filter(|g| g.cpu == cpu) {
            let at = events.partition_point(|e| e.timestamp.unwrap_or(0) < g.to_ns);
            parts.push((events.split_off(at), true));
        }
        parts.push((events, false));
        for (events, lost) in parts.into_iter().rev().filter(|(events, _)| !events.is_empty()) {
            packets.push(packet(TracePacket {
                ftrace_events: Some(FtraceEventBundle {
                    cpu: Some(cpu),
                    event: events,
                    lost_events: lost.then_some(true),
                }),
                ..TracePacket::default()
            }));
        }
    }
    packets.extend(gap_packets(&gaps).into_iter().map(packet));
    if let Some(w) = wait {
        packets.extend(wait_packets(w).map(packet));
    }
    Trace { packet: packets }.encode_to_vec()
}

#[cfg(test)]
mod tests {
    use latency_common::maps::CAPTURE_IDLE_EXIT;

    use super::*;

    fn comm(s: &str) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..s.len()].copy_from_slice(s.as_bytes());
        c
    }

    #[test]
    fn a_gap_in_a_cpus_sequence_splits_its_bundle_and_is_marked_where_it_was() {
        let at = |cpu, seq, ts_ns| CaptureRecord {
            kind: CAPTURE_SWITCH,
            seq,
            seq_end: seq,
            ts_ns,
            cpu,
            pid: 7,
            other_pid: 8,
            ..CaptureRecord::default()
        };
        // CPU 1 lost 5..=9 (between 40 and 100) and 11 (between 100 and 120); CPU 0 nothing.
        let records = [at(0, 1, 10), at(1, 3, 30), at(1, 4, 40), at(1, 10, 100), at(0, 2, 110), at(1, 12, 120)];
        let t = Trace::decode(trace(&records, &Host::default(), None).as_slice()).unwrap();
        let bundles: Vec<(u32, Vec<u64>, Option<bool>)> = t
            .packet
            .iter()
            .filter_map(|p| p.ftrace_events.as_ref())
            .map(|b| (b.cpu.unwrap(), b.event.iter().map(|e| e.timestamp.unwrap()).collect(), b.lost_events))
            .collect();
        assert_eq!(
            bundles,
            [(0, vec![10, 110], None), (1, vec![30, 40], None), (1, vec![100], Some(true)), (1, vec![120], Some(true))]
        );
        let track = t.packet.iter().find_map(|p| p.track_descriptor.as_ref()).unwrap();
        assert_eq!((track.name.as_deref(), track.thread.is_none()), (Some("CPU 1: events missing"), true));
        type Notes<'a> = Vec<(Option<&'a str>, Option<u64>)>;
        let slices: Vec<(u64, i32, Option<&str>, Notes)> = t
            .packet
            .iter()
            .filter_map(|p| Some((p.timestamp?, p.track_event.as_ref()?)))
            .map(|(ts, e)| {
                assert_eq!(e.track_uuid, track.uuid);
                let notes = e.debug_annotations.iter().map(|a| (a.name.as_deref(), a.uint_value)).collect();
                (ts, e.r#type.unwrap(), e.name.as_deref(), notes)
            })
            .collect();
        let notes = |n| vec![(Some("cpu"), Some(1)), (Some("missing"), Some(n))];
        assert_eq!(
            slices,
            [
                (40, SLICE_BEGIN, Some("5 events missing"), notes(5)),
                (100, SLICE_END, None, vec![]),
                (100, SLICE_BEGIN, Some("1 event missing"), notes(1)),
                (120, SLICE_END, None, vec![]),
            ]
        );
    }

    #[test]
    fn records_become_per_cpu_bundles_and_named_threads() {
        let switch = CaptureRecord {
            kind: CAPTURE_SWITCH,
            ts_ns: 100,
            cpu: 1,
            pid: 7,
            tgid: 7,
            comm: comm("victim"),
            other_pid: 8,
            other_tgid: 7,
            other_comm: comm("hog"),
            prio: 120,
            other_prio: 98,
            ..CaptureRecord::default()
        };
        let waking = CaptureRecord {
            kind: CAPTURE_WAKING,
            ts_ns: 90,
            cpu: 0,
            pid: 7,
            tgid: 7,
            comm: comm("victim"),
            other_pid: 9,
            other_tgid: 9,
            other_comm: comm("waker"),
            arg: 1,
            ..CaptureRecord::default()
        };
        let bytes =
            trace(&[waking, switch], &Host { release: "6.1.0".into(), machine: "x86_64".into(), cpus: 2 }, None);
        let t = Trace::decode(bytes.as_slice()).unwrap();
        assert_eq!(t.packet.len(), 4, "system info, process tree, a bundle per CPU");
        let tree = t.packet[1].process_tree.as_ref().unwrap();
        let names: Vec<(Option<i32>, Option<&str>)> = tree.threads.iter().map(|t| (t.tid, t.name.as_deref())).collect();
        assert_eq!(names, [(Some(7), Some("victim")), (Some(8), Some("hog")), (Some(9), Some("waker"))]);
        let cpu0 = t.packet[2].ftrace_events.as_ref().unwrap();
        assert_eq!(cpu0.cpu, Some(0));
        let w = cpu0.event[0].sched_waking.as_ref().unwrap();
        assert_eq!(
            (cpu0.event[0].pid, w.pid, w.target_cpu),
            (Some(9), Some(7), Some(1)),
            "the waker is the event's pid"
        );
        let s = t.packet[3].ftrace_events.as_ref().unwrap().event[0].sched_switch.as_ref().unwrap();
        assert_eq!(
            (s.prev_pid, s.next_pid, s.next_comm.as_deref(), s.prev_state),
            (Some(7), Some(8), Some("hog"), Some(0))
        );
    }

    #[test]
    fn the_wait_is_a_slice_on_its_thread_with_its_causes() {
        let wait = Wait {
            tid: 7,
            pid: 7,
            comm: "victim".into(),
            cpu: 1,
            start_ns: 1_000_000,
            end_ns: 6_000_000,
            reason: "wakeup".into(),
            parts: vec![("throttled", 4_000_000), ("held", 999_000)],
            cgroup: "/kubepods/x".into(),
            pod: "default/web/app".into(),
            ..Wait::default()
        };
        let bytes = trace(&[], &Host::default(), Some(&wait));
        let t = Trace::decode(bytes.as_slice()).unwrap();
        let track = t.packet.iter().find_map(|p| p.track_descriptor.as_ref()).unwrap();
        assert_eq!(track.thread.as_ref().and_then(|t| t.tid), Some(7));
        let events: Vec<(u64, &TrackEvent)> =
            t.packet.iter().filter_map(|p| Some((p.timestamp?, p.track_event.as_ref()?))).collect();
        assert_eq!(events.len(), 2);
        assert_eq!((events[0].0, events[0].1.r#type), (1_000_000, Some(SLICE_BEGIN)));
        assert_eq!((events[1].0, events[1].1.r#type), (6_000_000, Some(SLICE_END)));
        assert!(events.iter().all(|(_, e)| e.track_uuid == track.uuid));
        let annotated: Vec<(&str, String)> = events[0]
            .1
            .debug_annotations
            .iter()
            .map(|a| {
                let value = a.string_value.clone().or(a.uint_value.map(|n| n.to_string())).unwrap_or_default();
                (a.name.as_deref().unwrap_or(""), value)
            })
            .collect();
        for want in
            [("throttled_ns", "4000000"), ("held_ns", "999000"), ("pod", "default/web/app"), ("reason", "wakeup")]
        {
            assert!(annotated.iter().any(|(n, v)| (*n, v.as_str()) == want), "{want:?} in {annotated:?}");
        }
        assert!(events[0].1.name.as_deref().unwrap().starts_with("run-queue wait 5 ms"), "{:?}", events[0].1.name);
    }

    /// A protobuf varint.
    fn varint(mut n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
        out
    }

    /// `FtraceEvent { timestamp, pid, <field>: { its varint fields } }` on the wire, built by hand
    /// from the field numbers in Perfetto's protos (ftrace_event.proto: timestamp 1, pid 2,
    /// cpu_idle 13, softirq_entry 24, softirq_exit 25, irq_handler_entry 36, irq_handler_exit 37;
    /// power.proto `CpuIdleFtraceEvent`: state 1, cpu_id 2; irq.proto: `irq` 1, `name` 2 (a
    /// string, `IrqHandlerEntryFtraceEvent`), `ret` 2 (`IrqHandlerExitFtraceEvent`), `vec` 1), and
    /// after the varint fields a string one if `text` has it.
    fn wire(ts: u64, pid: u32, field: u64, inner: &[(u64, u64)], text: Option<(u64, &str)>) -> Vec<u8> {
        let mut body: Vec<u8> = inner.iter().flat_map(|&(f, v)| [varint(f << 3), varint(v)].concat()).collect();
        if let Some((f, s)) = text {
            body.extend([varint(f << 3 | 2), varint(s.len() as u64), s.as_bytes().to_vec()].concat());
        }
        [
            varint(1 << 3),
            varint(ts),
            varint(2 << 3),
            varint(u64::from(pid)),
            varint(field << 3 | 2),
            varint(body.len() as u64),
            body,
        ]
        .concat()
    }

    #[test]
    fn idle_irq_and_softirq_records_are_perfettos_ftrace_events_field_for_field() {
        let r = |kind, arg, other_arg, other_pid| CaptureRecord {
            kind,
            comm: if kind == CAPTURE_IRQ { comm("virtio0-input.0") } else { [0; 16] },
            ts_ns: 1_000_000_007,
            cpu: 1,
            arg,
            other_arg,
            other_pid,
            other_tgid: other_pid,
            other_comm: comm("ksoftirqd/1"),
            ..CaptureRecord::default()
        };
        let cases = [
            (r(CAPTURE_IDLE, 1, 1, 0), wire(1_000_000_007, 0, 13, &[(1, 1), (2, 1)], None)),
            (
                r(CAPTURE_IDLE, CAPTURE_IDLE_EXIT, 1, 0),
                wire(1_000_000_007, 0, 13, &[(1, u64::from(u32::MAX)), (2, 1)], None),
            ),
            (r(CAPTURE_IRQ, 11, 0, 42), wire(1_000_000_007, 42, 36, &[(1, 11)], Some((2, "virtio0-input.0")))),
            (r(CAPTURE_IRQ_EXIT, 11, 1, 42), wire(1_000_000_007, 42, 37, &[(1, 11), (2, 1)], None)),
            (r(CAPTURE_SOFTIRQ, 9, 0, 42), wire(1_000_000_007, 42, 24, &[(1, 9)], None)),
            (r(CAPTURE_SOFTIRQ_EXIT, 9, 0, 42), wire(1_000_000_007, 42, 25, &[(1, 9)], None)),
        ];
        for (record, expected) in cases {
            let got = event(&record).map(|e| e.encode_to_vec());
            assert_eq!(got, Some(expected), "kind {} arg {}", record.kind, record.arg);
        }
        assert_eq!(event(&r(99, 0, 0, 0)), None, "a kind this build does not know");
    }

    #[test]
    fn idle_and_irq_events_go_in_their_cpus_bundle_by_time_and_name_the_interrupted_task() {
        let at = |kind, ts_ns, arg, other_pid, name: &str| CaptureRecord {
            kind,
            ts_ns,
            cpu: 0,
            arg,
            other_pid,
            other_tgid: other_pid,
            other_comm: comm(name),
            ..CaptureRecord::default()
        };
        let records = [
            at(CAPTURE_IDLE, 10, CAPTURE_IDLE_EXIT, 0, ""),
            at(CAPTURE_SOFTIRQ, 20, 1, 0, ""),
            at(CAPTURE_IRQ, 25, 24, 0, ""),
            at(CAPTURE_IRQ_EXIT, 26, 24, 0, ""),
            at(CAPTURE_SOFTIRQ_EXIT, 30, 1, 0, ""),
            at(CAPTURE_SOFTIRQ, 40, 9, 15, "ksoftirqd/0"),
        ];
        let t = Trace::decode(trace(&records, &Host::default(), None).as_slice()).unwrap();
        let bundle = t.packet[2].ftrace_events.as_ref().unwrap();
        let kinds: Vec<(u64, bool, bool, bool, bool, bool)> = bundle
            .event
            .iter()
            .map(|e| {
                (
                    e.timestamp.unwrap(),
                    e.cpu_idle.is_some(),
                    e.softirq_entry.is_some(),
                    e.irq_handler_entry.is_some(),
                    e.irq_handler_exit.is_some(),
                    e.softirq_exit.is_some(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                (10, true, false, false, false, false),
                (20, false, true, false, false, false),
                (25, false, false, true, false, false),
                (26, false, false, false, true, false),
                (30, false, false, false, false, true),
                (40, false, true, false, false, false),
            ]
        );
        let tree = t.packet[1].process_tree.as_ref().unwrap();
        let names: Vec<(Option<i32>, Option<&str>)> = tree.threads.iter().map(|t| (t.tid, t.name.as_deref())).collect();
        assert_eq!(names, [(Some(15), Some("ksoftirqd/0"))], "the idle task is no thread");
    }
}
