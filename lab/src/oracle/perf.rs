//! `perf sched`, an oracle that rebuilds every delay from its own trace: in, a trace file to
//! write; out, `perf sched latency -p` rows by tid, perf's complaint about lost events, and how
//! often each CPU switched into and out of idle in the trace.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::Serialize;

use crate::cmd;
use crate::guard::{Lines, Proc, check_interrupted, piped};

/// `perf sched record` needs this long to open its events on every CPU (measured: ~1.5 s on
/// this 2-CPU VM; it prints nothing when it is ready).
const PERF_WARMUP: Duration = Duration::from_millis(1500);
const STOP_LIMIT: Duration = Duration::from_secs(30);
/// The largest trace whose idle switches are counted (6 s of `io` alone: ~4 MB).
const IDLE_COUNT_MAX_BYTES: u64 = 24 << 20;

/// One row of `perf sched latency -p`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PerfLatency {
    pub comm: String,
    /// perf calls it "Switches"; it is the number of delays perf rebuilt for the task.
    pub delays: u64,
    pub avg_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PerfResult {
    pub latency: BTreeMap<u32, PerfLatency>,
    /// perf's own complaint about lost events, if any.
    pub lost: Option<String>,
    pub data_bytes: u64,
    /// From perf's trace: per CPU, switches into and out of the idle task. Equal numbers mean
    /// the trace holds the events raised while a CPU idles; see the demo's report for why they
    /// differ.
    pub idle_switches: Vec<(u32, u64, u64)>,
}

/// A perf recording into a file (`perf sched record`, `perf record`): started, waited for until
/// its events are open, stopped with SIGINT so it finishes the file.
#[derive(Debug)]
pub(crate) struct Recording {
    proc: Proc,
    stderr: Lines,
    what: &'static str,
    started: Instant,
}

impl Recording {
    /// Runs `perf ARGS` (which write to a file); `what` names it in errors.
    pub(crate) fn start(args: &[&str], file: &Path, what: &'static str) -> anyhow::Result<Recording> {
        ensure_tracefs()?;
        let mut command = Command::new("perf");
        command.args(args).arg(file);
        let mut proc = Proc::spawn(piped(&mut command), what)?;
        let stderr = Lines::read(proc.take_stderr().context("perf's stderr")?);
        Ok(Recording { proc, stderr, what, started: Instant::now() })
    }

    /// Returns once perf has had the time it needs to open its events.
    pub(crate) fn wait_ready(&mut self) -> anyhow::Result<()> {
        while self.started.elapsed() < PERF_WARMUP {
            check_interrupted()?;
            if self.proc.exited() {
                bail!("{} exited at once: {:?}", self.what, self.stderr.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// SIGINT (perf finishes its file); perf's complaint about lost events, if any.
    pub(crate) fn stop(mut self) -> anyhow::Result<Option<String>> {
        let status = self.proc.stop(libc::SIGINT, STOP_LIMIT)?;
        let stderr = self.stderr.rest().join("\n");
        // perf exits 0, or 130 / by the signal itself, when stopped with SIGINT.
        if !(status.success() || status.code() == Some(130) || status.code().is_none()) {
            bail!("{} failed ({status}): {stderr}", self.what);
        }
        Ok(stderr.lines().find(|l| l.to_lowercase().contains("lost")).map(str::to_owned))
    }
}

/// `perf sched record -a` writing to a file.
#[derive(Debug)]
pub struct Perf {
    recording: Recording,
    file: PathBuf,
}

impl Perf {
    pub fn start(file: &Path) -> anyhow::Result<Perf> {
        let recording = Recording::start(&["sched", "record", "-a", "-m", "16M", "-o"], file, "perf sched record")?;
        Ok(Perf { recording, file: file.to_owned() })
    }

    /// Returns once perf has had the time it needs to open its events.
    pub fn wait_ready(&mut self) -> anyhow::Result<()> {
        self.recording.wait_ready()
    }

    /// SIGINT (perf finishes its file), then `perf sched latency -p` on it; with
    /// `with_idle_switches`, the trace's switches into and out of idle too (slow: seconds).
    pub fn stop(self, with_idle_switches: bool) -> anyhow::Result<PerfResult> {
        let lost = self.recording.stop()?;
        let mut latency = Command::new("perf");
        latency.args(["sched", "latency", "-p", "-i"]).arg(&self.file);
        let latency = parse_latency(&cmd::stdout(&mut latency)?);
        let data_bytes = std::fs::metadata(&self.file).map(|m| m.len()).unwrap_or(0);
        // Printing the trace costs ~5 s per million events; skip it when something else on the
        // machine filled the trace (the report then says it was not counted).
        let idle_switches = if with_idle_switches && data_bytes <= IDLE_COUNT_MAX_BYTES {
            idle_switches(&self.file)?
        } else {
            Vec::new()
        };
        Ok(PerfResult { latency, lost, data_bytes, idle_switches })
    }
}

/// perf reads the sched events' formats from tracefs; `cargo xtask setup` mounts it, a test
/// run on a fresh machine may not have.
fn ensure_tracefs() -> anyhow::Result<()> {
    if !Path::new("/sys/kernel/tracing/events/sched").exists() {
        cmd::run(Command::new("mount").args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"]))
            .context("mounting tracefs for perf")?;
    }
    Ok(())
}

fn idle_switches(file: &Path) -> anyhow::Result<Vec<(u32, u64, u64)>> {
    let mut script = Command::new("perf");
    script.args(["script", "-F", "cpu,event,trace", "-i"]).arg(file);
    Ok(count_idle_switches(&cmd::stdout(&mut script)?))
}

/// Rows look like `  comm:tid | 12.3 ms | 45 | avg: 1.234 ms | max: 5.678 ms | …`.
pub fn parse_latency(text: &str) -> BTreeMap<u32, PerfLatency> {
    let mut rows = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split('|').map(str::trim).collect();
        if fields.len() < 5 || !fields[3].starts_with("avg:") {
            continue;
        }
        let Some((comm, tid)) = fields[0].rsplit_once(':') else { continue };
        let ms =
            |field: &str, tag: &str| field.trim_start_matches(tag).trim().trim_end_matches("ms").trim().parse().ok();
        let (Ok(tid), Some(avg_ms), Some(max_ms)) = (tid.parse::<u32>(), ms(fields[3], "avg:"), ms(fields[4], "max:"))
        else {
            continue;
        };
        let delays = fields[2].parse().unwrap_or(0);
        rows.insert(tid, PerfLatency { comm: comm.to_owned(), delays, avg_ms, max_ms });
    }
    rows
}

/// `perf script -F cpu,event,trace` lines: `[001] sched:sched_switch: prev_comm=… prev_pid=0 …`.
pub fn count_idle_switches(text: &str) -> Vec<(u32, u64, u64)> {
    let mut per_cpu: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for line in text.lines().filter(|l| l.contains("sched_switch:")) {
        let cpu = line.trim_start().strip_prefix('[').and_then(|l| l.split(']').next()).and_then(|c| c.parse().ok());
        let Some(cpu) = cpu else { continue };
        let entry = per_cpu.entry(cpu).or_default();
        entry.0 += u64::from(line.contains(" next_pid=0 "));
        entry.1 += u64::from(line.contains(" prev_pid=0 "));
    }
    per_cpu.into_iter().map(|(cpu, (into, out))| (cpu, into, out)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_latency_rows_by_tid() {
        let text = "\n  Task                  |   Runtime ms  | Switches | Avg delay ms    | Max delay ms    |\n \
                    ---------\n  compete/3:1234        |    812.113 ms |      214 | avg:  17.116 ms | max:  24.001 ms | max start: 1.0 s | max end: 1.0 s\n  \
                    a:b:77                |      1.0 ms |        1 | avg:   0.004 ms | max:   0.004 ms |\n";
        let rows = parse_latency(text);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[&1234], PerfLatency { comm: "compete/3".into(), delays: 214, avg_ms: 17.116, max_ms: 24.001 });
        assert_eq!(rows[&77].comm, "a:b");
    }

    #[test]
    fn idle_switches_per_cpu() {
        let text = "[000] sched:sched_switch: prev_comm=a prev_pid=5 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120\n\
                    [000] sched:sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=a next_pid=5 next_prio=120\n\
                    [001] sched:sched_switch: prev_comm=b prev_pid=6 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120\n\
                    [001] sched:sched_waking: comm=b pid=6 prio=120 target_cpu=001\n";
        assert_eq!(count_idle_switches(text), [(0, 1, 1), (1, 1, 0)]);
    }
}

/// `perf record` of `sched_switch` and `sched_waking` (and with `start_with_cpu_events`,
/// `cpu_idle` and the irq tracepoints) on every CPU: the events one by one, on
/// CLOCK_BOOTTIME (the clock a capture is on) to set beside a capture's. The kernel will not
/// time tracepoints on CLOCK_BOOTTIME (not NMI-safe: "wrong clockid"), so perf records on
/// CLOCK_MONOTONIC and each time is moved by BOOTTIME − MONOTONIC, which changes only across a
/// suspend.
#[derive(Debug)]
pub struct SchedTrace {
    recording: Recording,
    file: PathBuf,
    boot_offset_ns: u64,
}

/// CLOCK_BOOTTIME − CLOCK_MONOTONIC now.
fn boot_offset_ns() -> u64 {
    let read = |clock| {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid clock id and a timespec to fill.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let mono = read(libc::CLOCK_MONOTONIC);
    read(libc::CLOCK_BOOTTIME).saturating_sub(mono)
}

/// One event of a [`SchedTrace`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedEvent {
    Switch {
        cpu: u32,
        ts_ns: u64,
        prev: u32,
        next: u32,
    },
    /// `tid` is the task that woke `woken` (the one running on `cpu`).
    Waking {
        cpu: u32,
        ts_ns: u64,
        tid: u32,
        woken: u32,
        target_cpu: u32,
    },
    /// `power:cpu_idle`: `state` the idle state entered, or `u32::MAX` on leaving it.
    Idle {
        cpu: u32,
        ts_ns: u64,
        state: u32,
    },
    /// `irq:irq_handler_entry` (`entry`) or `irq:irq_handler_exit`.
    Irq {
        cpu: u32,
        ts_ns: u64,
        irq: u32,
        entry: bool,
    },
    /// `irq:softirq_entry` (`entry`) or `irq:softirq_exit`.
    Softirq {
        cpu: u32,
        ts_ns: u64,
        vec: u32,
        entry: bool,
    },
}

impl SchedEvent {
    fn ts_ns_mut(&mut self) -> &mut u64 {
        match self {
            SchedEvent::Switch { ts_ns, .. }
            | SchedEvent::Waking { ts_ns, .. }
            | SchedEvent::Idle { ts_ns, .. }
            | SchedEvent::Irq { ts_ns, .. }
            | SchedEvent::Softirq { ts_ns, .. } => ts_ns,
        }
    }
}

/// What `start_with_cpu_events` adds: what each CPU does besides running tasks.
const CPU_EVENTS: [&str; 5] =
    ["power:cpu_idle", "irq:irq_handler_entry", "irq:irq_handler_exit", "irq:softirq_entry", "irq:softirq_exit"];

impl SchedTrace {
    pub fn start(file: &Path) -> anyhow::Result<SchedTrace> {
        SchedTrace::record(file, &[])
    }

    /// As `start`, with each CPU's idle states (`power:cpu_idle`), IRQ handlers and softirqs too.
    pub fn start_with_cpu_events(file: &Path) -> anyhow::Result<SchedTrace> {
        SchedTrace::record(file, &CPU_EVENTS)
    }

    fn record(file: &Path, also: &[&str]) -> anyhow::Result<SchedTrace> {
        let mut args = vec!["record", "-e", "sched:sched_switch", "-e", "sched:sched_waking"];
        for event in also {
            args.extend(["-e", event]);
        }
        args.extend(["-a", "-k", "mono", "-m", "16M", "-o"]);
        let recording = Recording::start(&args, file, "perf record")?;
        Ok(SchedTrace { recording, file: file.to_owned(), boot_offset_ns: boot_offset_ns() })
    }

    /// Returns once perf has had the time it needs to open its events.
    pub fn wait_ready(&mut self) -> anyhow::Result<()> {
        self.recording.wait_ready()
    }

    /// SIGINT, then the trace's events in perf's order, and perf's complaint about lost events.
    pub fn stop(self) -> anyhow::Result<(Vec<SchedEvent>, Option<String>)> {
        let lost = self.recording.stop()?;
        let mut script = Command::new("perf");
        script.args(["script", "--ns", "-F", "tid,cpu,time,event,trace", "-i"]).arg(&self.file);
        let mut events = parse_sched_script(&cmd::stdout(&mut script)?);
        for event in &mut events {
            *event.ts_ns_mut() += self.boot_offset_ns;
        }
        Ok((events, lost))
    }
}

/// `perf script --ns -F tid,cpu,time,event,trace` lines: `  123 [001] 4567.000000123:
/// sched:sched_switch: prev_comm=a prev_pid=123 … ==> next_comm=b next_pid=456 …`.
pub fn parse_sched_script(text: &str) -> Vec<SchedEvent> {
    let mut events = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(cpu_at) = words.iter().position(|w| w.starts_with('[') && w.ends_with(']')) else { continue };
        // perf prints -1 for a task it no longer knows (one that exited: its last switch, with
        // prev_state=X): the line still counts, its task unknown (`u32::MAX`).
        let (Some(tid), Some(cpu), Some(time), Some(event)) = (
            cpu_at
                .checked_sub(1)
                .and_then(|i| words[i].parse::<i64>().ok())
                .map(|t| u32::try_from(t).unwrap_or(u32::MAX)),
            words[cpu_at].trim_matches(['[', ']']).parse::<u32>().ok(),
            words.get(cpu_at + 1).map(|t| t.trim_end_matches(':')),
            words.get(cpu_at + 2),
        ) else {
            continue;
        };
        let Some((s, ns)) = time.split_once('.') else { continue };
        let (Ok(s), Ok(ns)) = (s.parse::<u64>(), ns.parse::<u64>()) else { continue };
        let ts_ns = s * 1_000_000_000 + ns;
        let field = |key: &str| {
            words[cpu_at + 3..].iter().find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse::<u32>().ok())
        };
        match *event {
            "sched:sched_switch:" => {
                if let (Some(prev), Some(next)) = (field("prev_pid"), field("next_pid")) {
                    events.push(SchedEvent::Switch { cpu, ts_ns, prev, next });
                }
            }
            "sched:sched_waking:" => {
                if let (Some(woken), Some(target_cpu)) = (field("pid"), field("target_cpu")) {
                    events.push(SchedEvent::Waking { cpu, ts_ns, tid, woken, target_cpu });
                }
            }
            "power:cpu_idle:" => {
                if let Some(state) = field("state") {
                    events.push(SchedEvent::Idle { cpu, ts_ns, state });
                }
            }
            "irq:irq_handler_entry:" | "irq:irq_handler_exit:" => {
                if let Some(irq) = field("irq") {
                    events.push(SchedEvent::Irq { cpu, ts_ns, irq, entry: *event == "irq:irq_handler_entry:" });
                }
            }
            "irq:softirq_entry:" | "irq:softirq_exit:" => {
                if let Some(vec) = field("vec") {
                    events.push(SchedEvent::Softirq { cpu, ts_ns, vec, entry: *event == "irq:softirq_entry:" });
                }
            }
            _ => {}
        }
    }
    events
}

#[cfg(test)]
mod sched_script_tests {
    use super::*;

    #[test]
    fn switches_wakings_idle_and_irqs_are_read_with_their_cpu_time_and_fields() {
        let text = "     0 [001]  4567.000000123: sched:sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 \
                    prev_state=R ==> next_comm=my thread next_pid=456 next_prio=120\n\
                    \x20  456 [001]  4567.000001000: sched:sched_waking: comm=sh pid=789 prio=120 target_cpu=000\n\
                    \x20    0 [000]  4567.000002000: power:cpu_idle: state=1 cpu_id=0\n\
                    \x20    0 [000]  4567.000003000: power:cpu_idle: state=4294967295 cpu_id=0\n\
                    \x20    0 [000]  4567.000004000: irq:irq_handler_entry: irq=11 name=virtio0\n\
                    \x20    0 [000]  4567.000005000: irq:irq_handler_exit: irq=11 ret=handled\n\
                    \x20  456 [001]  4567.000006000: irq:softirq_entry: vec=1 [action=TIMER]\n\
                    \x20  456 [001]  4567.000007000: irq:softirq_exit: vec=1 [action=TIMER]\n\
                    \x20   -1 [001]  4567.000008000: sched:sched_switch: prev_comm=gone prev_pid=456 prev_prio=120 \
                    prev_state=X ==> next_comm=swapper/1 next_pid=0 next_prio=120\n\
                    garbage\n";
        assert_eq!(
            parse_sched_script(text),
            [
                SchedEvent::Switch { cpu: 1, ts_ns: 4_567_000_000_123, prev: 0, next: 456 },
                SchedEvent::Waking { cpu: 1, ts_ns: 4_567_000_001_000, tid: 456, woken: 789, target_cpu: 0 },
                SchedEvent::Idle { cpu: 0, ts_ns: 4_567_000_002_000, state: 1 },
                SchedEvent::Idle { cpu: 0, ts_ns: 4_567_000_003_000, state: u32::MAX },
                SchedEvent::Irq { cpu: 0, ts_ns: 4_567_000_004_000, irq: 11, entry: true },
                SchedEvent::Irq { cpu: 0, ts_ns: 4_567_000_005_000, irq: 11, entry: false },
                SchedEvent::Softirq { cpu: 1, ts_ns: 4_567_000_006_000, vec: 1, entry: true },
                SchedEvent::Softirq { cpu: 1, ts_ns: 4_567_000_007_000, vec: 1, entry: false },
                SchedEvent::Switch { cpu: 1, ts_ns: 4_567_000_008_000, prev: 456, next: 0 },
            ]
        );
    }
}
