//! One webhook: serialized transitions in (pushed by the dispatcher into a 64-event queue that
//! drops its oldest when full), one POST per event out, retried with backoff, then given up.
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use super::{ClientSlot, Health, Timing};
use crate::metrics::instruments::notify::{NotifyStats, Sink};
use crate::model::sink_url::HttpUrl;
use crate::net::post;

/// Per URL. A dead endpoint costs at most this many events of memory; keeping the newest ones
/// means that when it comes back it hears about the current state, not an hour-old backlog.
pub const QUEUE: usize = 64;

/// A Transition's JSON, shared by every webhook URL.
pub type Body = Arc<[u8]>;

#[derive(Debug, Default)]
pub struct Shared {
    queue: Mutex<VecDeque<Body>>,
    wake: Notify,
}

impl Shared {
    // The queue is a VecDeque of Arcs: a panic while holding the lock cannot leave it inconsistent.
    fn lock(&self) -> MutexGuard<'_, VecDeque<Body>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `body`; a full queue loses its oldest event, counted as dropped.
    pub fn push(&self, body: Body, stats: &NotifyStats) {
        {
            let mut q = self.lock();
            if q.len() >= QUEUE {
                q.pop_front();
                stats.dropped(Sink::Webhook, 1);
            }
            q.push_back(body);
        }
        self.wake.notify_one();
    }

    async fn pop(&self) -> Body {
        loop {
            if let Some(body) = self.lock().pop_front() {
                return body;
            }
            self.wake.notified().await;
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

/// This URL's task: runs until aborted (reconfigured away, or the notifier is gone).
pub async fn run(url: HttpUrl, shared: Arc<Shared>, stats: Arc<NotifyStats>, timing: Timing, client: Arc<ClientSlot>) {
    let mut health = Health::new("webhook", &url);
    loop {
        let body = shared.pop().await;
        let mut backoff = timing.backoff.iter();
        loop {
            match post(&url, &url.path, &body, timing.attempt, &client.get()).await {
                Ok(()) => {
                    stats.sent(Sink::Webhook);
                    health.ok();
                    break;
                }
                Err(e) => match backoff.next() {
                    Some(pause) => tokio::time::sleep(*pause).await,
                    None => {
                        stats.failed(Sink::Webhook);
                        health.failed(&e.to_string());
                        break;
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_the_oldest() {
        let stats = NotifyStats::default();
        let s = Shared::default();
        for i in 0..QUEUE + 5 {
            s.push(Arc::from(i.to_string().as_bytes()), &stats);
        }
        assert_eq!(s.len(), QUEUE);
        assert_eq!(stats.snapshot()[1], ("webhook", 0, 0, 5));
        assert_eq!(&*s.lock()[0], b"5", "the five oldest went");
    }
}
