//! The one-shot `record` command: attach, measure for a duration (or until Ctrl-C) with a
//! progress line, detach, then print the report as tables (`render`) or JSON.
mod render;

use std::{io::IsTerminal as _, process::ExitCode, time::Duration};

use latency_common::knobs::Clock;
use tokio::{signal::unix::SignalKind, time::Instant};

use crate::{
    cli::RecordArgs,
    host::{cgroups::CgroupNames, clock, system},
    kernel::{
        caps::{self, MissingCaps},
        drain,
        features::{self, Feature},
        probe::{ProbeError, ProbeOptions},
    },
    model::{
        attribution::attribution,
        report::{Meta, Report},
        snapshot::{self, Snapshot},
    },
};

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Capabilities(#[from] MissingCaps),
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error("cannot install a signal handler: {0}")]
    Signal(#[source] std::io::Error),
    #[error("cannot write the report: {0}")]
    Output(#[source] std::io::Error),
}

/// `latency-daemon record`: exit 0 with the report printed, 1 when it could not measure.
pub fn main(args: RecordArgs) -> ExitCode {
    let runtime = match super::runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match runtime.block_on(record(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => super::fail(&e.to_string()),
    }
}

async fn record(args: RecordArgs) -> Result<(), RecordError> {
    caps::require()?;
    let options = ProbeOptions {
        per_task: true,
        max_tasks: args.max_tasks,
        filter: args.pids.clone(),
        ceiling_ns: u64::try_from(args.ceiling.as_nanos()).unwrap_or(u64::MAX),
        clock: args.clock.into(),
        // On so attributed delays carry the victim's cgroup (record's cost matters less).
        cgroups: true,
        max_cgroups: 1024,
        // Attribute every delay: each CPU's worst per reason comes with who ran meanwhile.
        attribute_ns: 1,
    };
    let (mut probe, degraded) = features::load(&options)?;
    for d in &degraded {
        super::log(&format!("{} unavailable on this kernel, recording without it: {}", d.feature.name(), d.why));
    }
    let start = Snapshot::empty(clock::monotonic_ns(), drain::possible_cpus());
    let run_queue_clock = !degraded.iter().any(|d| d.feature == Feature::RunQueueClock);
    let meta = Meta {
        kernel: system::kernel_release(),
        wall: clock::wall_clock(),
        filter: args.pids.clone(),
        clock: if run_queue_clock { options.clock } else { Clock::Monotonic },
    };
    super::log(&format!(
        "attached; recording for {} (Ctrl-C to stop early)",
        humantime::format_duration(args.duration)
    ));

    wait(args.duration).await?;

    probe.detach()?;
    let end = drain::snapshot(&probe, drain::Extras { tasks: true, cgroups: false })?;
    let maxima = snapshot::maxima(&drain::window_slot(&probe, 0)?, 0);
    let incidents = drain::incidents(&probe, 0)?;
    drop(probe);
    let mut report = Report::between(&start, &end, &maxima, &meta);
    let mut names = CgroupNames::discover().ok();
    report.attributed = incidents
        .iter()
        .map(|(reason, cpu, inc)| {
            attribution(*reason, *cpu, inc, meta.wall, |id| names.as_mut().and_then(|n| n.path(id).map(str::to_string)))
        })
        .collect();
    report.attributed.sort_by_key(|a| std::cmp::Reverse(a.delay_ns));

    let text = if args.json {
        serde_json::to_string_pretty(&report).map_err(|e| RecordError::Output(e.into()))? + "\n"
    } else {
        render::report(&report, args.top)
    };
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes()).map_err(RecordError::Output)?;
    stdout.flush().map_err(RecordError::Output)
}

/// Sleep for `duration` or until SIGINT/SIGTERM, drawing a progress line on a terminal.
async fn wait(duration: Duration) -> Result<(), RecordError> {
    let mut sigint = tokio::signal::unix::signal(SignalKind::interrupt()).map_err(RecordError::Signal)?;
    let mut sigterm = tokio::signal::unix::signal(SignalKind::terminate()).map_err(RecordError::Signal)?;
    let started = Instant::now();
    let deadline = started + duration;
    let tty = std::io::stderr().is_terminal();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => break,
            _ = sigint.recv() => { if tty { eprintln!() } eprintln!("latency-daemon: interrupted; reporting what was measured"); return Ok(()) }
            _ = sigterm.recv() => { if tty { eprintln!() } eprintln!("latency-daemon: terminated; reporting what was measured"); return Ok(()) }
            _ = tick.tick() => {
                if tty {
                    let done = started.elapsed().as_secs_f64();
                    eprint!("\r  recording {done:5.1} s / {:.1} s", duration.as_secs_f64());
                }
            }
        }
    }
    if tty {
        eprintln!();
    }
    Ok(())
}
