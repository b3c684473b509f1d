//! Closed windows (their `Report`, top cgroups) in → a bounded `Timeline`: the last N windows,
//! each reduced to what the live view and `record --svg` draw (the non-empty kernel buckets, count,
//! p99 and exact max per reason, the window's top cgroups), and the last alert with its
//! attribution. Memory stays bounded: N summaries of at most 256 buckets per reason each.
use std::collections::VecDeque;

use latency_common::{Reason, buckets::BUCKETS, maps::CgroupHist};

use super::{attribution::Attribution, causes::Causes, container::ContainerLabels, report::Report};

/// Windows the daemon keeps for the live view: 15 minutes at the default 15 s window.
pub const WINDOWS_KEPT: usize = 60;

/// Cgroups kept per window summary.
pub const TOP_CGROUPS: usize = 5;

/// One reason's delays in one window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReasonSummary {
    pub count: u64,
    pub sum_ns: u64,
    /// Exact (the kernel's window maximum); None where only buckets are known (`record`'s
    /// intermediate columns).
    pub max_ns: Option<u64>,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub p999_ns: Option<u64>,
    /// (kernel bucket, count), non-empty buckets only, ascending.
    pub buckets: Vec<(u8, u64)>,
}

/// One cgroup's delays in one window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupSummary {
    pub cgroup: String,
    /// Namespace, pod and container where the cgroup is a container's.
    pub names: ContainerLabels,
    pub count: u64,
    pub sum_ns: u64,
    /// `sum_ns` by cause.
    pub causes: Causes,
}

/// What the view draws of one closed window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowSummary {
    pub start_unix_ns: u64,
    pub duration_ns: u64,
    /// Per reason (index = `Reason as usize`).
    pub reasons: [ReasonSummary; Reason::COUNT],
    /// Why they waited: both reasons' delay time by cause (adds up to their `sum_ns`).
    pub causes: Causes,
    /// The window's cgroups with the most delay time, largest first.
    pub top_cgroups: Vec<CgroupSummary>,
}

impl WindowSummary {
    /// From a window's report. `exact_max`: the report's maxima came from the kernel (a `run`
    /// window, or `record`'s whole run); otherwise the max is unknown.
    pub fn of_report(report: &Report, exact_max: bool, top_cgroups: Vec<CgroupSummary>) -> WindowSummary {
        let reasons = Reason::ALL.map(|r| {
            let h = report.histograms.get(r);
            ReasonSummary {
                count: h.count,
                sum_ns: h.sum_ns,
                max_ns: exact_max.then_some(h.max_ns),
                p50_ns: h.p50_ns,
                p99_ns: h.p99_ns,
                p999_ns: h.p999_ns,
                buckets: nonzero(&h.raw),
            }
        });
        WindowSummary {
            start_unix_ns: report.start_unix_ns,
            duration_ns: report.duration_ns,
            reasons,
            causes: report.waited_by_cause_ns,
            top_cgroups,
        }
    }

    /// Delays of both reasons per kernel bucket (non-empty only, ascending).
    pub fn all_buckets(&self) -> Vec<(u8, u64)> {
        let mut all = [0u64; BUCKETS];
        for r in &self.reasons {
            for &(k, c) in &r.buckets {
                all[usize::from(k)] += c;
            }
        }
        nonzero(&all)
    }
}

fn nonzero(raw: &[u64; BUCKETS]) -> Vec<(u8, u64)> {
    raw.iter().enumerate().filter(|(_, c)| **c > 0).filter_map(|(k, &c)| Some((u8::try_from(k).ok()?, c))).collect()
}

/// The `n` cgroups of a window with the most delay time, named by `name` (unnamed ids are left
/// out: the view lists what it can name).
pub fn top_cgroups(
    deltas: &[(u64, CgroupHist)],
    mut name: impl FnMut(u64) -> Option<String>,
    n: usize,
) -> Vec<CgroupSummary> {
    // A cgroup that only held others back in the window has no delay of its own to list.
    let mut by_time: Vec<&(u64, CgroupHist)> = deltas.iter().filter(|(_, h)| h.sum_ns > 0).collect();
    by_time.sort_by(|a, b| b.1.sum_ns.cmp(&a.1.sum_ns).then(a.0.cmp(&b.0)));
    by_time
        .into_iter()
        .filter_map(|(id, h)| {
            Some(CgroupSummary {
                cgroup: name(*id)?,
                names: ContainerLabels::default(),
                count: h.buckets.iter().sum(),
                sum_ns: h.sum_ns,
                causes: Causes(h.waited_ns),
            })
        })
        .take(n)
        .collect()
}

/// The last N window summaries, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timeline {
    windows: VecDeque<WindowSummary>,
    capacity: usize,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline::with_capacity(WINDOWS_KEPT)
    }
}

impl Timeline {
    pub fn with_capacity(capacity: usize) -> Timeline {
        let capacity = capacity.max(1);
        Timeline { windows: VecDeque::with_capacity(capacity), capacity }
    }

    /// Adds the newest window, dropping the oldest beyond capacity.
    pub fn push(&mut self, window: WindowSummary) {
        while self.windows.len() >= self.capacity {
            self.windows.pop_front();
        }
        self.windows.push_back(window);
    }

    pub fn windows(&self) -> impl ExactSizeIterator<Item = &WindowSummary> + DoubleEndedIterator {
        self.windows.iter()
    }

    pub fn last(&self) -> Option<&WindowSummary> {
        self.windows.back()
    }

    pub fn len(&self) -> usize {
        self.windows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }
}

/// The most recent alert the daemon fired, with the delay that made it fire and who ran meanwhile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastAlert {
    pub threshold_ns: u64,
    /// Unix ns of the window end at which it fired.
    pub fired_unix_ns: u64,
    /// Unix ns of the window end at which it resolved; None while firing.
    pub resolved_unix_ns: Option<u64>,
    /// The worst delay seen while firing (reason and cgroup are the alert's key).
    pub worst: Attribution,
}

#[cfg(test)]
mod tests {
    use latency_common::buckets::bucket_of;

    use super::*;
    use crate::model::{
        report::Meta,
        snapshot::{CpuMax, Snapshot},
        wall::WallClock,
    };

    fn report(delays: &[(Reason, u64)], max: bool) -> Report {
        let start = Snapshot::empty(0, 1);
        let mut end = Snapshot::empty(2_000_000_000, 1);
        let mut maxima = Vec::new();
        for &(r, d) in delays {
            end.histograms[r as usize].buckets[bucket_of(d)] += 1;
            end.histograms[r as usize].sum_ns += d;
            let mut m = latency_common::WindowMax::ZERO;
            m.delay_ns = d;
            maxima.push((r, CpuMax { cpu: 0, max: m }));
        }
        let meta = Meta {
            kernel: "t".into(),
            wall: WallClock::new(0, 1_000),
            filter: Vec::new(),
            clock: latency_common::knobs::Clock::Monotonic,
        };
        Report::between(&start, &end, if max { &maxima } else { &[] }, &meta)
    }

    #[test]
    fn a_summary_keeps_exact_buckets_and_the_max_only_when_known() {
        let mut r = report(&[(Reason::Wakeup, 5_000), (Reason::Wakeup, 5_001), (Reason::Preempt, 9_000_000)], true);
        r.waited_by_cause_ns = Causes([9_000_000, 0, 0, 0, 0, 10_001]);
        let s = WindowSummary::of_report(&r, true, Vec::new());
        assert_eq!(s.causes.total(), s.reasons.iter().map(|r| r.sum_ns).sum::<u64>());
        let w = &s.reasons[Reason::Wakeup as usize];
        assert_eq!((w.count, w.max_ns), (2, Some(5_001)));
        assert_eq!(w.buckets, vec![(bucket_of(5_000) as u8, 2)]);
        assert_eq!(s.reasons[Reason::Preempt as usize].max_ns, Some(9_000_000));
        assert_eq!(s.all_buckets().iter().map(|b| b.1).sum::<u64>(), 3);
        assert_eq!((s.start_unix_ns, s.duration_ns), (1_000, 2_000_000_000));
        let unknown = WindowSummary::of_report(&report(&[(Reason::Wakeup, 5_000)], false), false, Vec::new());
        assert_eq!(unknown.reasons[0].max_ns, None);
    }

    #[test]
    fn the_ring_is_bounded_and_keeps_the_newest() {
        let mut t = Timeline::with_capacity(3);
        for i in 0..10u64 {
            let mut s = WindowSummary::of_report(&report(&[], false), false, Vec::new());
            s.start_unix_ns = i;
            t.push(s);
            assert!(t.len() <= 3);
        }
        let starts: Vec<u64> = t.windows().map(|w| w.start_unix_ns).collect();
        assert_eq!(starts, [7, 8, 9]);
        assert_eq!(t.last().map(|w| w.start_unix_ns), Some(9));
    }

    #[test]
    fn top_cgroups_by_delay_time_named_ones_only() {
        let h = |sum_ns: u64, n: u64| {
            let mut h = CgroupHist::ZERO;
            h.buckets[3] = n;
            h.sum_ns = sum_ns;
            h
        };
        let mut deltas = [(1, h(10, 1)), (2, h(30, 2)), (3, h(20, 3)), (4, h(99, 9))];
        deltas[1].1.waited_ns = [20, 0, 0, 10, 0, 0];
        let top = top_cgroups(&deltas, |id| (id != 4).then(|| format!("/c{id}")), 2);
        let names: Vec<(&str, u64)> = top.iter().map(|c| (c.cgroup.as_str(), c.sum_ns)).collect();
        assert_eq!(names, [("/c2", 30), ("/c3", 20)]);
        assert_eq!(top[0].causes, Causes([20, 0, 0, 10, 0, 0]), "each cgroup carries its causes");
    }
}
