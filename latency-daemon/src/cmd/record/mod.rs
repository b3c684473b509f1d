//! The one-shot `record` command: attach, measure for a duration (or until Ctrl-C) with a
//! progress line, detach, then print the report as tables (`render`) or JSON; with `--svg`,
//! also draw the run over time (a column per period) as the live view's heatmap. Every delay is
//! split by cause (throttled by a CPU limit, IRQ or steal, behind its own cgroup, another cgroup,
//! a kernel thread, nothing): the text has a section and a column per cause, the JSON a
//! `waited_by_cause_ns` for the run, each CPU and each task, and `unsplit`.
mod render;

use std::{
    io::IsTerminal as _,
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use latency_common::knobs::Clock;
use tokio::{signal::unix::SignalKind, time::Instant};

use crate::{
    cli::RecordArgs,
    host::{cgroups::CgroupNames, clock, system},
    kernel::{
        caps::{self, MissingCaps},
        capture, drain,
        feature::{self, Feature},
        load,
        probe::{Probe, ProbeError, ProbeOptions},
    },
    model::{
        attribution::attribution,
        perfetto,
        report::{Meta, Report},
        snapshot::{self, Snapshot},
        timeline::WindowSummary,
        units::fmt_ns,
    },
    serve::view::chart,
};

/// At most this many columns in `--svg`: longer runs get longer columns.
const SVG_COLUMNS: u64 = 120;

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
    #[error("cannot write {}: {source}", path.display())]
    Svg { path: PathBuf, source: std::io::Error },
    #[error("cannot write the capture {}: {source}", path.display())]
    Capture { path: PathBuf, source: std::io::Error },
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
        split_throttle: true,
        throttle_hooks: true,
        throttle_unknown: true,
        split_stolen: true,
        split_irq: args.irq_tracepoints,
        capture_events: if args.capture.is_some() { args.capture_events } else { 0 },
        ..ProbeOptions::default()
    };
    let (mut probe, degraded) = load::load(&options)?;
    crate::model::causes::set_throttled_unknown(probe.is_on(Feature::ThrottleUnknown));
    feature::throttle_unknown::announce(probe.is_on(Feature::ThrottleUnknown));
    for d in &degraded {
        log::warn!("{} unavailable on this kernel, recording without it: {}", d.feature.name(), d.why);
    }
    let start = Snapshot::empty(clock::monotonic_ns(), drain::possible_cpus());
    let run_queue_clock = !degraded.iter().any(|d| d.feature == Feature::RunQueueClock);
    let meta = Meta {
        kernel: system::kernel_release(),
        wall: clock::wall_clock(),
        filter: args.pids.clone(),
        clock: if run_queue_clock { options.clock } else { Clock::Monotonic },
    };
    log::info!("attached; recording for {} (Ctrl-C to stop early)", humantime::format_duration(args.duration));

    // --svg: the histograms every period, each period's delta a column.
    let period = Duration::from_secs(args.duration.as_secs().div_ceil(SVG_COLUMNS).max(1));
    let mut columns = Columns { before_last: None, previous: start.clone(), columns: Vec::new() };
    let probe_ref = &probe;
    wait(args.duration, period, || {
        if args.svg.is_some()
            && let Ok(now) = drain::snapshot(probe_ref, drain::Extras { tasks: false })
        {
            columns.add(now, &meta);
        }
    })
    .await?;

    probe.detach()?;
    let end = drain::snapshot(&probe, drain::Extras { tasks: true })?;
    if let Some(path) = &args.svg {
        columns.finish(end.clone(), &meta);
        let title = format!(
            "latency-daemon record: {} on {}, a column per {}",
            fmt_ns(end.taken_ns.saturating_sub(start.taken_ns)),
            meta.kernel,
            humantime::format_duration(period)
        );
        let windows: Vec<&WindowSummary> = columns.columns.iter().collect();
        std::fs::write(path, chart::figure(&title, &windows, [None, None]))
            .map_err(|source| RecordError::Svg { path: path.clone(), source })?;
    }
    if let Some(path) = &args.capture {
        write_capture(&probe, path, options.capture_events)?;
    }
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

/// `--capture`: every CPU's ring (the recorder detached) as a Perfetto trace in `path`, and one
/// line saying what it holds.
fn write_capture(probe: &Probe, path: &Path, events: u32) -> Result<(), RecordError> {
    if !probe.is_on(Feature::Capture) {
        log::warn!("no capture written to {}: the recorder was unavailable (see above)", path.display());
        return Ok(());
    }
    let rings = capture::read(probe, feature::capture::slots(events))?;
    let host = perfetto::Host {
        release: system::kernel_release(),
        machine: std::env::consts::ARCH.to_owned(),
        cpus: drain::possible_cpus() as u32,
    };
    std::fs::write(path, perfetto::trace(&rings.records, &host, None))
        .map_err(|source| RecordError::Capture { path: path.to_owned(), source })?;
    let picture = path.with_extension("svg");
    std::fs::write(&picture, crate::serve::view::capture::picture(&rings.records, None))
        .map_err(|source| RecordError::Capture { path: picture.clone(), source })?;
    let span = match (rings.records.first(), rings.records.last()) {
        (Some(first), Some(last)) => fmt_ns(last.ts_ns - first.ts_ns),
        _ => "nothing".to_owned(),
    };
    let sum = |f: fn(&capture::CpuRing) -> u64| rings.cpus.iter().map(f).sum::<u64>();
    log::info!(
        "capture: {} events on {} CPUs over {span} written to {} and its picture to {} ({} older ones overwritten, \
         {} torn, {} given up by the recorder; open it in ui.perfetto.dev)",
        rings.records.len(),
        rings.cpus.iter().filter(|c| c.kept > 0).count(),
        path.display(),
        picture.display(),
        sum(|c| c.overwritten),
        sum(|c| c.torn),
        sum(|c| c.given_up),
    );
    Ok(())
}

/// `--svg`'s columns: each period's delays, from the snapshot before. Together they hold every
/// delay of the run, exactly once.
struct Columns {
    /// Where the last column starts.
    before_last: Option<Snapshot>,
    previous: Snapshot,
    columns: Vec<WindowSummary>,
}

impl Columns {
    fn add(&mut self, now: Snapshot, meta: &Meta) {
        let r = Report::between(&self.previous, &now, &[], meta);
        self.columns.push(WindowSummary::of_report(&r, false, Vec::new()));
        self.before_last = Some(std::mem::replace(&mut self.previous, now));
    }

    /// The end of the run: a column of its own, or, if it is only a sliver (< 100 ms) after the
    /// last period, the last column widened to it.
    fn finish(&mut self, end: Snapshot, meta: &Meta) {
        let sliver = end.taken_ns < self.previous.taken_ns + 100_000_000;
        if sliver && let Some(before) = self.before_last.take() {
            self.columns.pop();
            self.previous = before;
        }
        self.add(end, meta);
    }
}

/// Sleep for `duration` or until SIGINT/SIGTERM, drawing a progress line on a terminal and
/// calling `each_period` every `period`.
async fn wait(duration: Duration, period: Duration, mut each_period: impl FnMut()) -> Result<(), RecordError> {
    let mut sigint = tokio::signal::unix::signal(SignalKind::interrupt()).map_err(RecordError::Signal)?;
    let mut sigterm = tokio::signal::unix::signal(SignalKind::terminate()).map_err(RecordError::Signal)?;
    let started = Instant::now();
    let deadline = started + duration;
    let tty = std::io::stderr().is_terminal();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut periods = tokio::time::interval_at(started + period, period);
    loop {
        tokio::select! {
            _ = periods.tick() => each_period(),
            _ = tokio::time::sleep_until(deadline) => break,
            _ = sigint.recv() => { if tty { eprintln!() } log::info!("interrupted; reporting what was measured"); return Ok(()) }
            _ = sigterm.recv() => { if tty { eprintln!() } log::info!("terminated; reporting what was measured"); return Ok(()) }
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
