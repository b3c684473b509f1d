//! The user-space cost of draining: in, the release daemon and the pipeline benchmark; out, a
//! table and bench-report/drain.{md,json}.
//!
//! 1. The user-space pipeline on synthetic maps of 2, 64 and 256 CPUs (latency-daemon's bench
//!    target `pipeline`).
//! 2. The real maps on this machine: the daemon's own drain-duration histogram while the
//!    machine is idle and during a scheduler storm (`perf bench sched pipe`), to show that a
//!    drain costs the same whatever the event rate.
use std::{
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use anyhow::Context as _;

use super::Binaries;
use crate::daemon::Daemon;
use crate::guard::Proc;
use crate::{cmd, web, workspace_root};

/// Both drain measurements; `secs` is each phase (idle, storm) on the real maps.
pub fn run(binaries: &Binaries, secs: u64) -> anyhow::Result<()> {
    println!("bench: user-space pipeline on synthetic maps (medians of 101 runs)…");
    let table = cmd::stdout(&mut Command::new(binaries.pipeline()?))?;
    let json = cmd::stdout(Command::new(binaries.pipeline()?).arg("--json"))?;
    print!("{table}");

    println!("bench: real maps, {secs} s idle then {secs} s of `perf bench sched pipe`…");
    let real = real_maps(&binaries.daemon, Duration::from_secs(secs))?;
    let row = |name: &str, p: &Phase| {
        format!("{name:>8} {:>10} {:>14.1} {:>14.1} {:>16.0}\n", p.drains, p.avg_us(), p.cpu_avg_us(), p.switches_per_s)
    };
    let real_table = format!(
        "{:>8} {:>10} {:>14} {:>14} {:>16}\n{}{}(wall time includes waiting for a CPU, which a storm makes longer; CPU time is the drain's own cost)\n",
        "phase",
        "drains",
        "wall avg µs",
        "CPU avg µs",
        "switches/s",
        row("idle", &real.idle),
        row("storm", &real.storm)
    );
    print!("{real_table}");

    let dir = workspace_root().join("bench-report");
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let md = format!(
        "# Drain and encode cost\n\n## User-space pipeline, synthetic maps\n\n```\n{table}```\n\n\
         ## Real maps on this machine ({} CPUs)\n\n```\n{real_table}```\n",
        thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    std::fs::write(dir.join("drain.md"), md)?;
    let real_json = format!(
        "{{\"idle\":{{\"drains\":{},\"drain_avg_us\":{:.3},\"drain_cpu_avg_us\":{:.3},\"switches_per_s\":{:.1}}},\
         \"storm\":{{\"drains\":{},\"drain_avg_us\":{:.3},\"drain_cpu_avg_us\":{:.3},\"switches_per_s\":{:.1}}}}}",
        real.idle.drains,
        real.idle.avg_us(),
        real.idle.cpu_avg_us(),
        real.idle.switches_per_s,
        real.storm.drains,
        real.storm.avg_us(),
        real.storm.cpu_avg_us(),
        real.storm.switches_per_s
    );
    std::fs::write(dir.join("drain.json"), format!("{{\"synthetic\":{json},\"real\":{real_json}}}\n"))?;
    println!("bench: wrote {}", dir.join("drain.md").display());
    Ok(())
}

#[derive(Debug, Default)]
struct Phase {
    drains: u64,
    drain_seconds: f64,
    drain_cpu_seconds: f64,
    switches_per_s: f64,
}

impl Phase {
    fn avg_us(&self) -> f64 {
        if self.drains == 0 { 0.0 } else { self.drain_seconds / self.drains as f64 * 1e6 }
    }

    fn cpu_avg_us(&self) -> f64 {
        if self.drains == 0 { 0.0 } else { self.drain_cpu_seconds / self.drains as f64 * 1e6 }
    }
}

struct Real {
    idle: Phase,
    storm: Phase,
}

fn real_maps(daemon: &std::path::Path, secs: Duration) -> anyhow::Result<Real> {
    let ours = Daemon::start(daemon, &["--interval", "1s"])?;
    let a = Sample::take(&ours)?;
    thread::sleep(secs);
    let b = Sample::take(&ours)?;
    let storm = Storm::start()?;
    thread::sleep(Duration::from_secs(1));
    let c = Sample::take(&ours)?;
    thread::sleep(secs);
    let d = Sample::take(&ours)?;
    drop(storm);
    Ok(Real { idle: b.since(&a), storm: d.since(&c) })
}

/// `perf bench sched pipe` run after run until dropped. Each run is our child, killed by its pid
/// when the storm ends (a shell loop's current child would outlive the shell).
struct Storm {
    stop: Arc<AtomicBool>,
    runs: Option<JoinHandle<()>>,
}

impl Storm {
    fn start() -> anyhow::Result<Storm> {
        let run = || {
            let mut pipe = Command::new("perf");
            pipe.args(["bench", "sched", "pipe", "-l", "1000000"]).stdout(Stdio::null()).stderr(Stdio::null());
            Proc::spawn(&mut pipe, "perf bench sched pipe")
        };
        // The first run here, so a storm that cannot start is an error, not an idle phase.
        let mut current = Some(run()?);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let runs = thread::spawn(move || {
            while let Some(mut proc) = current.take() {
                while !stopped.load(Ordering::SeqCst) && !proc.exited() {
                    thread::sleep(Duration::from_millis(20));
                }
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                current = run().ok();
            }
        });
        Ok(Storm { stop, runs: Some(runs) })
    }
}

impl Drop for Storm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(runs) = self.runs.take() {
            let _ = runs.join();
        }
    }
}

struct Sample {
    at: Instant,
    drains: u64,
    drain_seconds: f64,
    drain_cpu_seconds: f64,
    switches: f64,
}

impl Sample {
    fn take(daemon: &Daemon) -> anyhow::Result<Sample> {
        let text = daemon.metrics()?;
        let value = |name: &str| web::total(&text, name);
        Ok(Sample {
            at: Instant::now(),
            drains: value("runqlat_drain_duration_seconds_count") as u64,
            drain_seconds: value("runqlat_drain_duration_seconds_sum"),
            drain_cpu_seconds: value("runqlat_drain_cpu_seconds_total"),
            switches: value("runqlat_context_switches_total"),
        })
    }

    fn since(&self, earlier: &Sample) -> Phase {
        let secs = self.at.duration_since(earlier.at).as_secs_f64().max(1e-9);
        Phase {
            drains: self.drains.saturating_sub(earlier.drains),
            drain_seconds: self.drain_seconds - earlier.drain_seconds,
            drain_cpu_seconds: self.drain_cpu_seconds - earlier.drain_cpu_seconds,
            switches_per_s: (self.switches - earlier.switches) / secs,
        }
    }
}
