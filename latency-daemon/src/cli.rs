//! Command line: clap definitions in, validated command out. Usage errors become one line and
//! exit code 2 in `main`; everything here is pure so it can be tested without root. The settings
//! of `run` are `config::args::RunArgs`, shared with the environment and the config file.
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

pub use crate::config::args::{ClockArg, RunArgs};
use crate::config::args::{parse_ceiling, parse_duration};

/// What `--version` and `-V` print after the name: the crate's version, the git commit it was
/// built from (`+dirty` with uncommitted changes, `unknown` outside a checkout) and the first 12
/// hex digits of the embedded kernel object's SHA-256 (both from build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("LATENCY_DAEMON_COMMIT"),
    ", bpf ",
    env!("LATENCY_DAEMON_BPF_ID"),
    ")"
);

/// Run-queue latency monitor: how long runnable tasks wait for a CPU (wakeup-to-run delay).
#[derive(Debug, Parser)]
#[command(name = "latency-daemon", version = VERSION, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant, reason = "parsed once at start; boxing buys nothing")]
pub enum Command {
    /// Measure for a while, then print histograms, a per-task table and per-CPU figures.
    Record(RecordArgs),
    /// Check that this machine can run the monitor (kernel, BTF, capabilities, load/attach), and
    /// with --config that a configuration file is valid.
    Check(CheckArgs),
    /// Run until stopped, serving Prometheus metrics; SIGHUP re-reads the --config file.
    Run(RunArgs),
    /// Print the seccomp profile `run` needs on this architecture (the one shipped in
    /// deploy/seccomp), or write it to a file: for a node's kubelet before the daemon starts.
    SeccompProfile(SeccompArgs),
    /// Ask the running daemon (started with capture_dir) for a capture of every CPU's scheduling:
    /// it reads its rings now and for capture_demand after, then lists it at /api/v1/captures.
    /// The same as sending it SIGUSR1.
    Capture(CaptureArgs),
}

#[derive(Debug, Args)]
pub struct CaptureArgs {
    /// The daemon's process id; without it, the one `latency-daemon run` on this host (or in
    /// this container's PID namespace).
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(u32).range(1..))]
    pub pid: Option<u32>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Also check the configuration `run --config FILE` would start with (the file, then the
    /// RUNQLAT_* environment over it): every problem on a line of its own, with the file's line,
    /// column and key; exit 1 if there is one.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct SeccompArgs {
    /// Write the profile to FILE (atomically, creating its directory) instead of printing it.
    #[arg(long, value_name = "FILE")]
    pub write: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// How long to measure (e.g. 6s, 500ms, 2m). Ctrl-C stops early and still prints.
    #[arg(short, long, default_value = "6s", value_parser = parse_duration)]
    pub duration: Duration,

    /// Print one JSON document instead of tables.
    #[arg(long)]
    pub json: bool,

    /// Also write the run as an SVG heatmap (delays per exact kernel bucket × time, one column
    /// per second or per 1/120 of the run) with p99 lines to FILE; the text output is unchanged.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<std::path::PathBuf>,

    /// Only record these processes or threads (tgid or tid); repeatable or comma-separated.
    #[arg(short, long = "pid", value_name = "PID", value_delimiter = ',', value_parser = parse_pid)]
    pub pids: Vec<u32>,

    /// Rows of the per-task table (0 = all). JSON always has every task.
    #[arg(long, default_value_t = 20)]
    pub top: usize,

    /// Capacity of the kernel's per-task map; tasks beyond it are counted as lost.
    #[arg(long, default_value_t = 32768, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub max_tasks: u32,

    /// Delays above this are discarded and counted instead of recorded (e.g. 10m; at most 2^40
    /// ns, about 18 minutes).
    #[arg(long, default_value = "10m", value_parser = parse_ceiling)]
    pub ceiling: Duration,

    /// Clock for stamps: `monotonic` (the time between the two scheduler events, as perf sched
    /// and runqlat measure) or `run-queue` (the run queue's clock, as the kernel's own run_delay
    /// in /proc/<tid>/schedstat accounts; it moves a preempting wakeup's last microseconds from
    /// the woken task to the preempted one).
    #[arg(long, value_enum, default_value_t = ClockArg::Monotonic)]
    pub clock: ClockArg,

    /// Also keep every CPU's last scheduler events (each switch, each wakeup with its waker,
    /// each migration) and write them at the end to FILE as a Perfetto trace, to open in
    /// ui.perfetto.dev or trace_processor (CPU tracks, thread states, wakeup arrows), and an SVG
    /// timeline of it beside FILE (its extension replaced by .svg).
    #[arg(long, value_name = "FILE")]
    pub capture: Option<std::path::PathBuf>,

    /// Events `--capture` keeps per CPU, the newest (rounded up to a power of two; 96 bytes of
    /// kernel memory each, per possible CPU).
    #[arg(long, value_name = "N", default_value_t = 65_536, value_parser = clap::value_parser!(u32).range(2..=1_048_576))]
    pub capture_events: u32,

    /// On kernels that do not account IRQ time (CONFIG_IRQ_TIME_ACCOUNTING off), follow device
    /// IRQ handlers and softirqs with the irq tracepoints: their time in each delay's cause split
    /// and, with --capture, their slices in the capture (two clock reads per handler or softirq
    /// run, two records with --capture); unavailable where the kernel accounts IRQ time itself.
    #[arg(long)]
    pub irq_tracepoints: bool,
}

/// A process or thread id that exists right now.
pub fn parse_pid(s: &str) -> Result<u32, String> {
    let pid: u32 = s.trim().parse().map_err(|_| format!("'{s}' is not a process id"))?;
    if pid == 0 {
        return Err("pid 0 is the idle task of every CPU; it never waits on a run queue".into());
    }
    // /proc/<tid> resolves threads too, even though `ls /proc` does not list them.
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Err(format!("no such process or thread: {pid}"));
    }
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("latency-daemon").chain(args.iter().copied()))
    }

    #[test]
    fn record_defaults() {
        let Command::Record(r) = parse(&["record"]).unwrap().command else { panic!() };
        assert_eq!(r.duration, Duration::from_secs(6));
        assert!(!r.json);
        assert!(r.svg.is_none());
        assert!(r.pids.is_empty());
        assert_eq!(r.ceiling, Duration::from_secs(600));
    }

    #[test]
    fn pids() {
        let me = std::process::id();
        let Command::Record(r) = parse(&["record", "--pid", &format!("{me},{me}")]).unwrap().command else { panic!() };
        assert_eq!(r.pids, vec![me, me]);
        assert!(parse_pid("0").unwrap_err().contains("idle task"));
        assert!(parse_pid("abc").unwrap_err().contains("not a process id"));
        // pid_max is at most 2^22, so this one cannot exist.
        assert!(parse_pid("4194305").unwrap_err().contains("no such process"));
    }

    #[test]
    fn run_leaves_unset_settings_unset() {
        let Command::Run(r) = parse(&["run"]).unwrap().command else { panic!() };
        assert!(r.listen.is_none() && r.interval.is_none() && r.per_task.is_none() && r.clock.is_none());
        let Command::Run(r) = parse(&["run", "--per-task", "--web.listen-address=:80"]).unwrap().command else {
            panic!()
        };
        assert_eq!((r.per_task, r.listen), (Some(true), Some(std::net::SocketAddr::from(([0, 0, 0, 0], 80)))));
    }

    #[test]
    fn unknown_flag_is_an_error() {
        assert!(parse(&["record", "--bogus"]).is_err());
        assert!(parse(&["record", "--max-tasks", "0"]).is_err());
    }
}
