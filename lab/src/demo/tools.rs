//! The watchers of one mode, each a child process: in, the workload's pid; out, what each saw —
//! our `record --json` (two clocks), `perf sched latency -p`, runqlat's log2 histogram — and a
//! bpftool check that none of our programs stayed loaded.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::Serialize;

use super::recording::Recording;
use crate::cmd;
use crate::guard::{Lines, Proc, Slurp, check_interrupted, piped};

/// `perf sched record` needs this long to open its events on every CPU (measured: ~1.5 s on
/// this 2-CPU VM; it prints nothing when it is ready).
const PERF_WARMUP: Duration = Duration::from_millis(1500);
const STOP_LIMIT: Duration = Duration::from_secs(30);
/// The largest trace whose idle switches are counted (6 s of `io` alone: ~4 MB).
const IDLE_COUNT_MAX_BYTES: u64 = 24 << 20;

/// `latency-daemon record --json --pid PID [--clock …]`, attached and measuring.
#[derive(Debug)]
pub struct Recorder {
    proc: Proc,
    stdout: Slurp,
    stderr: Lines,
    clock: &'static str,
}

impl Recorder {
    /// `clock`: "monotonic" or "run-queue" (the flag's spelling).
    pub fn start(daemon: &Path, pid: u32, clock: &'static str) -> anyhow::Result<Recorder> {
        let mut command = Command::new(daemon);
        command.args(["record", "--duration", "10m", "--json", "--pid", &pid.to_string(), "--clock", clock]);
        let mut proc = Proc::spawn_own_group(piped(&mut command), &format!("record --clock {clock}"))?;
        let stdout = Slurp::read(proc.take_stdout().context("record's stdout")?);
        let stderr = Lines::read(proc.take_stderr().context("record's stderr")?);
        Ok(Recorder { proc, stdout, stderr, clock })
    }

    pub fn wait_attached(&mut self, deadline: Instant) -> anyhow::Result<()> {
        self.stderr
            .wait_for("attached", deadline)
            .with_context(|| format!("record --clock {} did not attach", self.clock))
    }

    /// SIGINT: it reports what it measured and detaches.
    pub fn stop(mut self) -> anyhow::Result<Recording> {
        let status = self.proc.stop(libc::SIGINT, STOP_LIMIT)?;
        let json = self.stdout.text();
        let stderr = self.stderr.rest();
        if !status.success() {
            bail!("record --clock {} failed ({status}): {}", self.clock, stderr.join("\n"));
        }
        // The JSON says "run_queue" for the flag's "run-queue".
        Recording::parse(&json, &self.clock.replace('-', "_"))
    }
}

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
    /// the trace holds the events raised while a CPU idles; see the report for why they differ.
    pub idle_switches: Vec<(u32, u64, u64)>,
}

/// `perf sched record -a` writing to a file.
#[derive(Debug)]
pub struct Perf {
    proc: Proc,
    stderr: Lines,
    file: PathBuf,
    started: Instant,
}

impl Perf {
    pub fn start(file: &Path) -> anyhow::Result<Perf> {
        let mut command = Command::new("perf");
        command.args(["sched", "record", "-a", "-m", "16M", "-o"]).arg(file);
        let mut proc = Proc::spawn_own_group(piped(&mut command), "perf sched record")?;
        let stderr = Lines::read(proc.take_stderr().context("perf's stderr")?);
        Ok(Perf { proc, stderr, file: file.to_owned(), started: Instant::now() })
    }

    pub fn wait_ready(&mut self) -> anyhow::Result<()> {
        while self.started.elapsed() < PERF_WARMUP {
            check_interrupted()?;
            if self.proc.exited() {
                bail!("perf sched record exited at once: {:?}", self.stderr.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// SIGINT (perf finishes its file), then `perf sched latency -p` on it.
    pub fn stop(mut self, with_idle_switches: bool) -> anyhow::Result<PerfResult> {
        let status = self.proc.stop(libc::SIGINT, STOP_LIMIT)?;
        let stderr = self.stderr.rest().join("\n");
        // perf exits 0, or 130 / by the signal itself, when stopped with SIGINT.
        if !(status.success() || status.code() == Some(130) || status.code().is_none()) {
            bail!("perf sched record failed ({status}): {stderr}");
        }
        let lost = stderr.lines().find(|l| l.to_lowercase().contains("lost")).map(str::to_owned);
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

/// libbpf-tools `runqlat -p PID`: every thread of the process, one log2-µs histogram.
#[derive(Debug)]
pub struct Runqlat {
    proc: Proc,
    stdout: Lines,
}

impl Runqlat {
    pub fn start(pid: u32) -> anyhow::Result<Runqlat> {
        // stdbuf: runqlat's stdout is a pipe here, and its "Tracing…" line (printed once its
        // programs are attached) would otherwise sit in the stdio buffer until it exits.
        let mut command = Command::new("stdbuf");
        command.args(["-oL", "runqlat", "-p", &pid.to_string()]);
        let mut proc = Proc::spawn_own_group(piped(&mut command), "runqlat")?;
        let stdout = Lines::read(proc.take_stdout().context("runqlat's stdout")?);
        Ok(Runqlat { proc, stdout })
    }

    pub fn wait_ready(&mut self, deadline: Instant) -> anyhow::Result<()> {
        self.stdout.wait_for("Tracing", deadline).context("runqlat did not start tracing")
    }

    /// SIGINT: it prints its histogram and exits. Returns counts by log2 slot.
    pub fn stop(mut self) -> anyhow::Result<Vec<u64>> {
        let status = self.proc.stop(libc::SIGINT, STOP_LIMIT)?;
        let text = self.stdout.rest().join("\n");
        if !status.success() {
            bail!("runqlat failed ({status}): {text}");
        }
        Ok(parse_runqlat(&text))
    }
}

/// `  low -> high : count |***|` rows: slot k holds ⌊delay in µs⌋ in [2^k, 2^(k+1)), slot 0 also
/// holds 0 µs (runqlat takes log2 of the truncated µs value, with log2(0) = 0).
pub fn parse_runqlat(text: &str) -> Vec<u64> {
    let mut slots = Vec::new();
    for line in text.lines() {
        let Some((range, rest)) = line.split_once(':') else { continue };
        let Some((low, _high)) = range.split_once("->") else { continue };
        let (Ok(low), Some(Ok(count))) =
            (low.trim().parse::<u64>(), rest.split('|').next().map(|c| c.trim().parse::<u64>()))
        else {
            continue;
        };
        let slot = if low == 0 { 0 } else { low.ilog2() as usize };
        if slots.len() <= slot {
            slots.resize(slot + 1, 0);
        }
        slots[slot] += count;
    }
    slots
}

/// Ids of the STAMPS maps loaded now (every instance of our program has one).
pub fn stamps_maps() -> anyhow::Result<BTreeSet<u64>> {
    let maps = bpftool(&["map", "show"])?;
    Ok(maps
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["name"] == "STAMPS")
        .filter_map(|m| m["id"].as_u64())
        .collect())
}

/// Our programs that outlived the demo: STAMPS maps loaded since `before` (and the programs using
/// them) that no live process holds. Every child of the demo is reaped by now, so a map a live
/// process holds belongs to someone else (another user of this machine may run the daemon).
/// The kernel frees maps a little after the last fd closes, so this retries for 5 s.
pub fn leftovers(before: &BTreeSet<u64>) -> anyhow::Result<Vec<String>> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let held = held_maps();
        let new: Vec<u64> =
            stamps_maps()?.into_iter().filter(|id| !before.contains(id) && !held.contains(id)).collect();
        if new.is_empty() {
            return Ok(Vec::new());
        }
        if Instant::now() > deadline {
            let mut found: Vec<String> = new.iter().map(|id| format!("map STAMPS (id {id})")).collect();
            let progs = bpftool(&["prog", "show"])?;
            for prog in progs.as_array().into_iter().flatten() {
                let ids = prog["map_ids"].as_array().into_iter().flatten().filter_map(serde_json::Value::as_u64);
                if ids.into_iter().any(|i| new.contains(&i)) {
                    found.push(format!("program {} (id {})", prog["name"], prog["id"]));
                }
            }
            return Ok(found);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Map ids that some live process has an fd for (`map_id:` in /proc/*/fdinfo/*).
fn held_maps() -> BTreeSet<u64> {
    let mut held = BTreeSet::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return held };
    for process in procs.flatten() {
        let Ok(fds) = std::fs::read_dir(process.path().join("fdinfo")) else { continue };
        for fd in fds.flatten() {
            let text = std::fs::read_to_string(fd.path()).unwrap_or_default();
            held.extend(text.lines().filter_map(|l| l.strip_prefix("map_id:")?.trim().parse::<u64>().ok()));
        }
    }
    held
}

fn bpftool(args: &[&str]) -> anyhow::Result<serde_json::Value> {
    let text = cmd::stdout(Command::new("bpftool").arg("-j").args(args))?;
    if text.trim().is_empty() {
        return Ok(serde_json::Value::Array(Vec::new()));
    }
    serde_json::from_str(&text).context("bpftool printed no JSON")
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
    fn runqlat_slots_follow_the_low_bound() {
        let text = "Tracing run queue latency... Hit Ctrl-C to end.\n\n     usecs               : count    distribution\n\
                    \x20        0 -> 1          : 3        |****   |\n         2 -> 3          : 0        |       |\n\
                    \x20        4 -> 7          : 12       |*******|\n     16384 -> 32767      : 2        |*      |\n";
        let slots = parse_runqlat(text);
        assert_eq!(slots.len(), 15);
        assert_eq!((slots[0], slots[1], slots[2], slots[14]), (3, 0, 12, 2));
        assert_eq!(slots.iter().sum::<u64>(), 17);
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
