//! One pair of clock readings taken together (monotonic, Unix) in; the Unix time of any monotonic
//! stamp out; the days since the epoch of a calendar date; and the daemon's one wall clock
//! ([`now_unix_ns`]). The wall clock is read here, in `model`, so that every layer (the host
//! facts, the alert sinks, the exporter) takes the same one; the monotonic and CPU clocks are
//! `host::clock`'s.
use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock as Unix ns; 0 if it is set before 1970, u64::MAX after 2554.
pub fn now_unix_ns() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

/// Converts monotonic stamps (the kernel program's clock) to wall-clock time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WallClock {
    mono_ns: u64,
    real_ns: u64,
}

impl WallClock {
    /// `real_ns` (ns since the Unix epoch) was the wall time when CLOCK_MONOTONIC read `mono_ns`.
    pub fn new(mono_ns: u64, real_ns: u64) -> WallClock {
        WallClock { mono_ns, real_ns }
    }

    /// The Unix time (ns) of a monotonic stamp.
    pub fn unix_ns(self, mono_ns: u64) -> u64 {
        if mono_ns >= self.mono_ns {
            self.real_ns.saturating_add(mono_ns - self.mono_ns)
        } else {
            self.real_ns.saturating_sub(self.mono_ns - mono_ns)
        }
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_before_and_after_the_reading() {
        let w = WallClock::new(1_000, 1_700_000_000_000_000_000);
        assert_eq!(w.unix_ns(1_500), 1_700_000_000_000_000_500);
        assert_eq!(w.unix_ns(400), 1_699_999_999_999_999_400);
        assert_eq!(WallClock::new(10, 5).unix_ns(0), 0, "saturates instead of wrapping");
    }
}
