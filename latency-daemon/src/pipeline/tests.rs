//! The pipeline's rules on synthetic snapshots, slots and incidents, with names from tables: window
//! boundaries, late writes, top N with "other", removed cgroups, the last alert, attribution off.
use std::collections::HashMap;

use latency_common::{
    Reason, WindowMax,
    buckets::bucket_of,
    knobs::Clock,
    maps::{CgroupHist, Incident, Run},
};

use super::*;
use crate::{
    alert::engine::Alert,
    model::{cgroup_series::OTHER, exposition::DelayExemplar, wall::WallClock},
};

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;
/// Unix ns at monotonic 0.
const BOOT_UNIX_NS: u64 = 1_700_000_000 * S;

/// Names from tables; what was asked of them and forgotten, kept.
#[derive(Default)]
struct Table {
    paths: HashMap<u64, String>,
    containers: HashMap<String, ContainerLabels>,
    processes: HashMap<u32, String>,
    asked_processes: Vec<u32>,
    asked_labels: Vec<u64>,
    forgotten: Vec<String>,
}

impl Table {
    fn with_paths(ids: &[u64]) -> Table {
        Table { paths: ids.iter().map(|id| (*id, format!("/c{id}"))).collect(), ..Table::default() }
    }
}

impl Names for Table {
    fn path(&mut self, id: u64) -> Option<String> {
        self.paths.get(&id).cloned()
    }

    fn label(&mut self, id: u64) -> Option<String> {
        self.asked_labels.push(id);
        self.paths.get(&id).cloned()
    }

    fn containers(&mut self, path: &str) -> ContainerLabels {
        self.containers.get(path).cloned().unwrap_or_default()
    }

    fn process(&mut self, pid: u32) -> Option<(String, ContainerLabels)> {
        self.asked_processes.push(pid);
        let path = self.processes.get(&pid)?.clone();
        let labels = self.containers(&path);
        Some((path, labels))
    }

    fn forget(&mut self, path: &str) {
        self.forgotten.push(path.to_owned());
        self.containers.remove(path);
    }
}

fn pod(name: &str) -> ContainerLabels {
    ContainerLabels { namespace: "ns".into(), pod: name.into(), container: "app".into(), container_id: String::new() }
}

fn settings(intervals_per_window: u32) -> Settings {
    Settings {
        intervals_per_window,
        top_cgroups: 5,
        rules: Rules {
            max_delay_ns: None,
            per_reason_ns: [None, None],
            per_cgroup_ns: Vec::new(),
            for_windows: 1,
            resolve_after: 1,
            cooldown_ns: 0,
        },
        attribute: false,
        per_cgroup: true,
        window_seconds: 15.0,
        classic: vec![-80, 0],
        cgroup_classic: vec![5],
    }
}

/// Alerting on any delay over 10 ms.
fn alerting(intervals_per_window: u32) -> Settings {
    let mut s = settings(intervals_per_window);
    s.rules.max_delay_ns = Some(10 * MS);
    s.attribute = true;
    s
}

fn pipeline(settings: Settings) -> Pipeline {
    let meta = Meta {
        kernel: "test".into(),
        wall: WallClock::new(0, BOOT_UNIX_NS),
        filter: Vec::new(),
        clock: Clock::Monotonic,
    };
    Pipeline::new(settings, meta, Snapshot::empty(0, 2), Exposition::default())
}

/// A cgroup's cumulative histogram: `count` delays of 1 ms.
fn cg(count: u64) -> CgroupHist {
    let mut h = CgroupHist::ZERO;
    h.buckets[4] = count;
    h.sum_ns = count * MS;
    h
}

/// A drain at `taken_ns`: `wakeups` cumulative wakeup delays of 1 ms, and per-cgroup counts.
fn snap(taken_ns: u64, wakeups: u64, cgroups: &[(u64, u64)]) -> Snapshot {
    let mut s = Snapshot::empty(taken_ns, 2);
    let h = &mut s.histograms[Reason::Wakeup as usize];
    h.buckets[bucket_of(MS)] = wakeups;
    h.sum_ns = wakeups * MS;
    s.cgroups = cgroups.iter().map(|(id, count)| (*id, cg(*count))).collect();
    s
}

/// A preempt delay of cgroup `cgroup`'s task that ended at `end_ns`, while pid 77 ran.
fn incident(cgroup: u64, delay_ns: u64, end_ns: u64) -> (Reason, u32, Incident) {
    let mut inc = Incident::ZERO;
    inc.delay_ns = delay_ns;
    inc.end_ns = end_ns;
    inc.cgroup = cgroup;
    inc.victim_tid = 7;
    inc.culprits = 1;
    inc.runs[0] = Run { tid: 78, tgid: 77, start_ns: end_ns - delay_ns, end_ns, comm: [b'h'; 16] };
    (Reason::Preempt, 0, inc)
}

/// One drain as the drainer does it, with the kernel's slot and incidents given.
fn drain(
    p: &mut Pipeline,
    names: &mut Table,
    now: Snapshot,
    slot: WindowSlot,
    incidents: Incidents,
) -> (Option<Closing>, Vec<Transition>) {
    let closing = p.begin();
    let closed = closing.map(|c| {
        let mut closed = p.slot_read(&c, slot);
        if c.incidents {
            closed.incidents = Some(incidents);
        }
        closed
    });
    (closing, p.end(now, closed, names))
}

fn series(p: &Pipeline) -> Vec<(String, u64)> {
    p.exposition().cgroups.iter().map(|(l, h)| (l.clone(), h.buckets.iter().sum())).collect()
}

fn window(p: &Pipeline) -> &Window {
    p.exposition().window.as_deref().expect("a window closed")
}

#[test]
fn the_window_closes_every_nth_drain_and_spans_its_start_to_its_end() {
    let mut p = pipeline(settings(3));
    let mut names = Table::default();
    let mut closings = Vec::new();
    for i in 1..=7u64 {
        // 10 more delays each drain.
        let (closing, _) = drain(&mut p, &mut names, snap(i * S, 10 * i, &[]), Vec::new(), Vec::new());
        closings.push(closing.map(|c| (c.epoch, c.next)));
        assert_eq!(p.exposition().snapshot.as_ref().map(|s| s.taken_ns), Some(i * S), "every drain is published");
        if i == 3 {
            let w = window(&p);
            assert_eq!((w.report.start_ns, w.report.end_ns), (0, 3 * S), "from attach to the 3rd drain");
            assert_eq!(w.report.histograms.wakeup.count, 30);
        }
        if i == 5 {
            assert_eq!(window(&p).report.end_ns, 3 * S, "the last closed window stays until the next closes");
        }
    }
    assert_eq!(closings, [None, None, Some((0, 1)), None, None, Some((1, 2)), None]);
    let w = window(&p);
    assert_eq!((w.report.start_ns, w.report.end_ns), (3 * S, 6 * S), "the next window starts at the close");
    assert_eq!(w.report.histograms.wakeup.count, 30);
    assert_eq!(w.report.start_unix_ns, BOOT_UNIX_NS + 3 * S);
    assert_eq!(p.exposition().timeline.len(), 2);
}

#[test]
fn a_reload_applies_from_the_next_drain() {
    let mut p = pipeline(settings(3));
    let mut names = Table::default();
    assert!(drain(&mut p, &mut names, snap(S, 0, &[]), Vec::new(), Vec::new()).0.is_none());
    let mut shorter = settings(2);
    shorter.window_seconds = 2.0;
    shorter.classic = vec![0];
    p.apply(shorter);
    assert_eq!((p.exposition().window_seconds, p.exposition().classic.as_slice()), (2.0, &[0][..]));
    // The open window already had one drain: the second closes it.
    assert!(drain(&mut p, &mut names, snap(2 * S, 0, &[]), Vec::new(), Vec::new()).0.is_some());
}

#[test]
fn the_slots_records_give_the_maxima_and_late_writes_are_counted() {
    let mut p = pipeline(settings(1));
    let mut names = Table::default();
    let rec = |epoch: u64, delay_ns: u64| WindowMax { epoch, delay_ns, ..WindowMax::ZERO };
    // Window 0: cpu 0's record. Window 1: the other slot, empty.
    drain(&mut p, &mut names, snap(S, 1, &[]), vec![(Reason::Wakeup, 0, rec(0, 3 * MS))], Vec::new());
    assert_eq!(window(&p).max_ns[Reason::Wakeup as usize], 3 * MS);
    drain(&mut p, &mut names, snap(2 * S, 1, &[]), Vec::new(), Vec::new());
    assert_eq!(window(&p).max_ns, [0, 0]);
    // Window 2 reuses window 0's slot: cpu 1 carries a record of window 0 we never read (written
    // after the read), cpu 0 the one we read, and this window's maximum is cpu 2's.
    let slot = vec![
        (Reason::Wakeup, 0, rec(0, 3 * MS)),
        (Reason::Wakeup, 1, rec(0, 9 * MS)),
        (Reason::Wakeup, 2, rec(2, 5 * MS)),
    ];
    drain(&mut p, &mut names, snap(3 * S, 1, &[]), slot, Vec::new());
    assert_eq!(p.exposition().late_window_writes, 1);
    assert_eq!(window(&p).max_ns[Reason::Wakeup as usize], 5 * MS);
}

#[test]
fn the_top_n_cgroups_keep_series_and_the_rest_add_up_in_other() {
    let mut p = pipeline(Settings { top_cgroups: 2, ..settings(1) });
    // Cgroups 1..=4 named (3 a container's); 9 has no name.
    let mut names = Table::with_paths(&[1, 2, 3, 4]);
    names.containers.insert("/c3".into(), pod("web"));
    let counts = [(1, 10), (2, 40), (3, 30), (4, 5), (9, 50)];
    drain(&mut p, &mut names, snap(S, 0, &counts), Vec::new(), Vec::new());
    assert_eq!(series(&p), [("/c2".into(), 40), ("/c3".into(), 30), (OTHER.into(), 65)]);
    let total: u64 = series(&p).iter().map(|(_, n)| n).sum();
    assert_eq!(total, 135, "every delay in exactly one series");
    assert_eq!(p.exposition().containers.get("/c3"), Some(&pod("web")));
    assert_eq!(p.exposition().containers.len(), 1, "only containers are labelled");

    let w = window(&p);
    let reported: Vec<(&str, u64, &str)> =
        w.report.cgroups.iter().map(|c| (c.cgroup.as_str(), c.count, c.names.pod.as_str())).collect();
    assert_eq!(reported, [("id:9", 50, ""), ("/c2", 40, ""), ("/c3", 30, "web"), ("/c1", 10, ""), ("/c4", 5, "")]);
    let top = &p.exposition().timeline.last().expect("a window").top_cgroups;
    let top: Vec<(&str, &str)> = top.iter().map(|c| (c.cgroup.as_str(), c.names.pod.as_str())).collect();
    assert_eq!(top, [("/c2", ""), ("/c3", "web"), ("/c1", ""), ("/c4", "")], "named ones only");

    // The next window's deltas, not the cumulative counts: /c4 overtakes /c2.
    let counts = [(1, 10), (2, 41), (3, 30), (4, 25), (9, 50)];
    drain(&mut p, &mut names, snap(2 * S, 0, &counts), Vec::new(), Vec::new());
    assert_eq!(series(&p), [("/c4".into(), 20), ("/c2".into(), 41), (OTHER.into(), 65)]);
}

#[test]
fn a_removed_cgroup_leaves_at_the_close_its_last_delta_in_other_its_container_forgotten() {
    let mut p = pipeline(settings(2));
    let mut names = Table::with_paths(&[1, 2]);
    names.containers.insert("/c1".into(), pod("gone"));
    drain(&mut p, &mut names, snap(S, 0, &[(1, 5), (2, 1)]), Vec::new(), Vec::new());
    drain(&mut p, &mut names, snap(2 * S, 0, &[(1, 10), (2, 3)]), Vec::new(), Vec::new());
    assert_eq!(series(&p), [("/c1".into(), 10), ("/c2".into(), 3), (OTHER.into(), 0)]);

    // Cgroup 1 is removed, after 4 more delays: nothing changes until the window closes.
    p.removed([1]);
    drain(&mut p, &mut names, snap(3 * S, 0, &[(1, 14), (2, 3)]), Vec::new(), Vec::new());
    assert_eq!(series(&p), [("/c1".into(), 10), ("/c2".into(), 3), (OTHER.into(), 0)]);
    assert!(names.forgotten.is_empty());

    drain(&mut p, &mut names, snap(4 * S, 0, &[(1, 14), (2, 4)]), Vec::new(), Vec::new());
    assert_eq!(series(&p), [("/c2".into(), 4), (OTHER.into(), 4)], "its series gone, its last delta in other");
    assert_eq!(names.forgotten, ["/c1"]);
    assert!(!p.exposition().containers.contains_key("/c1"));

    // And only once: the next window does not forget it again.
    drain(&mut p, &mut names, snap(5 * S, 0, &[(2, 4)]), Vec::new(), Vec::new());
    drain(&mut p, &mut names, snap(6 * S, 0, &[(2, 4)]), Vec::new(), Vec::new());
    assert_eq!(names.forgotten, ["/c1"]);
    assert_eq!(series(&p), [("/c2".into(), 4), (OTHER.into(), 4)]);
}

#[test]
fn without_per_cgroup_delays_nothing_is_folded_or_named() {
    let mut p = pipeline(Settings { per_cgroup: false, ..settings(1) });
    let mut names = Table::with_paths(&[1]);
    drain(&mut p, &mut names, snap(S, 0, &[(1, 5)]), Vec::new(), Vec::new());
    assert!(p.exposition().cgroups.is_empty(), "no \"other\" series either");
    assert!(window(&p).report.cgroups.is_empty());
    assert!(names.asked_labels.is_empty());
}

/// (cgroup, worst delay, resolved) of the exposition's last alert.
fn last(p: &Pipeline) -> Option<(String, u64, bool)> {
    let l = p.exposition().last_alert.as_deref()?;
    Some((l.worst.cgroup.clone(), l.worst.delay_ns, l.resolved_unix_ns.is_some()))
}

fn fired(t: &[Transition]) -> Vec<String> {
    t.iter()
        .map(|t| match t {
            Transition::Fired(Alert { key, .. }) => format!("+{}", key.cgroup),
            Transition::Updated(Alert { key, .. }) => format!("~{}", key.cgroup),
            Transition::Resolved(Alert { key, .. }) => format!("-{}", key.cgroup),
            Transition::Grown(Alert { key, .. }) => format!("^{}", key.cgroup),
        })
        .collect()
}

#[test]
fn the_last_alert_is_the_last_fired_grows_while_firing_and_is_marked_when_it_resolves() {
    let mut p = pipeline(alerting(1));
    let mut names = Table::with_paths(&[1, 2]);
    names.containers.insert("/c1".into(), pod("victim"));
    names.containers.insert("/hog".into(), pod("hog"));
    names.processes.insert(77, "/hog".into());
    let mut window_at = |p: &mut Pipeline, i: u64, incidents: Incidents| {
        drain(p, &mut names, snap(i * S, 0, &[]), Vec::new(), incidents).1
    };

    let t = window_at(&mut p, 1, vec![incident(1, 12 * MS, S - 1), incident(1, 20 * MS, S - 2)]);
    assert_eq!(fired(&t), ["+/c1"]);
    assert_eq!(last(&p), Some(("/c1".into(), 20 * MS, false)));
    let l = p.exposition().last_alert.clone().expect("fired");
    assert_eq!((l.fired_unix_ns, l.threshold_ns), (BOOT_UNIX_NS + S, 10 * MS));
    assert_eq!(l.worst.names, pod("victim"), "the victim's pod");
    assert_eq!((l.worst.culprits[0].cgroup.as_str(), &l.worst.culprits[0].names), ("/hog", &pod("hog")));
    let attributed: Vec<u64> = window(&p).report.attributed.iter().map(|a| a.delay_ns).collect();
    assert_eq!(attributed, [20 * MS, 12 * MS], "largest first");
    assert_eq!(p.exposition().alerts_active, [(Reason::Preempt, "/c1".to_string())]);
    // The alert's pod is labelled though /c1 has no series (no cgroup delays in these windows).
    assert_eq!(p.exposition().containers.get("/c1"), Some(&pod("victim")));

    // Worse while firing: no transition, the last alert's worst grows, its start stays.
    let t = window_at(&mut p, 2, vec![incident(1, 30 * MS, 2 * S - 1)]);
    assert!(t.is_empty());
    assert_eq!(last(&p), Some(("/c1".into(), 30 * MS, false)));
    assert_eq!(p.exposition().last_alert.as_ref().map(|l| l.fired_unix_ns), Some(BOOT_UNIX_NS + S));

    // Another fires: it is the last alert now.
    let t = window_at(&mut p, 3, vec![incident(1, 25 * MS, 3 * S - 1), incident(2, 40 * MS, 3 * S - 2)]);
    assert_eq!(fired(&t), ["+/c2"]);
    assert_eq!(last(&p), Some(("/c2".into(), 40 * MS, false)));

    // The first resolves: not the last alert, which is left alone.
    let t = window_at(&mut p, 4, vec![incident(2, 40 * MS, 4 * S - 1)]);
    assert_eq!(fired(&t), ["-/c1"]);
    assert_eq!(last(&p), Some(("/c2".into(), 40 * MS, false)));

    // The last resolves: marked, at that window's end.
    let t = window_at(&mut p, 5, Vec::new());
    assert_eq!(fired(&t), ["-/c2"]);
    assert_eq!(last(&p), Some(("/c2".into(), 40 * MS, true)));
    assert_eq!(p.exposition().last_alert.as_ref().and_then(|l| l.resolved_unix_ns), Some(BOOT_UNIX_NS + 5 * S));
    assert_eq!(p.exposition().alerts_total, [0, 2]);
    assert!(p.exposition().alerts_active.is_empty());
}

#[test]
fn attribution_off_reads_no_incidents_and_leaves_alerts_alone() {
    let mut p = pipeline(settings(1));
    let mut names = Table::with_paths(&[1]);
    names.processes.insert(77, "/hog".into());
    let closing = p.begin().expect("one drain a window");
    assert!(!closing.incidents, "no threshold: nothing to read");
    let closed = p.slot_read(&closing, Vec::new());
    let t = p.end(snap(S, 0, &[]), Some(closed), &mut names);
    assert!(t.is_empty());
    assert!(window(&p).report.attributed.is_empty());
    assert!(names.asked_processes.is_empty());
    assert_eq!(p.exposition().last_alert, None);

    // On: the close asks for them.
    p.apply(alerting(1));
    assert!(p.begin().is_some_and(|c| c.incidents));
}

/// Cgroup 1's task waiting `age_ns` so far, seen at `seen_ns`, as the wait scan attributes it.
fn wait(age_ns: u64, seen_ns: u64) -> crate::model::attribution::Attribution {
    let (reason, cpu, inc) = incident(1, age_ns, seen_ns);
    let wall = WallClock::new(0, BOOT_UNIX_NS);
    let mut a = crate::model::attribution::attribution(reason, cpu, &inc, wall, |_| Some("/c1".into()));
    a.waiting = true;
    a
}

#[test]
fn a_wait_in_progress_fires_grows_the_last_alert_and_its_final_delay_updates_it() {
    let mut p = pipeline(alerting(1));
    let mut names = Table::with_paths(&[1]);
    let rules = p.settings.rules.clone();
    // A drain's scan, as the wait path feeds the engine and the exposition.
    let scan = |p: &mut Pipeline, age_ns: u64, at_ns: u64| {
        let t = p.alerts.evaluate_waiting(&rules, &[wait(age_ns, at_ns)], BOOT_UNIX_NS + at_ns);
        p.apply_transitions(&t);
        t
    };
    let waiting = |p: &Pipeline| p.exposition().last_alert.as_ref().map(|l| l.worst.waiting);

    assert_eq!(fired(&scan(&mut p, 20 * MS, S)), ["+/c1"]);
    assert_eq!((last(&p), waiting(&p)), (Some(("/c1".into(), 20 * MS, false)), Some(true)));
    assert_eq!(p.exposition().alerts_active, [(Reason::Preempt, "/c1".to_string())]);
    // The window closes while the task still waits: nothing resolves.
    let (_, t) = drain(&mut p, &mut names, snap(S, 0, &[]), Vec::new(), Vec::new());
    assert!(t.is_empty());

    // Still waiting at the next drain: the last alert grows, with only the quiet Grown (for what
    // Alertmanager re-sends).
    assert_eq!(fired(&scan(&mut p, 30 * MS, 2 * S)), ["^/c1"]);
    assert_eq!((last(&p), waiting(&p)), (Some(("/c1".into(), 30 * MS, false)), Some(true)));

    // It ran after 35 ms: the window's final delay updates the alert, which is not fired again.
    let (_, t) = drain(&mut p, &mut names, snap(2 * S, 0, &[]), Vec::new(), vec![incident(1, 35 * MS, 2 * S - 1)]);
    assert_eq!(fired(&t), ["~/c1"]);
    assert_eq!((last(&p), waiting(&p)), (Some(("/c1".into(), 35 * MS, false)), Some(false)));
    assert_eq!(p.exposition().last_alert.as_ref().map(|l| l.fired_unix_ns), Some(BOOT_UNIX_NS + S));
    assert_eq!(p.exposition().alerts_total, [0, 1]);

    // No wait left, a clean window: resolved.
    assert!(scan_none(&mut p, 3 * S).is_empty());
    let (_, t) = drain(&mut p, &mut names, snap(3 * S, 0, &[]), Vec::new(), Vec::new());
    assert_eq!(fired(&t), ["-/c1"]);
    assert_eq!(last(&p), Some(("/c1".into(), 35 * MS, true)));
    assert!(p.exposition().alerts_active.is_empty());
}

/// A drain's scan that found no wait over any threshold.
fn scan_none(p: &mut Pipeline, at_ns: u64) -> Vec<Transition> {
    let rules = p.settings.rules.clone();
    let t = p.alerts.evaluate_waiting(&rules, &[], BOOT_UNIX_NS + at_ns);
    p.apply_transitions(&t);
    t
}

/// A wait scan: task 7 of cgroup 1 waiting on CPU 0 since `since_ns` (seen at `now_ns`), while
/// pid 77 holds that CPU; task 8 of cgroup 2 waiting 1 ms on CPU 1.
fn scan(since_ns: u64, now_ns: u64) -> crate::model::waits::Waits {
    use latency_common::maps::{SEEN_RUNNING, SEEN_WAITING_PREEMPT, SEEN_WAITING_WAKEUP, Seen};
    let seen = |kind, tid, tgid, cpu, cgroup, since_ns| Seen {
        now_ns,
        since_ns,
        cgroup,
        tid,
        tgid,
        cpu,
        kind,
        queue_depth: 1,
        comm: [b'v'; 16],
        ..Seen::ZERO
    };
    crate::model::waits::Waits::from_seen(&[
        seen(SEEN_WAITING_PREEMPT, 7, 7, 0, 1, since_ns),
        seen(SEEN_RUNNING, 78, 77, 0, 1, 0),
        seen(SEEN_WAITING_WAKEUP, 8, 8, 1, 2, now_ns - MS),
    ])
}

fn kinds(ts: &[Transition]) -> Vec<&'static str> {
    ts.iter()
        .map(|t| match t {
            Transition::Fired(a) if a.worst.waiting => "fired waiting",
            Transition::Fired(_) => "fired",
            Transition::Updated(_) => "updated",
            Transition::Resolved(_) => "resolved",
            Transition::Grown(_) => "grown",
        })
        .collect()
}

#[test]
fn a_stall_fires_while_it_lasts_and_the_final_delay_updates_the_alert() {
    let mut p = pipeline(alerting(3));
    let mut names = Table::with_paths(&[1, 2]);
    // Drain 1: the victim has waited 5 ms (under 10 ms): gauges move, nothing fires.
    drain(&mut p, &mut names, snap(S, 0, &[]), Vec::new(), Vec::new());
    let t = p.waits(&scan(S - 5 * MS, S), &[], BOOT_UNIX_NS + S, &mut names);
    assert!(t.is_empty());
    let w = p.exposition().waits.clone().expect("published");
    assert_eq!(w.oldest_ns, [MS, 5 * MS]);
    assert_eq!(w.over, vec![(0, 2), (10 * MS, 0)]);
    // Drain 2: 1.005 s: fires, before the window closes and before the task ran.
    drain(&mut p, &mut names, snap(2 * S, 0, &[]), Vec::new(), Vec::new());
    let t = p.waits(&scan(S - 5 * MS, 2 * S), &[], BOOT_UNIX_NS + 2 * S, &mut names);
    assert_eq!(kinds(&t), ["fired waiting"]);
    let Transition::Fired(a) = &t[0] else { unreachable!() };
    assert_eq!((a.worst.victim_tid, a.worst.cgroup.as_str(), a.worst.delay_ns), (7, "/c1", S + 5 * MS));
    assert_eq!(p.exposition().alerts_active, vec![(Reason::Preempt, "/c1".to_string())]);
    assert!(p.exposition().last_alert.as_ref().is_some_and(|l| l.worst.waiting));
    // Drain 3 closes the window: the task ran after 1.5 s; its final delay updates the alert.
    let (closing, t) =
        drain(&mut p, &mut names, snap(3 * S, 0, &[]), Vec::new(), vec![incident(1, 1_500 * MS, 2 * S + 495 * MS)]);
    assert!(closing.is_some());
    assert_eq!(kinds(&t), ["updated"]);
    let t = p.waits(&crate::model::waits::Waits::default(), &[], BOOT_UNIX_NS + 3 * S, &mut names);
    assert!(t.is_empty());
    let last = p.exposition().last_alert.clone().expect("the alert");
    assert_eq!((last.worst.delay_ns, last.worst.waiting), (1_500 * MS, false));
    assert_eq!(p.exposition().waits.as_ref().map(|w| w.oldest_ns), Some([0, 0]));
}

#[test]
fn without_attribution_a_wait_in_progress_never_fires() {
    let mut p = pipeline(Settings { attribute: false, ..alerting(3) });
    let mut names = Table::with_paths(&[1, 2]);
    drain(&mut p, &mut names, snap(S, 0, &[]), Vec::new(), Vec::new());
    assert!(p.waits(&scan(MS, 2 * S), &[], BOOT_UNIX_NS + S, &mut names).is_empty());
    assert_eq!(p.exposition().waits.as_ref().map(|w| w.oldest_ns[Reason::Preempt as usize]), Some(2 * S - MS));
}

#[test]
fn exported_cgroups_get_their_longest_wait_and_the_rest_go_to_other() {
    let mut p = pipeline(settings(1));
    let mut names = Table::with_paths(&[1, 2]);
    // One window: cgroup 1 is exported (top 5 of one), 2 never delayed and not.
    drain(&mut p, &mut names, snap(S, 0, &[(1, 3)]), Vec::new(), Vec::new());
    p.waits(&scan(S / 2, S), &[], BOOT_UNIX_NS + S, &mut names);
    let w = p.exposition().waits.clone().expect("published");
    let cgroups: Vec<(&str, u64)> = w.cgroups.iter().map(|(l, ns)| (l.as_str(), *ns)).collect();
    assert!(cgroups.contains(&("/c1", S / 2)), "{cgroups:?}");
    assert_eq!(w.longest.iter().map(|n| (n.wait.tid, n.cgroup.as_str())).collect::<Vec<_>>(), [(7, "/c1"), (8, "/c2")]);
    assert_eq!(w.longest[0].holder.as_ref().map(|h| h.pid), Some(77));
}

#[test]
fn the_final_delay_comes_from_the_ring_when_another_task_was_the_windows_worst() {
    use latency_common::maps::{Final, FinalRing};
    let mut p = pipeline(alerting(3));
    let mut names = Table::with_paths(&[1, 2]);
    drain(&mut p, &mut names, snap(S, 0, &[]), Vec::new(), Vec::new());
    assert!(!p.awaiting_final());
    let t = p.waits(&scan(S / 2, S), &[], BOOT_UNIX_NS + S, &mut names);
    assert_eq!(kinds(&t), ["fired waiting"]);
    assert!(p.awaiting_final());
    // Another task's delay on that CPU in the ring, and an older, shorter one of the victim's
    // (a wait before this one): neither is this wait's end.
    let mut ring = FinalRing::ZERO;
    ring.finals[0] = Final { tid: 7, reason: Reason::Preempt as u32, delay_ns: 20 * MS, end_ns: S / 4 };
    ring.finals[1] = Final { tid: 9, reason: Reason::Preempt as u32, delay_ns: 900 * MS, end_ns: S + MS };
    ring.head = 2;
    assert!(p.finals(&[ring]).is_empty());
    // The victim ran after 600 ms: the alert is updated with it, and no longer waits for one.
    ring.finals[2] = Final { tid: 7, reason: Reason::Preempt as u32, delay_ns: 600 * MS, end_ns: S + 100 * MS };
    ring.head = 3;
    let t = p.finals(&[FinalRing::ZERO, ring]);
    assert_eq!(kinds(&t), ["updated"]);
    let Transition::Updated(a) = &t[0] else { unreachable!() };
    assert_eq!(
        (a.worst.delay_ns, a.worst.waiting, a.worst.end_unix_ns),
        (600 * MS, false, BOOT_UNIX_NS + S + 100 * MS)
    );
    assert!(!p.awaiting_final());
    assert_eq!(
        p.exposition().last_alert.as_ref().map(|l| (l.worst.delay_ns, l.worst.waiting)),
        Some((600 * MS, false))
    );
}

#[test]
fn a_windows_causes_reach_its_report_its_cgroups_the_timeline_and_the_alert() {
    let mut p = pipeline(Settings { per_cgroup: true, ..alerting(1) });
    let mut names = Table::with_paths(&[1]);
    // 10 delays of 1 ms: 6 ms throttled, 1 ms IRQ or steal, 3 ms behind another cgroup; all /c1's.
    let split = [6 * MS, MS, 0, 3 * MS, 0, 0];
    let mut now = snap(S, 10, &[(1, 10)]);
    now.cpus[1].waited_ns = split;
    now.cpus[1].unsplit = 2;
    now.cgroups[0].1.waited_ns = split;
    let mut inc = incident(1, 20 * MS, S - 1);
    (inc.2.throttled_ns, inc.2.stolen_ns) = (15 * MS, 2 * MS);
    let t = drain(&mut p, &mut names, now, Vec::new(), vec![inc]).1;
    let w = window(&p);
    assert_eq!((w.report.waited_by_cause_ns.0, w.report.unsplit), (split, 2));
    assert_eq!(w.report.waited_by_cause_ns.total(), w.report.histograms.wakeup.sum_ns, "the causes add up");
    assert_eq!(w.report.cgroups[0].waited_by_cause_ns.0, split);
    let last = p.exposition().timeline.last().expect("a summary");
    assert_eq!((last.causes.0, last.top_cgroups[0].causes.0), (split, split));
    let Some(Transition::Fired(a)) = t.first() else { panic!("nothing fired: {t:?}") };
    assert_eq!((a.worst.throttled_ns, a.worst.irq_steal_ns, a.worst.held_ns()), (15 * MS, 2 * MS, 3 * MS));
    let worst = &p.exposition().last_alert.as_ref().expect("the last alert").worst;
    assert_eq!(worst.throttled_ns, 15 * MS, "the live view's last alert carries the split");
}

/// A window's maximum on `cpu`: `delay_ns` ending at `end_ns`, of tid `tid` in process `pid`.
fn worst_on(
    reason: Reason,
    cpu: u32,
    epoch: u64,
    delay_ns: u64,
    end_ns: u64,
    (tid, pid): (u32, u32),
    comm: &str,
) -> (Reason, u32, WindowMax) {
    let mut m = WindowMax {
        epoch,
        delay_ns,
        end_ns,
        victim_tid: tid,
        victim_tgid: pid,
        reason: reason as u32,
        ..WindowMax::ZERO
    };
    m.victim_comm[..comm.len()].copy_from_slice(comm.as_bytes());
    (reason, cpu, m)
}

#[test]
fn each_reason_s_exemplar_is_its_largest_maximum_with_the_victim_s_pod() {
    let mut p = pipeline(settings(1));
    let mut names = Table::default();
    names.processes.insert(12, "/pod".into());
    names.containers.insert("/pod".into(), pod("web-0"));
    // Window 0: two CPUs' wakeup maxima and a smaller preempt one; the largest wakeup's process is a pod's.
    let slot = vec![
        worst_on(Reason::Wakeup, 0, 0, 3 * MS, S / 2, (10, 10), "small"),
        worst_on(Reason::Wakeup, 1, 0, 9 * MS, S / 4, (11, 12), "big"),
        worst_on(Reason::Preempt, 1, 0, 2 * MS, S / 3, (13, 13), "pre"),
    ];
    drain(&mut p, &mut names, snap(S, 3, &[]), slot, Vec::new());
    let [wakeup, preempt] = p.exposition().exemplars.clone();
    assert_eq!(
        wakeup,
        Some(DelayExemplar {
            delay_ns: 9 * MS,
            unix_ns: BOOT_UNIX_NS + S / 4,
            tid: 11,
            comm: "big".into(),
            pod: "web-0".into()
        })
    );
    assert_eq!(
        preempt,
        Some(DelayExemplar {
            delay_ns: 2 * MS,
            unix_ns: BOOT_UNIX_NS + S / 3,
            tid: 13,
            comm: "pre".into(),
            pod: String::new()
        })
    );
    // One lookup per reason, of the victim's process (13's is not known: no pod).
    assert_eq!(names.asked_processes, [12, 13]);

    // Window 1: only preempt waits, of a process gone by the close: no wakeup exemplar, no pod.
    names.processes.clear();
    drain(
        &mut p,
        &mut names,
        snap(2 * S, 3, &[]),
        vec![worst_on(Reason::Preempt, 0, 1, 5 * MS, S + 1, (12, 12), "big")],
        Vec::new(),
    );
    let [wakeup, preempt] = p.exposition().exemplars.clone();
    assert_eq!(wakeup, None);
    assert_eq!(preempt.map(|e| (e.delay_ns, e.pod)), Some((5 * MS, String::new())));

    // Between closes the exemplars stay; an empty window clears them.
    p.begin();
    let before = p.exposition().exemplars.clone();
    p.end(snap(2 * S + 1, 3, &[]), None, &mut names);
    assert_eq!(p.exposition().exemplars, before);
    drain(&mut p, &mut names, snap(3 * S, 3, &[]), Vec::new(), Vec::new());
    assert_eq!(p.exposition().exemplars, [None, None]);
}

#[test]
fn a_finished_wait_over_its_threshold_is_handed_to_the_capture_trigger_at_the_drain_that_first_sees_it() {
    let mut p = pipeline(alerting(3));
    let mut names = Table::with_paths(&[1]);
    names.containers.insert("/c1".into(), pod("web"));
    let epoch = p.open_epoch();
    let at = |p: &mut Pipeline, names: &mut Table, incidents: &Incidents| -> Vec<(u32, u64)> {
        let e = p.open_epoch();
        p.finished(e, incidents, BOOT_UNIX_NS + S, names).iter().map(|a| (a.victim_tid, a.delay_ns)).collect()
    };
    // Under the threshold: nothing; over it: once, at the first drain that sees it, named.
    assert!(at(&mut p, &mut names, &vec![incident(1, 9 * MS, S)]).is_empty());
    let over = vec![incident(1, 20 * MS, S + MS)];
    let first = p.finished(epoch, &over, BOOT_UNIX_NS + S, &mut names);
    assert_eq!(
        first.iter().map(|a| (a.delay_ns, a.cgroup.as_str(), a.names.pod.as_str())).collect::<Vec<_>>(),
        [(20 * MS, "/c1", "web")]
    );
    assert!(at(&mut p, &mut names, &over).is_empty(), "seen at the last drain");
    assert!(p.finished(epoch + 1, &vec![incident(1, 30 * MS, S + 2 * MS)], BOOT_UNIX_NS + S, &mut names).is_empty());
    // The window closes on it: its alert fires, and a longer wait of the same alert no longer
    // needs a capture of its own.
    drain(&mut p, &mut names, snap(S, 0, &[]), Vec::new(), Vec::new());
    drain(&mut p, &mut names, snap(2 * S, 0, &[]), Vec::new(), Vec::new());
    let (_, t) = drain(&mut p, &mut names, snap(3 * S, 0, &[]), Vec::new(), over.clone());
    assert_eq!(kinds(&t), ["fired"]);
    assert!(at(&mut p, &mut names, &vec![incident(1, 40 * MS, 3 * S + MS)]).is_empty(), "its alert fires");
    // Another cgroup's wait in the new window may fire its own.
    names.paths.insert(2, "/c2".into());
    assert_eq!(at(&mut p, &mut names, &vec![incident(2, 40 * MS, 3 * S + 2 * MS)]), [(7, 40 * MS)]);
}
