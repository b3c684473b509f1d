//! The exporter's waits between attempts: the backoff and what the receiver asked (`Retry-After`)
//! in; how long to sleep before the next attempt out, never shorter than the backoff.
use std::time::Duration;

use crate::model::wall::now_unix_ns;
use crate::net::MAX_RETRY_AFTER;

pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The wait before the next attempt: the backoff, or longer when the receiver asked for longer
/// (at most [`MAX_RETRY_AFTER`]). Never shorter: a `Retry-After` of 0 or a date already past
/// (a receiver shedding load, or one whose clock lags) would otherwise have every node of a fleet
/// retry as fast as the receiver answers; one that does not parse is no `Retry-After` at all.
pub fn wait(retry_after: Option<Duration>, backoff: Duration) -> Duration {
    retry_after.unwrap_or_default().clamp(backoff, MAX_RETRY_AFTER.max(backoff))
}

/// The backoff after `backoff`: doubled, up to [`MAX_BACKOFF`].
pub fn next(backoff: Duration) -> Duration {
    (backoff * 2).min(MAX_BACKOFF)
}

/// `wait` plus up to a tenth more, so that a fleet's daemons do not retry in step.
pub fn jitter(wait: Duration) -> Duration {
    let nanos = (now_unix_ns() % 1_000_000_000) as u32;
    wait + wait.mul_f64(f64::from(nanos % 1000) / 10_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn retry_after_lengthens_the_backoff_and_never_shortens_it() {
        for (retry_after, backoff, want) in [
            // No Retry-After, or one that did not parse: the backoff.
            (None, S, S),
            (None, 30 * S, 30 * S),
            // 0, or a date in the past (parsed as 0): still the backoff.
            (Some(Duration::ZERO), S, S),
            (Some(Duration::ZERO), 8 * S, 8 * S),
            // Shorter than the backoff: the backoff.
            (Some(2 * S), 4 * S, 4 * S),
            // Longer: as asked, up to the bound.
            (Some(2 * S), S, 2 * S),
            (Some(MAX_RETRY_AFTER), S, MAX_RETRY_AFTER),
            (Some(MAX_RETRY_AFTER + S), S, MAX_RETRY_AFTER),
        ] {
            assert_eq!(wait(retry_after, backoff), want, "Retry-After {retry_after:?}, backoff {backoff:?}");
        }
    }

    #[test]
    fn the_backoff_doubles_up_to_its_bound_and_jitter_adds_at_most_a_tenth() {
        let mut b = FIRST_BACKOFF;
        let mut seen = vec![b];
        for _ in 0..6 {
            b = next(b);
            seen.push(b);
        }
        assert_eq!(seen, [1, 2, 4, 8, 16, 30, 30].map(Duration::from_secs));
        for w in [S, 30 * S] {
            let j = jitter(w);
            assert!(w <= j && j <= w + w / 10, "{j:?} for {w:?}");
        }
    }
}
