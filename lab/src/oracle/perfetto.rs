//! A capture as Perfetto's own generated classes read it (the `perfetto` package's
//! `perfetto_trace_pb2` in the lab's venv, `cargo xtask setup`): in, a trace file; out, its
//! scheduler, idle and IRQ events and threads. Fields the classes do not know (a wrong tag or type) are refused,
//! as are packets out of order within a CPU.
use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, bail};
use serde::Deserialize;

/// The venv `cargo xtask setup` fills.
const PYTHON: &str = "/var/cache/runqlat-tools/venv/bin/python3";

const DECODE: &str = r#"
import json, sys
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace
trace = Trace()
trace.ParseFromString(open(sys.argv[1], "rb").read())
unknown(trace, "trace")
out = {"switches": [], "wakings": [], "migrations": [], "idles": [], "irqs": [], "softirqs": [], "threads": {}, "release": "", "slices": [], "lost": []}
tracks = {}
for p in trace.packet:
    if p.HasField("track_descriptor"):
        d = p.track_descriptor
        tracks[d.uuid] = (d.thread.tid if d.HasField("thread") else -1, d.name)
    if p.HasField("track_event"):
        e = p.track_event
        notes = {a.name: (a.string_value if a.HasField("string_value") else a.uint_value) for a in e.debug_annotations}
        tid, track = tracks.get(e.track_uuid, (-1, ""))
        out["slices"].append([tid, p.timestamp, int(e.type), e.name, notes, track])
    if p.HasField("ftrace_events") and p.ftrace_events.lost_events:
        out["lost"].append([p.ftrace_events.cpu, p.ftrace_events.event[0].timestamp if p.ftrace_events.event else 0])
    if p.HasField("system_info"):
        out["release"] = p.system_info.utsname.release
    if p.HasField("process_tree"):
        for t in p.process_tree.threads:
            out["threads"][str(t.tid)] = [t.tgid, t.name]
    if not p.HasField("ftrace_events"):
        continue
    cpu, last = p.ftrace_events.cpu, 0
    for e in p.ftrace_events.event:
        if e.timestamp < last:
            sys.exit(f"cpu {cpu}: event at {e.timestamp} after {last}")
        last = e.timestamp
        kind = e.WhichOneof("event")
        if kind == "sched_switch":
            s = e.sched_switch
            out["switches"].append([cpu, e.timestamp, s.prev_pid, s.next_pid, s.prev_state, s.prev_comm, s.next_comm])
        elif kind == "sched_waking":
            w = e.sched_waking
            out["wakings"].append([cpu, e.timestamp, e.pid, w.pid, w.target_cpu, w.comm])
        elif kind == "sched_migrate_task":
            m = e.sched_migrate_task
            out["migrations"].append([cpu, e.timestamp, m.pid, m.orig_cpu, m.dest_cpu])
        elif kind == "cpu_idle":
            out["idles"].append([cpu, e.timestamp, e.cpu_idle.state, e.cpu_idle.cpu_id])
        elif kind in ("irq_handler_entry", "irq_handler_exit"):
            i = getattr(e, kind)
            ret = i.ret if kind == "irq_handler_exit" else None
            name = i.name if kind == "irq_handler_entry" else None
            out["irqs"].append([cpu, e.timestamp, e.pid, i.irq, kind == "irq_handler_entry", ret, name])
        elif kind in ("softirq_entry", "softirq_exit"):
            out["softirqs"].append([cpu, e.timestamp, e.pid, getattr(e, kind).vec, kind == "softirq_entry"])
        else:
            sys.exit(f"unexpected event {kind}")
print(json.dumps(out))
"#;

/// One `sched_switch`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Switch {
    pub cpu: u32,
    pub ts_ns: u64,
    pub prev: i32,
    pub next: i32,
    pub prev_state: i64,
    pub prev_comm: String,
    pub next_comm: String,
}

/// One `sched_waking`, on the waker's CPU.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Waking {
    pub cpu: u32,
    pub ts_ns: u64,
    pub waker: u32,
    pub woken: i32,
    pub target_cpu: i32,
    pub comm: String,
}

/// One `sched_migrate_task`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Migration {
    pub cpu: u32,
    pub ts_ns: u64,
    pub pid: i32,
    pub from: i32,
    pub to: i32,
}

/// A `TrackEvent` slice's begin or end on a track: a thread's, or one of its own (a CPU's gaps).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct SliceEvent {
    /// The thread its track descriptor names; -1 for a track with none.
    pub tid: i64,
    pub ts_ns: u64,
    /// 1: begin, 2: end.
    pub kind: i32,
    pub name: String,
    /// Its debug annotations, by name: text or a number.
    pub notes: std::collections::BTreeMap<String, serde_json::Value>,
    /// Its track's name.
    pub track: String,
}

/// One `cpu_idle`: `state` the idle state entered, or `u32::MAX` (`PWR_EVENT_EXIT`) on leaving.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Idle {
    pub cpu: u32,
    pub ts_ns: u64,
    pub state: u32,
    pub cpu_id: u32,
}

/// One `irq_handler_entry` (`entry`) or `irq_handler_exit` (with what the handler returned).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Irq {
    pub cpu: u32,
    pub ts_ns: u64,
    /// The task it interrupted.
    pub pid: u32,
    pub irq: i32,
    pub entry: bool,
    pub ret: Option<i32>,
    /// The handler's name, at the entry.
    pub name: Option<String>,
}

/// One `softirq_entry` (`entry`) or `softirq_exit`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Softirq {
    pub cpu: u32,
    pub ts_ns: u64,
    /// The task it ran in.
    pub pid: u32,
    pub vec: u32,
    pub entry: bool,
}

/// What the classes read.
#[derive(Debug, Clone, Deserialize)]
pub struct Capture {
    pub switches: Vec<Switch>,
    pub wakings: Vec<Waking>,
    pub migrations: Vec<Migration>,
    pub idles: Vec<Idle>,
    pub irqs: Vec<Irq>,
    pub softirqs: Vec<Softirq>,
    /// tid → (tgid, name).
    pub threads: std::collections::BTreeMap<String, (i32, String)>,
    pub release: String,
    pub slices: Vec<SliceEvent>,
    /// Each bundle marked `lost_events` (events of its CPU lost before it): its CPU and first
    /// event's time.
    pub lost: Vec<(u32, u64)>,
}

impl Capture {
    /// The gaps marked on `cpu`'s own track ("CPU N: events missing"): from the last event before
    /// each to the first after it, and how many events are missing there.
    pub fn gaps(&self, cpu: u32) -> Vec<(u64, u64, u64)> {
        let track = format!("CPU {cpu}: events missing");
        let on: Vec<&SliceEvent> = self.slices.iter().filter(|s| s.track == track).collect();
        on.iter()
            .enumerate()
            .filter(|(_, s)| s.kind == 1)
            .filter_map(|(i, s)| {
                let end = on[i + 1..].iter().find(|e| e.kind == 2)?;
                Some((s.ts_ns, end.ts_ns, s.notes.get("missing")?.as_u64()?))
            })
            .collect()
    }
}

/// `path` read with Perfetto's classes.
pub fn read(path: &Path) -> anyhow::Result<Capture> {
    let out = Command::new(PYTHON)
        .args(["-c", &format!("{}{DECODE}", super::REFUSE_UNKNOWN)])
        .arg(path)
        .output()
        .with_context(|| format!("{PYTHON} (run `cargo xtask setup`)"))?;
    if !out.status.success() {
        bail!("Perfetto's classes refused {}: {}", path.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    serde_json::from_slice(&out.stdout).context("their JSON")
}
