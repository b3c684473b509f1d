//! The `run` command: check the configuration, bind, attach once, start the drain thread
//! (`pipeline`) and the HTTP server, reload on SIGHUP, detach and exit on SIGTERM/SIGINT.
mod pipeline;

use std::{process::ExitCode, sync::Arc, sync::mpsc, thread, time::Duration};

use latency_common::knobs::Clock;
use tokio::{signal::unix::SignalKind, sync::watch};

use self::pipeline::{Command, Drainer};
use super::log;
use crate::{
    alert::notify::{HttpUrl, Notifier, SinkConfig},
    config::{Config, args::RunArgs},
    host::{cgroups::CgroupNames, procstat, system},
    kernel::{
        caps::{self, MissingCaps},
        features::{self, Feature},
        probe::{ProbeError, ProbeOptions},
    },
    model::exposition::Exposition,
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
    // Every configuration problem is bad input: one line, exit 2, nothing attached.
    let config = match Config::load(&args) {
        Ok(c) => c,
        Err(e) => {
            log(&e.to_string());
            return ExitCode::from(super::BAD_INPUT);
        }
    };
    let runtime = match super::runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match runtime.block_on(run(config, args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => super::fail(&e.to_string()),
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
    super::install_logger();
    let (probe, degraded) = features::load(&options)?;
    for d in &degraded {
        log(&format!("{} unavailable on this kernel, running without it: {}", d.feature.name(), d.why));
    }
    let clock =
        if degraded.iter().any(|d| d.feature == Feature::RunQueueClock) { Clock::Monotonic } else { config.clock };
    let config = Config { clock, ..config };
    log(&format!(
        "attached; draining every {}, windows of {}, serving http://{}/metrics and the live view at http://{}/",
        humantime::format_duration(config.interval),
        humantime::format_duration(config.window),
        config.listen,
        config.listen
    ));

    let first = Exposition {
        version: env!("CARGO_PKG_VERSION"),
        kernel: system::kernel_release(),
        clock: config.clock,
        window_seconds: config.window.as_secs_f64(),
        classic: config.classic_buckets.clone(),
        cgroup_classic: config.cgroup_buckets.clone(),
        features: features::states(&options, &degraded).into_iter().map(|(f, state)| (f.name(), state)).collect(),
        ..Exposition::default()
    };
    let (published, latest) = watch::channel(Arc::new(first));
    let instruments = Instruments::default();
    let metrics = Metrics::new(latest.clone(), &instruments, procstat::sample);
    let routes = Arc::new(Routes::new(metrics, latest, Arc::new(config.clone())));
    let (commands, inbox) = mpsc::channel();
    let notifier = config.alert.enabled().then(|| Notifier::spawn(sink_config(&config), instruments.notify.clone()));
    let drainer = Drainer::new(probe, names, config.clone(), published, instruments.drain.clone(), notifier.clone());
    let drain_thread =
        thread::Builder::new().name("drain".into()).spawn(move || drainer.run(&inbox)).map_err(RunError::Thread)?;

    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(http::serve(
        listener,
        routes.clone(),
        http::Limits::default(),
        instruments.http.clone(),
        async move {
            let _ = http_stopped.await;
        },
    ));

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
