//! One wait scan's records (`Seen`, written by the kernel's task iterator) in; the waits in
//! progress out: who waits on which CPU since when and why, who holds each CPU, the oldest wait
//! per reason, per CPU and per cgroup, how many wait longer than a threshold, and a wait as an
//! `Attribution` (the same shape alerts carry for a finished delay, marked as still waiting).
use latency_common::{
    Reason,
    maps::{DEPTH_UNKNOWN, Incident, RUNS_KEPT, Run, RunRing, SEEN_RUNNING, Seen},
};
use serde::Serialize;

use super::{
    attribution::{Attribution, attribution},
    comm_string,
    container::ContainerLabels,
    ser_reason,
    wall::WallClock,
};

/// How many of the longest waits the snapshot and the live view list by name.
pub const LISTED: usize = 16;

/// What a scrape, the snapshot and the live view show of the last wait scan.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WaitsNow {
    /// The longest wait in progress per reason (index = `Reason as usize`), ns; 0: none.
    pub oldest_ns: [u64; Reason::COUNT],
    /// (threshold ns, tasks waiting longer than it): 0 first (every task waiting), then each alert
    /// threshold in force.
    pub over: Vec<(u64, usize)>,
    /// Per exported cgroup series (its label, "other" for the rest): its longest wait in progress, ns.
    pub cgroups: Vec<(String, u64)>,
    /// Per CPU with a wait in progress: (cpu, its longest wait ns, that task's tid).
    pub per_cpu: Vec<(u32, u64, u32)>,
    /// The longest waits, named, longest first (at most [`LISTED`]).
    pub longest: Vec<NamedWait>,
    /// Scans run, scans that failed, and the time spent in them (wall seconds), since start.
    pub scans: u64,
    pub scan_errors: u64,
    pub scan_seconds: f64,
}

/// A wait in progress with its cgroup, containers, and who holds its CPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NamedWait {
    #[serde(flatten)]
    pub wait: Wait,
    pub cgroup: String,
    #[serde(flatten)]
    pub names: ContainerLabels,
    /// The task on its CPU when the scan ran (None: idle, or switching).
    pub holder: Option<Running>,
}

/// A task that has waited in a run queue since `since_ns` and had not run when the scan saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Wait {
    #[serde(serialize_with = "ser_reason")]
    pub reason: Reason,
    pub cpu: u32,
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub prio: i32,
    /// cgroup v2 id (0: not read, per-cgroup histograms off).
    #[serde(skip)]
    pub cgroup_id: u64,
    /// When it began waiting and when the scan saw it (the program's clock).
    pub since_ns: u64,
    pub seen_ns: u64,
    /// How long it had waited when seen: exact to the stamp.
    pub waited_ns: u64,
    /// Tasks runnable on its CPU besides it when it was enqueued; None: unknown.
    pub queue_depth: Option<u32>,
}

/// A task on a CPU when the scan saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Running {
    pub cpu: u32,
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
}

/// One wait scan: the waits in progress (longest first) and who ran on each CPU.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Waits {
    pub waiting: Vec<Wait>,
    pub running: Vec<Running>,
}

impl Waits {
    /// From the scan's records. A record whose stamp is later than its own clock reading (a
    /// stamp written between the two reads) is not a wait yet and is left out.
    pub fn from_seen(records: &[Seen]) -> Waits {
        let mut waits = Waits::default();
        for r in records {
            if r.kind == SEEN_RUNNING {
                waits.running.push(Running { cpu: r.cpu, tid: r.tid, pid: r.tgid, comm: comm_string(&r.comm) });
                continue;
            }
            let Some(reason) = Reason::ALL.into_iter().find(|x| *x as u32 == r.kind) else { continue };
            if r.since_ns == 0 || r.since_ns > r.now_ns {
                continue;
            }
            waits.waiting.push(Wait {
                reason,
                cpu: r.cpu,
                tid: r.tid,
                pid: r.tgid,
                comm: comm_string(&r.comm),
                prio: r.prio,
                cgroup_id: r.cgroup,
                since_ns: r.since_ns,
                seen_ns: r.now_ns,
                waited_ns: r.now_ns - r.since_ns,
                queue_depth: (r.queue_depth != DEPTH_UNKNOWN).then_some(r.queue_depth),
            });
        }
        waits.waiting.sort_by(|a, b| b.waited_ns.cmp(&a.waited_ns).then(a.tid.cmp(&b.tid)));
        waits.running.sort_by_key(|r| (r.cpu, r.tid));
        waits
    }

    /// The longest wait in progress of `reason`, if any task waits for that reason.
    pub fn oldest(&self, reason: Reason) -> Option<&Wait> {
        self.waiting.iter().find(|w| w.reason == reason)
    }

    /// Tasks that have waited longer than `ns` (0: every task waiting).
    pub fn over(&self, ns: u64) -> usize {
        self.waiting.iter().take_while(|w| w.waited_ns > ns).count()
    }

    /// The longest wait in progress on each CPU that has one, by CPU.
    pub fn oldest_per_cpu(&self) -> Vec<&Wait> {
        let mut out: Vec<&Wait> = Vec::new();
        for w in &self.waiting {
            if !out.iter().any(|o| o.cpu == w.cpu) {
                out.push(w);
            }
        }
        out.sort_by_key(|w| w.cpu);
        out
    }

    /// Who was on `cpu` when the scan saw it (None: its idle task, or a task that was switching).
    pub fn holder(&self, cpu: u32) -> Option<&Running> {
        self.running.iter().find(|r| r.cpu == cpu)
    }

    /// `w` as an attribution, marked as still waiting: its delay so far, and who ran on its CPU
    /// meanwhile — the runs `ring` (that CPU's run ring, when attribution is on) kept since the
    /// wait began, and the task on the CPU now, from when it got it.
    pub fn attribution(
        &self,
        w: &Wait,
        ring: Option<&RunRing>,
        wall: WallClock,
        cgroup_name: impl FnMut(u64) -> Option<String>,
    ) -> Attribution {
        let mut runs: Vec<Run> = Vec::with_capacity(RUNS_KEPT);
        let mut truncated = false;
        if let Some(ring) = ring {
            if let Some(h) = self.holder(w.cpu) {
                let mut comm = [0u8; 16];
                let n = h.comm.len().min(15);
                comm[..n].copy_from_slice(&h.comm.as_bytes()[..n]);
                runs.push(Run { tid: h.tid, tgid: h.pid, start_ns: ring.running_since_ns, end_ns: w.seen_ns, comm });
            }
            let mask = RUNS_KEPT as u64 - 1;
            for i in 0..RUNS_KEPT as u64 {
                if runs.len() == RUNS_KEPT {
                    truncated = true;
                    break;
                }
                let run = ring.runs[(ring.head.wrapping_sub(1 + i) & mask) as usize];
                // The ring is read after the scan: runs that ended since are not part of this wait.
                if run.end_ns > w.seen_ns {
                    continue;
                }
                if run.end_ns <= w.since_ns || run.end_ns == 0 {
                    break;
                }
                runs.push(run);
                if i == mask && run.start_ns > w.since_ns {
                    truncated = true;
                }
            }
        }
        let mut inc = Incident::ZERO;
        inc.delay_ns = w.waited_ns;
        inc.end_ns = w.seen_ns;
        inc.cgroup = w.cgroup_id;
        inc.victim_tid = w.tid;
        inc.victim_tgid = w.pid;
        inc.victim_prio = w.prio;
        inc.reason = w.reason as u32;
        inc.queue_depth = w.queue_depth.unwrap_or(DEPTH_UNKNOWN);
        let n = w.comm.len().min(15);
        inc.victim_comm[..n].copy_from_slice(&w.comm.as_bytes()[..n]);
        inc.culprits = runs.len() as u32;
        inc.truncated = u32::from(truncated);
        for (slot, run) in inc.runs.iter_mut().zip(&runs) {
            *slot = *run;
        }
        let mut a = attribution(w.reason, w.cpu, &inc, wall, cgroup_name);
        a.waiting = true;
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use latency_common::maps::{SEEN_WAITING_PREEMPT, SEEN_WAITING_WAKEUP};

    const MS: u64 = 1_000_000;

    fn comm(s: &str) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..s.len()].copy_from_slice(s.as_bytes());
        c
    }

    fn seen(kind: u32, tid: u32, cpu: u32, since_ns: u64, now_ns: u64) -> Seen {
        Seen { now_ns, since_ns, tid, tgid: tid, cpu, kind, comm: comm("t"), queue_depth: DEPTH_UNKNOWN, ..Seen::ZERO }
    }

    #[test]
    fn waits_are_aged_from_their_stamp_and_sorted_longest_first() {
        let w = Waits::from_seen(&[
            seen(SEEN_WAITING_WAKEUP, 10, 0, 1_000 * MS, 1_200 * MS),
            seen(SEEN_WAITING_PREEMPT, 11, 1, 500 * MS, 1_201 * MS),
            seen(SEEN_RUNNING, 12, 1, 0, 1_201 * MS),
            seen(SEEN_WAITING_WAKEUP, 13, 1, 1_150 * MS, 1_202 * MS),
        ]);
        assert_eq!(
            w.waiting.iter().map(|x| (x.tid, x.waited_ns)).collect::<Vec<_>>(),
            vec![(11, 701 * MS), (10, 200 * MS), (13, 52 * MS)]
        );
        assert_eq!(w.oldest(Reason::Wakeup).map(|x| x.tid), Some(10));
        assert_eq!(w.oldest(Reason::Preempt).map(|x| x.tid), Some(11));
        assert_eq!((w.over(0), w.over(100 * MS), w.over(701 * MS)), (3, 2, 0));
        assert_eq!(w.oldest_per_cpu().iter().map(|x| (x.cpu, x.tid)).collect::<Vec<_>>(), vec![(0, 10), (1, 11)]);
        assert_eq!(w.holder(1).map(|r| r.tid), Some(12));
        assert!(w.holder(0).is_none());
    }

    #[test]
    fn a_stamp_newer_than_its_reading_is_not_a_wait() {
        let w = Waits::from_seen(&[seen(SEEN_WAITING_WAKEUP, 10, 0, 1_001, 1_000), seen(9, 11, 0, 1, 2)]);
        assert!(w.waiting.is_empty());
    }

    #[test]
    fn an_attribution_names_the_holder_and_the_runs_since_the_wait_began() {
        let w = Waits::from_seen(&[
            seen(SEEN_WAITING_WAKEUP, 10, 1, 1_000 * MS, 1_900 * MS),
            seen(SEEN_RUNNING, 12, 1, 0, 1_900 * MS),
        ]);
        let mut ring = RunRing::ZERO;
        // Ran before the wait (not a culprit), then 100 ms during it; the holder since 1.2 s.
        ring.runs[0] = Run { tid: 20, tgid: 20, start_ns: 800 * MS, end_ns: 900 * MS, comm: comm("before") };
        ring.runs[1] = Run { tid: 21, tgid: 21, start_ns: 1_100 * MS, end_ns: 1_200 * MS, comm: comm("during") };
        ring.head = 2;
        ring.running_since_ns = 1_200 * MS;
        let wall = WallClock::new(0, 0);
        let a = w.attribution(&w.waiting[0], Some(&ring), wall, |_| None);
        assert!(a.waiting);
        assert_eq!(a.delay_ns, 900 * MS);
        assert_eq!(
            a.culprits.iter().map(|c| (c.tid, c.ran_ns)).collect::<Vec<_>>(),
            vec![(12, 700 * MS), (21, 100 * MS)]
        );
        assert!(!a.culprits_truncated);
        let bare = w.attribution(&w.waiting[0], None, wall, |_| None);
        assert!(bare.culprits.is_empty() && bare.waiting);
    }
}
