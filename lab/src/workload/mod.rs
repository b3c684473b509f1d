//! `cargo xtask workload <mode>`: the loads of the perf-sched experiment and of the 2005 stall
//! report, as named threads of one process. In: a mode, a thread count, seconds; out: each
//! thread's tid as it starts and, when done, what it measured about itself (CPU time, its own
//! run_delay, loop gaps) — text, or one JSON event per line with `--json` (the demo's input).
mod crew;
mod event;
pub mod weights;

use std::io::{BufRead as _, Write as _};
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

pub use crew::{Body, Crew, Spec, gettid, group, set_thread_name};
pub use event::{Done, Event};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// CPUs/2 threads spinning (at least one).
    Cpu,
    /// CPUs threads looping on usleep(1000).
    Io,
    /// 4 × CPUs threads spinning.
    Compete,
    /// lat3: one thread reading CLOCK_MONOTONIC in a tight loop beside 2 × CPUs spinners.
    Stall,
    /// Two groups of spinners at two nice levels, 2 × CPUs threads in all.
    Nice,
}

impl Mode {
    pub const ALL: [Mode; 5] = [Mode::Cpu, Mode::Io, Mode::Compete, Mode::Stall, Mode::Nice];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Cpu => "cpu",
            Mode::Io => "io",
            Mode::Compete => "compete",
            Mode::Stall => "stall",
            Mode::Nice => "nice",
        }
    }

    /// The default thread count on `cpus` CPUs (for `stall`: the hogs; the loop is one more).
    pub fn default_threads(self, cpus: usize) -> usize {
        match self {
            Mode::Cpu => (cpus / 2).max(1),
            Mode::Io => cpus,
            Mode::Compete => 4 * cpus,
            Mode::Stall | Mode::Nice => 2 * cpus,
        }
    }
}

/// `stall`'s loop thread, the one whose gaps are compared with our preempt delays.
pub const STALL_LOOP: &str = "stall/loop";

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(value_enum)]
    pub mode: Mode,
    /// Threads (default per mode: cpu CPUs/2, io CPUs, compete 4×CPUs, stall 2×CPUs hogs beside
    /// the loop, nice 2×CPUs split into the two groups).
    #[arg(long)]
    pub threads: Option<usize>,
    /// How long each thread works, from its own start.
    #[arg(long, default_value_t = 6.0)]
    pub secs: f64,
    /// `nice`: the two nice levels, e.g. `--nice=-10,0`.
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_NICE, allow_hyphen_values = true)]
    pub nice: Vec<i32>,
    /// One JSON event per line instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print `ready`, then start the threads only after a line on stdin, and once all are done
    /// keep them blocked until stdin sends another line or closes (so tools can be attached
    /// before the first thread exists and detached before any thread exits).
    #[arg(long, hide = true)]
    pub wait_for_go: bool,
}

/// `nice`'s two levels unless told otherwise.
pub const DEFAULT_NICE: [i32; 2] = [0, 10];

pub fn cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// The threads of `mode` on this machine, at its default thread count and nice levels.
pub fn default_plan(mode: Mode) -> Vec<Spec> {
    plan(mode, mode.default_threads(cpus()), DEFAULT_NICE)
}

/// The threads of `mode`.
pub fn plan(mode: Mode, threads: usize, nice: [i32; 2]) -> Vec<Spec> {
    let spec = |name: String, group: &str, body, nice| Spec { name, group: group.to_owned(), body, nice };
    match mode {
        Mode::Cpu => group("cpu", Body::Spin, threads),
        Mode::Io => group("io", Body::Sleep1ms, threads),
        Mode::Compete => group("compete", Body::Spin, threads),
        Mode::Stall => {
            let mut all = vec![spec(STALL_LOOP.to_owned(), "stall-loop", Body::ClockLoop, 0)];
            all.extend((0..threads).map(|i| spec(format!("stall/hog{i}"), "stall-hog", Body::Spin, 0)));
            all
        }
        Mode::Nice => {
            // Interleaved, so neither group gets a head start on the CPUs.
            (0..threads)
                .map(|i| {
                    let level = nice[i % 2];
                    let group = nice_group(level);
                    spec(format!("{group}/{}", i / 2), &group, Body::Spin, level)
                })
                .collect()
        }
    }
}

/// `nice0`, `nice10`, `nice-10`: the group (and thread-name prefix) of a nice level.
pub fn nice_group(level: i32) -> String {
    format!("nice{level}")
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let cpus = cpus();
    let threads = args.threads.unwrap_or_else(|| args.mode.default_threads(cpus));
    if threads == 0 || !(args.secs > 0.0 && args.secs <= 3600.0) {
        bail!("--threads must be ≥ 1 and --secs in (0, 3600]");
    }
    let &[a, b] = args.nice.as_slice() else { bail!("--nice takes two levels, e.g. --nice 0,10") };
    if a == b || !(-20..=19).contains(&a) || !(-20..=19).contains(&b) {
        bail!("--nice takes two different levels in -20…19");
    }
    let nice = [a, b];
    let specs = plan(args.mode, threads, nice);
    let count = specs.len();
    let mut out = Output { json: args.json, stdout: std::io::stdout().lock() };
    out.print(&Event::Ready { pid: std::process::id(), mode: args.mode, cpus, secs: args.secs })?;
    let stdin = std::io::stdin();
    if args.wait_for_go {
        wait_for_line(&stdin).context("waiting for the go line on stdin")?;
    }

    let began = Instant::now();
    let (tx, rx) = mpsc::channel();
    let mut crew = Crew::spawn(specs, args.secs, &tx)?;
    drop(tx);
    let mut done = Vec::new();
    // Threads keep their senders while blocked, so stop at the last Done, not at disconnect.
    while done.len() < count {
        let event = rx.recv().context("a workload thread died")?;
        out.print(&event)?;
        if let Event::Done(d) = event {
            done.push(d);
        }
    }
    out.print(&Event::Finished { wall_ns: began.elapsed().as_nanos() as u64 })?;
    if args.wait_for_go {
        wait_for_line(&stdin).context("waiting for the release line on stdin")?;
    }
    crew.release();
    if !args.json {
        summarize(args.mode, &done);
    }
    Ok(())
}

struct Output<'a> {
    json: bool,
    stdout: std::io::StdoutLock<'a>,
}

impl Output<'_> {
    fn print(&mut self, event: &Event) -> anyhow::Result<()> {
        let line = if self.json { serde_json::to_string(event)? } else { event.text() };
        writeln!(self.stdout, "{line}").and_then(|()| self.stdout.flush()).context("writing to stdout")
    }
}

/// A line, or end of file (the reader went away: go on rather than hang).
fn wait_for_line(stdin: &std::io::Stdin) -> anyhow::Result<()> {
    let mut line = String::new();
    stdin.lock().read_line(&mut line)?;
    Ok(())
}

/// The text form's closing lines: totals per group and, for `nice`, the CPU-time ratio.
fn summarize(mode: Mode, done: &[Done]) {
    let delayacct = std::fs::read_to_string("/proc/sys/kernel/task_delayacct").unwrap_or_default();
    if delayacct.trim() != "1" {
        println!("workload: run_delay is 0 unless kernel.task_delayacct=1 (it is {})", delayacct.trim());
    }
    let mut groups: Vec<(&str, i32, u64, u64, usize)> = Vec::new();
    for d in done {
        match groups.iter_mut().find(|g| g.0 == d.group) {
            Some(g) => (g.2, g.3, g.4) = (g.2 + d.cpu_ns, g.3 + d.run_delay_ns, g.4 + 1),
            None => groups.push((&d.group, d.nice, d.cpu_ns, d.run_delay_ns, 1)),
        }
    }
    for (group, nice, cpu, delay, n) in &groups {
        println!(
            "workload: {group}: {n} threads, nice {nice}, CPU {:.3} s, run_delay {:.3} s",
            *cpu as f64 / 1e9,
            *delay as f64 / 1e9
        );
    }
    if let (Mode::Nice, [a, b]) = (mode, groups.as_slice()) {
        println!(
            "workload: CPU-time ratio {} : {} = {:.2}; kernel weights {} / {} = {:.2}",
            a.0,
            b.0,
            a.2 as f64 / b.2.max(1) as f64,
            weights::weight(a.1),
            weights::weight(b.1),
            weights::weight(a.1) as f64 / weights::weight(b.1) as f64
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_experiment() {
        let counts: Vec<usize> = Mode::ALL.iter().map(|m| m.default_threads(2)).collect();
        assert_eq!(counts, [1, 2, 8, 4, 4]);
        assert_eq!(Mode::Cpu.default_threads(1), 1);
        assert_eq!(Mode::Compete.default_threads(4), 16);
    }

    #[test]
    fn plans_name_every_thread_within_comm_length() {
        for mode in Mode::ALL {
            let specs = plan(mode, 9, [-10, 19]);
            for s in &specs {
                assert!(s.name.len() <= 15, "{} is longer than a comm", s.name);
            }
            let mut names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), specs.len(), "{mode:?}: duplicate names");
        }
        let stall = plan(Mode::Stall, 4, [0, 10]);
        assert_eq!((stall.len(), stall[0].name.as_str()), (5, STALL_LOOP));
        let nice = plan(Mode::Nice, 4, [0, 10]);
        let levels: Vec<i32> = nice.iter().map(|s| s.nice).collect();
        assert_eq!(levels, [0, 10, 0, 10]);
        assert_eq!(nice[3].name, "nice10/1");
    }
}
