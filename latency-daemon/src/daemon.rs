//! The `run` command: attach once, drain the kernel maps on a thread of their own every
//! interval, publish an `Exposition` for HTTP to encode, close a window every `--window`, reload
//! on SIGHUP, detach and exit on SIGTERM/SIGINT.
use std::{
    sync::{Arc, mpsc},
    thread,
    time::{Duration, Instant},
};

use latency_common::{Reason, WindowMax};
use tokio::{signal::unix::SignalKind, sync::watch};

use crate::{
    alert::{Attribution, Engine, Transition},
    caps::Caps,
    cgroup_series::CgroupSeries,
    cgroups::CgroupNames,
    cli::RunArgs,
    clock::{self, WallClock},
    config::Config,
    drain::{self, CpuMax, Extras, Snapshot},
    export::Exposition,
    http, incident,
    notify::{HttpUrl, Notifier, SinkConfig},
    probe::{Probe, ProbeError, ProbeOptions},
    report::Meta,
    routes::Routes,
    system,
    window::Window,
};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("not permitted to load the kernel program: missing {}; run as root or grant them", .missing.join(" and "))]
    Capabilities { missing: Vec<&'static str> },
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error(transparent)]
    Http(#[from] http::HttpError),
    #[error("cannot install a signal handler: {0}")]
    Signal(#[source] std::io::Error),
    #[error("cannot start the drain thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// After flipping the epoch, how long to wait before reading the closed slot: a program that
/// read the old epoch finishes within microseconds (it runs with preemption off).
const EPOCH_GRACE: Duration = Duration::from_millis(2);

/// Messages from the async side to the drain thread.
enum Command {
    Reload(Box<Config>),
    Stop,
}

pub async fn run(config: Config, args: RunArgs) -> Result<(), RunError> {
    if let Ok(caps) = Caps::current() {
        let missing = caps.missing();
        if !missing.is_empty() {
            return Err(RunError::Capabilities { missing });
        }
    }
    // Bind before attaching: a port in use must not leave a program loaded, even briefly.
    let listener = http::bind(config.listen).await?;
    let names = if !config.per_cgroup {
        None
    } else {
        match CgroupNames::discover() {
            Ok(n) => {
                log(&format!("per-cgroup delays: cgroup2 at {}, {} cgroups", n.mount().display(), n.len()));
                Some(n)
            }
            Err(e) => {
                log(&format!("per-cgroup delays off: {e}"));
                None
            }
        }
    };
    let options = ProbeOptions {
        per_task: config.per_task,
        max_tasks: config.max_tasks,
        filter: Vec::new(),
        ceiling_ns: u64::try_from(config.ceiling.as_nanos()).unwrap_or(u64::MAX),
        clock: config.clock,
        cgroups: names.is_some(),
        max_cgroups: config.max_cgroups,
        attribute_ns: config.alert.attribute_ns(),
    };
    let probe = Probe::load(&options)?;
    log(&format!(
        "attached; draining every {}, windows of {}, serving http://{}/metrics",
        humantime::format_duration(config.interval),
        humantime::format_duration(config.window),
        config.listen
    ));

    let first = Exposition {
        version: env!("CARGO_PKG_VERSION"),
        kernel: system::kernel_release(),
        clock: config.clock,
        window_seconds: config.window.as_secs_f64(),
        classic: config.classic_buckets.clone(),
        cgroup_classic: config.cgroup_buckets.clone(),
        ..Exposition::default()
    };
    let (published, latest) = watch::channel(Arc::new(first));
    let routes = Arc::new(Routes::new(latest, Arc::new(config.clone())));
    let (commands, inbox) = mpsc::channel();
    let notifier = config.alert.enabled().then(|| Notifier::spawn(sink_config(&config), routes.notify_stats()));
    let drainer = Drainer::new(probe, names, config.clone(), published, routes.drain_histogram(), notifier.clone());
    let drain_thread =
        thread::Builder::new().name("drain".into()).spawn(move || drainer.run(&inbox)).map_err(RunError::Thread)?;

    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let server =
        tokio::spawn(http::serve(listener, routes.clone(), http::Limits::default(), routes.http_stats(), async move {
            let _ = http_stopped.await;
        }));

    let mut sigterm = tokio::signal::unix::signal(SignalKind::terminate()).map_err(RunError::Signal)?;
    let mut sigint = tokio::signal::unix::signal(SignalKind::interrupt()).map_err(RunError::Signal)?;
    let mut sighup = tokio::signal::unix::signal(SignalKind::hangup()).map_err(RunError::Signal)?;
    let mut current = config;
    loop {
        tokio::select! {
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
            _ = sighup.recv() => match current.reload(&args) {
                Ok(reload) => {
                    if !reload.needs_restart.is_empty() {
                        log(&format!("reload: {} changed but need a restart; kept the running values", reload.needs_restart.join(", ")));
                    }
                    current = reload.config;
                    routes.set_config(Arc::new(current.clone()));
                    if let Some(n) = &notifier {
                        n.reconfigure(sink_config(&current));
                    }
                    let _ = commands.send(Command::Reload(Box::new(current.clone())));
                    log("reloaded the configuration");
                }
                Err(e) => log(&format!("reload failed, keeping the running configuration: {e}")),
            },
        }
    }
    log("stopping: detaching the kernel program");
    let _ = commands.send(Command::Stop);
    // The drain thread drops the probe (detaching everything) and returns.
    let _ = tokio::task::spawn_blocking(move || drain_thread.join()).await;
    let _ = stop_http.send(());
    let _ = tokio::time::timeout(Duration::from_secs(1), server).await;
    log("stopped");
    Ok(())
}

/// Where and how alerts are sent.
fn sink_config(config: &Config) -> SinkConfig {
    let parse = |urls: &[String]| -> Vec<HttpUrl> {
        urls.iter()
            .filter_map(|u| match HttpUrl::parse(u) {
                Ok(url) => Some(url),
                Err(e) => {
                    log(&format!("ignoring alert URL: {e}"));
                    None
                }
            })
            .collect()
    };
    let host = system::hostname();
    SinkConfig {
        alertmanagers: parse(&config.alert.alertmanagers),
        webhooks: parse(&config.alert.webhooks),
        resend: config.alert.resend,
        generator_url: format!("http://{host}:{}/", config.listen.port()),
        instance: host,
        severity: config.alert.severity.clone(),
        log: true,
    }
}

/// One line on stderr, prefixed so it can be told apart in a journal.
pub fn log(message: &str) {
    eprintln!("latency-daemon: {message}");
}

/// The drain thread's state: owns the probe, so detaching happens when it returns.
struct Drainer {
    probe: Probe,
    names: Option<CgroupNames>,
    config: Config,
    published: watch::Sender<Arc<Exposition>>,
    duration: prometheus_client::metrics::histogram::Histogram,
    meta: Meta,
    epoch: u64,
    window_start: Option<Snapshot>,
    drains_in_window: u32,
    series: CgroupSeries,
    alerts: Engine,
    notifier: Option<Notifier>,
    /// What we last read from each WINDOW_MAX slot (by epoch parity), to spot late writes.
    last_read: [Vec<(Reason, u32, WindowMax)>; 2],
    exposition: Exposition,
}

impl Drainer {
    fn new(
        probe: Probe,
        names: Option<CgroupNames>,
        config: Config,
        published: watch::Sender<Arc<Exposition>>,
        duration: prometheus_client::metrics::histogram::Histogram,
        notifier: Option<Notifier>,
    ) -> Drainer {
        let exposition = (**published.borrow()).clone();
        let meta =
            Meta { kernel: system::kernel_release(), wall: WallClock::now(), filter: Vec::new(), clock: config.clock };
        // The first window starts at attach, from maps that are all zero.
        let attached = Snapshot::empty(clock::monotonic_ns(), aya::util::nr_cpus().unwrap_or(1));
        Drainer {
            probe,
            names,
            config,
            published,
            duration,
            meta,
            epoch: 0,
            window_start: Some(attached),
            drains_in_window: 0,
            series: CgroupSeries::default(),
            alerts: Engine::default(),
            notifier,
            last_read: [Vec::new(), Vec::new()],
            exposition,
        }
    }

    fn run(mut self, inbox: &mpsc::Receiver<Command>) {
        let mut next = Instant::now() + self.config.interval;
        loop {
            match inbox.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok(Command::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Ok(Command::Reload(config)) => {
                    self.apply(*config);
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            next += self.config.interval;
            // Behind by more than an interval (suspend, a stall): skip ticks rather than burst.
            if next < Instant::now() {
                next = Instant::now() + self.config.interval;
            }
            let started = Instant::now();
            let cpu_before = clock::thread_cpu_ns();
            let result = self.drain();
            // CPU time, unlike the wall time above, excludes waiting for a CPU: on a saturated
            // machine that is what shows a drain costs the same whatever the event rate.
            self.exposition.drain_cpu_seconds += clock::thread_cpu_ns().saturating_sub(cpu_before) as f64 / 1e9;
            match result {
                Ok(()) => self.duration.observe(started.elapsed().as_secs_f64()),
                Err(e) => {
                    self.exposition.drain_errors += 1;
                    log(&format!("drain failed: {e}"));
                }
            }
            self.published.send_replace(Arc::new(self.exposition.clone()));
        }
        // Dropping self drops the probe: every program detaches, every map closes.
    }

    fn apply(&mut self, config: Config) {
        self.exposition.window_seconds = config.window.as_secs_f64();
        self.exposition.classic = config.classic_buckets.clone();
        self.exposition.cgroup_classic = config.cgroup_buckets.clone();
        self.config = config;
    }

    fn drain(&mut self) -> Result<(), ProbeError> {
        let extras = Extras { tasks: self.config.per_task, cgroups: self.names.is_some() };
        let now = drain::snapshot(&self.probe, extras)?;
        self.drains_in_window += 1;
        let start = self.window_start.get_or_insert_with(|| now.clone());
        if self.drains_in_window >= self.config.intervals_per_window() {
            let start = start.clone();
            let closed = self.epoch;
            let maxima = self.close_epoch()?;
            let mut window = Window::close(&start, &now, &maxima, &self.meta);
            self.attribute(&mut window, closed)?;
            self.fold_cgroups(&window);
            self.exposition.window = Some(Arc::new(window));
            self.window_start = Some(now.clone());
            self.drains_in_window = 0;
        }
        self.exposition.drains += 1;
        self.exposition.last_drain_unix = clock::realtime_ns() as f64 / 1e9;
        self.exposition.snapshot = Some(now);
        Ok(())
    }

    /// Flip the epoch so the kernel writes the other slot, then read the closed one.
    fn close_epoch(&mut self) -> Result<Vec<(Reason, CpuMax)>, ProbeError> {
        let closed = self.epoch;
        self.epoch += 1;
        self.probe.set_epoch(self.epoch)?;
        thread::sleep(EPOCH_GRACE);
        let slot = drain::window_slot(&self.probe, closed)?;
        let parity = (closed & 1) as usize;
        self.exposition.late_window_writes += drain::late_writes(&self.last_read[parity], &slot, closed);
        let maxima = drain::maxima(&slot, closed);
        self.last_read[parity] = slot;
        Ok(maxima)
    }

    /// The window's attributed incidents → its report and the alert engine; transitions go to
    /// the sinks without waiting for them.
    fn attribute(&mut self, window: &mut Window, closed: u64) -> Result<(), ProbeError> {
        if self.config.alert.attribute_ns() == 0 {
            return Ok(());
        }
        let incidents = drain::incidents(&self.probe, closed)?;
        let wall = self.meta.wall;
        let names = &mut self.names;
        let mut attributed: Vec<Attribution> = incidents
            .iter()
            .map(|(reason, cpu, inc)| {
                incident::attribution(*reason, *cpu, inc, wall, |id| {
                    names.as_mut().and_then(|n| n.path(id).map(str::to_string))
                })
            })
            .collect();
        attributed.sort_by_key(|a| std::cmp::Reverse(a.delay_ns));
        let end_unix_ns = wall.unix_ns(window.report.end_ns);
        for t in self.alerts.evaluate(&self.config.alert.rules(), &attributed, end_unix_ns) {
            if let Transition::Fired(a) = &t {
                let slot = if a.key.reason == Reason::Wakeup.name() { 0 } else { 1 };
                self.exposition.alerts_total[slot] += 1;
            }
            if let Some(n) = &self.notifier {
                n.send(t);
            }
        }
        self.exposition.alerts_active =
            self.alerts.active().iter().map(|a| (a.key.reason, a.key.cgroup.clone())).collect();
        self.exposition.alerts_suppressed = self.alerts.suppressed;
        window.report.attributed = attributed;
        Ok(())
    }

    fn fold_cgroups(&mut self, window: &Window) {
        let Some(names) = self.names.as_mut() else { return };
        self.series.add_window(&window.cgroups, |id| names.path(id).map(str::to_string), self.config.top_cgroups);
        self.exposition.cgroups = self.series.exported().into_iter().map(|(l, h)| (l.to_string(), *h)).collect();
        for id in names.prune() {
            match self.probe.delete_cgroup(id) {
                Ok(()) => self.exposition.cgroups_pruned += 1,
                Err(e) => log(&format!("cannot delete cgroup {id} from the kernel map: {e}")),
            }
        }
    }
}
