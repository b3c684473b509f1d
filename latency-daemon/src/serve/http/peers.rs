//! Connections per client address: an address in, a permit out while it holds fewer than its
//! share — so one host's idle or slow connections cannot take every slot a scraper needs.
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

#[derive(Debug)]
pub(super) struct Peers {
    open: Mutex<HashMap<IpAddr, usize>>,
    max: usize,
}

/// Held by a connection's task; gives the slot back when dropped.
#[derive(Debug)]
pub(super) struct PeerPermit {
    peers: Arc<Peers>,
    ip: IpAddr,
}

impl Peers {
    pub fn new(max: usize) -> Arc<Peers> {
        Arc::new(Peers { open: Mutex::new(HashMap::new()), max: max.max(1) })
    }

    pub fn try_acquire(self: &Arc<Self>, ip: IpAddr) -> Option<PeerPermit> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(PeerPermit { peers: Arc::clone(self), ip })
    }
}

impl PeerPermit {
    pub fn ip(&self) -> IpAddr {
        self.ip
    }
}

impl Drop for PeerPermit {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_gets_its_share_and_gives_it_back() {
        let peers = Peers::new(2);
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap());
        let first = peers.try_acquire(a).unwrap();
        let _second = peers.try_acquire(a).unwrap();
        assert!(peers.try_acquire(a).is_none(), "a's share is taken");
        assert!(peers.try_acquire(b).is_some(), "b is not affected");
        drop(first);
        assert!(peers.try_acquire(a).is_some(), "given back");
    }
}
