//! The HTTP server's own counters (requests by outcome, open connections) from `serve::http` in; a
//! plain snapshot out for `families::instruments`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// How one request ended, or one connection that ended before producing a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The handler answered with a status below 400.
    Ok,
    /// The handler answered 404.
    NotFound,
    /// The handler answered another 4xx/5xx, or a reply we could not encode (500).
    HandlerError,
    /// A wrong or missing password: 401 without calling the handler.
    Unauthorized,
    /// The handler panicked; the client got a 500.
    Panicked,
    /// Not GET or HEAD: 405 without calling the handler.
    BadMethod,
    /// A request body (413) or a header section over the limit (431, sent by hyper).
    TooLarge,
    /// A request head that hyper could not parse (400, sent by hyper).
    Malformed,
    /// The client was too slow to send a request head.
    Timeout,
    /// No connection slot was free: 503.
    Busy,
    /// Closed before it sent a complete request head, to make room for a newer connection.
    Evicted,
    /// Too many failed logins from the client's address or from everyone: 429 without checking the password.
    Throttled,
}

/// Counters shared between `serve::http` and the registry; every field only ever grows except
/// `connections`. Relaxed ordering throughout: each counter is read on its own, never used to
/// order other memory.
#[derive(Debug, Default)]
pub struct HttpStats {
    ok: AtomicU64,
    not_found: AtomicU64,
    handler_error: AtomicU64,
    unauthorized: AtomicU64,
    panicked: AtomicU64,
    bad_method: AtomicU64,
    rejected_too_large: AtomicU64,
    rejected_malformed: AtomicU64,
    rejected_timeout: AtomicU64,
    rejected_busy: AtomicU64,
    rejected_throttled: AtomicU64,
    evicted: AtomicU64,
    accept_errors: AtomicU64,
    connections: AtomicU64,
}

/// One consistent-enough reading of [`HttpStats`] (each field is read atomically, not all at once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpStatsSnapshot {
    pub ok: u64,
    pub not_found: u64,
    pub handler_error: u64,
    pub unauthorized: u64,
    pub panicked: u64,
    pub bad_method: u64,
    pub rejected_too_large: u64,
    pub rejected_malformed: u64,
    pub rejected_timeout: u64,
    pub rejected_busy: u64,
    pub rejected_throttled: u64,
    pub evicted: u64,
    pub accept_errors: u64,
    /// Connections being served right now (a gauge; turned-away connections are not included).
    pub connections: u64,
}

impl HttpStats {
    pub fn snapshot(&self) -> HttpStatsSnapshot {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        HttpStatsSnapshot {
            ok: read(&self.ok),
            not_found: read(&self.not_found),
            handler_error: read(&self.handler_error),
            unauthorized: read(&self.unauthorized),
            panicked: read(&self.panicked),
            bad_method: read(&self.bad_method),
            rejected_too_large: read(&self.rejected_too_large),
            rejected_malformed: read(&self.rejected_malformed),
            rejected_timeout: read(&self.rejected_timeout),
            rejected_busy: read(&self.rejected_busy),
            rejected_throttled: read(&self.rejected_throttled),
            evicted: read(&self.evicted),
            accept_errors: read(&self.accept_errors),
            connections: read(&self.connections),
        }
    }

    pub fn record(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Ok => &self.ok,
            Outcome::NotFound => &self.not_found,
            Outcome::HandlerError => &self.handler_error,
            Outcome::Unauthorized => &self.unauthorized,
            Outcome::Panicked => &self.panicked,
            Outcome::BadMethod => &self.bad_method,
            Outcome::TooLarge => &self.rejected_too_large,
            Outcome::Malformed => &self.rejected_malformed,
            Outcome::Timeout => &self.rejected_timeout,
            Outcome::Busy => &self.rejected_busy,
            Outcome::Throttled => &self.rejected_throttled,
            Outcome::Evicted => &self.evicted,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn accept_failed(&self) {
        self.accept_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection as open until the returned guard drops, so aborted tasks are uncounted too.
    pub fn open_connection(self: &Arc<Self>) -> OpenConnection {
        self.connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection(Arc::clone(self))
    }
}

#[derive(Debug)]
pub struct OpenConnection(Arc<HttpStats>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_has_its_own_counter() {
        let stats = HttpStats::default();
        let all = [
            Outcome::Ok,
            Outcome::NotFound,
            Outcome::HandlerError,
            Outcome::Unauthorized,
            Outcome::Panicked,
            Outcome::BadMethod,
            Outcome::TooLarge,
            Outcome::Malformed,
            Outcome::Timeout,
            Outcome::Busy,
            Outcome::Throttled,
            Outcome::Evicted,
        ];
        for (i, outcome) in all.iter().enumerate() {
            for _ in 0..=i {
                stats.record(*outcome);
            }
        }
        let s = stats.snapshot();
        let got = [
            s.ok,
            s.not_found,
            s.handler_error,
            s.unauthorized,
            s.panicked,
            s.bad_method,
            s.rejected_too_large,
            s.rejected_malformed,
            s.rejected_timeout,
            s.rejected_busy,
            s.rejected_throttled,
            s.evicted,
        ];
        assert_eq!(got, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    }

    #[test]
    fn connection_gauge_follows_guards() {
        let stats = Arc::new(HttpStats::default());
        let a = stats.open_connection();
        let b = stats.open_connection();
        assert_eq!(stats.snapshot().connections, 2);
        drop(a);
        assert_eq!(stats.snapshot().connections, 1);
        drop(b);
        assert_eq!(stats.snapshot().connections, 0);
    }
}
