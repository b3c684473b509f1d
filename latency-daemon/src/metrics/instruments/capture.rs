//! What the capture recorder's trigger counts (the drain thread and the capture writer add,
//! `families::instruments` shows): captures by result, those the directory's caps removed, and
//! the records dropped because they were being rewritten as they were read, and those the
//! recorder itself gave up (as of the last reading of its rings).
//! Plain atomics; not shown until the recorder runs.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct CaptureStats {
    enabled: AtomicBool,
    written: AtomicU64,
    suppressed: AtomicU64,
    failed: AtomicU64,
    removed: AtomicU64,
    torn: AtomicU64,
    overwritten: AtomicU64,
    given_up: AtomicU64,
}

/// One reading of [`CaptureStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureCounts {
    pub written: u64,
    pub suppressed: u64,
    pub failed: u64,
    pub removed: u64,
    pub torn: u64,
    pub overwritten: u64,
    pub given_up: u64,
}

impl CaptureStats {
    /// The recorder runs: its families are shown from now on.
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// A capture written to the directory.
    pub fn written(&self) {
        self.written.fetch_add(1, Ordering::Relaxed);
    }

    /// A capture not taken: too soon after the last one, or the writer still busy.
    pub fn suppressed(&self) {
        self.suppressed.fetch_add(1, Ordering::Relaxed);
    }

    /// A capture that could not be read or written.
    pub fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Older captures the directory's caps removed.
    pub fn removed(&self, n: usize) {
        self.removed.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Records dropped because they were being rewritten as they were read.
    pub fn torn(&self, n: u64) {
        self.torn.fetch_add(n, Ordering::Relaxed);
    }

    /// Records missing from inside a capture (the ring wrapped between two readings).
    pub fn overwritten(&self, n: u64) {
        self.overwritten.fetch_add(n, Ordering::Relaxed);
    }

    /// The recorder's own count of records it gave up, all CPUs together, as the kernel holds it
    /// (a total since attach: kept if larger than the last reading's).
    pub fn given_up(&self, total: u64) {
        self.given_up.fetch_max(total, Ordering::Relaxed);
    }

    /// None until the recorder runs.
    pub fn snapshot(&self) -> Option<CaptureCounts> {
        if !self.enabled.load(Ordering::Relaxed) {
            return None;
        }
        Some(CaptureCounts {
            written: self.written.load(Ordering::Relaxed),
            suppressed: self.suppressed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            removed: self.removed.load(Ordering::Relaxed),
            torn: self.torn.load(Ordering::Relaxed),
            overwritten: self.overwritten.load(Ordering::Relaxed),
            given_up: self.given_up.load(Ordering::Relaxed),
        })
    }
}
