//! What the OTLP push exporter counts (`export::otlp` adds, `families::instruments` shows): exports by result,
//! failed attempts by why, the queue, bytes sent. Plain atomics: the exporter never waits on a
//! scrape, nor a scrape on the exporter.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Why an attempt failed and will be retried: `runqlat_otlp_failed_attempts_total`'s `why`.
pub const FAILURES: [&str; 5] = ["connect", "tls", "timeout", "status", "io"];

/// The exporter's counters; all zero, and not shown, until an exporter starts.
#[derive(Debug, Default)]
pub struct PushStats {
    enabled: AtomicBool,
    sent: AtomicU64,
    rejected: AtomicU64,
    dropped: AtomicU64,
    failed: [AtomicU64; FAILURES.len()],
    queued: AtomicU64,
    bytes: AtomicU64,
    last_sent_unix_ms: AtomicU64,
}

/// One reading of [`PushStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PushCounts {
    pub sent: u64,
    pub rejected: u64,
    pub dropped: u64,
    pub failed: [u64; FAILURES.len()],
    pub queued: u64,
    pub bytes: u64,
    pub last_sent_unix_ms: u64,
}

impl PushStats {
    /// An exporter runs: its families are shown from now on.
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// A batch the receiver accepted, of `bytes` bytes on the wire, at `unix_ms`.
    pub fn sent(&self, bytes: u64, unix_ms: u64) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.last_sent_unix_ms.store(unix_ms, Ordering::Relaxed);
    }

    /// A batch refused for good (a status that retrying cannot change).
    pub fn rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// A batch dropped unsent: the queue was full.
    pub fn dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// An attempt that failed, by index into [`FAILURES`].
    pub fn failed(&self, why: usize) {
        if let Some(c) = self.failed.get(why) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Batches waiting now.
    pub fn set_queued(&self, n: usize) {
        self.queued.store(n as u64, Ordering::Relaxed);
    }

    /// None until an exporter starts.
    pub fn snapshot(&self) -> Option<PushCounts> {
        if !self.enabled.load(Ordering::Relaxed) {
            return None;
        }
        Some(PushCounts {
            sent: self.sent.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            failed: std::array::from_fn(|i| self.failed[i].load(Ordering::Relaxed)),
            queued: self.queued.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            last_sent_unix_ms: self.last_sent_unix_ms.load(Ordering::Relaxed),
        })
    }
}
