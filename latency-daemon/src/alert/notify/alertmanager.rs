//! One Alertmanager: transitions in (applied by the dispatcher to this URL's [`Shared`] state),
//! POSTs of every active alert plus the not-yet-delivered resolved ones out — at once on a change,
//! then every `resend` while anything is left. Never more state than one entry per alert key; an
//! update replaces the active entry, so re-sends carry the alert as last fired or updated.
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::payload::{self, Origin};
use super::{ClientSlot, Health};
use crate::alert::{Alert, AlertKey, Transition};
use crate::metrics::instruments::notify::{NotifyStats, Sink};
use crate::model::sink_url::HttpUrl;
use crate::model::wall::now_unix_ns;
use crate::net::post;

/// Bound on each of the active and the resolved-but-undelivered sets. The alert engine keeps one
/// entry per reason × cgroup; this only matters if a dead Alertmanager meets thousands of keys.
const MAX_ALERTS: usize = 4096;

/// Alertmanager resolves an alert whose `endsAt` has passed; re-sends come every `resend`, so
/// four of them may be lost before a firing alert looks resolved.
const ENDS_AFTER_RESENDS: u32 = 4;

/// A zero `resend` would re-send in a busy loop; an absurd one would overflow the clock
/// arithmetic below (and Alertmanager forgets an alert long before either matters).
const MIN_RESEND: Duration = Duration::from_millis(100);
const MAX_RESEND: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug)]
struct State {
    active: BTreeMap<AlertKey, Alert>,
    /// Resolved and not yet accepted by this Alertmanager.
    resolved: BTreeMap<AlertKey, Alert>,
    origin: Origin,
    resend: Duration,
}

/// What the dispatcher and this URL's task share. The lock is held only to copy or update the
/// maps, never across an await.
#[derive(Debug)]
pub struct Shared {
    state: Mutex<State>,
    wake: Notify,
}

impl Shared {
    /// Starts with `active` (alerts firing before this URL was configured), due to be sent now.
    pub fn new(active: impl IntoIterator<Item = Alert>, origin: Origin, resend: Duration) -> Arc<Shared> {
        let active: BTreeMap<AlertKey, Alert> = active.into_iter().map(|a| (a.key.clone(), a)).collect();
        let due = !active.is_empty();
        let shared = Arc::new(Shared {
            state: Mutex::new(State { active, resolved: BTreeMap::new(), origin, resend }),
            wake: Notify::new(),
        });
        if due {
            shared.wake.notify_one();
        }
        shared
    }

    // A panic elsewhere while holding the lock leaves plain maps behind, still consistent
    // enough to send; alerting must outlive it.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn apply(&self, t: &Transition, stats: &NotifyStats) {
        {
            let mut s = self.lock();
            match t {
                Transition::Fired(a) | Transition::Updated(a) => {
                    s.resolved.remove(&a.key);
                    if s.active.len() >= MAX_ALERTS && !s.active.contains_key(&a.key) {
                        stats.dropped(Sink::Alertmanager, 1);
                        return;
                    }
                    s.active.insert(a.key.clone(), a.clone());
                }
                Transition::Grown(a) => {
                    if let Some(active) = s.active.get_mut(&a.key) {
                        *active = a.clone();
                    }
                    return;
                }
                Transition::Resolved(a) => {
                    s.active.remove(&a.key);
                    if s.resolved.len() >= MAX_ALERTS && !s.resolved.contains_key(&a.key) {
                        stats.dropped(Sink::Alertmanager, 1);
                        return;
                    }
                    s.resolved.insert(a.key.clone(), a.clone());
                }
            }
        }
        self.wake.notify_one();
    }

    /// A firing alert grew: its next re-send carries it; nothing is sent now.
    pub fn refresh(&self, a: &Alert) {
        if let Some(active) = self.lock().active.get_mut(&a.key) {
            *active = a.clone();
        }
    }

    /// New labels or re-send period (SIGHUP); sends at once so the new ones take effect.
    pub fn configure(&self, origin: Origin, resend: Duration) {
        {
            let mut s = self.lock();
            if s.origin == origin && s.resend == resend {
                return;
            }
            s.origin = origin;
            s.resend = resend;
        }
        self.wake.notify_one();
    }

    /// What to send now, or None if nothing is active or pending. Resolved alerts are taken out:
    /// delivered once, or put back by [`Shared::restore`].
    fn take(&self) -> Option<Batch> {
        let mut s = self.lock();
        if s.active.is_empty() && s.resolved.is_empty() {
            return None;
        }
        Some(Batch {
            active: s.active.values().cloned().collect(),
            resolved: std::mem::take(&mut s.resolved).into_values().collect(),
            origin: s.origin.clone(),
            resend: s.resend.clamp(MIN_RESEND, MAX_RESEND),
        })
    }

    /// A POST failed: its resolved alerts are due again, unless the key fired or resolved anew.
    fn restore(&self, resolved: Vec<Alert>) {
        let mut s = self.lock();
        for a in resolved {
            if s.resolved.len() < MAX_ALERTS && !s.active.contains_key(&a.key) && !s.resolved.contains_key(&a.key) {
                s.resolved.insert(a.key.clone(), a);
            }
        }
    }

    fn idle(&self) -> bool {
        let s = self.lock();
        s.active.is_empty() && s.resolved.is_empty()
    }
}

struct Batch {
    active: Vec<Alert>,
    resolved: Vec<Alert>,
    origin: Origin,
    resend: Duration,
}

/// This URL's task: runs until aborted (reconfigured away, or the notifier is gone).
pub async fn run(
    url: HttpUrl,
    shared: Arc<Shared>,
    stats: Arc<NotifyStats>,
    attempt_timeout: Duration,
    client: Arc<ClientSlot>,
) {
    let path = url.join("/api/v2/alerts");
    let mut health = Health::new("alertmanager", &url);
    let mut resend_at: Option<Instant> = None;
    loop {
        match resend_at {
            Some(at) => tokio::select! {
                () = shared.wake.notified() => {}
                () = tokio::time::sleep_until(at) => {}
            },
            None => shared.wake.notified().await,
        }
        let Some(batch) = shared.take() else {
            resend_at = None;
            continue;
        };
        let now = now_unix_ns();
        let keep_for = u64::try_from((batch.resend * ENDS_AFTER_RESENDS).as_nanos()).unwrap_or(u64::MAX);
        let body = payload::alertmanager_body(
            &batch.active,
            &batch.resolved,
            &batch.origin,
            now.saturating_add(keep_for),
            now,
        );
        let result = match body {
            Ok(body) => post(&url, &path, &body, attempt_timeout, &client.get()).await.map_err(|e| e.to_string()),
            Err(e) => Err(format!("encoding the alerts: {e}")),
        };
        match result {
            Ok(()) => {
                stats.sent(Sink::Alertmanager);
                health.ok();
            }
            Err(e) => {
                stats.failed(Sink::Alertmanager);
                health.failed(&e);
                shared.restore(batch.resolved);
            }
        }
        resend_at = (!shared.idle()).then(|| Instant::now() + batch.resend);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::notify::text::tests::alert;

    fn origin() -> Origin {
        Origin { instance: "i".into(), severity: "warning".into(), generator_url: "g".into() }
    }

    #[test]
    fn fired_and_resolved_move_one_entry_per_key() {
        let stats = NotifyStats::default();
        let s = Shared::new([], origin(), Duration::from_secs(30));
        assert!(s.take().is_none());
        let a = alert();
        s.apply(&Transition::Fired(a.clone()), &stats);
        s.apply(&Transition::Fired(a.clone()), &stats);
        let b = s.take().unwrap();
        assert_eq!((b.active.len(), b.resolved.len()), (1, 0));

        s.apply(&Transition::Resolved(a.clone()), &stats);
        let b = s.take().unwrap();
        assert_eq!((b.active.len(), b.resolved.len()), (0, 1));
        assert!(s.take().is_none(), "a resolved alert is sent once");

        s.restore(b.resolved);
        assert_eq!(s.take().unwrap().resolved.len(), 1, "a failed POST puts it back");

        s.apply(&Transition::Resolved(a.clone()), &stats);
        s.apply(&Transition::Fired(a.clone()), &stats);
        let b = s.take().unwrap();
        assert_eq!((b.active.len(), b.resolved.len()), (1, 0), "firing again supersedes the resolution");
        s.restore(vec![a]);
        assert!(s.lock().resolved.is_empty(), "nor does a late restore bring it back");
    }

    #[test]
    fn an_update_replaces_the_active_entry_and_is_sent_at_once() {
        let stats = NotifyStats::default();
        let s = Shared::new([], origin(), Duration::from_secs(30));
        let mut a = alert();
        a.worst.waiting = true;
        s.apply(&Transition::Fired(a.clone()), &stats);
        assert!(s.take().unwrap().active[0].worst.waiting);
        a.worst.waiting = false;
        a.worst.delay_ns *= 2;
        a.ran_after_waiting = true;
        s.apply(&Transition::Updated(a.clone()), &stats);
        let b = s.take().unwrap();
        assert_eq!((b.active.len(), b.resolved.len()), (1, 0));
        assert_eq!(b.active[0], a, "re-sends carry the final delay");
    }

    #[test]
    fn a_grown_alert_is_what_the_next_resend_carries_and_wakes_nobody() {
        let stats = NotifyStats::default();
        let s = Shared::new([], origin(), Duration::from_secs(30));
        let mut a = alert();
        a.worst.waiting = true;
        s.apply(&Transition::Fired(a.clone()), &stats);
        s.take();
        // The firing woke the sender (its permit is taken here); growing must not wake it again.
        let fired = s.wake.notified();
        tokio::pin!(fired);
        assert!(futures_poll(fired.as_mut()), "the firing woke the sender");
        a.worst.delay_ns *= 3;
        s.apply(&Transition::Grown(a.clone()), &stats);
        s.refresh(&a);
        let grown = s.wake.notified();
        tokio::pin!(grown);
        assert!(!futures_poll(grown.as_mut()), "a grown alert woke the sender");
        assert_eq!(s.take().unwrap().active[0], a, "the next re-send carries the grown wait");
        // An alert not firing here is not added by growing.
        let mut other = alert();
        other.key.cgroup = "/elsewhere".into();
        s.apply(&Transition::Grown(other), &stats);
        assert_eq!(s.take().unwrap().active.len(), 1);
    }

    /// Whether a future is ready at its first poll.
    fn futures_poll<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        f.poll(&mut cx).is_ready()
    }

    #[test]
    fn bounded_per_set() {
        let stats = NotifyStats::default();
        let s = Shared::new([], origin(), Duration::from_secs(30));
        for i in 0..MAX_ALERTS + 10 {
            let mut a = alert();
            a.key.cgroup = format!("/c{i}");
            s.apply(&Transition::Fired(a), &stats);
        }
        assert_eq!(s.lock().active.len(), MAX_ALERTS);
        assert_eq!(stats.snapshot()[0], ("alertmanager", 0, 0, 10));
    }
}
