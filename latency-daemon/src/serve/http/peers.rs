//! Who holds the connection slots: a client address in at accept, a permit or a refusal out. A
//! connection is *incomplete* until its first request head is in (a TLS handshake in progress
//! included), *served* after. Each kind has its own caps, overall and per address. A newcomer that
//! finds the incomplete caps full evicts the oldest incomplete connection — of its own address when
//! that address's cap is the one that is full — so clients that trickle heads or stay silent cannot
//! keep out a scraper that shares their address: its fresh connection always gets its turn to send
//! a head. Served connections are never evicted; when they alone fill the slots, newcomers are refused.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

/// How many connections of each kind may be open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Caps {
    /// All connections, incomplete and served.
    pub total: usize,
    /// Incomplete connections, all addresses together.
    pub incomplete: usize,
    /// Incomplete connections of one address.
    pub incomplete_per_peer: usize,
    /// Served connections of one address; its next connection to finish a head is answered 503.
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
    /// Every incomplete connection, oldest first, with what evicts it.
    incomplete: BTreeMap<u64, Incomplete>,
    served: usize,
    by_peer: HashMap<IpAddr, Peer>,
}

#[derive(Debug)]
struct Incomplete {
    ip: IpAddr,
    evict: oneshot::Sender<()>,
}

#[derive(Debug, Default)]
struct Peer {
    incomplete: BTreeSet<u64>,
    served: usize,
}

/// What [`Peers::admit`] decided for a new connection.
#[derive(Debug)]
pub(super) enum Admission {
    /// Admitted; `evicted` tells whether the oldest incomplete connection was closed to make room.
    Admitted { permit: Arc<PeerPermit>, eviction: Eviction, evicted: bool },
    /// Every slot is held by a served connection.
    Refused,
}

/// Held by a connection and its requests; gives its slot back when the last holder drops it.
#[derive(Debug)]
pub(super) struct PeerPermit {
    peers: Arc<Peers>,
    id: u64,
    ip: IpAddr,
    /// Written only under the table's lock (by `promote`); read without it only as a shortcut.
    served: AtomicBool,
}

/// Resolves when the connection is evicted; never, once it is served or after it is dropped.
#[derive(Debug)]
pub(super) struct Eviction(Option<oneshot::Receiver<()>>);

/// What [`PeerPermit::promote`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Promotion {
    /// Now (or already) a served connection, no longer evictable.
    Served,
    /// Its address already has its share of served connections: answer 503 and close.
    Full,
    /// Evicted before its head was complete; it is closing.
    Evicted,
}

impl Peers {
    pub fn new(caps: Caps) -> Arc<Peers> {
        Arc::new(Peers { caps, table: Mutex::new(Table::default()) })
    }

    /// A slot for a new connection from `ip`, evicting the oldest incomplete connection when the
    /// incomplete caps (its address's first) or the total are full.
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
                table.evict(id);
                true
            }
            None if table.open() >= self.caps.total => return Admission::Refused,
            None => false,
        };
        let id = table.next_id;
        table.next_id += 1;
        let (evict, evicted_rx) = oneshot::channel();
        table.incomplete.insert(id, Incomplete { ip, evict });
        table.by_peer.entry(ip).or_default().incomplete.insert(id);
        let permit = PeerPermit { peers: Arc::clone(self), id, ip, served: AtomicBool::new(false) };
        Admission::Admitted { permit: Arc::new(permit), eviction: Eviction(Some(evicted_rx)), evicted }
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
    fn evict(&mut self, id: u64) {
        if let Some(gone) = self.forget_incomplete(id) {
            // The task may be ending on its own already; then nobody listens, which is fine.
            let _ = gone.evict.send(());
        }
    }

    fn forget_incomplete(&mut self, id: u64) -> Option<Incomplete> {
        let gone = self.incomplete.remove(&id)?;
        if let Some(peer) = self.by_peer.get_mut(&gone.ip) {
            peer.incomplete.remove(&id);
            self.forget_peer_if_idle(gone.ip);
        }
        Some(gone)
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

    /// Called when a request head is complete: the connection becomes served (not evictable) if its
    /// address has room for one more.
    pub fn promote(&self) -> Promotion {
        if self.served.load(Ordering::Relaxed) {
            return Promotion::Served;
        }
        let mut table = self.peers.lock();
        if !table.incomplete.contains_key(&self.id) {
            return Promotion::Evicted;
        }
        let served = table.by_peer.get(&self.ip).map_or(0, |p| p.served);
        if served >= self.peers.caps.served_per_peer {
            return Promotion::Full;
        }
        // Dropping the eviction sender resolves nothing: see Eviction::wait.
        table.forget_incomplete(self.id);
        table.by_peer.entry(self.ip).or_default().served += 1;
        table.served += 1;
        self.served.store(true, Ordering::Relaxed);
        Promotion::Served
    }
}

impl Drop for PeerPermit {
    fn drop(&mut self) {
        let mut table = self.peers.lock();
        if self.served.load(Ordering::Relaxed) {
            table.served -= 1;
            if let Some(peer) = table.by_peer.get_mut(&self.ip) {
                peer.served -= 1;
            }
            table.forget_peer_if_idle(self.ip);
        } else {
            // Already gone if it was evicted.
            table.forget_incomplete(self.id);
        }
    }
}

impl Eviction {
    /// Resolves when the connection has been evicted; pending forever otherwise (a promotion closes
    /// the channel without a message). Once it has resolved, pending forever too.
    pub async fn wait(&mut self) {
        if let Some(evicted) = self.0.as_mut() {
            let told = evicted.await.is_ok();
            // A finished receiver must not be polled again.
            self.0 = None;
            if told {
                return;
            }
        }
        std::future::pending::<()>().await;
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
        eviction.0.as_mut().is_some_and(|rx| rx.try_recv().is_ok())
    }

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
                assert_eq!(is_evicted(&mut c.1), i == oldest, "connection {i} after {oldest} evictions");
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
    fn served_connections_are_never_evicted() {
        let peers = Peers::new(Caps { total: 3, incomplete: 3, incomplete_per_peer: 3, served_per_peer: 3 });
        let (scraper, mut scraper_eviction, _) = admit(&peers, ip(1));
        assert_eq!(scraper.promote(), Promotion::Served);
        let mut slow: Vec<_> = (0..2).map(|_| admit(&peers, ip(1))).collect();
        // Full: each newcomer replaces the oldest incomplete one, never the served scraper.
        let newcomer = admit(&peers, ip(1));
        assert!(newcomer.2);
        assert!(is_evicted(&mut slow[0].1));
        assert!(!is_evicted(&mut slow[1].1));
        assert!(!is_evicted(&mut scraper_eviction));
        // Served connections alone fill the slots: refused.
        assert_eq!(slow[1].0.promote(), Promotion::Served);
        assert_eq!(newcomer.0.promote(), Promotion::Served);
        assert!(matches!(peers.admit(ip(2)), Admission::Refused));
        drop(scraper);
        assert!(!admit(&peers, ip(2)).2, "a freed slot needs no eviction");
    }

    #[test]
    fn an_address_gets_its_share_of_served_connections_and_gives_it_back() {
        let peers = Peers::new(Caps { total: 100, incomplete: 100, incomplete_per_peer: 100, served_per_peer: 2 });
        let served: Vec<_> = (0..2).map(|_| admit(&peers, ip(1)).0).collect();
        assert!(served.iter().all(|p| p.promote() == Promotion::Served));
        let third = admit(&peers, ip(1)).0;
        assert_eq!(third.promote(), Promotion::Full);
        assert_eq!(admit(&peers, ip(2)).0.promote(), Promotion::Served, "another address is not affected");
        drop(served);
        assert_eq!(third.promote(), Promotion::Served, "given back");
    }

    #[test]
    fn an_evicted_connection_cannot_be_promoted_and_everything_is_given_back() {
        let peers = Peers::new(Caps { total: 100, incomplete: 100, incomplete_per_peer: 1, served_per_peer: 1 });
        let (old, _, _) = admit(&peers, ip(1));
        let (new, _, _) = admit(&peers, ip(1));
        assert_eq!(old.promote(), Promotion::Evicted);
        assert_eq!(new.promote(), Promotion::Served);
        drop((old, new));
        let table = peers.lock();
        assert_eq!((table.open(), table.by_peer.len()), (0, 0), "{table:?}");
    }
}
