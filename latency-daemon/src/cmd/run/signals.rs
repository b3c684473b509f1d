//! The running daemon and the process's signals in; SIGHUP reloads (the files read on a blocking
//! worker, the result handed to the HTTP server, the sinks and the drain thread), SIGUSR1 asks the
//! drain thread for a capture on demand, SIGUSR2 is logged and ignored, and SIGTERM or SIGINT ends the wait, handing back the drain thread's
//! channel for the stop.
use std::sync::{Arc, mpsc};

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::task::JoinHandle;

use super::drainer::Command;
use super::{RunError, Running, logger, sink_client, sink_config};
use crate::config::{Config, ConfigError, Reload, args::RunArgs};
use crate::net::Client;
use crate::serve::http;

/// A reload in progress: the new configuration and the sinks' client built from it.
type Reloading = JoinHandle<Result<(Reload, Client), ConfigError>>;

/// Serves signals until SIGTERM or SIGINT.
pub(super) async fn serve_until_stopped(
    mut running: Running,
    args: RunArgs,
) -> Result<mpsc::Sender<Command>, RunError> {
    let install = |kind: SignalKind| -> Result<Signal, RunError> { signal(kind).map_err(RunError::Signal) };
    let mut sigterm = install(SignalKind::terminate())?;
    let mut sigint = install(SignalKind::interrupt())?;
    let mut sighup = install(SignalKind::hangup())?;
    let mut sigusr1 = install(SignalKind::user_defined1())?;
    let mut sigusr2 = install(SignalKind::user_defined2())?;
    // SIGHUP reads the files on a blocking worker: whatever the path turns out to be, serving and
    // the stop signals go on. One reload at a time; a SIGHUP meanwhile is taken after it.
    let mut reloading: Option<Reloading> = None;
    loop {
        tokio::select! {
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
            _ = sigusr1.recv() => {
                let _ = running.commands.send(Command::Capture);
            }
            _ = sigusr2.recv() => log::info!("SIGUSR2 received: it has no meaning here; ignored"),
            _ = sighup.recv(), if reloading.is_none() => {
                reloading = Some(start_reload(&running.config, &args));
            }
            done = async {
                match reloading.as_mut() {
                    Some(r) => r.await,
                    None => std::future::pending().await,
                }
            }, if reloading.is_some() => {
                reloading = None;
                match done {
                    Ok(Ok((reload, client))) => adopt(&mut running, reload, client),
                    Ok(Err(e)) => log::error!("reload failed, keeping the running configuration: {e}"),
                    Err(e) => log::error!("reload failed, keeping the running configuration: {e}"),
                }
            }
        }
    }
    Ok(running.commands)
}

/// Reads the configuration again on a blocking worker.
fn start_reload(running: &Config, args: &RunArgs) -> Reloading {
    let (running, args) = (running.clone(), args.clone());
    // The sinks' client too: it may read the system's CA bundle.
    tokio::task::spawn_blocking(move || {
        running.reload(&args).map(|r| {
            let client = sink_client(&r.config);
            (r, client)
        })
    })
}

/// Puts a reloaded configuration in force: the logger, the HTTP server's TLS and auth, the
/// routes, the sinks and the drain thread.
fn adopt(running: &mut Running, reload: Reload, client: Client) {
    if !reload.needs_restart.is_empty() {
        log::warn!(
            "reload: {} changed but need a restart (a new map size or re-attach needs the capabilities dropped after attach); kept the running values",
            reload.needs_restart.join(", ")
        );
    }
    running.config = reload.config;
    let current = &running.config;
    logger::set(current.log_level, current.log_format);
    running.web.set(http::WebState::new(current.web.as_ref()));
    running.routes.set_config(Arc::new(current.clone()));
    if let Some(n) = &running.notifier {
        n.reconfigure(sink_config(current, client));
    }
    let _ = running.commands.send(Command::Reload(Box::new(current.clone())));
    log::info!("reloaded the configuration");
}
