//! A stall on one CPU, the kind the 2005 report saw, made exact: in, a CPU, a SCHED_FIFO
//! priority, how long to hog the CPU and when to wake the victim; out, RT throttling off for the
//! while, a SCHED_FIFO spinner holding the CPU for a bounded time, a normal thread woken by a
//! timer on that CPU while it spins (with the moments it really ran), and beside them a stopped
//! and an uninterruptible process that must never count as waiting. Everything is undone when
//! the `Stall` goes, pass or fail (and, if this process is killed, by death signals and a
//! watchdog).
//!
//! On kernels with the fair server (6.12+), RT throttling off still leaves normal tasks 50 ms of
//! every second on that CPU: the victim waits ~0.95 s, runs, and (if it keeps waking) waits again.
mod forked;
mod idle;
mod rt;
mod victim;

use std::time::Duration;

pub use forked::{Stat, monotonic_ns, stat};
pub use idle::{Stopped, Uninterruptible};
pub use rt::{MAX_PRIORITY, MAX_SPIN, RtUnthrottled, Spinner};
pub use victim::{Again, Run, Victim, pin};

/// The victim's comm.
pub const VICTIM: &str = "stall-victim";
/// The SCHED_FIFO spinner's name (its comm).
pub const SPINNER: &str = "stall-spinner";

/// What a stall does.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub cpu: usize,
    pub priority: i32,
    /// How long the spinner holds the CPU.
    pub spin: Duration,
    /// How long after the spinner starts the victim's timer fires.
    pub wake_after: Duration,
    /// After its first run, the victim wakes every this often until the spin ends (None: once).
    pub again: Option<Duration>,
}

/// A stall in progress; fields drop in order: the spinner first, RT throttling last.
#[derive(Debug)]
pub struct Stall {
    pub spinner: Spinner,
    pub victim: Victim,
    pub stopped: Stopped,
    pub blocked: Uninterruptible,
    pub rt: RtUnthrottled,
}

impl Stall {
    /// Sets the CPU up (throttling off, the stopped and the blocked process, the victim
    /// asleep), then starts the spinner.
    pub fn start(plan: Plan) -> anyhow::Result<Stall> {
        let rt = RtUnthrottled::new()?;
        let stopped = Stopped::start(plan.cpu)?;
        let blocked = Uninterruptible::start(plan.cpu)?;
        // Computed before the spinner starts: the victim sleeps until then from the outset.
        let wake_ns = monotonic_ns() + (plan.wake_after + Duration::from_millis(50)).as_nanos() as u64;
        let again = plan.again.map(|period| Again {
            period,
            until_ns: monotonic_ns() + (plan.spin + Duration::from_millis(50)).as_nanos() as u64,
        });
        let victim = Victim::start(VICTIM, plan.cpu, wake_ns, again)?;
        std::thread::sleep(Duration::from_millis(50));
        let spinner = Spinner::start(plan.cpu, plan.priority, plan.spin)?;
        eprintln!(
            "stall: CPU {}: stopped pid {} ({:?}), vfork parent pid {} ({:?}, child {}), victim tid {} wakes {:.3} s \
             after the spinner started",
            plan.cpu,
            stopped.pid(),
            stopped.state(),
            blocked.pid(),
            blocked.state(),
            blocked.child(),
            victim.tid,
            wake_ns.saturating_sub(spinner.began_ns) as f64 / 1e9
        );
        Ok(Stall { spinner, victim, stopped, blocked, rt })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By hand, as root: `cargo test -p latency-lab stall::tests -- --ignored --nocapture`.
    /// Prints the victim's waits under a 4 s spin; on a fair-server kernel, each ~0.95 s.
    #[test]
    #[ignore = "root: changes kernel.sched_rt_runtime_us and hogs CPU 1 for 4 s"]
    fn the_victim_waits_for_the_spinner() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let cpu = 1;
        assert!(pin(0), "pinning the test to CPU 0");
        let plan = Plan {
            cpu,
            priority: 5,
            spin: Duration::from_secs(4),
            wake_after: Duration::from_millis(20),
            again: Some(Duration::from_millis(1)),
        };
        let mut stall = Stall::start(plan).unwrap_or_else(|e| panic!("{e:#}"));
        let spinner = stat(stall.spinner.pid());
        eprintln!("spinner: {spinner:?}");
        assert!(spinner.is_some_and(|s| s.policy == libc::SCHED_FIFO as u32 && s.cpu as usize == cpu), "{spinner:?}");
        let mut states = Vec::new();
        while monotonic_ns() < stall.spinner.ends_ns {
            states.push((stall.stopped.state(), stall.blocked.state()));
            std::thread::sleep(Duration::from_millis(100));
        }
        stall.spinner.finish().unwrap_or_else(|e| panic!("{e:#}"));
        let (tid, wake_ns, began_ns) = (stall.victim.tid, stall.victim.wake_ns, stall.spinner.began_ns);
        let Stall { victim, .. } = stall;
        let runs = victim.join().unwrap_or_else(|e| panic!("{e:#}"));
        let long: Vec<&Run> = runs.iter().filter(|r| r.late_ns() > 10_000_000).collect();
        eprintln!("victim tid {tid}: {} wakeups, {} waited over 10 ms:", runs.len(), long.len());
        for r in &long {
            eprintln!(
                "  woken {:.3} s, ran {:.3} s after the spin began: waited {:.3} ms",
                r.asked_ns.saturating_sub(began_ns) as f64 / 1e9,
                r.ran_ns.saturating_sub(began_ns) as f64 / 1e9,
                r.late_ns() as f64 / 1e6
            );
        }
        assert!(states.iter().all(|s| *s == (Some('T'), Some('D'))), "states during the spin: {states:?}");
        assert_eq!(runs[0].asked_ns, wake_ns);
        assert!(runs[0].late_ns() > 500_000_000, "the first wakeup waited only {} ns", runs[0].late_ns());
    }
}
