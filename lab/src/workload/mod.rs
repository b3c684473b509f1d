//! The experiment: the loads of the perf-sched experiment and of the 2005 stall report, as
//! named threads of one process. In: a mode, a thread count (and nice levels); out: the plan of
//! threads, which a `Crew` runs in this process (a test) or `run` in one of its own (`cargo
//! xtask workload`, the demo's).
mod crew;
mod event;
pub mod flood;
mod run;
pub mod stall;
pub mod weights;

use serde::{Deserialize, Serialize};

pub use crew::{Body, Crew, Spec, gettid, group, set_thread_name};
pub use event::{Done, Event};
pub use run::{Args, run};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// CPUs/2 threads spinning (at least one).
    Cpu,
    /// CPUs threads looping on usleep(1000).
    Io,
    /// 4 × CPUs threads spinning.
    Compete,
    /// lat3: one thread reading CLOCK_MONOTONIC in a tight loop beside 2 × CPUs spinners.
    Stall,
    /// Two groups of spinners at two nice levels, 2 × CPUs threads in all.
    Nice,
}

impl Mode {
    pub const ALL: [Mode; 5] = [Mode::Cpu, Mode::Io, Mode::Compete, Mode::Stall, Mode::Nice];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Cpu => "cpu",
            Mode::Io => "io",
            Mode::Compete => "compete",
            Mode::Stall => "stall",
            Mode::Nice => "nice",
        }
    }

    /// The default thread count on `cpus` CPUs (for `stall`: the hogs; the loop is one more).
    pub fn default_threads(self, cpus: usize) -> usize {
        match self {
            Mode::Cpu => (cpus / 2).max(1),
            Mode::Io => cpus,
            Mode::Compete => 4 * cpus,
            Mode::Stall | Mode::Nice => 2 * cpus,
        }
    }
}

/// `stall`'s loop thread, the one whose gaps are compared with our preempt delays.
pub const STALL_LOOP: &str = "stall/loop";

/// `nice`'s two levels unless told otherwise.
pub const DEFAULT_NICE: [i32; 2] = [0, 10];

pub fn cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// The threads of `mode` on this machine, at its default thread count and nice levels.
pub fn default_plan(mode: Mode) -> Vec<Spec> {
    plan(mode, mode.default_threads(cpus()), DEFAULT_NICE)
}

/// The threads of `mode`.
pub fn plan(mode: Mode, threads: usize, nice: [i32; 2]) -> Vec<Spec> {
    let spec = |name: String, group: &str, body, nice| Spec { name, group: group.to_owned(), body, nice };
    match mode {
        Mode::Cpu => group("cpu", Body::Spin, threads),
        Mode::Io => group("io", Body::Sleep1ms, threads),
        Mode::Compete => group("compete", Body::Spin, threads),
        Mode::Stall => {
            let mut all = vec![spec(STALL_LOOP.to_owned(), "stall-loop", Body::ClockLoop, 0)];
            all.extend((0..threads).map(|i| spec(format!("stall/hog{i}"), "stall-hog", Body::Spin, 0)));
            all
        }
        Mode::Nice => {
            // Interleaved, so neither group gets a head start on the CPUs.
            (0..threads)
                .map(|i| {
                    let level = nice[i % 2];
                    let group = nice_group(level);
                    spec(format!("{group}/{}", i / 2), &group, Body::Spin, level)
                })
                .collect()
        }
    }
}

/// `nice0`, `nice10`, `nice-10`: the group (and thread-name prefix) of a nice level.
pub fn nice_group(level: i32) -> String {
    format!("nice{level}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_experiment() {
        let counts: Vec<usize> = Mode::ALL.iter().map(|m| m.default_threads(2)).collect();
        assert_eq!(counts, [1, 2, 8, 4, 4]);
        assert_eq!(Mode::Cpu.default_threads(1), 1);
        assert_eq!(Mode::Compete.default_threads(4), 16);
    }

    #[test]
    fn plans_name_every_thread_within_comm_length() {
        for mode in Mode::ALL {
            let specs = plan(mode, 9, [-10, 19]);
            for s in &specs {
                assert!(s.name.len() <= 15, "{} is longer than a comm", s.name);
            }
            let mut names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), specs.len(), "{mode:?}: duplicate names");
        }
        let stall = plan(Mode::Stall, 4, [0, 10]);
        assert_eq!((stall.len(), stall[0].name.as_str()), (5, STALL_LOOP));
        let nice = plan(Mode::Nice, 4, [0, 10]);
        let levels: Vec<i32> = nice.iter().map(|s| s.nice).collect();
        assert_eq!(levels, [0, 10, 0, 10]);
        assert_eq!(nice[3].name, "nice10/1");
    }
}
