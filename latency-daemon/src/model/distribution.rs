//! Reading our kernel buckets as a distribution: bounds in seconds, counts, quantile estimates.
//! Pure functions over `[u64; BUCKETS]`; [`native_bound`] is the one place a bucket bound is
//! computed in seconds.
use latency_common::buckets::{BUCKETS, OVERFLOW_BUCKET, UPPER_NS, ZERO_BUCKET, ZERO_NATIVE_INDEX, native_index};

/// The upper bound of native schema-3 bucket `i` in seconds, `2^(i/8)`, as Prometheus computes
/// it; exact when `i/8` is whole (every power of two), as `powf` is for representable results.
pub fn native_bound(i: i32) -> f64 {
    2f64.powf(f64::from(i) / 8.0)
}

/// Native indices from one per-cgroup bucket bound to the next: every other octave.
pub const CGROUP_STEP: i32 = 16;

/// Upper bound of per-cgroup bucket `m` in seconds, `2^(-20 + 2m)` (see
/// `latency_common::maps::CGROUP_BUCKETS`).
pub fn cgroup_bound(m: i32) -> f64 {
    native_bound(ZERO_NATIVE_INDEX + CGROUP_STEP * m)
}

/// Upper bound of bucket `k` in seconds, or `None` for the overflow bucket.
pub fn upper_seconds(k: usize) -> Option<f64> {
    if k == ZERO_BUCKET {
        return Some(native_bound(ZERO_NATIVE_INDEX));
    }
    native_index(k).map(native_bound)
}

/// Lower (exclusive) bound of bucket `k` in ns; 0 for the zero bucket.
pub fn lower_ns(k: usize) -> u64 {
    if k == ZERO_BUCKET { 0 } else { UPPER_NS[k - 1] }
}

pub fn count(buckets: &[u64; BUCKETS]) -> u64 {
    buckets.iter().sum()
}

/// A value to stand for the delays in bucket `k`: the geometric midpoint of its bounds (delays
/// spread roughly log-uniformly at this resolution), never above `max_ns`.
fn representative_ns(k: usize, max_ns: Option<u64>) -> u64 {
    let upper = if k == OVERFLOW_BUCKET { max_ns.unwrap_or(UPPER_NS[k - 1]).max(UPPER_NS[k - 1]) } else { UPPER_NS[k] };
    let lower = lower_ns(k).max(1);
    let mid = ((lower as f64) * (upper as f64)).sqrt().round() as u64;
    match max_ns {
        Some(m) => mid.min(m).max(1),
        None => mid.max(1),
    }
}

/// An HDR histogram of the bucket counts, each bucket recorded at its representative value:
/// quantiles read from it are within a bucket's width (9 %) of the truth.
pub fn hdr(buckets: &[u64; BUCKETS], max_ns: Option<u64>) -> Option<hdrhistogram::Histogram<u64>> {
    // 3 significant digits keeps the HDR error (0.1 %) far below the bucket width.
    let mut h = hdrhistogram::Histogram::<u64>::new(3).ok()?;
    for (k, &c) in buckets.iter().enumerate() {
        if c > 0 {
            h.record_n(representative_ns(k, max_ns), c).ok()?;
        }
    }
    Some(h)
}

/// Estimates of the `qs` quantiles in ns (from [`hdr`]), never above `max_ns`; `None` when
/// there is nothing recorded.
pub fn quantiles_ns<const N: usize>(buckets: &[u64; BUCKETS], qs: [f64; N], max_ns: Option<u64>) -> [Option<u64>; N] {
    let mut out = [None; N];
    if count(buckets) == 0 {
        return out;
    }
    if let Some(h) = hdr(buckets, max_ns) {
        for (slot, q) in out.iter_mut().zip(qs) {
            let v = h.value_at_quantile(q.clamp(0.0, 1.0));
            *slot = Some(match max_ns {
                Some(m) => v.min(m),
                None => v,
            });
        }
    }
    out
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
        let [p50, p100] = quantiles_ns(&b, [0.5, 1.0], Some(1_000_000));
        let k = bucket_of(4_000);
        let p50 = p50.unwrap();
        assert!(p50 > lower_ns(k) && p50 <= UPPER_NS[k], "{p50}");
        assert!(p100.unwrap() <= 1_000_000);
        assert!(p100.unwrap() > lower_ns(bucket_of(1_000_000)));
        let [none] = quantiles_ns(&[0; BUCKETS], [0.5], None);
        assert_eq!(none, None);
    }

    #[test]
    fn a_single_value_is_its_own_quantile_when_max_is_known() {
        let mut b = [0u64; BUCKETS];
        b[bucket_of(123_456)] = 10;
        for e in quantiles_ns(&b, [0.5, 0.99, 0.999], Some(123_456)) {
            let e = e.unwrap();
            assert!(e <= 123_456 && e > lower_ns(bucket_of(123_456)));
        }
    }

    #[test]
    fn quantiles_order_and_ranks() {
        // 900 delays near 10 µs and 100 near 10 ms: p50 is small, p99 and p99.9 large.
        let mut b = [0u64; BUCKETS];
        b[bucket_of(10_000)] = 900;
        b[bucket_of(10_000_000)] = 100;
        let [p50, p90, p99, p999] = quantiles_ns(&b, [0.5, 0.9, 0.99, 0.999], Some(10_000_000)).map(Option::unwrap);
        assert!(p50 < 11_000 && p90 < 11_000, "{p50} {p90}");
        assert!(p99 > 9_000_000 && p999 > 9_000_000, "{p99} {p999}");
        assert!(p50 <= p90 && p90 <= p99 && p99 <= p999);
    }
}
