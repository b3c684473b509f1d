//! What a scrape shows, as plain data: the `Exposition` the drain loop publishes after each drain,
//! and the pure conversions from kernel buckets to Prometheus's classic and native buckets.
//! Encoding it is `metrics`'s job; nothing here knows prometheus-client.
use std::{collections::HashMap, sync::Arc};

use latency_common::{
    Reason,
    buckets::{BUCKETS, OVERFLOW_BUCKET, ZERO_BUCKET, ZERO_NATIVE_INDEX, native_index},
    knobs::Clock,
    maps::{CGROUP_BUCKETS, CgroupHist},
};

use super::{
    container::ContainerLabels,
    distribution::{cgroup_bound, native_bound},
    snapshot::Snapshot,
    timeline::{LastAlert, Timeline},
    waits::WaitsNow,
    window::Window,
};

/// Why a cgroup id had no name: `runqlat_cgroup_unresolved_total`'s `reason` values, the order of
/// `Exposition::cgroups_unresolved` (`host::cgroups::Unresolved` says what each means).
pub const CGROUP_UNRESOLVED: [&str; 3] = ["not_found", "walk_truncated", "walk_failed"];

/// Everything a scrape shows, as published by the drain loop after each drain.
#[derive(Clone, Debug, Default)]
pub struct Exposition {
    pub version: &'static str,
    /// The git commit the binary was built from (`--version`'s), and its kernel object's id.
    pub revision: &'static str,
    pub bpf: &'static str,
    pub kernel: String,
    pub clock: Clock,
    /// Each optional kernel path and its state: on, off (not asked for), unavailable (asked for,
    /// this kernel did not give it).
    pub features: Vec<(&'static str, &'static str)>,
    pub window_seconds: f64,
    /// Classic `le` bounds of `runqlat_delay_seconds`, as native indices (bound = 2^(i/8) s).
    pub classic: Vec<i32>,
    /// Classic bounds of `runqlat_cgroup_delay_seconds`, as coarse buckets m (2^(−20+2m) s).
    pub cgroup_classic: Vec<u8>,
    /// The latest drain: cumulative since the program was loaded.
    pub snapshot: Option<Snapshot>,
    /// The last closed window.
    pub window: Option<Arc<Window>>,
    /// Per reason (index = `Reason as usize`): the last closed window's worst wait, shown as an
    /// exemplar on `runqlat_delay_seconds` (None: no wait of that reason in the window).
    pub exemplars: [Option<DelayExemplar>; Reason::COUNT],
    /// Cumulative per-cgroup series (top N and "other").
    pub cgroups: Vec<(String, CgroupHist)>,
    /// Namespace, pod and container of the cgroups named in `cgroups` and `alerts_active` (absent:
    /// not a container).
    pub containers: HashMap<String, ContainerLabels>,
    /// Container lookups that found no runtime config on this node (names left empty).
    pub containers_unresolved: u64,
    /// Containers whose names the daemon holds now (forgotten when their cgroup goes).
    pub container_names_cached: u64,
    /// Culprits (tasks that ran while a victim waited) whose process was gone before the daemon
    /// read its cgroup: their cgroup and pod show as "unknown".
    pub culprit_cgroups_unknown: u64,
    /// Window maxima the kernel wrote after we had read their slot (see `pipeline::Pipeline::slot_read`).
    pub late_window_writes: u64,
    /// Removed cgroups whose kernel entries were retired (their final counts kept, their slots
    /// free for reuse).
    pub cgroups_pruned: u64,
    /// Cgroup ids of a window that had no name (their delays went to "other"), by reason in
    /// `CGROUP_UNRESOLVED`'s order.
    pub cgroups_unresolved: [u64; CGROUP_UNRESOLVED.len()],
    /// Alerts firing now: (reason, cgroup).
    pub alerts_active: Vec<(Reason, String)>,
    /// Alerts fired since start, per reason (index = `Reason as usize`).
    pub alerts_total: [u64; Reason::COUNT],
    /// Breaches that fell in a cooldown and did not fire.
    pub alerts_suppressed: u64,
    pub drains: u64,
    pub drain_errors: u64,
    /// CPU time the drain thread spent draining (excludes waiting for a CPU).
    pub drain_cpu_seconds: f64,
    pub last_drain_unix: f64,
    /// The last closed windows, for the live view (shared: a drain republishes it without a copy).
    pub timeline: Arc<Timeline>,
    /// The most recent alert fired, with its attribution.
    pub last_alert: Option<Arc<LastAlert>>,
    /// The last wait scan (None: the scan is off or unavailable).
    pub waits: Option<Arc<WaitsNow>>,
}

/// One window's worst wait of a reason: an exemplar, labelled with what the daemon already shows
/// of the task elsewhere (its tid and comm in alerts and the snapshot API, its pod in labels).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DelayExemplar {
    pub delay_ns: u64,
    /// When the task got the CPU, Unix ns.
    pub unix_ns: u64,
    pub tid: u32,
    pub comm: String,
    /// Its pod ("" when not a pod's, or the process was gone when the window closed).
    pub pod: String,
}

/// Classic buckets (non-cumulative counts per `le` in `bounds`, native indices) from kernel
/// buckets, ending with `+Inf`. Every bound is a kernel boundary, so each kernel bucket falls in
/// exactly one. The `+Inf` bucket is explicit because OpenMetrics requires it and
/// prometheus-client's OpenMetrics encoder writes only the buckets it is given (its 0.0.4 encoder
/// adds one when missing; protobuf carries it like prometheus-client's own histograms).
pub fn classic_buckets(raw: &[u64; BUCKETS], bounds: &[i32]) -> Vec<(f64, u64)> {
    let mut out: Vec<(f64, u64)> = bounds.iter().map(|&i| (native_bound(i), 0)).collect();
    out.push((f64::INFINITY, 0));
    for (k, &c) in raw.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let index = match k {
            ZERO_BUCKET => Some(ZERO_NATIVE_INDEX),
            OVERFLOW_BUCKET => None,
            _ => native_index(k),
        };
        // The first bound at or above the bucket's upper bound; none: only in +Inf.
        let slot = index.and_then(|i| bounds.iter().position(|&b| b >= i)).unwrap_or(bounds.len());
        out[slot].1 += c;
    }
    out
}

/// The kernel buckets as native-histogram spans and delta-encoded counts (schema 3, zero
/// bucket ≤ 2^-20 s): a lossless copy. The overflow bucket (above 2^(94/8) s ≈ 57 min) has no
/// native bucket; the daemon's ceiling keeps it empty (see config).
pub fn native_buckets(raw: &[u64; BUCKETS]) -> (Vec<(i32, u32)>, Vec<i64>) {
    let mut spans: Vec<(i32, u32)> = Vec::new();
    let mut deltas: Vec<i64> = Vec::new();
    let mut previous_count = 0i64;
    let mut previous_index: Option<i32> = None;
    for (k, &c) in raw.iter().enumerate().take(OVERFLOW_BUCKET).skip(1) {
        if c == 0 {
            continue;
        }
        let Some(i) = native_index(k) else { continue };
        match previous_index {
            // Adjacent: extend the current span.
            Some(p) if i == p + 1 => {
                if let Some(last) = spans.last_mut() {
                    last.1 += 1;
                }
            }
            // A gap: a new span whose offset is the gap since the previous span's end.
            Some(p) => spans.push((i - p - 1, 1)),
            // The first span's offset is the absolute index.
            None => spans.push((i, 1)),
        }
        deltas.push(c as i64 - previous_count);
        previous_count = c as i64;
        previous_index = Some(i);
    }
    (spans, deltas)
}

/// Classic buckets of a per-cgroup histogram (non-cumulative counts per `le` in `bounds`, coarse
/// steps m): each coarse bucket below the top one falls in the first bound at or above it.
pub fn cgroup_classic_buckets(h: &CgroupHist, bounds: &[u8]) -> Vec<(f64, u64)> {
    let mut classic: Vec<(f64, u64)> = bounds.iter().map(|&m| (cgroup_bound(i32::from(m)), 0)).collect();
    classic.push((f64::INFINITY, 0));
    for (m, &c) in h.buckets.iter().enumerate() {
        // The last kernel bucket (and any beyond the highest bound) only in +Inf.
        let slot = match m {
            m if m == CGROUP_BUCKETS - 1 => bounds.len(),
            m => bounds.iter().position(|&b| usize::from(b) >= m).unwrap_or(bounds.len()),
        };
        classic[slot].1 += c;
    }
    classic
}

/// A process's own cost, as the standard `process_*` metrics show it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessSample {
    /// User + system CPU time.
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    /// Unix time of the process's start, when boot time is known.
    pub start_time_unix: Option<f64>,
}

#[cfg(test)]
mod tests {
    use latency_common::buckets::{bucket_of, bucket_of_native};

    use super::*;

    fn raw(delays: &[u64]) -> [u64; BUCKETS] {
        let mut b = [0u64; BUCKETS];
        for &d in delays {
            b[bucket_of(d)] += 1;
        }
        b
    }

    /// Counts per native index, rebuilt from spans (offsets) and deltas as Prometheus reads them.
    fn expand(spans: &[(i32, u32)], deltas: &[i64]) -> Vec<(i32, u64)> {
        let (mut out, mut index, mut count, mut d) = (Vec::new(), 0i32, 0i64, deltas.iter());
        for (n, &(offset, len)) in spans.iter().enumerate() {
            index = if n == 0 { offset } else { index + offset + 1 };
            for step in 0..len {
                count += d.next().copied().unwrap_or(0);
                out.push((index + step as i32, count as u64));
            }
            index += len as i32 - 1;
        }
        out
    }

    #[test]
    fn native_buckets_are_a_lossless_copy() {
        // Adjacent buckets, gaps, a repeated count, the zero bucket and the overflow bucket.
        let b = raw(&[500, 2_000, 2_100, 2_300, 4_000, 1_000_000, 1_000_000, 90 * 1_000_000_000, u64::MAX]);
        let (spans, deltas) = native_buckets(&b);
        let rebuilt = expand(&spans, &deltas);
        let want: Vec<(i32, u64)> =
            (1..OVERFLOW_BUCKET).filter(|&k| b[k] > 0).map(|k| (native_index(k).unwrap_or_default(), b[k])).collect();
        assert_eq!(rebuilt, want);
        for (i, c) in rebuilt {
            assert_eq!(bucket_of_native(i).map(|k| b[k]), Some(c));
        }
        assert_eq!(native_buckets(&[0; BUCKETS]), (vec![], vec![]));
    }

    #[test]
    fn classic_buckets_fold_each_kernel_bucket_into_one_bound() {
        // Bounds 2^-20 s (the zero bucket's threshold), 2^-10 s and 1 s.
        let bounds = [ZERO_NATIVE_INDEX, -80, 0];
        let b = raw(&[500, 900_000, 976_562, 976_563, 1_000_000_000, 1_000_000_001, u64::MAX]);
        let classic = classic_buckets(&b, &bounds);
        let le: Vec<f64> = classic.iter().map(|c| c.0).collect();
        assert_eq!(le, [2f64.powi(-20), 2f64.powi(-10), 1.0, f64::INFINITY]);
        // ≤ 2^-10 s = 976 562.5 ns: 900 µs and 976 562 ns; 976 563 ns is above it. Beyond 1 s
        // (and the kernel's overflow bucket) only +Inf, so the buckets add up to the count.
        let counts: Vec<u64> = classic.iter().map(|c| c.1).collect();
        assert_eq!(counts, [1, 2, 2, 2]);
        assert_eq!(counts.iter().sum::<u64>(), b.iter().sum::<u64>());
    }

    #[test]
    fn cgroup_buckets_use_every_other_octave() {
        let mut h = CgroupHist::ZERO;
        h.buckets[0] = 1; // ≤ 2^-20 s
        h.buckets[5] = 2; // ≤ 2^-10 s
        h.buckets[CGROUP_BUCKETS - 1] = 4; // above 64 s: +Inf only
        let classic = cgroup_classic_buckets(&h, &[0, 5, 13]);
        assert_eq!(classic, [(2f64.powi(-20), 1), (2f64.powi(-10), 2), (64.0, 0), (f64::INFINITY, 4)]);
    }
}
