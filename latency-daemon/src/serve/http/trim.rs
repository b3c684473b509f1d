//! Memory given back after a flood: the number of connection tasks in, as they come and go; out,
//! when a flood has subsided, a `malloc_trim(0)`. Each connection's buffers and task are freed when
//! it ends, but glibc keeps freed memory in the arena of the thread that used it, and a flood
//! spreads connections over every worker and blocking thread: measured with
//! `tests/connection_flood.rs`, RSS stayed at 68 MiB after the flood from 44 MiB before, and came
//! back to within a few percent of it once trimmed.
use std::time::Duration;

use tokio::time::Instant;

/// A flood: at least this many connection tasks at once since the last trim.
const FLOOD: usize = 128;
/// It has subsided when at most this many are left …
const SUBSIDED: usize = 16;
/// … for this long (connections close in waves as their timeouts run out).
const SETTLE: Duration = Duration::from_secs(1);
/// Trims at most this often: each walks every arena under its lock.
const MIN_GAP: Duration = Duration::from_secs(10);

/// When to trim, from the task counts it is shown.
#[derive(Debug, Default)]
pub(super) struct Trim {
    /// Most tasks at once since the last trim.
    peak: usize,
    /// When it will trim, if the count stays low until then.
    due: Option<Instant>,
    last: Option<Instant>,
}

impl Trim {
    /// Notes that `tasks` connection tasks are alive at `now`.
    pub fn observe(&mut self, tasks: usize, now: Instant) {
        self.peak = self.peak.max(tasks);
        if tasks > SUBSIDED {
            self.due = None;
        } else if self.peak >= FLOOD && self.due.is_none() {
            let earliest = self.last.map_or(now, |last| last + MIN_GAP);
            self.due = Some(earliest.max(now + SETTLE));
        }
    }

    /// When [`Trim::trim_if_due`] should next be called, if at all.
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    /// Trims (on a blocking thread: it can take milliseconds) if it is due at `now`.
    pub fn trim_if_due(&mut self, tasks: usize, now: Instant) {
        if self.due.is_none_or(|due| now < due) {
            return;
        }
        self.due = None;
        if tasks > SUBSIDED {
            return;
        }
        self.peak = tasks;
        self.last = Some(now);
        tokio::task::spawn_blocking(give_back);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn give_back() {
    // SAFETY: malloc_trim takes no pointers and locks each arena itself; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other allocators (musl's) return memory on their own.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn give_back() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn trims_once_after_a_flood_has_subsided_for_a_while() {
        let mut trim = Trim::default();
        let t0 = Instant::now();
        trim.observe(SUBSIDED, t0);
        assert_eq!(trim.due(), None, "no flood yet");
        trim.observe(FLOOD, t0);
        assert_eq!(trim.due(), None, "still flooding");
        trim.observe(SUBSIDED + 1, t0);
        assert_eq!(trim.due(), None, "not low enough");
        trim.observe(SUBSIDED, t0);
        assert_eq!(trim.due(), Some(t0 + SETTLE));
        trim.trim_if_due(SUBSIDED, t0 + SETTLE / 2);
        assert_eq!(trim.due(), Some(t0 + SETTLE), "not yet");
        trim.trim_if_due(SUBSIDED, t0 + SETTLE);
        assert_eq!((trim.due(), trim.last, trim.peak), (None, Some(t0 + SETTLE), SUBSIDED));
        // Quiet after it: nothing more.
        trim.observe(2, t0 + SETTLE * 2);
        assert_eq!(trim.due(), None);
    }

    #[tokio::test]
    async fn a_count_that_rises_again_cancels_and_trims_are_spaced() {
        let mut trim = Trim::default();
        let t0 = Instant::now();
        trim.observe(FLOOD, t0);
        trim.observe(0, t0);
        trim.observe(SUBSIDED + 1, t0);
        assert_eq!(trim.due(), None, "rose again before it was due");
        trim.observe(0, t0);
        trim.trim_if_due(0, t0 + SETTLE);
        assert_eq!(trim.last, Some(t0 + SETTLE));
        // A second flood right after: the next trim waits for MIN_GAP after the first.
        trim.observe(FLOOD, t0 + SETTLE * 2);
        trim.observe(0, t0 + SETTLE * 2);
        assert_eq!(trim.due(), Some(t0 + SETTLE + MIN_GAP));
    }
}
