//! The `run` command: check the configuration, bind, attach once, start the drain thread
//! (`drainer`) and the HTTP server, reload on SIGHUP, detach and exit on SIGTERM/SIGINT.
mod drainer;

use std::{process::ExitCode, sync::Arc, sync::mpsc, thread, time::Duration};

use latency_common::knobs::Clock;
use tokio::{signal::unix::SignalKind, sync::watch};

pub use self::drainer::pipeline_settings;
use self::drainer::{Command, Drainer};
use super::logger;
use crate::{
    alert::notify::{Client, Notifier, SinkConfig},
    config::{Config, ConfigError, Reload, args::RunArgs},
    export::otlp,
    host::{self, cgroups::CgroupNames, paths::HostPaths, procstat, system},
    kernel::{
        caps::{self, MissingCaps},
        feature::Feature,
        load, privileges,
        probe::{ProbeError, ProbeOptions},
    },
    model::{exposition::Exposition, sink_url::HttpUrl},
    serve::{Instruments, encode::Metrics, http, routes::Routes},
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

async fn run(config: Config, args: RunArgs) -> Result<(), RunError> {
    caps::require()?;
    // Bind before attaching: a port in use must not leave a program loaded, even briefly.
    let listener = http::bind(config.listen).await?;
    let names = if !config.per_cgroup {
        None
    } else {
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
    };
    let options = ProbeOptions {
        per_task: config.per_task,
        max_tasks: config.max_tasks,
        ceiling_ns: u64::try_from(config.ceiling.as_nanos()).unwrap_or(u64::MAX),
        clock: config.clock,
        cgroups: names.is_some(),
        max_cgroups: config.max_cgroups,
        cgroup_removals: true,
        attribute_ns: config.alert.attribute_ns(),
        wait_scan: config.wait_scan,
        split_throttle: config.wait_causes,
        split_stolen: config.wait_causes,
        split_irq: config.wait_causes && config.irq_tracepoints,
        ..ProbeOptions::default()
    };
    if config.irq_tracepoints && !config.wait_causes {
        log::warn!(
            "irq_tracepoints is set but wait_causes is off: there is no irq_steal part to add IRQ time to, so the irq tracepoints stay detached"
        );
    }
    let (probe, degraded) = load::load(&options)?;
    log::info!("{}", system::stamp_slots_reason(probe.stamp_capacity()));
    for d in &degraded {
        log::warn!(feature = d.feature.name(); "{} unavailable on this kernel, running without it: {}", d.feature.name(), d.why);
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

    let first = Exposition {
        version: env!("CARGO_PKG_VERSION"),
        revision: env!("LATENCY_DAEMON_COMMIT"),
        bpf: env!("LATENCY_DAEMON_BPF_ID"),
        kernel: system::kernel_release(),
        clock: config.clock,
        window_seconds: config.window.as_secs_f64(),
        classic: config.classic_buckets.clone(),
        cgroup_classic: config.cgroup_buckets.clone(),
        features: load::states(&options, &degraded).into_iter().map(|(f, state)| (f.name(), state)).collect(),
        ..Exposition::default()
    };
    let (published, latest) = watch::channel(Arc::new(first));
    let instruments = Instruments::default();
    let metrics = Arc::new(Metrics::new(latest.clone(), &instruments, procstat::sample));
    match otlp::Settings::of(&config.otlp, &system::hostname()) {
        Ok(Some(settings)) => otlp::spawn(settings, Arc::clone(&metrics), latest.clone(), instruments.push.clone()),
        Ok(None) => {}
        // Checked with the configuration; only a CA bundle that changed since could get here.
        Err(e) => log::error!("OTLP push is off: {e}"),
    }
    let routes = Arc::new(Routes::new(metrics, latest, Arc::new(config.clone())));
    let (commands, inbox) = mpsc::channel();
    let notifier = config
        .alert
        .enabled()
        .then(|| Notifier::spawn(sink_config(&config, sink_client(&config)), instruments.notify.clone()));
    let drainer = Drainer::new(
        probe,
        names,
        config.clone(),
        published,
        instruments.drain.clone(),
        notifier.clone(),
        commands.clone(),
    );
    let drain_thread =
        thread::Builder::new().name("drain".into()).spawn(move || drainer.run(&inbox)).map_err(RunError::Thread)?;

    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let web = Arc::new(http::WebSlot::new(http::WebState::new(config.web.as_ref())));
    let limits = http::Limits {
        max_connections: config.web_max_connections,
        max_connections_per_peer: (config.web_max_connections / 4).max(1),
        max_requests: config.web_max_requests,
        ..http::Limits::default()
    };
    let server = tokio::spawn(http::serve_with(
        listener,
        routes.clone(),
        limits,
        instruments.http.clone(),
        Arc::clone(&web),
        async move {
            let _ = http_stopped.await;
        },
    ));

    let mut sigterm = tokio::signal::unix::signal(SignalKind::terminate()).map_err(RunError::Signal)?;
    let mut sigint = tokio::signal::unix::signal(SignalKind::interrupt()).map_err(RunError::Signal)?;
    let mut sighup = tokio::signal::unix::signal(SignalKind::hangup()).map_err(RunError::Signal)?;
    let mut sigusr1 = tokio::signal::unix::signal(SignalKind::user_defined1()).map_err(RunError::Signal)?;
    let mut sigusr2 = tokio::signal::unix::signal(SignalKind::user_defined2()).map_err(RunError::Signal)?;
    let mut current = config;
    // SIGHUP reads the files on a blocking worker: whatever the path turns out to be, serving and
    // the stop signals go on. One reload at a time; a SIGHUP meanwhile is taken after it.
    let mut reloading: Option<tokio::task::JoinHandle<Result<(Reload, Client), ConfigError>>> = None;
    loop {
        tokio::select! {
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
            _ = sigusr1.recv() => log::info!("SIGUSR1 received: it has no meaning here; ignored"),
            _ = sigusr2.recv() => log::info!("SIGUSR2 received: it has no meaning here; ignored"),
            _ = sighup.recv(), if reloading.is_none() => {
                let (running, args) = (current.clone(), args.clone());
                // The sinks' client too: it may read the system's CA bundle.
                reloading = Some(tokio::task::spawn_blocking(move || {
                    running.reload(&args).map(|r| {
                        let client = sink_client(&r.config);
                        (r, client)
                    })
                }));
            }
            done = async {
                match reloading.as_mut() {
                    Some(r) => r.await,
                    None => std::future::pending().await,
                }
            }, if reloading.is_some() => {
                reloading = None;
                match done {
                    Ok(Ok((reload, client))) => {
                        if !reload.needs_restart.is_empty() {
                            log::warn!("reload: {} changed but need a restart (a new map size or re-attach needs the capabilities dropped after attach); kept the running values", reload.needs_restart.join(", "));
                        }
                        current = reload.config;
                        logger::set(current.log_level, current.log_format);
                        web.set(http::WebState::new(current.web.as_ref()));
                        routes.set_config(Arc::new(current.clone()));
                        if let Some(n) = &notifier {
                            n.reconfigure(sink_config(&current, client));
                        }
                        let _ = commands.send(Command::Reload(Box::new(current.clone())));
                        log::info!("reloaded the configuration");
                    }
                    Ok(Err(e)) => log::error!("reload failed, keeping the running configuration: {e}"),
                    Err(e) => log::error!("reload failed, keeping the running configuration: {e}"),
                }
            }
        }
    }
    log::info!("stopping: detaching the kernel program");
    let _ = commands.send(Command::Stop);
    // The drain thread drops the probe (detaching everything) and returns.
    let _ = tokio::task::spawn_blocking(move || drain_thread.join()).await;
    let _ = stop_http.send(());
    let _ = tokio::time::timeout(Duration::from_secs(1), server).await;
    log::info!("stopped");
    Ok(())
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
    SinkConfig {
        alertmanagers: parse(&config.alert.alertmanagers),
        webhooks: parse(&config.alert.webhooks),
        resend: config.alert.resend,
        generator_url: format!("http://{host}:{}/", config.listen.port()),
        instance: host,
        severity: config.alert.severity.clone(),
        log: true,
        client,
    }
}
