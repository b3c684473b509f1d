//! The snapshot at a window's start, the snapshot at its end and the kernel's maxima for it →
//! `Window`: what happened in those `--window` seconds — the same `Report` `record --json`
//! prints, HDR quantiles per reason, and each cgroup's delays.
use latency_common::{Reason, maps::CgroupHist};

use super::{
    distribution::quantiles_ns,
    report::{Meta, Report},
    snapshot::{CpuMax, Snapshot},
};

/// Quantiles the window exports, in the order of [`Quantiles::ns`].
pub const QUANTILES: [f64; 4] = [0.5, 0.9, 0.99, 0.999];

/// Estimated quantiles of one reason's delays in a window (ns; `None` without delays).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quantiles {
    pub ns: [Option<u64>; QUANTILES.len()],
}

/// One closed window.
#[derive(Clone, Debug)]
pub struct Window {
    pub report: Report,
    /// Per reason (index = `Reason as usize`).
    pub quantiles: [Quantiles; Reason::COUNT],
    /// Exact per-reason maximum (ns; 0 without delays), from the kernel's per-CPU maxima.
    pub max_ns: [u64; Reason::COUNT],
    /// Per cgroup id: its delays in this window (ids without delays left out).
    pub cgroups: Vec<(u64, CgroupHist)>,
}

impl Window {
    pub fn close(start: &Snapshot, end: &Snapshot, maxima: &[(Reason, CpuMax)], meta: &Meta) -> Window {
        let report = Report::between(start, end, maxima, meta);
        let mut max_ns = [0u64; Reason::COUNT];
        for (reason, m) in maxima {
            let slot = &mut max_ns[*reason as usize];
            *slot = (*slot).max(m.max.delay_ns);
        }
        let quantiles = Reason::ALL.map(|reason| {
            let h = report.histograms.get(reason);
            let max = (h.max_ns > 0).then_some(h.max_ns);
            Quantiles { ns: quantiles_ns(&h.raw, QUANTILES, max) }
        });
        Window { report, quantiles, max_ns, cgroups: cgroup_deltas(start, end) }
    }
}

/// Per-cgroup deltas between two snapshots (both sorted by id). An id missing from `start` is
/// new (its whole count is in the window); one missing from `end` was deleted and is skipped. A
/// cgroup is in the result if its tasks waited or held others' back in the window.
pub fn cgroup_deltas(start: &Snapshot, end: &Snapshot) -> Vec<(u64, CgroupHist)> {
    let mut out = Vec::new();
    let mut before = start.cgroups.iter().peekable();
    for (id, later) in &end.cgroups {
        while before.peek().is_some_and(|(b, _)| b < id) {
            before.next();
        }
        let earlier = match before.peek() {
            Some((b, h)) if b == id => *h,
            _ => CgroupHist::ZERO,
        };
        let mut d = CgroupHist::ZERO;
        d.sum_ns = later.sum_ns.saturating_sub(earlier.sum_ns);
        for (slot, (l, e)) in d.buckets.iter_mut().zip(later.buckets.iter().zip(earlier.buckets.iter())) {
            *slot = l.saturating_sub(*e);
        }
        for (slot, (l, e)) in d.waited_ns.iter_mut().zip(later.waited_ns.iter().zip(earlier.waited_ns.iter())) {
            *slot = l.saturating_sub(*e);
        }
        d.held_others_ns = later.held_others_ns.saturating_sub(earlier.held_others_ns);
        if d.buckets.iter().any(|&c| c > 0) || d.held_others_ns > 0 {
            out.push((*id, d));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use latency_common::{CpuStats, Histogram, WindowMax, buckets::bucket_of, knobs::Clock};

    use super::*;
    use crate::model::wall::WallClock;

    fn snap(taken_ns: u64, cgroups: Vec<(u64, CgroupHist)>) -> Snapshot {
        Snapshot {
            taken_ns,
            cpus: vec![CpuStats::default(); 2],
            histograms: [Histogram::ZERO; Reason::COUNT],
            tasks: Vec::new(),
            cgroups,
            irq_ns: None,
            steal_ns: None,
        }
    }

    fn hist(count: u64, sum_ns: u64) -> CgroupHist {
        let mut h = CgroupHist::ZERO;
        h.buckets[3] = count;
        h.sum_ns = sum_ns;
        h
    }

    fn meta() -> Meta {
        Meta { kernel: "test".into(), wall: WallClock::new(0, 0), filter: Vec::new(), clock: Clock::Monotonic }
    }

    #[test]
    fn cgroup_deltas_handle_new_gone_and_idle_ids() {
        let start = snap(0, vec![(1, hist(5, 50)), (2, hist(7, 70)), (3, hist(1, 10))]);
        let end = snap(1, vec![(1, hist(9, 90)), (3, hist(1, 10)), (4, hist(2, 20))]);
        let d = cgroup_deltas(&start, &end);
        // 1 grew by 4; 2 was deleted; 3 had nothing new; 4 is new.
        assert_eq!(d, vec![(1, hist(4, 40)), (4, hist(2, 20))]);
    }

    #[test]
    fn cgroup_deltas_carry_who_held_the_cpu() {
        let with = |h: CgroupHist, by: [u64; 6], held: u64| CgroupHist { waited_ns: by, held_others_ns: held, ..h };
        let start = snap(
            0,
            vec![(1, with(hist(5, 50), [0, 0, 10, 20, 10, 10], 0)), (2, with(hist(1, 10), [0, 0, 0, 0, 0, 10], 7))],
        );
        let end = snap(
            1,
            vec![(1, with(hist(9, 90), [5, 1, 20, 40, 20, 4], 0)), (2, with(hist(1, 10), [0, 0, 0, 0, 0, 10], 37))],
        );
        let d = cgroup_deltas(&start, &end);
        // 2 waited no more but held others back for 30 ns: it stays in the window.
        assert_eq!(d, vec![(1, with(hist(4, 40), [5, 1, 10, 20, 10, 0], 0)), (2, with(hist(0, 0), [0; 6], 30))]);
    }

    #[test]
    fn window_max_is_per_reason_and_exact() {
        let start = snap(0, Vec::new());
        let mut end = snap(15_000_000_000, Vec::new());
        for d in [3_000u64, 5_000, 7_000_000] {
            end.histograms[Reason::Preempt as usize].buckets[bucket_of(d)] += 1;
            end.histograms[Reason::Preempt as usize].sum_ns += d;
        }
        let mut m = WindowMax::ZERO;
        m.delay_ns = 7_000_000;
        let maxima = vec![
            (Reason::Preempt, CpuMax { cpu: 0, max: m }),
            (Reason::Preempt, CpuMax { cpu: 1, max: WindowMax { delay_ns: 5_000, ..m } }),
        ];
        let w = Window::close(&start, &end, &maxima, &meta());
        assert_eq!(w.max_ns, [0, 7_000_000]);
        assert_eq!(w.quantiles[Reason::Wakeup as usize], Quantiles::default());
        let [p50, _, p99, p999] = w.quantiles[Reason::Preempt as usize].ns.map(Option::unwrap);
        assert!(p50 < 6_000, "{p50}");
        assert!(p99 <= 7_000_000 && p999 <= 7_000_000 && p99 > 6_000_000, "{p99}");
        assert_eq!(w.report.histograms.preempt.count, 3);
    }
}
