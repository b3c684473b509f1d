//! What password checks may cost: a client address in; whether a bcrypt verification may start
//! (and, once it ran, its price) out. Checks draw on a budget of bcrypt time per address and on a
//! shared one, which refill at a fixed share of one core; a failure keeps what it cost, a success
//! gets it back, and a check that finds the budgets empty is refused before any hash is computed.
//! An address with no failed check on record is served before addresses that keep failing: when
//! they have spent the shared budget it draws on a second one they cannot touch, and it does not
//! queue behind them for the worker, so wrong passwords from other addresses cannot keep a right
//! one out. Verifications run one at a time: at most one core, never the request slots.
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
/// The second shared budget, for addresses with no failure on record once the first is spent: 5 %
/// of one core. Its burst holds a first check from each of about fifteen addresses at cost 10 (an
/// address is only known to fail after its first check, so after a restart during a flood every
/// flooding address gets one from here; one at a time per address, see [`Peer::trying`]).
const FRESH_RATE: f64 = 0.05;
const FRESH_BURST: f64 = 3.0;
/// How long a failed check keeps its address off the second budget and behind in the queue.
const REMEMBER_FAILURE: Duration = Duration::from_secs(600);
/// Verifications computed at once: one core at most, the other(s) stay free for scrapes.
const WORKERS: usize = 1;
/// How long a check from an address with failures waits for the worker before it is answered busy.
const QUEUE_WAIT: Duration = Duration::from_secs(1);
/// The same for an address in good standing: ahead of it in the queue are at most one check from an
/// address with failures and what the budgets admitted (a few seconds of bcrypt, after a restart).
const FRESH_QUEUE_WAIT: Duration = Duration::from_secs(4);
/// Addresses remembered; beyond it, those with nothing to remember (a full budget, no recent
/// failure) are forgotten, then all (the shared budgets still hold).
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

    /// Seconds until it is above empty again (0 if it is).
    fn wait(&self, rate: f64) -> f64 {
        if self.level > EMPTY { 0.0 } else { -self.level / rate }
    }
}

/// What is known of one address.
#[derive(Debug, Clone, Copy)]
struct Peer {
    budget: Bucket,
    /// When a check from it last failed.
    failed: Option<Instant>,
    /// A check it drew from the second budget is running: one at a time, so that an address not yet
    /// known to fail cannot spend that budget on many first tries at once.
    trying: bool,
}

impl Peer {
    fn new(now: Instant) -> Peer {
        Peer { budget: Bucket::full(now, PEER_BURST), failed: None, trying: false }
    }

    fn in_good_standing(&self, now: Instant) -> bool {
        self.failed.is_none_or(|at| now.saturating_duration_since(at) >= REMEMBER_FAILURE)
    }
}

/// The shared budget a check drew on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pool {
    Global,
    Fresh,
}

/// Seconds of bcrypt reserved for a check, where from, and whether its address was in good standing.
#[derive(Debug, Clone, Copy)]
struct Reservation {
    seconds: f64,
    pool: Pool,
    good: bool,
}

#[derive(Debug)]
struct Budgets {
    global: Bucket,
    fresh: Bucket,
    peers: HashMap<IpAddr, Peer>,
    /// The last verification's measured time, reserved up front by the next one.
    estimate: f64,
}

#[derive(Debug)]
pub(super) struct Throttle {
    budgets: Mutex<Budgets>,
    workers: Arc<Semaphore>,
    /// Passed by checks from addresses with failures before they queue for the worker: at most one
    /// of them waits there, so an address in good standing waits for at most one of theirs.
    gate: Semaphore,
}

impl Default for Throttle {
    fn default() -> Self {
        let now = Instant::now();
        Throttle {
            budgets: Mutex::new(Budgets {
                global: Bucket::full(now, GLOBAL_BURST),
                fresh: Bucket::full(now, FRESH_BURST),
                peers: HashMap::new(),
                estimate: FIRST_GUESS,
            }),
            workers: Arc::new(Semaphore::new(WORKERS)),
            gate: Semaphore::new(1),
        }
    }
}

/// Why a verification may not run now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The address's or the shared budget is spent: try again in this many seconds.
    Throttled { retry_after: u64 },
    /// The budget allows it but the worker stayed busy for [`QUEUE_WAIT`] (or [`FRESH_QUEUE_WAIT`]).
    Busy,
}

/// An admitted verification: holds the worker and the time reserved.
#[derive(Debug)]
pub(super) struct Admission<'a> {
    throttle: &'a Throttle,
    peer: IpAddr,
    reservation: Reservation,
    worker: Option<OwnedSemaphorePermit>,
    settled: bool,
}

impl Drop for Admission<'_> {
    /// The request went away before its check was settled (the client left while it waited or
    /// hashed): the reserved time stays spent, but the address is not marked as failing, nor left
    /// marked as trying its first check (which would keep it off the second budget for good).
    fn drop(&mut self) {
        if !self.settled {
            let seconds = self.reservation.seconds;
            self.throttle.settle(self.peer, self.reservation, seconds, false, Instant::now());
        }
    }
}

impl Admission<'_> {
    /// The worker, for the blocking task that hashes to hold: if the request is dropped while that
    /// task runs (the client left), the worker stays taken until the hash is done.
    pub fn take_worker(&mut self) -> Option<OwnedSemaphorePermit> {
        self.worker.take()
    }
}

impl Throttle {
    /// Reserves a verification's estimated price from `peer`'s and a shared budget (refused if they
    /// are empty, without waiting), then waits briefly for the worker.
    pub async fn admit(&self, peer: IpAddr) -> Result<Admission<'_>, Refusal> {
        let reservation = self.reserve(peer, Instant::now())?;
        let mut admission = Admission { throttle: self, peer, reservation, worker: None, settled: false };
        let wait = if reservation.good { FRESH_QUEUE_WAIT } else { QUEUE_WAIT };
        let worker = tokio::time::timeout(wait, async {
            let _turn = if reservation.good { None } else { Some(self.gate.acquire().await.ok()?) };
            Arc::clone(&self.workers).acquire_owned().await.ok()
        })
        .await;
        match worker {
            Ok(Some(worker)) => {
                admission.worker = Some(worker);
                Ok(admission)
            }
            _ => {
                admission.settled = true;
                self.settle(peer, reservation, 0.0, false, Instant::now());
                Err(Refusal::Busy)
            }
        }
    }

    /// Settles an admission: a failure costs what the verification took, a success nothing.
    pub fn finish(&self, mut admission: Admission<'_>, took: Duration, succeeded: bool) {
        admission.settled = true;
        let took = took.as_secs_f64();
        self.budgets.lock().unwrap_or_else(PoisonError::into_inner).estimate = took;
        let owed = if succeeded { 0.0 } else { took };
        self.settle(admission.peer, admission.reservation, owed, !succeeded, Instant::now());
    }

    fn reserve(&self, peer: IpAddr, now: Instant) -> Result<Reservation, Refusal> {
        let mut b = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
        let Budgets { global, fresh, peers, estimate } = &mut *b;
        global.refill(now, GLOBAL_RATE, GLOBAL_BURST);
        fresh.refill(now, FRESH_RATE, FRESH_BURST);
        if peers.len() >= MAX_PEERS && !peers.contains_key(&peer) {
            peers.retain(|_, p| {
                p.budget.refill(now, PEER_RATE, PEER_BURST);
                p.budget.level < PEER_BURST || !p.in_good_standing(now) || p.trying
            });
            if peers.len() >= MAX_PEERS {
                peers.clear();
            }
        }
        let own = peers.entry(peer).or_insert_with(|| Peer::new(now));
        own.budget.refill(now, PEER_RATE, PEER_BURST);
        let good = own.in_good_standing(now);
        let fresh_open = good && !own.trying;
        let pool = if global.level > EMPTY {
            Some(Pool::Global)
        } else if fresh_open && fresh.level > EMPTY {
            Some(Pool::Fresh)
        } else {
            None
        };
        let Some(pool) = pool.filter(|_| own.budget.level > EMPTY) else {
            let shared = if fresh_open {
                global.wait(GLOBAL_RATE).min(fresh.wait(FRESH_RATE))
            } else {
                global.wait(GLOBAL_RATE)
            };
            let wait = own.budget.wait(PEER_RATE).max(shared);
            // At least a second: Retry-After counts whole seconds, and 0 would invite an instant retry.
            return Err(Refusal::Throttled { retry_after: ((wait - EMPTY).ceil() as u64).max(1) });
        };
        let seconds = *estimate;
        own.budget.level -= seconds;
        match pool {
            Pool::Global => global.level -= seconds,
            Pool::Fresh => {
                fresh.level -= seconds;
                own.trying = true;
            }
        }
        Ok(Reservation { seconds, pool, good })
    }

    /// Replaces what was reserved by what is owed, and records a failure.
    fn settle(&self, peer: IpAddr, reservation: Reservation, owed: f64, failed: bool, now: Instant) {
        let mut b = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
        let Budgets { global, fresh, peers, .. } = &mut *b;
        let back = reservation.seconds - owed;
        let (pool, rate, burst) = match reservation.pool {
            Pool::Global => (global, GLOBAL_RATE, GLOBAL_BURST),
            Pool::Fresh => (fresh, FRESH_RATE, FRESH_BURST),
        };
        pool.refill(now, rate, burst);
        pool.level = (pool.level + back).min(burst);
        if let Some(own) = peers.get_mut(&peer) {
            own.budget.refill(now, PEER_RATE, PEER_BURST);
            own.budget.level = (own.budget.level + back).min(PEER_BURST);
            if reservation.pool == Pool::Fresh {
                own.trying = false;
            }
            if failed {
                own.failed = Some(now);
            }
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
        let reservation = t.reserve(peer, now)?;
        t.budgets.lock().unwrap().estimate = took;
        t.settle(peer, reservation, took, true, now);
        Ok(())
    }

    /// Where `peer`'s next check would draw from (reserved and given back).
    fn pool(t: &Throttle, peer: IpAddr, now: Instant) -> Result<Pool, Refusal> {
        let reservation = t.reserve(peer, now)?;
        t.settle(peer, reservation, 0.0, false, now);
        Ok(reservation.pool)
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
    fn addresses_that_failed_share_the_global_budget_and_new_ones_draw_on_the_second() {
        let t = Throttle::default();
        let now = Instant::now();
        // Eight addresses fail as fast as they may: five draw the global budget's 1 s at 0.2 s each,
        // the three it refused draw their first check from the second budget, and that is all.
        let mut admitted = 0;
        for _ in 0..10 {
            admitted += (2..10).filter(|&i| fail(&t, ip(i), now, 0.2).is_ok()).count();
        }
        assert_eq!(admitted, 5 + 3);
        let Err(Refusal::Throttled { retry_after }) = fail(&t, ip(2), now, 0.2) else { panic!("admitted") };
        assert_eq!(retry_after, 1, "the global budget is at zero");
        // A new address still gets in, from the second budget, again and again while it does not fail.
        for _ in 0..10 {
            assert_eq!(pool(&t, ip(20), now), Ok(Pool::Fresh));
        }
        // Ten seconds refill 1 s of the global budget: five more failures, from any address.
        let later = now + Duration::from_secs(10);
        let admitted = (2..10).chain(2..10).filter(|&i| fail(&t, ip(i), later, 0.2).is_ok()).count();
        assert_eq!(admitted, 5);
        // Addresses that failed never touch the second budget: 2.4 s + 0.5 s left for new addresses.
        let admitted = (30..60).filter(|&i| fail(&t, ip(i), later, 0.2).is_ok()).count();
        assert_eq!(admitted, 15, "2.9 s at 0.2 s each, the last one overdrawing");
        let Err(Refusal::Throttled { .. }) = fail(&t, ip(99), later, 0.2) else { panic!("admitted") };
    }

    #[test]
    fn a_new_address_draws_one_check_at_a_time_on_the_second_budget() {
        let t = Throttle::default();
        let now = Instant::now();
        while fail(&t, ip(2), now, 0.2).is_ok() {}
        for i in 3..8 {
            let _ = fail(&t, ip(i), now, 0.2);
        }
        assert!(t.budgets.lock().unwrap().global.level <= EMPTY, "the global budget is spent");
        let first = t.reserve(ip(20), now).unwrap();
        assert_eq!(first.pool, Pool::Fresh);
        assert!(matches!(t.reserve(ip(20), now), Err(Refusal::Throttled { .. })), "its first check is running");
        t.settle(ip(20), first, 0.2, true, now);
        assert!(matches!(t.reserve(ip(20), now), Err(Refusal::Throttled { .. })), "it failed");
        // Until the failure is forgotten (with the global budget still spent).
        let later = now + REMEMBER_FAILURE;
        t.budgets.lock().unwrap().global = Bucket { level: -10.0, at: later };
        assert_eq!(pool(&t, ip(20), later), Ok(Pool::Fresh));
    }

    #[test]
    fn a_success_costs_nothing() {
        let t = Throttle::default();
        let now = Instant::now();
        for _ in 0..20 {
            let reservation = t.reserve(ip(2), now).unwrap();
            t.settle(ip(2), reservation, 0.0, false, now);
        }
        assert_eq!(fail(&t, ip(2), now, 0.2), Ok(()), "the budget is untouched");
    }

    #[test]
    fn the_address_table_stays_bounded() {
        let t = Throttle::default();
        let now = Instant::now();
        for i in 0..(MAX_PEERS as u32 + 10) {
            let peer = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            let reservation = t.reserve(peer, now).unwrap();
            t.settle(peer, reservation, 0.0, false, now);
        }
        assert!(t.budgets.lock().unwrap().peers.len() <= MAX_PEERS);
    }

    #[tokio::test]
    async fn a_check_whose_client_left_keeps_its_cost_but_marks_nothing() {
        let t = Throttle::default();
        // Spent for the next ten seconds: at 0.0 the refill between here and `admit` (10 µs on a
        // loaded machine) would open it again.
        t.budgets.lock().unwrap().global = Bucket { level: -1.0, at: Instant::now() };
        let admission = t.admit(ip(20)).await.unwrap();
        assert_eq!(admission.reservation.pool, Pool::Fresh);
        drop(admission);
        let b = t.budgets.lock().unwrap();
        let peer = b.peers[&ip(20)];
        assert!(!peer.trying && peer.failed.is_none(), "{peer:?}");
        assert!((b.fresh.level - (FRESH_BURST - FIRST_GUESS)).abs() < 0.01, "{}", b.fresh.level);
    }

    #[tokio::test]
    async fn verifications_run_one_at_a_time_and_waiters_give_up() {
        let t = Throttle::default();
        let now = Instant::now();
        assert_eq!(fail(&t, ip(3), now, 0.001), Ok(()));
        let first = t.admit(ip(2)).await.unwrap();
        // An address with a failure waits QUEUE_WAIT (a second) for the worker, then gives up.
        let waited = Instant::now();
        assert_eq!(t.admit(ip(3)).await.unwrap_err(), Refusal::Busy, "the worker is taken");
        assert!(waited.elapsed() < FRESH_QUEUE_WAIT);
        t.finish(first, Duration::from_millis(1), false);
        assert!(t.admit(ip(3)).await.is_ok());
    }

    #[tokio::test]
    async fn an_address_in_good_standing_waits_for_at_most_one_check_of_those_failing() {
        let t = Arc::new(Throttle::default());
        let now = Instant::now();
        for i in 3..6 {
            assert_eq!(fail(&t, ip(i), now, 0.001), Ok(()));
        }
        let running = t.admit(ip(2)).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiting = Vec::new();
        // Three failing addresses queue, then a new one.
        for i in [3, 4, 5, 20] {
            let (t, order) = (Arc::clone(&t), Arc::clone(&order));
            waiting.push(tokio::spawn(async move {
                let admission = t.admit(ip(i)).await.unwrap();
                order.lock().unwrap().push(i);
                tokio::time::sleep(Duration::from_millis(10)).await;
                t.finish(admission, Duration::from_millis(1), i != 20);
            }));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        t.finish(running, Duration::from_millis(1), true);
        for w in waiting {
            w.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [3, 20, 4, 5], "past all but the one at the worker");
    }
}
