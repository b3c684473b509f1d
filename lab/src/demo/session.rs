//! One mode of the demo, end to end: in, a mode and its seconds; out, what the workload threads
//! said about themselves and what every watcher saw of them.
//!
//! Order matters. The workload process starts first but holds its threads back, so the
//! watchers can filter on its pid; every watcher is attached before the first thread exists
//! (its first delay, at `sched_wakeup_new`, is in all of them); each thread reads its own
//! run_delay as its last act and then blocks, so nothing it does later can differ between the
//! kernel's count and ours; the watchers stop before the threads are released to exit.
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::guard::{Lines, Proc, check_interrupted};
use crate::oracle::perf::{Perf, PerfResult};
use crate::oracle::runqlat::Runqlat;
use crate::recorder::Recorder;
use crate::recording::Recording;
use crate::workload::{Done, Event, Mode};

/// What the demo runs with.
#[derive(Debug)]
pub struct Context {
    pub daemon: PathBuf,
    /// The program and leading arguments that run the workload (`xtask workload …`).
    pub workload: PathBuf,
    pub workload_args: Vec<String>,
    /// For perf's data files.
    pub scratch: PathBuf,
    pub secs: f64,
    /// Whether stdout is a terminal (then progress redraws one line).
    pub tty: bool,
}

/// `stall`: one second of the loop thread.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Gap {
    pub second: u32,
    pub largest_gap_ns: u64,
    pub largest_gap_end_ns: u64,
    pub gaps_over_10ms: u32,
}

#[derive(Debug)]
pub struct Measured {
    pub mode: Mode,
    pub cpus: usize,
    pub secs: f64,
    pub threads: Vec<Done>,
    pub gaps: Vec<Gap>,
    pub ours: Recording,
    /// The same delays on the run queue's clock (the one run_delay reads).
    pub ours_rq: Recording,
    pub perf: PerfResult,
    /// runqlat's counts by log2-µs slot, for the whole workload process.
    pub runqlat: Vec<u64>,
    /// From "go" to the last thread done.
    pub workload_ns: u64,
    /// Time the hypervisor ran something else on our vCPUs meanwhile (/proc/stat steal, summed
    /// over CPUs; 10 ms resolution). A thread "running" then makes no progress.
    pub steal_ns: u64,
    /// This mode from start to finish, watchers' start-up and perf's post-processing included.
    pub took: Duration,
}

pub fn measure(ctx: &Context, mode: Mode, step: usize, steps: usize) -> anyhow::Result<Measured> {
    let began = Instant::now();
    let mut workload = Workload::start(ctx, mode)?;
    let (pid, cpus) = workload.ready()?;
    println!(
        "demo: [{step}/{steps}] {:<8} workload pid {pid}; starting perf sched record, runqlat and two recorders…",
        mode.name()
    );

    // Programs on one tracepoint run in the order they attached, and each reads the clock when
    // it runs. So: the run-queue recorder first (its clock does not move while programs run),
    // then runqlat and our monotonic recorder side by side, which then differ only by runqlat's
    // own cost — a program between them would add its run time (µs on a CPU leaving idle) to
    // the later one's wakeup delays. The monotonic recorder, whose span gives idle %, attaches
    // last, once perf is ready, right before the threads start.
    let attach_by = Instant::now() + Duration::from_secs(30);
    let mut perf = Perf::start(&ctx.scratch.join(format!("{}.perf.data", mode.name())))?;
    let ours_rq = record(ctx, pid, "run-queue", attach_by)?;
    let mut runqlat = Runqlat::start(&["-p", &pid.to_string()])?;
    runqlat.wait_ready(attach_by)?;
    perf.wait_ready()?;
    let ours = record(ctx, pid, "monotonic", attach_by)?;

    let steal_before = steal_ns();
    let (threads, gaps, workload_ns) = workload.go_and_wait(ctx, mode)?;
    let steal_ns = steal_ns().saturating_sub(steal_before);
    // Every thread is blocked now: stop the watchers, then let the threads exit.
    let ours = recording(ours, "monotonic")?;
    let ours_rq = recording(ours_rq, "run-queue")?;
    let runqlat = runqlat.stop()?;
    let perf = perf.stop(mode == Mode::Io)?;
    workload.release()?;
    let took = began.elapsed();
    Ok(Measured {
        mode,
        cpus,
        secs: ctx.secs,
        threads,
        gaps,
        ours,
        ours_rq,
        perf,
        runqlat,
        workload_ns,
        steal_ns,
        took,
    })
}

/// `record --json` of the workload process on `clock` ("monotonic" or "run-queue", the flag's
/// spelling), attached by `deadline`.
fn record(ctx: &Context, pid: u32, clock: &str, deadline: Instant) -> anyhow::Result<Recorder> {
    let pid = pid.to_string();
    Recorder::start_by(&ctx.daemon, &["--duration", "10m", "--json", "--pid", &pid, "--clock", clock], deadline)
}

/// SIGINT: the recorder reports what it measured and detaches.
fn recording(recorder: Recorder, clock: &str) -> anyhow::Result<Recording> {
    // The JSON says "run_queue" for the flag's "run-queue".
    Recording::parse(&recorder.stop()?, &clock.replace('-', "_"))
}

/// `<workload program> MODE --json --wait-for-go`.
struct Workload {
    proc: Proc,
    stdin: Option<std::process::ChildStdin>,
    events: Lines,
}

impl Workload {
    fn start(ctx: &Context, mode: Mode) -> anyhow::Result<Workload> {
        let mut command = Command::new(&ctx.workload);
        command
            .args(&ctx.workload_args)
            .args([mode.name(), "--json", "--wait-for-go", "--secs", &ctx.secs.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut proc = Proc::spawn(&mut command, "workload")?;
        let stdin = proc.take_stdin();
        let events = Lines::read(proc.take_stdout().context("the workload's stdout")?);
        Ok(Workload { proc, stdin, events })
    }

    fn next(&mut self, limit: Duration) -> anyhow::Result<Option<Event>> {
        let Some(line) = self.events.next(limit).context("the workload exited early")? else { return Ok(None) };
        serde_json::from_str(&line).map(Some).with_context(|| format!("workload printed `{line}`"))
    }

    fn ready(&mut self) -> anyhow::Result<(u32, usize)> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            check_interrupted()?;
            if let Some(Event::Ready { pid, cpus, .. }) = self.next(Duration::from_millis(50))? {
                return Ok((pid, cpus));
            }
        }
        bail!("the workload did not say it was ready within 10 s")
    }

    fn send(&mut self, what: &str) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("the workload's stdin is closed")?;
        writeln!(stdin, "{what}").and_then(|()| stdin.flush()).context("writing to the workload")
    }

    /// Starts the threads; returns their reports once all are done (and blocked).
    fn go_and_wait(&mut self, ctx: &Context, mode: Mode) -> anyhow::Result<(Vec<Done>, Vec<Gap>, u64)> {
        self.send("go")?;
        let began = Instant::now();
        let deadline = began + Duration::from_secs_f64(ctx.secs) + Duration::from_secs(30);
        let (mut done, mut gaps) = (Vec::new(), Vec::new());
        let mut shown = 0.0;
        loop {
            check_interrupted()?;
            if Instant::now() > deadline {
                bail!("the {} workload did not finish in {:.0} s", mode.name(), ctx.secs + 30.0);
            }
            let elapsed = began.elapsed().as_secs_f64();
            if ctx.tty && elapsed - shown >= 0.5 {
                shown = elapsed;
                print!("\r        running {:>4.1} / {} s ", elapsed.min(ctx.secs), ctx.secs);
                let _ = std::io::stdout().flush();
            }
            match self.next(Duration::from_millis(100))? {
                Some(Event::Done(d)) => done.push(d),
                Some(Event::Gap { second, largest_gap_ns, largest_gap_end_ns, gaps_over_10ms, .. }) => {
                    gaps.push(Gap { second, largest_gap_ns, largest_gap_end_ns, gaps_over_10ms })
                }
                Some(Event::Finished { wall_ns }) => {
                    if ctx.tty {
                        print!("\r");
                    }
                    done.sort_by(|a, b| a.name.cmp(&b.name));
                    return Ok((done, gaps, wall_ns));
                }
                Some(Event::Ready { .. } | Event::Started { .. }) | None => {}
            }
        }
    }

    fn release(&mut self) -> anyhow::Result<()> {
        self.send("release")?;
        self.stdin = None;
        let status = self.proc.stop(0, Duration::from_secs(10))?;
        if !status.success() {
            bail!("the workload failed ({status})");
        }
        Ok(())
    }
}

/// Steal time of all CPUs so far (the 8th value of /proc/stat's `cpu` line, in USER_HZ ticks).
fn steal_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: u64 = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .and_then(|l| l.split_whitespace().nth(8)?.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks * 1_000_000_000 / hz
}

/// The directory for perf's files, removed afterwards.
pub fn scratch_dir(out: &Path) -> anyhow::Result<PathBuf> {
    let dir = out.join(".scratch");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}
