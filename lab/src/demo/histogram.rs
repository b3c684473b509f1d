//! Our buckets beside runqlat's: in, our schema-3 buckets (bucket i holds 2^((i−1)/8) s < d ≤
//! 2^(i/8) s, 9 % wide); out, counts per runqlat slot (slot k holds ⌊d in µs⌋ in [2^k, 2^(k+1)),
//! slot 0 also 0 µs). The grids do not line up: for display each of our buckets goes whole to the
//! slot of its geometric midpoint; for agreement, runqlat's count in a slot must lie between
//! what our buckets say must be in it and what may be (those straddling its bounds).
use latency_common::buckets::{UPPER_NS, ZERO_BUCKET, bucket_of_native};
use serde::Serialize;

use crate::recording::Bucket;

/// runqlat's last slot (`MAX_SLOTS - 1` in runqlat.h): everything from 2^25 µs ≈ 33.5 s up.
pub const LAST_SLOT: usize = 25;

/// Our native index of a bucket bound.
pub fn native_index(le_seconds: f64) -> i32 {
    (8.0 * le_seconds.log2()).round() as i32
}

/// runqlat's slot of a delay of `ns`: log2 of the truncated µs, log2(0) = 0, capped.
pub fn runqlat_slot(ns: u64) -> usize {
    let us = ns / 1000;
    if us == 0 { 0 } else { (us.ilog2() as usize).min(LAST_SLOT) }
}

/// Bucket `le`'s bounds in ns: (exclusive low, inclusive high), from the kernel's own table; the
/// zero bucket starts at 0.
fn bounds_ns(le_seconds: Option<f64>) -> (u64, u64) {
    let Some(le) = le_seconds else { return (u64::MAX / 2, u64::MAX / 2) };
    match bucket_of_native(native_index(le)) {
        Some(k) => (UPPER_NS[k - 1], UPPER_NS[k]),
        None => (0, UPPER_NS[ZERO_BUCKET]),
    }
}

/// The runqlat slot our bucket with upper bound `le_seconds` goes to: its geometric midpoint's.
pub fn slot_of(le_seconds: Option<f64>) -> usize {
    let Some(le) = le_seconds else { return LAST_SLOT };
    let midpoint = 1e9 * 2f64.powf((f64::from(native_index(le)) - 0.5) / 8.0);
    runqlat_slot(midpoint as u64)
}

/// How far runqlat's stamp of one delay may be from ours. Programs on one tracepoint run one
/// after the other and each reads the clock when it runs, so the later one's delay is longer by
/// what the earlier one spent at the switch and shorter by what it spent at the wakeup. On a CPU
/// leaving idle that is measured up to 2 µs on this VM (every slot agrees with this slack, none
/// at 1 µs; in busy modes 0 is enough).
pub const STAMP_SLACK_NS: u64 = 3_000;

/// The lowest and highest runqlat slot a delay in this bucket can have, each delay allowed to
/// be `slack_ns` away from ours.
pub fn slot_span(le_seconds: Option<f64>, slack_ns: u64) -> (usize, usize) {
    let (low, high) = bounds_ns(le_seconds);
    let first = if low == 0 { 0 } else { low + 1 };
    (runqlat_slot(first.saturating_sub(slack_ns)), runqlat_slot(high.saturating_add(slack_ns)))
}

/// One row of the side-by-side table.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SlotRow {
    /// runqlat's label: `low -> high` µs.
    pub low_us: u64,
    pub high_us: u64,
    /// Ours, each bucket at its midpoint's slot.
    pub ours: u64,
    /// Ours that must be in this slot, and that may be (buckets straddling its bounds, or
    /// within `STAMP_SLACK_NS` of them).
    pub ours_min: u64,
    pub ours_max: u64,
    pub runqlat: u64,
}

/// Our buckets beside runqlat's slots, from the first to the last slot either side uses.
pub fn side_by_side(buckets: &[Bucket], runqlat: &[u64]) -> Vec<SlotRow> {
    let mut rows: Vec<SlotRow> = (0..=LAST_SLOT)
        .map(|k| SlotRow {
            low_us: if k == 0 { 0 } else { 1 << k },
            high_us: (1 << (k + 1)) - 1,
            ours: 0,
            ours_min: 0,
            ours_max: 0,
            runqlat: runqlat.get(k).copied().unwrap_or(0),
        })
        .collect();
    // runqlat's own last slot holds everything above it.
    rows[LAST_SLOT].runqlat += runqlat.iter().skip(LAST_SLOT + 1).sum::<u64>();
    for b in buckets {
        let (first, last) = slot_span(b.le_seconds, STAMP_SLACK_NS);
        rows[slot_of(b.le_seconds)].ours += b.count;
        if first == last {
            rows[first].ours_min += b.count;
        }
        for row in &mut rows[first..=last] {
            row.ours_max += b.count;
        }
    }
    let used = |r: &SlotRow| r.ours_max + r.runqlat > 0;
    let (Some(first), Some(last)) = (rows.iter().position(used), rows.iter().rposition(used)) else {
        return Vec::new();
    };
    rows[first..=last].to_vec()
}

/// How many delays runqlat puts where none of ours could be, given our bucket bounds: for each
/// slot, what runqlat has beyond our most, or short of our least; halved, as one delay in
/// another slot shows in two. 0 when the two histograms are the same delays.
pub fn unexplained(rows: &[SlotRow]) -> f64 {
    let excess: u64 =
        rows.iter().map(|r| r.runqlat.saturating_sub(r.ours_max) + r.ours_min.saturating_sub(r.runqlat)).sum();
    excess as f64 / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(i: i32) -> Option<f64> {
        Some(2f64.powf(f64::from(i) / 8.0))
    }

    #[test]
    fn index_round_trips_through_the_float_bound() {
        for i in -160..=94 {
            assert_eq!(native_index(2f64.powf(f64::from(i) / 8.0)), i);
        }
    }

    #[test]
    fn runqlat_truncates_to_us_then_takes_log2() {
        assert_eq!([0, 999, 1_000, 1_999, 2_000, 3_999, 4_000].map(runqlat_slot), [0, 0, 0, 0, 1, 1, 2]);
        assert_eq!(runqlat_slot(16_383_999), 13);
        assert_eq!(runqlat_slot(16_384_000), 14);
        assert_eq!(runqlat_slot(u64::MAX), LAST_SLOT);
    }

    #[test]
    fn slots_follow_the_midpoint_and_spans_the_bounds() {
        // The zero bucket (≤ 2^-20 s ≈ 0.95 µs): slot 0 only.
        assert_eq!((slot_of(bound(-160)), slot_span(bound(-160), 0)), (0, (0, 0)));
        // 2 µs = 2^-18.93 s. Bucket -151 spans (1.907, 2.081] µs, midpoint 1.99 µs: shown in
        // slot 0, may be in 0 or 1. Bucket -150's midpoint 2.17 µs: slot 1 only.
        assert_eq!((slot_of(bound(-151)), slot_span(bound(-151), 0)), (0, (0, 1)));
        assert_eq!((slot_of(bound(-150)), slot_span(bound(-150), 0)), (1, (1, 1)));
        // With 3 µs of slack, (2.081, 2.269] µs may also be read as 0 µs … 5.269 µs.
        assert_eq!(slot_span(bound(-150), 3_000), (0, 2));
        // 16 384 µs = 2^-5.93 s. Bucket -47 spans (15.63, 17.04] ms, midpoint 16.32 ms.
        assert_eq!((slot_of(bound(-47)), slot_span(bound(-47), 0)), (13, (13, 14)));
        assert_eq!((slot_of(bound(-46)), slot_span(bound(-46), 0)), (14, (14, 14)));
        assert_eq!(slot_span(bound(-46), 3_000), (14, 14));
        assert_eq!((slot_of(None), slot_span(None, 0)), (LAST_SLOT, (LAST_SLOT, LAST_SLOT)));
    }

    #[test]
    fn rows_keep_every_count_and_trim_empty_ends() {
        let buckets: Vec<Bucket> =
            (-160..-40).map(|i| Bucket { le_seconds: bound(i), count: (i + 200) as u64 }).collect();
        let total: u64 = buckets.iter().map(|b| b.count).sum();
        let rows = side_by_side(&buckets, &[]);
        assert_eq!(rows.iter().map(|r| r.ours).sum::<u64>(), total);
        assert!(rows.iter().all(|r| r.ours_min <= r.ours && r.ours <= r.ours_max));
        assert_eq!(rows[0].low_us, 0);
        assert!(side_by_side(&[], &[0, 0]).is_empty());
    }

    #[test]
    fn straddling_buckets_explain_a_shift_and_nothing_else_does() {
        // 10 delays in (14.67, 15.63] ms: runqlat shows them in 8192–16383 µs.
        let buckets = [Bucket { le_seconds: bound(-48), count: 10 }];
        let runqlat = |slots: &[(usize, u64)]| {
            let mut v = vec![0; 16];
            for &(k, n) in slots {
                v[k] = n;
            }
            v
        };
        assert_eq!(unexplained(&side_by_side(&buckets, &runqlat(&[(13, 10)]))), 0.0);
        // Two of them in the next slot cannot be.
        assert_eq!(unexplained(&side_by_side(&buckets, &runqlat(&[(13, 8), (14, 2)]))), 2.0);
        // One runqlat saw and we did not.
        assert_eq!(unexplained(&side_by_side(&buckets, &runqlat(&[(13, 11)]))), 0.5);
        // (15.63, 17.04] ms straddles 16.384 ms: either slot is fine.
        let straddling = [Bucket { le_seconds: bound(-47), count: 10 }];
        assert_eq!(unexplained(&side_by_side(&straddling, &runqlat(&[(13, 4), (14, 6)]))), 0.0);
    }
}
