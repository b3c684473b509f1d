//! The dispatcher task: transitions and configurations in, each transition fanned out to the log
//! queue, every Alertmanager's state and every webhook's queue. Never awaits anything but its
//! inputs, so one slow sink cannot hold back another.
use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

use super::payload::Origin;
use super::{ClientSlot, LogFormat, SinkConfig, Targets, Timing, alertmanager, log, webhook};
use crate::alert::{Alert, AlertKey, Transition};
use crate::metrics::instruments::notify::{NotifyStats, Sink};
use crate::model::sink_url::HttpUrl;

/// A running per-URL task and what it shares with the dispatcher.
#[derive(Debug)]
struct Running<S> {
    url: HttpUrl,
    shared: Arc<S>,
    task: AbortHandle,
}

#[derive(Debug)]
pub(super) struct Dispatcher {
    config: SinkConfig,
    timing: Timing,
    stats: Arc<NotifyStats>,
    targets: Arc<Targets>,
    /// Firing alerts, for Alertmanagers configured later.
    active: BTreeMap<AlertKey, Alert>,
    log: mpsc::Sender<(Transition, LogFormat)>,
    alertmanagers: Vec<Running<alertmanager::Shared>>,
    webhooks: Vec<Running<webhook::Shared>>,
    client: Arc<ClientSlot>,
}

impl Dispatcher {
    /// Spawns the log task and one task per URL.
    pub fn start(config: SinkConfig, timing: Timing, stats: Arc<NotifyStats>, targets: Arc<Targets>) -> Dispatcher {
        let (log, log_rx) = mpsc::channel(log::QUEUE);
        tokio::spawn(log::run(log_rx, tokio::io::stderr(), Arc::clone(&stats)));
        let mut d = Dispatcher {
            config: SinkConfig { alertmanagers: Vec::new(), webhooks: Vec::new(), ..config.clone() },
            timing,
            stats,
            targets,
            active: BTreeMap::new(),
            log,
            alertmanagers: Vec::new(),
            webhooks: Vec::new(),
            client: Arc::default(),
        };
        d.reconfigure(config);
        d
    }

    pub async fn run(mut self, mut transitions: mpsc::Receiver<Transition>, mut configs: watch::Receiver<SinkConfig>) {
        let mut configs_open = true;
        loop {
            tokio::select! {
                t = transitions.recv() => match t {
                    Some(t) => self.dispatch(t),
                    // Every Notifier is gone: stop (Drop aborts the URL tasks).
                    None => return,
                },
                changed = configs.changed(), if configs_open => match changed {
                    Ok(()) => {
                        let config = configs.borrow_and_update().clone();
                        self.reconfigure(config);
                    }
                    Err(_) => configs_open = false,
                },
            }
        }
    }

    fn dispatch(&mut self, t: Transition) {
        if let Transition::Grown(a) = &t {
            // Only what Alertmanagers re-send grows; nothing is sent or logged for it.
            if let Some(active) = self.active.get_mut(&a.key) {
                *active = a.clone();
            }
            for am in &self.alertmanagers {
                am.shared.refresh(a);
            }
            return;
        }
        match &t {
            Transition::Fired(a) | Transition::Updated(a) => {
                self.active.insert(a.key.clone(), a.clone());
            }
            Transition::Resolved(a) => {
                self.active.remove(&a.key);
            }
            Transition::Grown(_) => {}
        }
        for am in &self.alertmanagers {
            am.shared.apply(&t, &self.stats);
        }
        if !self.webhooks.is_empty() {
            match serde_json::to_vec(&t) {
                Ok(body) => {
                    let body: webhook::Body = Arc::from(body);
                    for w in &self.webhooks {
                        w.shared.push(Arc::clone(&body), &self.stats);
                    }
                }
                Err(_) => self.stats.failed(Sink::Webhook),
            }
        }
        if self.config.log && self.log.try_send((t, self.config.log_format)).is_err() {
            self.stats.dropped(Sink::Log, 1);
        }
    }

    fn reconfigure(&mut self, config: SinkConfig) {
        let origin = Origin {
            instance: config.instance.clone(),
            severity: config.severity.clone(),
            generator_url: config.generator_url.clone(),
        };
        self.client.set(config.client.clone());
        let wanted = distinct(&config.alertmanagers);
        retain_wanted(&mut self.alertmanagers, &wanted);
        for am in &self.alertmanagers {
            am.shared.configure(origin.clone(), config.resend);
        }
        for url in wanted {
            if self.alertmanagers.iter().any(|r| r.url == url) {
                continue;
            }
            let shared = alertmanager::Shared::new(self.active.values().cloned(), origin.clone(), config.resend);
            let task = tokio::spawn(alertmanager::run(
                url.clone(),
                Arc::clone(&shared),
                Arc::clone(&self.stats),
                self.timing.attempt,
                Arc::clone(&self.client),
            ));
            self.alertmanagers.push(Running { url, shared, task: task.abort_handle() });
        }

        let wanted = distinct(&config.webhooks);
        retain_wanted(&mut self.webhooks, &wanted);
        for url in wanted {
            if self.webhooks.iter().any(|r| r.url == url) {
                continue;
            }
            let shared = Arc::new(webhook::Shared::default());
            let task = tokio::spawn(webhook::run(
                url.clone(),
                Arc::clone(&shared),
                Arc::clone(&self.stats),
                self.timing.clone(),
                Arc::clone(&self.client),
            ));
            self.webhooks.push(Running { url, shared, task: task.abort_handle() });
        }

        self.targets.set(config.log, self.alertmanagers.len(), self.webhooks.len());
        self.config = config;
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        for r in &self.alertmanagers {
            r.task.abort();
        }
        for r in &self.webhooks {
            r.task.abort();
        }
    }
}

/// The URLs in order, each once: listing one twice must not send twice.
fn distinct(urls: &[HttpUrl]) -> Vec<HttpUrl> {
    let mut out: Vec<HttpUrl> = Vec::with_capacity(urls.len());
    for u in urls {
        if !out.contains(u) {
            out.push(u.clone());
        }
    }
    out
}

/// Stops the tasks of URLs no longer wanted.
fn retain_wanted<S>(running: &mut Vec<Running<S>>, wanted: &[HttpUrl]) {
    running.retain(|r| {
        let keep = wanted.contains(&r.url);
        if !keep {
            r.task.abort();
        }
        keep
    });
}
