//! Who holds the connection slots: a client address in at accept, a permit or a refusal out. A
//! connection is *incomplete* until its first request head is in (a TLS handshake in progress
//! included), *served* after; a served connection is *idle* between a response and its next head
//! (keep-alive), *busy* from a head to its response. Each kind has its own caps, overall and per
//! address. A newcomer that finds the incomplete caps full evicts the oldest incomplete connection —
//! of its own address when that address's cap is the one that is full — so clients that trickle
//! heads or stay silent cannot keep out a scraper that shares their address. A newcomer whose
//! address already holds its share of served connections, or that finds every slot served, closes
//! the served connection idle the longest (its own address's first, else the largest holder's):
//! closing an idle keep-alive connection is something every HTTP client expects and retries, so
//! keep-alive clients sharing the scraper's address cannot keep it out either. Busy connections are
//! never evicted; when they alone fill the slots, newcomers are refused.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// How many connections of each kind may be open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Caps {
    /// All connections, incomplete and served.
    pub total: usize,
    /// Incomplete connections, all addresses together.
    pub incomplete: usize,
    /// Incomplete connections of one address.
    pub incomplete_per_peer: usize,
    /// Served connections of one address; its next connection to finish a head closes the
    /// address's longest-idle one, or is answered 503 when all of them are busy.
    pub served_per_peer: usize,
}

impl Caps {
    /// From the transport's limits: `total` slots, half of them for incomplete connections (a
    /// handshake or a head in progress costs buffers and does nothing useful yet), `per_peer` of
    /// each kind for one address.
    pub fn new(total: usize, per_peer: usize) -> Caps {
        let total = total.max(1);
        let incomplete = (total / 2).max(1);
        let per_peer = per_peer.clamp(1, total);
        Caps { total, incomplete, incomplete_per_peer: per_peer.min(incomplete), served_per_peer: per_peer }
    }
}

#[derive(Debug)]
pub(super) struct Peers {
    caps: Caps,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    /// Ids are handed out in accept order, so the smallest is the oldest.
    next_id: u64,
    /// Handed out each time a served connection goes idle, so the smallest is idle the longest.
    /// Starts at 1: 0 means "not idle".
    next_stamp: u64,
    /// Every incomplete connection by id, oldest first.
    incomplete: BTreeMap<u64, Conn>,
    /// Every idle served connection by stamp, idle the longest first.
    idle: BTreeMap<u64, Conn>,
    /// Served connections, idle and busy.
    served: usize,
    by_peer: HashMap<IpAddr, Peer>,
}

/// A connection as the table knows it: whose, and how to tell it to close.
#[derive(Debug, Clone)]
struct Conn {
    ip: IpAddr,
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct Peer {
    incomplete: BTreeSet<u64>,
    /// Stamps of its idle served connections.
    idle: BTreeSet<u64>,
    served: usize,
}

/// Shared by a connection's permit and the table; written only under the table's lock.
#[derive(Debug, Default)]
struct State {
    served: AtomicBool,
    /// Its stamp in `Table::idle` while it is idle; 0 otherwise.
    idle: AtomicU64,
    /// Told to close; already forgotten by the table.
    evicted: AtomicBool,
    notify: Notify,
}

impl State {
    fn evict(&self) {
        self.evicted.store(true, Ordering::Relaxed);
        // Stores a wakeup if the connection is not waiting yet.
        self.notify.notify_one();
    }
}

/// What [`Peers::admit`] decided for a new connection.
#[derive(Debug)]
pub(super) enum Admission {
    /// Admitted; `evicted` tells whether a connection was closed to make room.
    Admitted { permit: Arc<PeerPermit>, eviction: Eviction, evicted: bool },
    /// Every slot is held by a busy connection (or an idle one whose address may keep it).
    Refused,
}

/// Held by a connection and its requests; gives its slot back when the last holder drops it.
#[derive(Debug)]
pub(super) struct PeerPermit {
    peers: Arc<Peers>,
    id: u64,
    ip: IpAddr,
    state: Arc<State>,
}

/// Resolves when the connection is evicted (before its first head, or while idle between
/// requests); never otherwise.
#[derive(Debug)]
pub(super) struct Eviction(Arc<State>);

/// What [`PeerPermit::promote`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Promotion {
    /// Now (or still) a served connection, busy until [`PeerPermit::rest`]; `evicted`: another
    /// connection of its address, idle the longest, was closed to make room.
    Served { evicted: bool },
    /// Its address already has its share of served connections, all busy: answer 503 and close.
    Full,
    /// Evicted before this head was complete; it is closing.
    Evicted,
}

impl Peers {
    pub fn new(caps: Caps) -> Arc<Peers> {
        Arc::new(Peers { caps, table: Mutex::new(Table::default()) })
    }

    /// A slot for a new connection from `ip`, evicting the oldest incomplete connection when the
    /// incomplete caps (its address's first) or the total are full, and the longest-idle served
    /// one when every slot is served.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Admission {
        let mut table = self.lock();
        let own = table.by_peer.get(&ip).map_or(0, |p| p.incomplete.len());
        let victim = if own >= self.caps.incomplete_per_peer {
            table.by_peer.get(&ip).and_then(|p| p.incomplete.first().copied())
        } else if table.incomplete.len() >= self.caps.incomplete || table.open() >= self.caps.total {
            table.incomplete.first_key_value().map(|(id, _)| *id)
        } else {
            None
        };
        let evicted = match victim {
            Some(id) => {
                table.evict_incomplete(id);
                true
            }
            None if table.open() >= self.caps.total => {
                let Some(stamp) = table.idle_victim(ip) else { return Admission::Refused };
                table.evict_idle(stamp);
                true
            }
            None => false,
        };
        let id = table.next_id;
        table.next_id += 1;
        let state = Arc::new(State::default());
        table.incomplete.insert(id, Conn { ip, state: Arc::clone(&state) });
        table.by_peer.entry(ip).or_default().incomplete.insert(id);
        let permit = PeerPermit { peers: Arc::clone(self), id, ip, state: Arc::clone(&state) };
        Admission::Admitted { permit: Arc::new(permit), eviction: Eviction(state), evicted }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Table {
    fn open(&self) -> usize {
        self.incomplete.len() + self.served
    }

    /// Forgets incomplete connection `id` and tells its task to close.
    fn evict_incomplete(&mut self, id: u64) {
        if let Some(gone) = self.forget_incomplete(id) {
            // The task may be ending on its own already; then nobody listens, which is fine.
            gone.state.evict();
        }
    }

    fn forget_incomplete(&mut self, id: u64) -> Option<Conn> {
        let gone = self.incomplete.remove(&id)?;
        if let Some(peer) = self.by_peer.get_mut(&gone.ip) {
            peer.incomplete.remove(&id);
            self.forget_peer_if_idle(gone.ip);
        }
        Some(gone)
    }

    /// The idle served connection a newcomer from `ip` closes: its own address's idle the longest,
    /// else that of the address holding the most served connections with one idle.
    fn idle_victim(&self, ip: IpAddr) -> Option<u64> {
        let own = self.by_peer.get(&ip).and_then(|p| p.idle.first().copied());
        own.or_else(|| {
            let largest = self.by_peer.values().filter(|p| !p.idle.is_empty()).max_by_key(|p| p.served)?;
            largest.idle.first().copied()
        })
    }

    /// Forgets idle served connection `stamp` (its slot is free from now on) and tells its task
    /// to close.
    fn evict_idle(&mut self, stamp: u64) {
        let Some(gone) = self.idle.remove(&stamp) else { return };
        gone.state.idle.store(0, Ordering::Relaxed);
        self.served -= 1;
        if let Some(peer) = self.by_peer.get_mut(&gone.ip) {
            peer.idle.remove(&stamp);
            peer.served -= 1;
            self.forget_peer_if_idle(gone.ip);
        }
        gone.state.evict();
    }

    /// Takes served connection `state` out of the idle ones, if it is there.
    fn wake(&mut self, ip: IpAddr, state: &State) {
        let stamp = state.idle.swap(0, Ordering::Relaxed);
        if stamp != 0 {
            self.idle.remove(&stamp);
            if let Some(peer) = self.by_peer.get_mut(&ip) {
                peer.idle.remove(&stamp);
            }
        }
    }

    fn forget_peer_if_idle(&mut self, ip: IpAddr) {
        if self.by_peer.get(&ip).is_some_and(|p| p.incomplete.is_empty() && p.served == 0) {
            self.by_peer.remove(&ip);
        }
    }
}

impl PeerPermit {
    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// Called when a request head is complete: the connection becomes (or stays) served and is
    /// busy until [`PeerPermit::rest`]. A first head finding its address's served share full takes
    /// the place of the address's longest-idle connection, if one is idle.
    pub fn promote(&self) -> Promotion {
        let mut table = self.peers.lock();
        if self.state.evicted.load(Ordering::Relaxed) {
            return Promotion::Evicted;
        }
        if self.state.served.load(Ordering::Relaxed) {
            table.wake(self.ip, &self.state);
            return Promotion::Served { evicted: false };
        }
        if !table.incomplete.contains_key(&self.id) {
            return Promotion::Evicted;
        }
        let peer = table.by_peer.get(&self.ip);
        let mut evicted = false;
        if peer.map_or(0, |p| p.served) >= self.peers.caps.served_per_peer {
            let Some(stamp) = peer.and_then(|p| p.idle.first().copied()) else { return Promotion::Full };
            table.evict_idle(stamp);
            evicted = true;
        }
        table.forget_incomplete(self.id);
        table.by_peer.entry(self.ip).or_default().served += 1;
        table.served += 1;
        self.state.served.store(true, Ordering::Relaxed);
        Promotion::Served { evicted }
    }

    /// Called when a response has been handed over: the connection waits for its next head, and
    /// may be closed to make room until it is in.
    pub fn rest(&self) {
        let mut table = self.peers.lock();
        let state = &self.state;
        if !state.served.load(Ordering::Relaxed)
            || state.evicted.load(Ordering::Relaxed)
            || state.idle.load(Ordering::Relaxed) != 0
        {
            return;
        }
        table.next_stamp += 1;
        let stamp = table.next_stamp;
        state.idle.store(stamp, Ordering::Relaxed);
        table.idle.insert(stamp, Conn { ip: self.ip, state: Arc::clone(state) });
        table.by_peer.entry(self.ip).or_default().idle.insert(stamp);
    }
}

impl Drop for PeerPermit {
    fn drop(&mut self) {
        let mut table = self.peers.lock();
        if self.state.evicted.load(Ordering::Relaxed) {
            // Forgotten when it was evicted.
        } else if self.state.served.load(Ordering::Relaxed) {
            table.wake(self.ip, &self.state);
            table.served -= 1;
            if let Some(peer) = table.by_peer.get_mut(&self.ip) {
                peer.served -= 1;
            }
            table.forget_peer_if_idle(self.ip);
        } else {
            table.forget_incomplete(self.id);
        }
    }
}

impl Eviction {
    /// Resolves when the connection has been evicted; pending forever otherwise.
    pub async fn wait(&mut self) {
        loop {
            if self.0.evicted.load(Ordering::Relaxed) {
                return;
            }
            self.0.notify.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    /// Admits one connection and says whether it evicted another.
    fn admit(peers: &Arc<Peers>, from: IpAddr) -> (Arc<PeerPermit>, Eviction, bool) {
        match peers.admit(from) {
            Admission::Admitted { permit, eviction, evicted } => (permit, eviction, evicted),
            Admission::Refused => panic!("{from} refused"),
        }
    }

    /// Whether this connection has been told to close.
    fn is_evicted(eviction: &mut Eviction) -> bool {
        eviction.0.evicted.load(Ordering::Relaxed)
    }

    const SERVED: Promotion = Promotion::Served { evicted: false };

    #[test]
    fn caps_follow_the_limits() {
        assert_eq!(
            Caps::new(1024, 256),
            Caps { total: 1024, incomplete: 512, incomplete_per_peer: 256, served_per_peer: 256 }
        );
        assert_eq!(Caps::new(1, 1), Caps { total: 1, incomplete: 1, incomplete_per_peer: 1, served_per_peer: 1 });
        // A share larger than half the slots is cut to what incomplete connections may hold.
        assert_eq!(Caps::new(8, 8).incomplete_per_peer, 4);
    }

    #[test]
    fn a_full_address_evicts_its_own_oldest_incomplete_first() {
        let peers = Peers::new(Caps { total: 100, incomplete: 100, incomplete_per_peer: 3, served_per_peer: 3 });
        let mut other = admit(&peers, ip(9));
        let mut own: Vec<_> = (0..3).map(|_| admit(&peers, ip(1))).collect();
        assert!(own.iter().all(|(_, _, evicted)| !evicted));
        // The fourth from the same address takes the place of the oldest, then of the next oldest.
        for oldest in 0..2 {
            let newcomer = admit(&peers, ip(1));
            assert!(newcomer.2, "an eviction was reported");
            for (i, c) in own.iter_mut().enumerate() {
                assert_eq!(is_evicted(&mut c.1), i <= oldest, "connection {i} after {oldest} evictions");
            }
            own.push(newcomer);
        }
        assert!(!is_evicted(&mut other.1), "another address's connection, older still, is untouched");
    }

    #[test]
    fn full_overall_evicts_the_oldest_incomplete_of_any_address() {
        let peers = Peers::new(Caps { total: 100, incomplete: 3, incomplete_per_peer: 3, served_per_peer: 3 });
        let mut first = admit(&peers, ip(1));
        let mut second = admit(&peers, ip(2));
        let _third = admit(&peers, ip(2));
        let newcomer = admit(&peers, ip(3));
        assert!(newcomer.2);
        assert!(is_evicted(&mut first.1), "the oldest of all");
        assert!(!is_evicted(&mut second.1));
    }

    #[test]
    fn busy_connections_are_never_evicted() {
        let peers = Peers::new(Caps { total: 3, incomplete: 3, incomplete_per_peer: 3, served_per_peer: 3 });
        let (scraper, mut scraper_eviction, _) = admit(&peers, ip(1));
        assert_eq!(scraper.promote(), SERVED);
        let mut slow: Vec<_> = (0..2).map(|_| admit(&peers, ip(1))).collect();
        // Full: each newcomer replaces the oldest incomplete one, never the busy scraper.
        let newcomer = admit(&peers, ip(1));
        assert!(newcomer.2);
        assert!(is_evicted(&mut slow[0].1));
        assert!(!is_evicted(&mut slow[1].1));
        assert!(!is_evicted(&mut scraper_eviction));
        // Busy connections alone fill the slots: refused.
        assert_eq!(slow[1].0.promote(), SERVED);
        assert_eq!(newcomer.0.promote(), SERVED);
        assert!(matches!(peers.admit(ip(2)), Admission::Refused));
        drop(scraper);
        assert!(!admit(&peers, ip(2)).2, "a freed slot needs no eviction");
    }

    #[test]
    fn a_newcomer_closes_the_longest_idle_served_connection_when_every_slot_is_served() {
        let peers = Peers::new(Caps { total: 3, incomplete: 3, incomplete_per_peer: 3, served_per_peer: 3 });
        let mut held: Vec<_> = (0..3).map(|_| admit(&peers, ip(1))).collect();
        for (permit, _, _) in &held {
            assert_eq!(permit.promote(), SERVED);
        }
        // The second goes idle first, then the third; the first stays busy.
        held[1].0.rest();
        held[2].0.rest();
        let (newcomer, _, evicted) = admit(&peers, ip(2));
        assert!(evicted);
        let evicted: Vec<bool> = held.iter_mut().map(|c| is_evicted(&mut c.1)).collect();
        assert_eq!(evicted, [false, true, false], "the one idle the longest");
        assert_eq!(held[1].0.promote(), Promotion::Evicted, "its next head finds it closing");
        // A head wakes the third: busy again, it cannot be taken.
        assert_eq!(held[2].0.promote(), SERVED);
        assert_eq!(newcomer.promote(), SERVED);
        assert!(matches!(peers.admit(ip(3)), Admission::Refused), "all busy");
        drop(held);
        drop(newcomer);
        let table = peers.lock();
        assert_eq!((table.open(), table.idle.len(), table.by_peer.len()), (0, 0, 0), "{table:?}");
    }

    #[test]
    fn keep_alive_clients_on_the_scrapers_address_cannot_keep_its_new_connection_out() {
        let peers = Peers::new(Caps { total: 100, incomplete: 50, incomplete_per_peer: 50, served_per_peer: 4 });
        // Four keep-alive clients hold the address's share, idle between their requests.
        let mut clients: Vec<_> = (0..4).map(|_| admit(&peers, ip(1))).collect();
        for (permit, _, _) in &clients {
            assert_eq!(permit.promote(), SERVED);
            permit.rest();
        }
        // Client 0 asks again: busy, then idle the shortest.
        assert_eq!(clients[0].0.promote(), SERVED);
        clients[0].0.rest();
        // The scraper's fresh connection takes the place of the one idle the longest (client 1).
        let (scraper, _, _) = admit(&peers, ip(1));
        assert_eq!(scraper.promote(), Promotion::Served { evicted: true });
        let evicted: Vec<bool> = clients.iter_mut().map(|c| is_evicted(&mut c.1)).collect();
        assert_eq!(evicted, [false, true, false, false]);
        // With all four busy, a fifth is refused with 503.
        for (permit, _, _) in [&clients[0], &clients[2], &clients[3]] {
            assert_eq!(permit.promote(), SERVED);
        }
        assert_eq!(admit(&peers, ip(1)).0.promote(), Promotion::Full);
    }

    #[tokio::test]
    async fn an_evicted_idle_connection_is_told_even_when_it_was_not_yet_waiting() {
        let peers = Peers::new(Caps { total: 1, incomplete: 1, incomplete_per_peer: 1, served_per_peer: 1 });
        let (idle, mut eviction, _) = admit(&peers, ip(1));
        assert_eq!(idle.promote(), SERVED);
        idle.rest();
        let _newcomer = admit(&peers, ip(2));
        tokio::time::timeout(std::time::Duration::from_secs(1), eviction.wait()).await.expect("told");
    }

    #[test]
    fn an_address_gets_its_share_of_served_connections_and_gives_it_back() {
        let peers = Peers::new(Caps { total: 100, incomplete: 100, incomplete_per_peer: 100, served_per_peer: 2 });
        let served: Vec<_> = (0..2).map(|_| admit(&peers, ip(1)).0).collect();
        assert!(served.iter().all(|p| p.promote() == SERVED));
        let third = admit(&peers, ip(1)).0;
        assert_eq!(third.promote(), Promotion::Full);
        assert_eq!(admit(&peers, ip(2)).0.promote(), SERVED, "another address is not affected");
        drop(served);
        assert_eq!(third.promote(), SERVED, "given back");
    }

    #[test]
    fn an_evicted_connection_cannot_be_promoted_and_everything_is_given_back() {
        let peers = Peers::new(Caps { total: 100, incomplete: 100, incomplete_per_peer: 1, served_per_peer: 1 });
        let (old, _, _) = admit(&peers, ip(1));
        let (new, _, _) = admit(&peers, ip(1));
        assert_eq!(old.promote(), Promotion::Evicted);
        assert_eq!(new.promote(), SERVED);
        drop((old, new));
        let table = peers.lock();
        assert_eq!((table.open(), table.by_peer.len()), (0, 0), "{table:?}");
    }
}
