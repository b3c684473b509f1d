//! A kernel `Incident` (plus the CPU it happened on, a way to name cgroups and the wall clock)
//! → an `Attribution`: who waited, where, when, for how long, how deep the queue was, and who
//! ran meanwhile and for how long (each run clipped to the wait). The names of the containers and
//! pods involved are the host's to find (`host::containers`, `host::process_cgroups`) and are
//! filled in by `name` afterwards; until then they are empty.
use latency_common::{
    Reason,
    maps::{DEPTH_UNKNOWN, Incident},
};
use serde::Serialize;

use super::{comm_string, container::ContainerLabels, ser_reason, wall::WallClock};

/// A culprit's cgroup when its process was gone before the daemon could read it.
pub const UNKNOWN_CGROUP: &str = "unknown";

/// One thing that ran on the victim's CPU while it waited.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Culprit {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    /// How long it ran during the victim's wait (its run, clipped to the wait).
    pub ran_ns: u64,
    /// Its process's cgroup v2 path, read when the window closed ("unknown": the process was gone
    /// by then); empty where nobody looked (`record`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cgroup: String,
    /// Namespace, pod and container of that cgroup, where it is a container's.
    #[serde(flatten)]
    pub names: ContainerLabels,
}

/// Who waited, where, when, and who ran instead: what the kernel kept for one delay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Attribution {
    #[serde(serialize_with = "ser_reason")]
    pub reason: Reason,
    pub delay_ns: u64,
    /// The part of `delay_ns` the victim's cgroup (or a parent) was throttled by its CPU limit on
    /// that CPU, and the part its CPU spent in IRQ or steal; the rest it waited behind who ran
    /// ([`Attribution::held_ns`]). 0 where the kernel could not split it (a task that migrated
    /// while it waited, the split off on this kernel, a wait in progress).
    pub throttled_ns: u64,
    pub irq_steal_ns: u64,
    /// Where the kernel keeps no throttle clock (`throttle_unknown`): the whole delay if a
    /// CPU-limit throttle overlapped it (then `throttled_ns` is 0), how much of it throttled not
    /// known. Left out of JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub unknown_ns: u64,
    pub cpu: u32,
    pub victim_tid: u32,
    pub victim_pid: u32,
    pub victim_comm: String,
    pub victim_prio: i32,
    pub cgroup: String,
    /// Namespace, pod and container of the victim's cgroup, where it is a container's.
    #[serde(flatten)]
    pub names: ContainerLabels,
    /// When the victim got the CPU: monotonic ns (the kernel's clock) and Unix ns.
    pub end_ns: u64,
    pub end_unix_ns: u64,
    /// Tasks runnable on the CPU besides the victim when it was enqueued; None: unknown.
    pub queue_depth: Option<u32>,
    /// Most recent first.
    pub culprits: Vec<Culprit>,
    /// More tasks ran during the wait than the kernel keeps.
    pub culprits_truncated: bool,
    /// The victim had still not run when this was seen (a wait in progress): `delay_ns` is its
    /// wait so far, `end_ns`/`end_unix_ns` when it was seen. Left out of JSON when false, so a
    /// finished delay serializes as it always did.
    #[serde(skip_serializing_if = "is_false")]
    pub waiting: bool,
}

impl Attribution {
    /// The part of the delay spent behind the tasks that ran (neither throttled nor IRQ or steal).
    pub fn held_ns(&self) -> u64 {
        self.delay_ns
            .saturating_sub(self.throttled_ns)
            .saturating_sub(self.irq_steal_ns)
            .saturating_sub(self.unknown_ns)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

pub fn attribution(
    reason: Reason,
    cpu: u32,
    inc: &Incident,
    wall: WallClock,
    mut cgroup_name: impl FnMut(u64) -> Option<String>,
) -> Attribution {
    let waited_from = inc.end_ns.saturating_sub(inc.delay_ns);
    let kept = (inc.culprits as usize).min(inc.runs.len());
    let culprits = inc.runs[..kept]
        .iter()
        .map(|run| {
            // A run the ring saw start before we attached has start 0: count from the wait.
            let start = run.start_ns.max(waited_from);
            let end = run.end_ns.min(inc.end_ns);
            Culprit {
                tid: run.tid,
                pid: run.tgid,
                comm: comm_string(&run.comm),
                ran_ns: end.saturating_sub(start),
                ..Culprit::default()
            }
        })
        .collect();
    // The kernel clamps both into the delay; clamp again so a bad record cannot overflow it. Where
    // the throttled slot holds waits a throttle overlapped (see `causes`), its part is unknown.
    let throttled = inc.throttled_ns.min(inc.delay_ns);
    let unknown = crate::model::causes::throttled_is_unknown();
    Attribution {
        reason,
        delay_ns: inc.delay_ns,
        throttled_ns: if unknown { 0 } else { throttled },
        irq_steal_ns: inc.stolen_ns.min(inc.delay_ns.saturating_sub(throttled)),
        unknown_ns: if unknown { throttled } else { 0 },
        cpu,
        victim_tid: inc.victim_tid,
        victim_pid: inc.victim_tgid,
        victim_comm: comm_string(&inc.victim_comm),
        victim_prio: inc.victim_prio,
        cgroup: if inc.cgroup == 0 {
            "unknown".to_string()
        } else {
            cgroup_name(inc.cgroup).unwrap_or_else(|| format!("id:{}", inc.cgroup))
        },
        names: ContainerLabels::default(),
        end_ns: inc.end_ns,
        end_unix_ns: wall.unix_ns(inc.end_ns),
        queue_depth: (inc.queue_depth != DEPTH_UNKNOWN).then_some(inc.queue_depth),
        culprits,
        culprits_truncated: inc.truncated != 0,
        waiting: false,
    }
}

/// Names the containers involved: the victim's (from its cgroup path, by the caller), each
/// culprit's from its process (`culprit` gives a process id's cgroup path and names; None: the
/// process is gone, and its cgroup is "unknown"). The idle task (pid 0) belongs to no process and
/// is left unnamed.
pub fn name(
    a: &mut Attribution,
    victim: ContainerLabels,
    mut culprit: impl FnMut(u32) -> Option<(String, ContainerLabels)>,
) {
    a.names = victim;
    for c in &mut a.culprits {
        if c.pid == 0 {
            continue;
        }
        (c.cgroup, c.names) = culprit(c.pid).unwrap_or_else(|| (UNKNOWN_CGROUP.to_owned(), ContainerLabels::default()));
    }
}

#[cfg(test)]
mod tests {
    use latency_common::maps::{RUNS_KEPT, Run};

    use super::*;

    fn comm(s: &str) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..s.len()].copy_from_slice(s.as_bytes());
        c
    }

    #[test]
    fn runs_are_clipped_to_the_wait_and_named() {
        let mut inc = Incident::ZERO;
        inc.delay_ns = 10_000;
        inc.end_ns = 100_000;
        inc.cgroup = 42;
        inc.victim_tid = 7;
        inc.victim_comm = comm("victim");
        inc.queue_depth = 3;
        inc.culprits = 2;
        // Most recent first: the hog ran to the end; before it, a kworker that began before
        // the wait (counts from 90 000).
        inc.runs[0] = Run { tid: 99, tgid: 99, start_ns: 95_000, end_ns: 100_000, comm: comm("hog") };
        inc.runs[1] = Run { tid: 5, tgid: 5, start_ns: 80_000, end_ns: 95_000, comm: comm("kworker/1:0") };
        let a = attribution(Reason::Preempt, 1, &inc, WallClock::new(0, 1_000), |id| {
            (id == 42).then(|| "/web".to_string())
        });
        assert_eq!(a.cgroup, "/web");
        assert_eq!(a.queue_depth, Some(3));
        assert_eq!(a.culprits.len(), 2);
        assert_eq!((a.culprits[0].comm.as_str(), a.culprits[0].ran_ns), ("hog", 5_000));
        assert_eq!((a.culprits[1].comm.as_str(), a.culprits[1].ran_ns), ("kworker/1:0", 5_000));
        assert_eq!(a.end_unix_ns, 101_000);
        assert!(!a.culprits_truncated);
        assert_eq!((a.throttled_ns, a.irq_steal_ns, a.held_ns()), (0, 0, 10_000), "not split: all behind who ran");
    }

    #[test]
    fn the_split_of_the_delay_is_carried_and_bounded_by_it() {
        let mut inc = Incident::ZERO;
        inc.delay_ns = 120_000_000;
        inc.throttled_ns = 95_000_000;
        inc.stolen_ns = 5_000_000;
        let a = attribution(Reason::Wakeup, 0, &inc, WallClock::new(0, 0), |_| None);
        assert_eq!((a.throttled_ns, a.irq_steal_ns, a.held_ns()), (95_000_000, 5_000_000, 20_000_000));
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!((&json["throttled_ns"], &json["irq_steal_ns"]), (&95_000_000u64.into(), &5_000_000u64.into()));
        // A record whose parts exceed the delay is cut to it.
        inc.stolen_ns = 50_000_000;
        let a = attribution(Reason::Wakeup, 0, &inc, WallClock::new(0, 0), |_| None);
        assert_eq!((a.throttled_ns, a.irq_steal_ns, a.held_ns()), (95_000_000, 25_000_000, 0));
    }

    #[test]
    fn where_the_kernel_keeps_no_throttle_clock_the_part_is_unknown_in_json() {
        let mut inc = Incident::ZERO;
        inc.delay_ns = 120_000_000;
        inc.throttled_ns = 120_000_000;
        // `throttle_unknown`: the slot holds the whole wait a throttle overlapped.
        crate::model::causes::set_throttled_unknown(true);
        let a = attribution(Reason::Preempt, 0, &inc, WallClock::new(0, 0), |_| None);
        crate::model::causes::set_throttled_unknown(false);
        assert_eq!((a.throttled_ns, a.unknown_ns, a.held_ns()), (0, 120_000_000, 0));
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!((&json["throttled_ns"], &json["unknown_ns"]), (&0u64.into(), &120_000_000u64.into()));
        // With the clock the same record is throttled, and JSON has no unknown part.
        let a = attribution(Reason::Preempt, 0, &inc, WallClock::new(0, 0), |_| None);
        assert_eq!((a.throttled_ns, a.unknown_ns), (120_000_000, 0));
        assert!(serde_json::to_value(&a).unwrap().get("unknown_ns").is_none());
    }

    #[test]
    fn naming_fills_the_victims_and_the_culprits_pods() {
        let mut inc = Incident::ZERO;
        inc.delay_ns = 10;
        inc.end_ns = 20;
        inc.culprits = 3;
        inc.runs[0] = Run { tid: 11, tgid: 10, start_ns: 10, end_ns: 20, comm: comm("hog") };
        inc.runs[1] = Run { tid: 0, tgid: 0, start_ns: 5, end_ns: 10, comm: comm("swapper/0") };
        inc.runs[2] = Run { tid: 31, tgid: 30, start_ns: 1, end_ns: 5, comm: comm("gone") };
        let mut a = attribution(Reason::Preempt, 0, &inc, WallClock::new(0, 0), |_| Some("/pod-v".into()));
        let pod = |ns: &str, pod: &str| ContainerLabels {
            namespace: ns.into(),
            pod: pod.into(),
            container: "c".into(),
            container_id: String::new(),
        };
        let mut asked = Vec::new();
        name(&mut a, pod("ns", "victim"), |pid| {
            asked.push(pid);
            (pid == 10).then(|| ("/pod-h".to_string(), pod("ns", "hog")))
        });
        assert_eq!(asked, [10, 30], "the idle task is nobody's process");
        assert_eq!(a.names.pod_name().as_deref(), Some("ns/victim"));
        assert_eq!((a.culprits[0].cgroup.as_str(), a.culprits[0].names.pod.as_str()), ("/pod-h", "hog"));
        assert_eq!(a.culprits[1].cgroup, "");
        assert_eq!((a.culprits[2].cgroup.as_str(), a.culprits[2].names.is_empty()), (UNKNOWN_CGROUP, true));
        // In JSON the names sit beside the fields they describe; empty ones are left out.
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["pod"], "victim");
        assert_eq!(json["culprits"][0]["namespace"], "ns");
        assert_eq!(json["culprits"][0]["cgroup"], "/pod-h");
        assert!(json["culprits"][1].get("cgroup").is_none() && json["culprits"][1].get("pod").is_none());
        assert!(json.get("container_id").is_none());
    }

    #[test]
    fn unknown_depth_cgroup_and_a_full_ring() {
        let mut inc = Incident::ZERO;
        inc.delay_ns = 1;
        inc.end_ns = 2;
        inc.queue_depth = DEPTH_UNKNOWN;
        inc.culprits = 99;
        inc.truncated = 1;
        let a = attribution(Reason::Wakeup, 0, &inc, WallClock::new(0, 0), |_| None);
        assert_eq!(a.queue_depth, None);
        assert_eq!(a.cgroup, "unknown");
        assert_eq!(a.culprits.len(), RUNS_KEPT, "never more than the kernel keeps");
        assert!(a.culprits_truncated);
    }

    #[test]
    fn waiting_is_in_json_only_when_true() {
        let mut a = attribution(Reason::Wakeup, 0, &Incident::ZERO, WallClock::new(0, 0), |_| None);
        assert!(!a.waiting, "a delay the kernel kept has ended");
        assert!(serde_json::to_value(&a).unwrap().get("waiting").is_none(), "finished delays serialize as before");
        a.waiting = true;
        assert_eq!(serde_json::to_value(&a).unwrap()["waiting"], true);
    }
}
