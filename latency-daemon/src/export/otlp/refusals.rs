//! The refused-batch log line, rate-limited: each refusal (and when it came) in; whether a line is
//! due, and how many refusals it reports, out. A receiver that refuses every batch would otherwise
//! get a line per batch (5,760 a day at the default interval); the counter of refused batches
//! (`runqlat_otlp_exports_total{result="rejected"}`) stays exact whatever the log says.
use std::time::{Duration, Instant};

/// At most one line per this, after the first.
pub const EVERY: Duration = Duration::from_secs(600);

#[derive(Debug, Default)]
pub struct Refusals {
    /// When the last line was logged (None: never).
    logged: Option<Instant>,
    /// Refusals since that line.
    unlogged: u64,
}

impl Refusals {
    /// A batch was refused at `now`: Some(n) when a line is due, n the refusals it reports (this
    /// one included); None when it is only counted, to be reported by a later line.
    pub fn refused(&mut self, now: Instant) -> Option<u64> {
        self.unlogged += 1;
        self.due(now)
    }

    /// A batch was taken at `now`: Some(n) when refusals are waiting to be reported and a line
    /// is due, so that a burst's count is not left unsaid until the next refusal.
    pub fn taken(&mut self, now: Instant) -> Option<u64> {
        if self.unlogged == 0 { None } else { self.due(now) }
    }

    fn due(&mut self, now: Instant) -> Option<u64> {
        if self.logged.is_some_and(|at| now.duration_since(at) < EVERY) {
            return None;
        }
        self.logged = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_then_at_most_one_summary_per_period() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut r = Refusals::default();
        // The first refusal is logged at once.
        assert_eq!(r.refused(at(0)), Some(1));
        // A batch refused every 15 s: counted, not logged, until the period has passed.
        let lines: Vec<(u64, u64)> = (1..=80).filter_map(|k| r.refused(at(15 * k)).map(|n| (15 * k, n))).collect();
        // At 600 s, 40 refusals since the first line; at 1200 s, 40 more.
        assert_eq!(lines, [(600, 40), (1200, 40)]);
        // Taken again before the period is over: nothing yet; the next due moment reports them.
        assert_eq!(r.refused(at(1300)), None);
        assert_eq!(r.taken(at(1400)), None);
        assert_eq!(r.taken(at(1800)), Some(1));
        // Nothing waiting: a taken batch logs nothing.
        assert_eq!(r.taken(at(3000)), None);
        // A refusal long after: logged at once, alone.
        assert_eq!(r.refused(at(4000)), Some(1));
    }
}
