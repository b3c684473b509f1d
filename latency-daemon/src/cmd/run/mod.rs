//! The `run` command: check the configuration, bind, attach once, start the drain thread
//! (`drainer`) and the HTTP server, reload on SIGHUP, detach and exit on SIGTERM/SIGINT.
mod capturer;
mod drainer;
mod signals;

use std::{process::ExitCode, sync::Arc, sync::mpsc, thread, time::Duration};

use latency_common::knobs::Clock;
use tokio::{net::TcpListener, sync::watch};

pub use self::drainer::pipeline_settings;
use self::drainer::{Command, Drainer};
use super::logger;
use crate::{
    alert::notify::{self, Notifier, SinkConfig},
    config::{
        Config, ConfigError,
        args::{LogFormat, RunArgs},
    },
    export::otlp,
    host::{self, cgroups::CgroupNames, paths::HostPaths, procstat, system},
    kernel::{
        caps::{self, MissingCaps},
        feature::{self, Feature},
        load, privileges,
        probe::{Probe, ProbeError, ProbeOptions},
    },
    metrics::{Instruments, Metrics},
    model::{exposition::Exposition, sink_url::HttpUrl},
    net::Client,
    serve::{http, routes::Routes},
};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Capabilities(#[from] MissingCaps),
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error(transparent)]
    Http(#[from] http::HttpError),
    #[error("cannot install a signal handler: {0}")]
    Signal(#[source] std::io::Error),
    #[error("cannot start the drain thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// `latency-daemon run`: exit 0 after a clean stop, 2 on bad configuration (nothing attached),
/// 1 when the machine said no.
pub fn main(args: RunArgs) -> ExitCode {
    ignore_stray_signals();
    // The flags' log settings until the environment and the file are read too.
    logger::set(args.log_level.unwrap_or_default(), args.log_format.unwrap_or_default());
    // Every configuration problem is bad input: one line each, exit 2, nothing attached.
    let config = match Config::load(&args) {
        Ok(c) => c,
        Err(ConfigError::Invalid { problems }) => {
            for p in problems {
                log::error!("invalid configuration: {p}");
            }
            return ExitCode::from(super::BAD_INPUT);
        }
        Err(e) => {
            log::error!("{e}");
            return ExitCode::from(super::BAD_INPUT);
        }
    };
    logger::set(config.log_level, config.log_format);
    // Before anything reads /proc or /sys: nothing has, so the first set wins.
    let paths = HostPaths {
        procfs: config.path_procfs.clone(),
        sysfs: config.path_sysfs.clone(),
        cgroupfs: config.path_cgroupfs.clone(),
        rootfs: config.path_rootfs.clone(),
    };
    if !host::paths::set(paths.clone()) && *host::paths::get() != paths {
        log::warn!("host files were read before --path.* took effect; reading them under {:?}", host::paths::get());
    }
    // The first line says which build this is (what `--version` prints) and on which kernel, for
    // whoever reads the log after an upgrade of either.
    log::info!(kernel:% = host::system::kernel_release(); "latency-daemon {} starting", crate::cli::VERSION);
    let runtime = match super::serving_runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let result = runtime.block_on(run(config, args));
    // A blocking worker still reading a file must not hold the exit (the read is bounded, but
    // the stop must not depend on it).
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => super::fail(&e.to_string()),
    }
}

/// Where pod names will come from, said once: a node whose runtime's state is not mounted (or not readable)
/// otherwise shows only as container cgroups without namespace/pod labels.
fn log_container_runtimes() {
    let root = &crate::host::paths::get().rootfs;
    let seen = crate::host::containers::runtimes_seen(root);
    if seen.is_empty() {
        log::warn!(
            rootfs:% = root.display();
            "no container runtime state readable below the host root (containerd run/containerd, k3s/RKE2 \
             run/k3s/containerd, CRI-O run/containers/storage, dockerd var/lib/docker/containers): containers \
             get their id only, no namespace, pod or container names"
        );
    } else {
        let found: Vec<String> = seen.iter().map(|(runtime, dir)| format!("{runtime} ({})", dir.display())).collect();
        log::info!(rootfs:% = root.display(); "container names from {}", found.join(", "));
    }
}

/// The steps of a run, in order; each below in its own function.
async fn run(config: Config, args: RunArgs) -> Result<(), RunError> {
    caps::require()?;
    // Bind before attaching: a port in use must not leave a program loaded, even briefly.
    let listener = http::bind(config.listen).await?;
    let names = cgroup_names(&config);
    let Attached { probe, config, features, capture_slots } = attach(config, names.is_some())?;
    let (published, latest) = watch::channel(Arc::new(first_exposition(&config, features)));
    let instruments = Instruments::default();
    let metrics = Arc::new(Metrics::new(latest.clone(), &instruments, procstat::sample));
    start_otlp(&config, &metrics, &latest, &instruments);
    let (capturer, shelf) = start_captures(&config, capture_slots, &instruments);
    let mut routes = Routes::new(metrics, latest, Arc::new(config.clone()));
    if let Some(shelf) = shelf {
        routes = routes.with_captures(shelf);
    }
    let routes = Arc::new(routes);
    let (commands, inbox) = mpsc::channel();
    let notifier = start_notifier(&config, &instruments);
    let drainer = Drainer::new(
        probe,
        names,
        config.clone(),
        published,
        instruments.drain.clone(),
        notifier.clone(),
        commands.clone(),
    )
    .with_capturer(capturer);
    let drain_thread =
        thread::Builder::new().name("drain".into()).spawn(move || drainer.run(&inbox)).map_err(RunError::Thread)?;
    let server = start_http(listener, &config, Arc::clone(&routes), &instruments);
    let running = Running { config, web: Arc::clone(&server.web), routes, notifier, commands };
    let commands = signals::serve_until_stopped(running, args).await?;
    stop(commands, drain_thread, server).await;
    Ok(())
}

/// The cgroup hierarchy's names when per-cgroup delays are asked for and the cgroup2 mount can
/// be read; None (per-cgroup delays off) otherwise.
fn cgroup_names(config: &Config) -> Option<CgroupNames> {
    if !config.per_cgroup {
        return None;
    }
    match CgroupNames::discover() {
        Ok(n) => {
            log::info!(mount:% = n.mount().display(), cgroups = n.len(); "per-cgroup delays on");
            log_container_runtimes();
            Some(n)
        }
        Err(e) => {
            log::warn!("per-cgroup delays off: {e}");
            None
        }
    }
}

/// What attaching gave: the probe, the configuration with the clock the kernel allowed, and
/// each optional feature's state.
struct Attached {
    probe: Probe,
    config: Config,
    features: Vec<(&'static str, &'static str)>,
    /// The capture recorder's slots per CPU, when it is on.
    capture_slots: Option<u32>,
}

/// Loads and attaches the kernel program with what `config` asks (what this kernel lacks
/// dropped), then drops every privilege: the maps and links are file descriptors from here on.
fn attach(config: Config, cgroups: bool) -> Result<Attached, RunError> {
    let options = ProbeOptions {
        per_task: config.per_task,
        max_tasks: config.max_tasks,
        ceiling_ns: u64::try_from(config.ceiling.as_nanos()).unwrap_or(u64::MAX),
        clock: config.clock,
        cgroups,
        max_cgroups: config.max_cgroups,
        cgroup_removals: true,
        attribute_ns: config.alert.attribute_ns(),
        wait_scan: config.wait_scan,
        split_throttle: config.wait_causes,
        throttle_hooks: config.wait_causes && config.throttle_hooks,
        throttle_unknown: config.wait_causes,
        split_stolen: config.wait_causes,
        split_irq: config.wait_causes && config.irq_tracepoints,
        capture_events: if config.capture_dir.is_some() { config.capture_events } else { 0 },
        ..ProbeOptions::default()
    };
    if config.irq_tracepoints && !config.wait_causes {
        log::warn!(
            "irq_tracepoints is set but wait_causes is off: there is no irq_steal part to add IRQ time to, so the irq tracepoints stay detached"
        );
    }
    let (probe, degraded) = load::load(&options)?;
    crate::model::causes::set_throttled_unknown(probe.is_on(Feature::ThrottleUnknown));
    feature::throttle_unknown::announce(probe.is_on(Feature::ThrottleUnknown));
    log::info!("{}", system::stamp_slots_reason(probe.stamp_capacity()));
    for d in &degraded {
        log::warn!(feature = d.feature.name(); "{} unavailable on this kernel, running without it: {}", d.feature.name(), d.reason());
    }
    let clock =
        if degraded.iter().any(|d| d.feature == Feature::RunQueueClock) { Clock::Monotonic } else { config.clock };
    let config = Config { clock, ..config };
    // Least privilege from here on: the maps and links are file descriptors. The runtime's threads
    // dropped theirs when they started, so the drain thread and every later one start without.
    privileges::drop_after_attach();
    let scheme = if config.web.as_ref().is_some_and(|w| w.tls.is_some()) { "https" } else { "http" };
    log::info!(
        "attached; draining every {}, windows of {}, serving {scheme}://{}/metrics and the live view at {scheme}://{}/",
        humantime::format_duration(config.interval),
        humantime::format_duration(config.window),
        config.listen,
        config.listen
    );
    let features = load::states(&options, &degraded).into_iter().map(|(f, state)| (f.name(), state)).collect();
    let capture_slots = probe.is_on(Feature::Capture).then(|| feature::capture::slots(options.capture_events));
    Ok(Attached { probe, config, features, capture_slots })
}

/// What a scrape shows before the first drain: the build, the kernel, the clock and the features.
fn first_exposition(config: &Config, features: Vec<(&'static str, &'static str)>) -> Exposition {
    Exposition {
        version: env!("CARGO_PKG_VERSION"),
        revision: env!("LATENCY_DAEMON_COMMIT"),
        bpf: env!("LATENCY_DAEMON_BPF_ID"),
        kernel: system::kernel_release(),
        clock: config.clock,
        window_seconds: config.window.as_secs_f64(),
        classic: config.classic_buckets.clone(),
        cgroup_classic: config.cgroup_buckets.clone(),
        features,
        ..Exposition::default()
    }
}

/// Starts the OTLP exporter when one is configured.
fn start_otlp(
    config: &Config,
    metrics: &Arc<Metrics>,
    latest: &watch::Receiver<Arc<Exposition>>,
    instruments: &Instruments,
) {
    match otlp::Settings::of(&config.otlp, &system::hostname()) {
        Ok(Some(settings)) => otlp::spawn(settings, Arc::clone(metrics), latest.clone(), instruments.push.clone()),
        Ok(None) => {}
        // Checked with the configuration; only a CA bundle that changed since could get here.
        Err(e) => log::error!("OTLP push is off: {e}"),
    }
}

/// The capture trigger and the shelf the routes serve captures from, when the recorder is on and
/// its directory can be made; neither otherwise (said in one line).
fn start_captures(
    config: &Config,
    slots: Option<u32>,
    instruments: &Instruments,
) -> (Option<capturer::Capturer>, Option<Arc<dyn crate::model::capture::Shelf>>) {
    let (Some(dir), Some(slots)) = (&config.capture_dir, slots) else { return (None, None) };
    let caps = host::captures::Caps {
        files: config.capture_max_files as usize,
        bytes: u64::from(config.capture_max_mib) << 20,
    };
    let limits = capturer::Limits {
        interval: config.capture_interval,
        cpu_interval: config.capture_cpu_interval,
        demand: config.capture_demand,
        hold: capturer::hold(config),
    };
    let started = host::captures::Store::open(dir, caps).and_then(|store| {
        let shelf = host::captures::Store::open(dir, caps)?;
        Ok((capturer::Capturer::start(store, slots, limits, instruments.capture.clone())?, shelf))
    });
    match started {
        Ok((capturer, shelf)) => {
            log::info!(
                "captures on: {slots} events per CPU kept, written to {} when an alert fires, served at /api/v1/captures",
                dir.display()
            );
            (Some(capturer), Some(Arc::new(shelf)))
        }
        Err(e) => {
            log::error!("captures off: cannot use {}: {e}", dir.display());
            (None, None)
        }
    }
}

/// Starts the alert sinks when alerting is on.
fn start_notifier(config: &Config, instruments: &Instruments) -> Option<Notifier> {
    config
        .alert
        .enabled()
        .then(|| Notifier::spawn(sink_config(config, sink_client(config)), instruments.notify.clone()))
}

/// The HTTP server's task, how to stop it, and its TLS and basic-auth settings (swapped on reload).
struct Server {
    task: tokio::task::JoinHandle<Result<(), http::HttpError>>,
    stop: tokio::sync::oneshot::Sender<()>,
    web: Arc<http::WebSlot>,
}

/// Serves `routes` on `listener` until [`stop`].
fn start_http(listener: TcpListener, config: &Config, routes: Arc<Routes>, instruments: &Instruments) -> Server {
    let (stop, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let web = Arc::new(http::WebSlot::new(http::WebState::new(config.web.as_ref())));
    let limits = http::Limits {
        max_connections: config.web_max_connections,
        max_connections_per_peer: (config.web_max_connections / 4).max(1),
        max_requests: config.web_max_requests,
        ..http::Limits::default()
    };
    let task = tokio::spawn(http::serve_with(
        listener,
        routes,
        limits,
        instruments.http.clone(),
        Arc::clone(&web),
        async move {
            let _ = http_stopped.await;
        },
    ));
    Server { task, stop, web }
}

/// What a reload changes while the daemon runs.
struct Running {
    /// The configuration in force.
    config: Config,
    web: Arc<http::WebSlot>,
    routes: Arc<Routes>,
    notifier: Option<Notifier>,
    /// To the drain thread.
    commands: mpsc::Sender<Command>,
}

/// Detaches (the drain thread drops the probe and returns), then stops the HTTP server.
async fn stop(commands: mpsc::Sender<Command>, drain_thread: thread::JoinHandle<()>, server: Server) {
    log::info!("stopping: detaching the kernel program");
    let _ = commands.send(Command::Stop);
    let _ = tokio::task::spawn_blocking(move || drain_thread.join()).await;
    let _ = server.stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(1), server.task).await;
    log::info!("stopped");
}

/// SIGUSR1 and SIGUSR2 end a process by default (exit 138/140) and SIGPIPE would too; a stray
/// `kill -USR1` must not stop the monitor. Ignored from the first instruction of `run`, before
/// anything is attached; `run` later logs each one it receives.
fn ignore_stray_signals() {
    for signal in [libc::SIGUSR1, libc::SIGUSR2, libc::SIGPIPE] {
        // SAFETY: SIG_IGN installs no handler code; called before any other thread exists.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
}

/// Where and how alerts are sent.
/// The sinks' CAs and credentials, as the configuration read them.
fn sink_client(config: &Config) -> Client {
    // Checked with the configuration; the default only if that check is ever skipped.
    Client::new(config.alert.ca_pem.as_deref(), config.alert.auth.clone()).unwrap_or_default()
}

fn sink_config(config: &Config, client: Client) -> SinkConfig {
    let parse = |urls: &[String]| -> Vec<HttpUrl> {
        urls.iter()
            .filter_map(|u| match HttpUrl::parse(u) {
                Ok(url) => Some(url),
                Err(e) => {
                    log::warn!("ignoring alert URL: {e}");
                    None
                }
            })
            .collect()
    };
    let host = system::hostname();
    // Where users reach this daemon: alerts link to it (its live view, an alert's capture).
    let scheme = if config.web.as_ref().is_some_and(|w| w.tls.is_some()) { "https" } else { "http" };
    let generator_url = match &config.web_external_url {
        Some(url) => format!("{}/", url.trim_end_matches('/')),
        None => format!("{scheme}://{host}:{}/", config.listen.port()),
    };
    SinkConfig {
        alertmanagers: parse(&config.alert.alertmanagers),
        webhooks: parse(&config.alert.webhooks),
        resend: config.alert.resend,
        generator_url,
        instance: host,
        severity: config.alert.severity.clone(),
        log: true,
        log_format: match config.log_format {
            LogFormat::Logfmt => notify::LogFormat::Logfmt,
            LogFormat::Json => notify::LogFormat::Json,
        },
        client,
    }
}
