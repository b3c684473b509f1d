//! Each window's per-cgroup deltas and their paths → bounded cumulative series: the top N
//! cgroups by delay time in the window (time waited plus time they held other cgroups' tasks
//! back, so a noisy neighbour that rarely waits is named too) keep a series of their own (places
//! left free go to those that waited before, so a quiet cgroup stays), everything else adds to
//! `cgroup="other"`, so the label set stays ≤ N + 1 however many containers come and go.
use std::collections::HashMap;

use latency_common::maps::CgroupHist;

use super::snapshot::add_cgroup as add;

/// The label that collects every cgroup outside the top N (and ids we cannot name).
pub const OTHER: &str = "other";

/// How many windows' worth of dropped-out cgroups to remember, as a multiple of N: a cgroup
/// that re-enters the top N soon continues its counters instead of restarting them.
const REMEMBER_FACTOR: usize = 4;

#[derive(Clone, Debug)]
struct Series {
    total: CgroupHist,
    /// The last window in which this cgroup was in the top N.
    last_top: u64,
}

impl Default for Series {
    fn default() -> Self {
        Series { total: CgroupHist::ZERO, last_top: 0 }
    }
}

/// Cumulative per-label histograms, exported at most N + 1 at a time.
#[derive(Clone, Debug)]
pub struct CgroupSeries {
    series: HashMap<String, Series>,
    other: CgroupHist,
    /// Labels of the latest window's top N, largest delay first.
    current: Vec<String>,
    windows: u64,
}

impl Default for CgroupSeries {
    fn default() -> Self {
        CgroupSeries { series: HashMap::new(), other: CgroupHist::ZERO, current: Vec::new(), windows: 0 }
    }
}

impl CgroupSeries {
    /// Fold one window's deltas in. `name` turns an id into its path (None: unknown, folded
    /// into "other"); `top` is N.
    pub fn add_window(
        &mut self,
        deltas: &[(u64, CgroupHist)],
        mut name: impl FnMut(u64) -> Option<String>,
        top: usize,
    ) {
        self.windows += 1;
        let mut named: Vec<(String, &CgroupHist)> = Vec::with_capacity(deltas.len());
        for (id, delta) in deltas {
            match name(*id) {
                // A path equal to our fold label would merge two meanings into one series.
                Some(path) if path != OTHER => named.push((path, delta)),
                _ => add(&mut self.other, delta),
            }
        }
        let weight = |h: &CgroupHist| h.sum_ns.saturating_add(h.held_others_ns);
        named.sort_by(|a, b| weight(b.1).cmp(&weight(a.1)).then_with(|| a.0.cmp(&b.0)));
        self.current.clear();
        for (i, (path, delta)) in named.into_iter().enumerate() {
            if i < top {
                let s = self.series.entry(path.clone()).or_default();
                add(&mut s.total, delta);
                s.last_top = self.windows;
                self.current.push(path);
            } else {
                add(&mut self.other, delta);
            }
        }
        // Fewer than N cgroups waited in this window: the free places keep the series of those
        // that waited before (latest first), standing still, so a quiet cgroup does not vanish
        // from /metrics (a stale series) and come back a window later.
        if self.current.len() < top {
            let mut quiet: Vec<(u64, &String)> =
                self.series.iter().filter(|(l, _)| !self.current.contains(l)).map(|(l, s)| (s.last_top, l)).collect();
            quiet.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
            let free = top - self.current.len();
            let kept: Vec<String> = quiet.into_iter().take(free).map(|(_, l)| l.clone()).collect();
            self.current.extend(kept);
        }
        self.forget_old(top);
    }

    /// Keep at most REMEMBER_FACTOR × N remembered series, dropping the longest out of the top.
    fn forget_old(&mut self, top: usize) {
        let keep = REMEMBER_FACTOR * top.max(1);
        if self.series.len() <= keep {
            return;
        }
        let mut by_age: Vec<(u64, String)> = self.series.iter().map(|(k, s)| (s.last_top, k.clone())).collect();
        by_age.sort();
        let excess = self.series.len() - keep;
        for (_, label) in by_age.into_iter().take(excess) {
            self.series.remove(&label);
        }
    }

    /// Drop a cgroup's series at once (the cgroup was removed): it leaves /metrics now rather than
    /// standing still in a free place for ever.
    pub fn remove(&mut self, label: &str) {
        self.series.remove(label);
        self.current.retain(|l| l != label);
    }

    /// The series to export now: the latest top N, then "other" (always present, so the sum over
    /// labels is the whole machine's per-cgroup total).
    pub fn exported(&self) -> Vec<(&str, &CgroupHist)> {
        let mut out: Vec<(&str, &CgroupHist)> =
            self.current.iter().filter_map(|l| self.series.get(l).map(|s| (l.as_str(), &s.total))).collect();
        out.push((OTHER, &self.other));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(sum_ns: u64) -> CgroupHist {
        let mut h = CgroupHist::ZERO;
        h.buckets[2] = 1;
        h.sum_ns = sum_ns;
        h
    }

    fn names(id: u64) -> Option<String> {
        (id != 99).then(|| format!("/c{id}"))
    }

    fn sums(s: &CgroupSeries) -> Vec<(String, u64)> {
        s.exported().into_iter().map(|(l, h)| (l.to_string(), h.sum_ns)).collect()
    }

    #[test]
    fn top_n_by_delay_time_and_the_rest_folded() {
        let mut s = CgroupSeries::default();
        s.add_window(&[(1, h(10)), (2, h(30)), (3, h(20)), (99, h(5))], names, 2);
        assert_eq!(sums(&s), vec![("/c2".into(), 30), ("/c3".into(), 20), ("other".into(), 15)]);
    }

    #[test]
    fn a_cgroup_that_held_others_back_ranks_by_that_too() {
        let mut s = CgroupSeries::default();
        let mut hog = h(1);
        hog.held_others_ns = 100;
        s.add_window(&[(1, h(10)), (2, h(30)), (3, hog)], names, 2);
        let exported: Vec<(String, u64, u64)> =
            s.exported().into_iter().map(|(l, h)| (l.to_string(), h.sum_ns, h.held_others_ns)).collect();
        assert_eq!(exported, vec![("/c3".into(), 1, 100), ("/c2".into(), 30, 0), ("other".into(), 10, 0)]);
    }

    #[test]
    fn a_quiet_cgroup_keeps_its_series_while_there_is_room() {
        let mut s = CgroupSeries::default();
        s.add_window(&[(1, h(10)), (2, h(30))], names, 3);
        // Only /c2 waited: /c1 stays, standing still, instead of vanishing for a window.
        s.add_window(&[(2, h(5))], names, 3);
        assert_eq!(sums(&s), vec![("/c2".into(), 35), ("/c1".into(), 10), ("other".into(), 0)]);
        // No room: only the top one.
        s.add_window(&[(2, h(5))], names, 1);
        assert_eq!(sums(&s), vec![("/c2".into(), 40), ("other".into(), 0)]);
    }

    #[test]
    fn series_never_decrease_and_resume_when_back_in_the_top() {
        let mut s = CgroupSeries::default();
        s.add_window(&[(1, h(10)), (2, h(30))], names, 1);
        assert_eq!(sums(&s), vec![("/c2".into(), 30), ("other".into(), 10)]);
        // /c1 takes the lead: /c2's next delta goes to "other", /c1 starts its own series.
        s.add_window(&[(1, h(50)), (2, h(5))], names, 1);
        assert_eq!(sums(&s), vec![("/c1".into(), 50), ("other".into(), 15)]);
        // /c2 back on top: it continues from 30, not from 0.
        s.add_window(&[(2, h(100))], names, 1);
        assert_eq!(sums(&s), vec![("/c2".into(), 130), ("other".into(), 15)]);
    }

    #[test]
    fn cardinality_is_bounded_however_many_cgroups_come_and_go() {
        let mut s = CgroupSeries::default();
        for window in 0..1000u64 {
            let deltas: Vec<(u64, CgroupHist)> = (0..10).map(|i| (window * 10 + i, h(1 + i))).collect();
            s.add_window(&deltas, |id| Some(format!("/pod{id}")), 3);
            assert!(s.exported().len() <= 4);
        }
        assert!(s.series.len() <= REMEMBER_FACTOR * 3);
        let total: u64 = s.exported().iter().map(|(_, h)| h.sum_ns).sum::<u64>();
        assert!(total > 0);
    }

    #[test]
    fn a_removed_cgroup_leaves_at_once_even_with_room() {
        let mut s = CgroupSeries::default();
        s.add_window(&[(1, h(10)), (2, h(30))], names, 5);
        // /c1 was removed during the next window: its last delta goes to "other", its series goes.
        s.add_window(&[(1, h(4)), (2, h(5))], |id| (id != 1).then(|| format!("/c{id}")), 5);
        s.remove("/c1");
        assert_eq!(sums(&s), vec![("/c2".into(), 35), ("other".into(), 4)]);
        s.add_window(&[], names, 5);
        assert_eq!(sums(&s), vec![("/c2".into(), 35), ("other".into(), 4)], "and does not come back");
    }

    #[test]
    fn a_cgroup_literally_named_other_cannot_merge_into_the_fold() {
        let mut s = CgroupSeries::default();
        s.add_window(&[(7, h(10))], |_| Some(OTHER.to_string()), 5);
        assert_eq!(sums(&s), vec![("other".into(), 10)]);
    }
}
