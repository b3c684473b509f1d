//! What password checks may cost: a client address in; whether a bcrypt verification may start
//! (and, once it ran, its price) out. Failed checks draw on two budgets of bcrypt time — one per
//! address, one for all — that refill at a fixed share of one core, and a check that finds either
//! empty is refused before any hash is computed. Verifications also run one at a time, so however
//! many are admitted they use at most one core and never the request slots scrapes need.
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// bcrypt time failed checks from one address may spend per second: 5 % of one core (at cost 10,
/// about one wrong password every 1.5–4 s, after the burst).
const PEER_RATE: f64 = 0.05;
/// What one address may spend at once: a person mistyping a few times is not refused.
const PEER_BURST: f64 = 0.6;
/// bcrypt time failed checks from every address together may spend per second: 10 % of one core.
const GLOBAL_RATE: f64 = 0.10;
const GLOBAL_BURST: f64 = 1.0;
/// Verifications computed at once: one core at most, the other(s) stay free for scrapes.
const WORKERS: usize = 1;
/// How long a check waits for the worker before it is answered busy.
const QUEUE_WAIT: Duration = Duration::from_secs(1);
/// Addresses remembered; beyond it, those whose budget is full again are forgotten (they would start
/// full anyway), then all (the global budget still holds).
const MAX_PEERS: usize = 4096;
/// What a verification is assumed to cost until one has been measured (cost 10 on a slow core).
const FIRST_GUESS: f64 = 0.2;
/// A budget at or below this (a microsecond of bcrypt) is empty; floating-point sums of reservations
/// rarely land on zero exactly.
const EMPTY: f64 = 1e-6;

/// A budget of seconds of bcrypt: refills at `rate` per second up to `burst`; may go below zero
/// when a verification cost more than was reserved, and is then paid back by the refill.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    level: f64,
    at: Instant,
}

impl Bucket {
    fn full(now: Instant, burst: f64) -> Bucket {
        Bucket { level: burst, at: now }
    }

    fn refill(&mut self, now: Instant, rate: f64, burst: f64) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.level = (self.level + elapsed * rate).min(burst);
        self.at = now;
    }
}

#[derive(Debug)]
struct Budgets {
    global: Bucket,
    peers: HashMap<IpAddr, Bucket>,
    /// The last verification's measured time, reserved up front by the next one.
    estimate: f64,
}

#[derive(Debug)]
pub(super) struct Throttle {
    budgets: Mutex<Budgets>,
    workers: Arc<Semaphore>,
}

impl Default for Throttle {
    fn default() -> Self {
        let now = Instant::now();
        Throttle {
            budgets: Mutex::new(Budgets {
                global: Bucket::full(now, GLOBAL_BURST),
                peers: HashMap::new(),
                estimate: FIRST_GUESS,
            }),
            workers: Arc::new(Semaphore::new(WORKERS)),
        }
    }
}

/// Why a verification may not run now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The address's or everyone's budget for failures is spent: try again in this many seconds.
    Throttled { retry_after: u64 },
    /// The budget allows it but the worker stayed busy for [`QUEUE_WAIT`].
    Busy,
}

/// An admitted verification: holds the worker and the time reserved from both budgets.
#[derive(Debug)]
pub(super) struct Admission {
    peer: IpAddr,
    reserved: f64,
    worker: Option<OwnedSemaphorePermit>,
}

impl Admission {
    /// The worker, for the blocking task that hashes to hold: if the request is dropped while that
    /// task runs (the client left), the worker stays taken until the hash is done.
    pub fn take_worker(&mut self) -> Option<OwnedSemaphorePermit> {
        self.worker.take()
    }
}

impl Throttle {
    /// Reserves a verification's estimated price from `peer`'s and the global budget (refused if either
    /// is empty, without waiting), then waits briefly for the worker.
    pub async fn admit(&self, peer: IpAddr) -> Result<Admission, Refusal> {
        let reserved = self.reserve(peer, Instant::now())?;
        match tokio::time::timeout(QUEUE_WAIT, Arc::clone(&self.workers).acquire_owned()).await {
            Ok(Ok(worker)) => Ok(Admission { peer, reserved, worker: Some(worker) }),
            _ => {
                self.settle(peer, reserved, 0.0, Instant::now());
                Err(Refusal::Busy)
            }
        }
    }

    /// Settles an admission: a failure costs what the verification took, a success nothing.
    pub fn finish(&self, admission: Admission, took: Duration, succeeded: bool) {
        let took = took.as_secs_f64();
        let mut budgets = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
        budgets.estimate = took;
        drop(budgets);
        self.settle(admission.peer, admission.reserved, if succeeded { 0.0 } else { took }, Instant::now());
    }

    fn reserve(&self, peer: IpAddr, now: Instant) -> Result<f64, Refusal> {
        let mut b = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
        let Budgets { global, peers, estimate } = &mut *b;
        global.refill(now, GLOBAL_RATE, GLOBAL_BURST);
        if peers.len() >= MAX_PEERS && !peers.contains_key(&peer) {
            peers.retain(|_, p| {
                p.refill(now, PEER_RATE, PEER_BURST);
                p.level < PEER_BURST
            });
            if peers.len() >= MAX_PEERS {
                peers.clear();
            }
        }
        let own = peers.entry(peer).or_insert_with(|| Bucket::full(now, PEER_BURST));
        own.refill(now, PEER_RATE, PEER_BURST);
        if own.level <= EMPTY || global.level <= EMPTY {
            let wait = (-own.level / PEER_RATE).max(-global.level / GLOBAL_RATE);
            // At least a second: Retry-After counts whole seconds, and 0 would invite an instant retry.
            return Err(Refusal::Throttled { retry_after: ((wait - EMPTY).ceil() as u64).max(1) });
        }
        let reserved = *estimate;
        own.level -= reserved;
        global.level -= reserved;
        Ok(reserved)
    }

    /// Replaces what was reserved by what is owed.
    fn settle(&self, peer: IpAddr, reserved: f64, owed: f64, now: Instant) {
        let mut b = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
        let Budgets { global, peers, .. } = &mut *b;
        let back = reserved - owed;
        global.refill(now, GLOBAL_RATE, GLOBAL_BURST);
        global.level = (global.level + back).min(GLOBAL_BURST);
        if let Some(own) = peers.get_mut(&peer) {
            own.refill(now, PEER_RATE, PEER_BURST);
            own.level = (own.level + back).min(PEER_BURST);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    /// Admits and settles a failed verification of `took` seconds at `now`, as `finish` would.
    fn fail(t: &Throttle, peer: IpAddr, now: Instant, took: f64) -> Result<(), Refusal> {
        let reserved = t.reserve(peer, now)?;
        t.budgets.lock().unwrap().estimate = took;
        t.settle(peer, reserved, took, now);
        Ok(())
    }

    #[test]
    fn one_address_gets_its_burst_then_its_rate() {
        let t = Throttle::default();
        let now = Instant::now();
        // 0.6 s of burst at 0.2 s each: three, and the third leaves the budget at zero.
        for i in 0..3 {
            assert_eq!(fail(&t, ip(2), now, 0.2), Ok(()), "attempt {i}");
        }
        let refused = fail(&t, ip(2), now, 0.2);
        assert_eq!(refused, Err(Refusal::Throttled { retry_after: 1 }), "the burst is spent");
        // Another address has its own budget (the global one still has 0.4 s).
        assert_eq!(fail(&t, ip(3), now, 0.2), Ok(()));
        // A second refills 0.05 s: enough to admit one more (the level is above zero), which overdraws.
        let later = now + Duration::from_secs(1);
        assert_eq!(fail(&t, ip(2), later, 0.2), Ok(()));
        let Err(Refusal::Throttled { retry_after }) = fail(&t, ip(2), later, 0.2) else { panic!("admitted") };
        assert_eq!(retry_after, 3, "0.15 s owed at 0.05 s/s");
    }

    #[test]
    fn all_addresses_together_get_the_global_budget() {
        let t = Throttle::default();
        let now = Instant::now();
        let admitted = (10..60).filter(|&i| fail(&t, ip(i), now, 0.2).is_ok()).count();
        assert_eq!(admitted, 5, "1 s of global burst at 0.2 s each");
        let Err(Refusal::Throttled { retry_after }) = fail(&t, ip(99), now, 0.2) else { panic!("admitted") };
        assert_eq!(retry_after, 1);
        // Ten seconds refill one second: five more.
        let later = now + Duration::from_secs(10);
        let admitted = (100..150).filter(|&i| fail(&t, ip(i), later, 0.2).is_ok()).count();
        assert_eq!(admitted, 5);
    }

    #[test]
    fn a_success_costs_nothing() {
        let t = Throttle::default();
        let now = Instant::now();
        for _ in 0..20 {
            let reserved = t.reserve(ip(2), now).unwrap();
            t.settle(ip(2), reserved, 0.0, now);
        }
        assert_eq!(fail(&t, ip(2), now, 0.2), Ok(()), "the budget is untouched");
    }

    #[test]
    fn the_address_table_stays_bounded() {
        let t = Throttle::default();
        let now = Instant::now();
        for i in 0..(MAX_PEERS as u32 + 10) {
            let peer = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            let reserved = t.reserve(peer, now).unwrap();
            t.settle(peer, reserved, 0.0, now);
        }
        assert!(t.budgets.lock().unwrap().peers.len() <= MAX_PEERS);
    }

    #[tokio::test]
    async fn verifications_run_one_at_a_time_and_waiters_give_up() {
        let t = Throttle::default();
        let first = t.admit(ip(2)).await.unwrap();
        // Waits QUEUE_WAIT (a second) for the worker, then gives up.
        assert_eq!(t.admit(ip(3)).await.unwrap_err(), Refusal::Busy, "the worker is taken");
        t.finish(first, Duration::from_millis(1), false);
        assert!(t.admit(ip(3)).await.is_ok());
    }
}
