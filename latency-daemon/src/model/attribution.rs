//! A kernel `Incident` (plus the CPU it happened on, a way to name cgroups and the wall clock)
//! → an `Attribution`: who waited, where, when, for how long, how deep the queue was, and who
//! ran meanwhile and for how long (each run clipped to the wait).
use latency_common::{
    Reason,
    maps::{DEPTH_UNKNOWN, Incident},
};
use serde::Serialize;

use super::{comm_string, ser_reason, wall::WallClock};

/// One thing that ran on the victim's CPU while it waited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Culprit {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    /// How long it ran during the victim's wait (its run, clipped to the wait).
    pub ran_ns: u64,
}

/// Who waited, where, when, and who ran instead: what the kernel kept for one delay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Attribution {
    #[serde(serialize_with = "ser_reason")]
    pub reason: Reason,
    pub delay_ns: u64,
    pub cpu: u32,
    pub victim_tid: u32,
    pub victim_pid: u32,
    pub victim_comm: String,
    pub victim_prio: i32,
    pub cgroup: String,
    /// When the victim got the CPU: monotonic ns (the kernel's clock) and Unix ns.
    pub end_ns: u64,
    pub end_unix_ns: u64,
    /// Tasks runnable on the CPU besides the victim when it was enqueued; None: unknown.
    pub queue_depth: Option<u32>,
    /// Most recent first.
    pub culprits: Vec<Culprit>,
    /// More tasks ran during the wait than the kernel keeps.
    pub culprits_truncated: bool,
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
            Culprit { tid: run.tid, pid: run.tgid, comm: comm_string(&run.comm), ran_ns: end.saturating_sub(start) }
        })
        .collect();
    Attribution {
        reason,
        delay_ns: inc.delay_ns,
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
        end_ns: inc.end_ns,
        end_unix_ns: wall.unix_ns(inc.end_ns),
        queue_depth: (inc.queue_depth != DEPTH_UNKNOWN).then_some(inc.queue_depth),
        culprits,
        culprits_truncated: inc.truncated != 0,
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
}
