//! `cargo xtask workload <mode>`: a plan run in a process of its own. In: a mode, a thread
//! count, seconds; out: each thread's tid as it starts and, when done, what it measured about
//! itself (CPU time, its own run_delay, loop gaps) — text, or one JSON event per line with
//! `--json` (the demo's input).
use std::io::{BufRead as _, Write as _};
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{Context as _, bail};

use super::{Crew, DEFAULT_NICE, Done, Event, Mode, cpus, plan, weights};

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
