//! `Report::between` on synthetic snapshots: JSON field names, window deltas, hostile names.
use latency_common::{WindowMax, buckets::bucket_of};

use super::*;

fn snapshot(taken_ns: u64) -> Snapshot {
    Snapshot {
        taken_ns,
        cpus: vec![CpuStats::default(); 2],
        histograms: [Histogram::ZERO; Reason::COUNT],
        tasks: Vec::new(),
        cgroups: Vec::new(),
        irq_ns: None,
        steal_ns: None,
    }
}

fn comm(s: &str) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[..s.len()].copy_from_slice(s.as_bytes());
    c
}

fn sample() -> (Snapshot, Snapshot, Vec<(Reason, CpuMax)>, Meta) {
    let earlier = snapshot(1_000_000_000);
    let mut later = snapshot(3_000_000_000);
    for d in [2_000u64, 3_000, 5_000_000] {
        later.histograms[Reason::Preempt as usize].buckets[bucket_of(d)] += 1;
        later.histograms[Reason::Preempt as usize].sum_ns += d;
    }
    // The 5 ms delay on cpu 1: 3 ms throttled, 1 ms stolen, 1 ms behind another cgroup; the two
    // short ones on cpu 0, behind a kernel thread and idle.
    later.cpus[1] = CpuStats {
        switches: 10,
        voluntary: 4,
        involuntary: 5,
        idle_ns: 500_000_000,
        idle_since_ns: 2_500_000_000,
        waited_ns: [3_000_000, 1_000_000, 0, 1_000_000, 0, 0],
        unsplit: 1,
        ..Default::default()
    };
    later.cpus[0].waited_ns = [0, 0, 0, 0, 2_000, 3_000];
    later.cpus[0].lost[Lost::Tasks as usize] = 3;
    let mut t = TaskStats::ZERO;
    t.tgid = 42;
    t.prio = 120;
    t.comm = comm("bad\"name\n");
    t.runtime_ns = 7;
    t.last_in_ns = 2_999_999_000;
    t.voluntary = 1;
    t.involuntary = 2;
    t.delays = [0, 3];
    t.delay_sum_ns = 5_005_000;
    t.waited_ns = [3_000_000, 1_000_000, 5_000, 1_000_000, 0, 0];
    t.delay_max_ns = 5_000_000;
    t.delay_max_at_ns = 2_000_000_000;
    t.delay_max_reason = Reason::Preempt as u32;
    later.tasks.push((43, t));
    let mut max = WindowMax::ZERO;
    max.delay_ns = 5_000_000;
    max.end_ns = 2_000_000_000;
    max.victim_tid = 43;
    max.victim_tgid = 42;
    max.victim_comm = comm("victim");
    max.prev_tid = 7;
    max.prev_comm = comm("hog");
    max.reason = Reason::Preempt as u32;
    let maxima = vec![(Reason::Preempt, CpuMax { cpu: 1, max })];
    let meta = Meta {
        kernel: "6.18-test".into(),
        wall: WallClock::new(1_000_000_000, 1_700_000_000_000_000_000),
        filter: vec![42],
        clock: Clock::Monotonic,
    };
    (earlier, later, maxima, meta)
}

#[test]
fn json_has_the_documented_fields() {
    let (earlier, later, maxima, meta) = sample();
    let report = Report::between(&earlier, &later, &maxima, &meta);
    let v: serde_json::Value = serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
    let task = &v["tasks"][0];
    for field in [
        "tid",
        "pid",
        "comm",
        "prio",
        "runtime_ns",
        "switches",
        "voluntary",
        "involuntary",
        "delay_count",
        "delay_sum_ns",
        "delay_max_ns",
        "delay_max_at_ns",
    ] {
        assert!(!task[field].is_null(), "tasks[].{field} missing: {task}");
    }
    assert_eq!(task["comm"], "bad\"name\n");
    assert_eq!(task["switches"], 3);
    assert_eq!(task["delay_count"], 3);
    // Still running at the snapshot: 7 ns closed + 1000 ns open.
    assert_eq!(task["runtime_ns"], 1_007);
    let preempt = &v["histograms"]["preempt"];
    assert_eq!(preempt["count"], 3);
    assert_eq!(preempt["sum_ns"], 5_005_000);
    assert_eq!(preempt["max_ns"], 5_000_000);
    let buckets = preempt["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 3, "empty buckets are left out");
    assert_eq!(buckets.iter().map(|b| b["count"].as_u64().unwrap()).sum::<u64>(), 3);
    // 2 µs lies in (2^(-152/8), 2^(-151/8)] s.
    let le = buckets[0]["le_seconds"].as_f64().unwrap();
    assert!((2e-6..2e-6 * 1.0905).contains(&le), "{le}");
    assert_eq!(v["histograms"]["wakeup"]["count"], 0);
    let cpu1 = &v["cpus"][1];
    assert_eq!(cpu1["cpu"], 1);
    assert_eq!(cpu1["voluntary"], 4);
    // 0.5 s closed + 0.5 s still idle at the snapshot.
    assert_eq!(cpu1["idle_ns"], 1_000_000_000);
    assert_eq!(v["lost"]["tasks"], 3);
    assert_eq!(v["discarded"]["over_ceiling"], 0);
    assert_eq!(v["window_max"][0]["prev"]["comm"], "hog");
    assert_eq!(v["window_max"][0]["end_unix_ns"], 1_700_000_001_000_000_000u64);
    assert_eq!(v["duration_ns"], 2_000_000_000);
}

/// The sum of every cause in a `waited_by_cause_ns` object, which must hold all six.
fn causes_sum(v: &serde_json::Value) -> u64 {
    let names: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(names.len(), 6, "{v}");
    for cause in latency_common::maps::Cause::ALL {
        assert!(v[cause.name()].is_u64(), "{} missing: {v}", cause.name());
    }
    v.as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum()
}

#[test]
fn causes_are_in_json_and_add_up_to_the_delays_beside_them() {
    let (earlier, later, maxima, meta) = sample();
    let report = Report::between(&earlier, &later, &maxima, &meta);
    let v = serde_json::to_value(&report).unwrap();
    let machine = &v["waited_by_cause_ns"];
    let delays =
        v["histograms"]["wakeup"]["sum_ns"].as_u64().unwrap() + v["histograms"]["preempt"]["sum_ns"].as_u64().unwrap();
    assert_eq!(causes_sum(machine), delays);
    assert_eq!((machine["throttled"].as_u64(), machine["irq_steal"].as_u64()), (Some(3_000_000), Some(1_000_000)));
    assert_eq!(v["unsplit"], 1);
    let task = &v["tasks"][0];
    assert_eq!(causes_sum(&task["waited_by_cause_ns"]), task["delay_sum_ns"].as_u64().unwrap());
    assert_eq!(task["waited_by_cause_ns"]["same"], 5_000);
    assert_eq!(causes_sum(&v["cpus"][1]["waited_by_cause_ns"]), 5_000_000);
    // Nothing new between a snapshot and itself.
    let none = Report::between(&later, &later, &[], &meta);
    assert_eq!((none.waited_by_cause_ns.total(), none.unsplit, none.tasks[0].waited_by_cause_ns.total()), (0, 0, 0));
}

#[test]
fn where_the_kernel_keeps_no_throttle_clock_the_json_names_the_part_unknown() {
    // What /api/v1/snapshot serves (and `record --json` prints) under `throttle_unknown`.
    crate::model::causes::set_throttled_unknown(true);
    let (earlier, later, maxima, meta) = sample();
    let v = serde_json::to_value(Report::between(&earlier, &later, &maxima, &meta)).unwrap();
    crate::model::causes::set_throttled_unknown(false);
    for causes in [&v["waited_by_cause_ns"], &v["tasks"][0]["waited_by_cause_ns"], &v["cpus"][1]["waited_by_cause_ns"]]
    {
        assert_eq!(causes["unknown"], 3_000_000, "{causes}");
        assert!(causes.get("throttled").is_none(), "both names: {causes}");
        assert_eq!(causes.as_object().unwrap().len(), 6, "{causes}");
    }
}

#[test]
fn a_window_holds_only_what_changed_in_it() {
    let (earlier, later, maxima, meta) = sample();
    // The same state twice: nothing happened in between.
    let r = Report::between(&later, &later, &[], &meta);
    assert_eq!(r.histograms.preempt.count, 0);
    assert_eq!(r.tasks[0].delay_count, 0);
    assert_eq!(r.tasks[0].delay_max_ns, 0, "a lifetime max from before the window is not this window's");
    assert_eq!(r.cpus[1].switches, 0);
    assert_eq!(r.lost["tasks"], 0);
    let full = Report::between(&earlier, &later, &maxima, &meta);
    assert_eq!(full.tasks[0].delay_max_ns, 5_000_000);
}

#[test]
fn invalid_utf8_names_survive() {
    let mut c = [0u8; 16];
    c[..4].copy_from_slice(&[0xff, b'a', 0xfe, b'\\']);
    let s = comm_string(&c);
    assert_eq!(s, "\u{fffd}a\u{fffd}\\");
    assert!(serde_json::from_str::<String>(&serde_json::to_string(&s).unwrap()).is_ok());
}

#[test]
fn cgroups_are_named_and_sorted_by_time_waited() {
    let hist = |count: u64, sum_ns: u64| {
        let mut h = CgroupHist::ZERO;
        h.buckets[2] = count;
        h.sum_ns = sum_ns;
        h
    };
    let mut deltas = [(1, hist(2, 10)), (2, hist(1, 500)), (3, hist(4, 40))];
    deltas[1].1.waited_ns = [400, 0, 0, 100, 0, 0];
    let pod =
        ContainerLabels { namespace: "ns".into(), pod: "p".into(), container: "c".into(), container_id: "x".into() };
    let reports = cgroup_reports(
        &deltas,
        |id| (id != 3).then(|| format!("/cg{id}")),
        |path| if path == "/cg2" { pod.clone() } else { ContainerLabels::default() },
    );
    let order: Vec<&str> = reports.iter().map(|r| r.cgroup.as_str()).collect();
    assert_eq!(order, ["/cg2", "id:3", "/cg1"]);
    assert_eq!((reports[0].count, reports[0].sum_ns), (1, 500));
    let v = serde_json::to_value(&reports).unwrap();
    assert_eq!(
        v[0],
        serde_json::json!({"cgroup": "/cg2", "namespace": "ns", "pod": "p", "container": "c",
                                        "container_id": "x", "count": 1, "sum_ns": 500,
                                        "waited_by_cause_ns": {"throttled": 400, "irq_steal": 0, "same": 0,
                                                               "other": 100, "kernel": 0, "idle": 0}})
    );
    assert_eq!(v[2]["cgroup"], "/cg1");
    assert!(v[2].get("pod").is_none() && v[2].get("namespace").is_none(), "no names: none shown");
}
