//! What the workload says about itself, one event per line with `--json` (the demo reads these):
//! in, what the threads measured; out, serde types and their one-line text form.
use serde::{Deserialize, Serialize};

use super::Mode;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The process is up; with `--wait-for-go` no workload thread exists yet.
    Ready { pid: u32, mode: Mode, cpus: usize, secs: f64 },
    /// A thread has named itself; `tid` is what perf, runqlat and /proc show.
    Started { name: String, tid: u32, group: String, nice: i32 },
    /// `stall`: the largest gap between two consecutive clock reads of the loop thread in one
    /// second of its run (1-based), when it ended (CLOCK_MONOTONIC), and how many gaps exceeded
    /// 10 ms (lat3's two numbers).
    Gap { name: String, tid: u32, second: u32, largest_gap_ns: u64, largest_gap_end_ns: u64, gaps_over_10ms: u32 },
    /// A thread finished its work; it then blocks until the process is released.
    Done(Done),
    /// Every thread is done and blocked: their counters are final.
    Finished { wall_ns: u64 },
}

/// A thread's account of itself, taken as its last act before it blocks.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Done {
    pub name: String,
    pub tid: u32,
    pub group: String,
    pub nice: i32,
    /// The kernel's load weight for this thread (`se.load.weight` in /proc/thread-self/sched,
    /// unscaled), if the kernel shows it.
    pub weight: Option<u64>,
    /// Completed 1 ms sleeps (`io`), 0 otherwise.
    pub sleeps: u64,
    /// The longest of those sleeps, wall time from calling usleep to its return (0 if none).
    #[serde(default)]
    pub longest_sleep_ns: u64,
    /// `se.nr_migrations` from /proc/thread-self/sched, if the kernel shows it.
    #[serde(default)]
    pub migrations: Option<u64>,
    /// CLOCK_THREAD_CPUTIME_ID at the end.
    pub cpu_ns: u64,
    /// `run_delay` from /proc/thread-self/schedstat (0 unless kernel.task_delayacct=1).
    pub run_delay_ns: u64,
    /// `stall`'s loop thread: the largest gap over the whole run, and when it ended
    /// (CLOCK_MONOTONIC, the clock of our recorder's stamps).
    pub largest_gap_ns: Option<u64>,
    pub largest_gap_end_ns: Option<u64>,
    /// How often the thread had blocked (its voluntary context switches, `ru_nvcsw`), read after
    /// everything else: each block ends in one wakeup, whether it was a sleep or not, and a sleep
    /// whose timer fired before the thread got to block is none.
    #[serde(default)]
    pub blocks: Option<u64>,
}

impl Event {
    /// The human form (without `--json`).
    pub fn text(&self) -> String {
        match self {
            Event::Ready { pid, mode, cpus, secs } => {
                format!("workload: {} on {cpus} CPUs for {secs} s, pid {pid}", mode.name())
            }
            Event::Started { name, tid, nice, .. } => format!("  {name:<14} tid {tid:<8} nice {nice}"),
            Event::Gap { name, second, largest_gap_ns, gaps_over_10ms, .. } => format!(
                "  {name}: second {second}: largest gap {:.3} ms, {gaps_over_10ms} gaps > 10 ms",
                *largest_gap_ns as f64 / 1e6
            ),
            Event::Done(d) => format!(
                "  {:<14} tid {:<8} cpu {:>9.3} ms  run_delay {:>9.3} ms{}",
                d.name,
                d.tid,
                d.cpu_ns as f64 / 1e6,
                d.run_delay_ns as f64 / 1e6,
                match (d.sleeps, d.largest_gap_ns) {
                    (_, Some(gap)) => format!("  largest gap {:.3} ms", gap as f64 / 1e6),
                    (0, None) => String::new(),
                    (n, None) => format!("  {n} sleeps"),
                }
            ),
            Event::Finished { wall_ns } => format!("workload: all threads done in {:.3} s", *wall_ns as f64 / 1e9),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_one_json_line() {
        let events = [
            Event::Ready { pid: 7, mode: Mode::Stall, cpus: 2, secs: 6.0 },
            Event::Gap {
                name: "stall/loop".into(),
                tid: 9,
                second: 3,
                largest_gap_ns: 8_000_123,
                largest_gap_end_ns: 77,
                gaps_over_10ms: 1,
            },
            Event::Done(Done {
                name: "nice10/1".into(),
                tid: 12,
                group: "nice10".into(),
                nice: 10,
                weight: Some(110),
                sleeps: 0,
                longest_sleep_ns: 0,
                migrations: Some(3),
                cpu_ns: 5,
                run_delay_ns: 6,
                largest_gap_ns: None,
                largest_gap_end_ns: None,
                blocks: None,
            }),
        ];
        for event in events {
            let line = serde_json::to_string(&event).unwrap_or_default();
            assert!(!line.contains('\n'));
            let back: Event = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert_eq!(back, event);
        }
    }
}
