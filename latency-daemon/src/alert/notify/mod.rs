//! Alert sinks: [`Transition`]s in from any thread through [`Notifier::send`], which never blocks;
//! out to the log on stderr (logfmt or JSON, as `--log.format`), Alertmanager (API v2) and webhooks, each URL in its own task,
//! with [`NotifyStats`] counting what was sent, failed and dropped. Why none of it can block or
//! bloat the daemon: docs/design.md.

mod alertmanager;
mod dispatch;
mod log;
mod payload;
#[cfg(test)]
mod tests;
mod text;
mod webhook;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::alert::Transition;
use crate::metrics::instruments::notify::{NotifyStats, Sink};
use crate::model::sink_url::HttpUrl;
use crate::net::Client;

/// Transitions between `send` and the dispatcher. Transitions come a few per window close; this
/// only fills if the runtime stops scheduling the dispatcher.
const CHANNEL: usize = 256;

/// Where alerts go and how they are labelled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkConfig {
    /// Base URLs; alerts are POSTed to `<path without trailing slash>/api/v2/alerts`.
    pub alertmanagers: Vec<HttpUrl>,
    /// The JSON of each Transition is POSTed to exactly these URLs.
    pub webhooks: Vec<HttpUrl>,
    /// Active alerts are re-sent to Alertmanager this often.
    pub resend: Duration,
    /// The `instance` label (the hostname).
    pub instance: String,
    /// The `severity` label, e.g. "warning".
    pub severity: String,
    /// e.g. "http://host:9954/".
    pub generator_url: String,
    /// A line per transition on stderr.
    pub log: bool,
    /// That line's format: the daemon's `--log.format`.
    pub log_format: LogFormat,
    /// CAs for `https://` and the credentials every sink sends.
    pub client: Client,
}

impl Default for SinkConfig {
    fn default() -> Self {
        SinkConfig {
            alertmanagers: Vec::new(),
            webhooks: Vec::new(),
            resend: Duration::from_secs(30),
            instance: String::new(),
            severity: "warning".into(),
            generator_url: String::new(),
            log: false,
            log_format: LogFormat::default(),
            client: Client::default(),
        }
    }
}

/// How the log sink writes its lines: as the logger writes every other event (`--log.format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Logfmt,
    Json,
}

/// How long a delivery may take; tests shorten it.
#[derive(Clone, Debug)]
struct Timing {
    /// Connect + request + status line, per attempt.
    attempt: Duration,
    /// Webhook pauses between attempts; its length + 1 attempts in all.
    backoff: Vec<Duration>,
}

impl Default for Timing {
    fn default() -> Self {
        let ms = Duration::from_millis;
        Timing { attempt: Duration::from_secs(5), backoff: vec![ms(500), ms(1000), ms(2000)] }
    }
}

/// How many destinations of each kind are configured, so that `send` can count a transition it
/// drops once per destination that lost it without asking the dispatcher.
#[derive(Debug, Default)]
struct Targets {
    log: AtomicBool,
    alertmanagers: AtomicU64,
    webhooks: AtomicU64,
}

impl Targets {
    fn set(&self, log: bool, alertmanagers: usize, webhooks: usize) {
        self.log.store(log, Ordering::Relaxed);
        self.alertmanagers.store(alertmanagers as u64, Ordering::Relaxed);
        self.webhooks.store(webhooks as u64, Ordering::Relaxed);
    }

    fn count_dropped(&self, stats: &NotifyStats) {
        if self.log.load(Ordering::Relaxed) {
            stats.dropped(Sink::Log, 1);
        }
        stats.dropped(Sink::Alertmanager, self.alertmanagers.load(Ordering::Relaxed));
        stats.dropped(Sink::Webhook, self.webhooks.load(Ordering::Relaxed));
    }
}

#[derive(Debug)]
struct Inner {
    transitions: mpsc::Sender<Transition>,
    configs: watch::Sender<SinkConfig>,
    targets: Arc<Targets>,
    stats: Arc<NotifyStats>,
}

/// A handle on the sinks; clones share them. When the last clone is dropped the sinks stop.
#[derive(Clone, Debug)]
pub struct Notifier {
    inner: Arc<Inner>,
}

impl Notifier {
    /// Starts the sink tasks on the current tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime (as `tokio::spawn` does).
    pub fn spawn(config: SinkConfig, stats: Arc<NotifyStats>) -> Notifier {
        Notifier::spawn_with(config, stats, Timing::default())
    }

    fn spawn_with(config: SinkConfig, stats: Arc<NotifyStats>, timing: Timing) -> Notifier {
        let (transitions, rx) = mpsc::channel(CHANNEL);
        let (configs, config_rx) = watch::channel(config.clone());
        let targets = Arc::new(Targets::default());
        let dispatcher = dispatch::Dispatcher::start(config, timing, Arc::clone(&stats), Arc::clone(&targets));
        tokio::spawn(dispatcher.run(rx, config_rx));
        Notifier { inner: Arc::new(Inner { transitions, configs, targets, stats }) }
    }

    /// From any thread, never blocks: queues `t` for every sink. A full queue drops it and counts
    /// it as `dropped` for each destination that would have received it.
    pub fn send(&self, t: Transition) {
        if self.inner.transitions.try_send(t).is_err() {
            self.inner.targets.count_dropped(&self.inner.stats);
        }
    }

    /// SIGHUP: new URLs, labels and resend period. Active alerts are kept and sent to any newly
    /// configured Alertmanager; a URL in both the old and new lists keeps its queue.
    pub fn reconfigure(&self, config: SinkConfig) {
        self.inner.configs.send_replace(config);
    }
}

/// The sinks' current [`Client`]: replaced on reconfiguration, read by each URL's task per attempt.
#[derive(Debug, Default)]
struct ClientSlot(std::sync::RwLock<Client>);

impl ClientSlot {
    fn get(&self) -> Client {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn set(&self, client: Client) {
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = client;
    }
}

/// Logs a sink's first failure and its recovery, not every failure: a dead endpoint would
/// otherwise write a line per event; the counters have the rest.
#[derive(Debug)]
struct Health {
    what: &'static str,
    url: String,
    failing: bool,
}

impl Health {
    fn new(what: &'static str, url: &HttpUrl) -> Health {
        Health { what, url: url.to_string(), failing: false }
    }

    fn ok(&mut self) {
        if std::mem::replace(&mut self.failing, false) {
            ::log::info!("notify: {} {} is delivering again", self.what, self.url);
        }
    }

    fn failed(&mut self, error: &str) {
        if !std::mem::replace(&mut self.failing, true) {
            ::log::warn!(
                "notify: {} {}: {error} (further failures are only counted until it recovers)",
                self.what,
                self.url
            );
        }
    }
}
