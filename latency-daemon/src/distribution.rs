//! Reading our kernel buckets as a distribution: bounds in seconds, counts, quantile estimates.
//! Pure functions over `[u64; BUCKETS]`.
use latency_common::buckets::{BUCKETS, OVERFLOW_BUCKET, UPPER_NS, ZERO_BUCKET, native_index};

/// Upper bound of bucket `k` in seconds (`2^(i/8)` exactly as Prometheus computes it), or
/// `None` for the overflow bucket.
pub fn upper_seconds(k: usize) -> Option<f64> {
    if k == ZERO_BUCKET {
        return Some(2f64.powi(-20));
    }
    native_index(k).map(|i| 2f64.powf(f64::from(i) / 8.0))
}

/// Lower (exclusive) bound of bucket `k` in ns; 0 for the zero bucket.
pub fn lower_ns(k: usize) -> u64 {
    if k == ZERO_BUCKET { 0 } else { UPPER_NS[k - 1] }
}

pub fn count(buckets: &[u64; BUCKETS]) -> u64 {
    buckets.iter().sum()
}

/// Estimate the `q` quantile (0..=1) in ns: find the bucket that holds it, then interpolate on a
/// log scale inside the bucket (delays are spread roughly log-uniformly at this resolution). The
/// result never exceeds `max_ns`, the exact maximum, when one is known. Bucket width is 9 %, so
/// that is the worst-case error.
pub fn quantile_ns(buckets: &[u64; BUCKETS], q: f64, max_ns: Option<u64>) -> Option<u64> {
    let total = count(buckets);
    if total == 0 {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0);
    let mut seen = 0u64;
    for (k, &c) in buckets.iter().enumerate() {
        if c == 0 {
            continue;
        }
        if (seen + c) as f64 >= rank {
            let lower = lower_ns(k).max(1) as f64;
            let upper =
                if k == OVERFLOW_BUCKET { max_ns.unwrap_or(UPPER_NS[k - 1]) as f64 } else { UPPER_NS[k] as f64 };
            let upper = match max_ns {
                Some(m) => upper.min(m as f64).max(lower),
                None => upper,
            };
            let fraction = (rank - seen as f64) / c as f64;
            let estimate = lower * (upper / lower).powf(fraction);
            return Some(estimate.round() as u64);
        }
        seen += c;
    }
    max_ns
}

#[cfg(test)]
mod tests {
    use super::*;
    use latency_common::buckets::bucket_of;

    #[test]
    fn bounds_agree_with_the_integer_table() {
        for (k, &upper) in UPPER_NS.iter().enumerate().take(OVERFLOW_BUCKET) {
            let ns = upper_seconds(k).unwrap() * 1e9;
            // The float bound and the integer floor differ by less than one nanosecond.
            assert!(ns >= upper as f64 - 1e-3 && ns < upper as f64 + 1.0, "bucket {k}: {ns}");
        }
        assert_eq!(upper_seconds(OVERFLOW_BUCKET), None);
        assert_eq!(upper_seconds(bucket_of(1_000_000_000)), Some(1.0));
    }

    #[test]
    fn quantiles_stay_in_their_bucket_and_under_the_max() {
        let mut b = [0u64; BUCKETS];
        for d in [1_000u64, 2_000, 4_000, 8_000, 1_000_000] {
            b[bucket_of(d)] += 1;
        }
        let p50 = quantile_ns(&b, 0.5, Some(1_000_000)).unwrap();
        let k = bucket_of(4_000);
        assert!(p50 > lower_ns(k) && p50 <= UPPER_NS[k], "{p50}");
        assert_eq!(quantile_ns(&b, 1.0, Some(1_000_000)), Some(1_000_000));
        let p100_no_max = quantile_ns(&b, 1.0, None).unwrap();
        assert_eq!(p100_no_max, UPPER_NS[bucket_of(1_000_000)]);
        assert_eq!(quantile_ns(&[0; BUCKETS], 0.5, None), None);
    }

    #[test]
    fn a_single_value_is_its_own_quantile_when_max_is_known() {
        let mut b = [0u64; BUCKETS];
        b[bucket_of(123_456)] = 10;
        for q in [0.5, 0.99, 0.999] {
            let e = quantile_ns(&b, q, Some(123_456)).unwrap();
            assert!(e <= 123_456 && e > lower_ns(bucket_of(123_456)));
        }
    }
}
