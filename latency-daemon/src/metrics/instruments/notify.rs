//! Delivery counters per sink kind: increments from `alert::notify`'s sink tasks and `send` in, a snapshot out
//! for `runqlat_alert_notifications_{sent,failed,dropped}_total{sink}`.
use std::sync::atomic::{AtomicU64, Ordering};

/// The kinds of sink; the counters are kept per kind, not per URL, so the metric's label set
/// cannot grow with the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    Alertmanager,
    Webhook,
    Log,
}

impl Sink {
    const ALL: [Sink; 3] = [Sink::Alertmanager, Sink::Webhook, Sink::Log];

    fn name(self) -> &'static str {
        match self {
            Sink::Alertmanager => "alertmanager",
            Sink::Webhook => "webhook",
            Sink::Log => "log",
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
}

/// What each kind counts: alertmanager — POSTs (each carries every active alert); webhook —
/// events (failed once all retries are spent); log — lines. `dropped`: an event a sink never got
/// because a queue was full, counted once per URL that would have received it.
#[derive(Debug, Default)]
pub struct NotifyStats {
    by_sink: [Counters; 3],
}

impl NotifyStats {
    /// `(sink, sent, failed, dropped)` for alertmanager, webhook, log, in that order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64, u64, u64)> {
        Sink::ALL
            .iter()
            .map(|&s| {
                let c = self.counters(s);
                let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
                (s.name(), get(&c.sent), get(&c.failed), get(&c.dropped))
            })
            .collect()
    }

    fn counters(&self, sink: Sink) -> &Counters {
        &self.by_sink[sink as usize]
    }

    pub fn sent(&self, sink: Sink) {
        self.counters(sink).sent.fetch_add(1, Ordering::Relaxed);
    }

    pub fn failed(&self, sink: Sink) {
        self.counters(sink).failed.fetch_add(1, Ordering::Relaxed);
    }

    pub fn dropped(&self, sink: Sink, n: u64) {
        self.counters(sink).dropped.fetch_add(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_counts_apart() {
        let s = NotifyStats::default();
        s.sent(Sink::Alertmanager);
        s.failed(Sink::Webhook);
        s.failed(Sink::Webhook);
        s.dropped(Sink::Log, 3);
        assert_eq!(s.snapshot(), vec![("alertmanager", 1, 0, 0), ("webhook", 0, 2, 0), ("log", 0, 0, 3)]);
    }
}
