//! The victim of a stall: in, a CPU and the moment to wake; out, a normal (SCHED_OTHER) thread
//! of this process pinned to that CPU, asleep on a CLOCK_MONOTONIC timer until that moment, that
//! records when it really ran after each wakeup: its first instruction after the sleep returns.
//! Its waits are exactly the run-queue waits a monitor must see (timer and switch costs aside).
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context as _, bail};

use super::forked::{monotonic_ns, sleep_until};
use crate::workload::{gettid, set_thread_name};

/// One wakeup: when the timer was set to fire, and when the thread ran (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub asked_ns: u64,
    pub ran_ns: u64,
}

impl Run {
    /// How long it waited for the CPU, timer slack included (tens of µs).
    pub fn late_ns(&self) -> u64 {
        self.ran_ns.saturating_sub(self.asked_ns)
    }
}

/// After the first wakeup, wake every `period` (from the last run) until `until_ns`.
#[derive(Debug, Clone, Copy)]
pub struct Again {
    pub period: Duration,
    pub until_ns: u64,
}

#[derive(Debug)]
pub struct Victim {
    pub tid: u32,
    pub name: String,
    pub cpu: usize,
    pub wake_ns: u64,
    first_ran: Arc<AtomicU64>,
    handle: Option<JoinHandle<Vec<Run>>>,
}

impl Victim {
    /// A thread named `name` (≤ 15 bytes: its comm) pinned to `cpu`, asleep until `wake_ns`.
    pub fn start(name: &str, cpu: usize, wake_ns: u64, again: Option<Again>) -> anyhow::Result<Victim> {
        if name.len() > 15 {
            bail!("{name:?} is longer than a comm");
        }
        let first_ran = Arc::new(AtomicU64::new(0));
        let (tx, rx) = mpsc::channel();
        let (thread_name, ran) = (name.to_owned(), first_ran.clone());
        let handle = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                set_thread_name(thread_name.as_bytes());
                let pinned = pin(cpu);
                let _ = tx.send((gettid(), pinned));
                drop(tx);
                let mut runs = Vec::new();
                let mut asked = wake_ns;
                loop {
                    sleep_until(asked);
                    // The first thing after the sleep returns: the moment it ran.
                    let ran_ns = monotonic_ns();
                    if runs.is_empty() {
                        ran.store(ran_ns, Ordering::SeqCst);
                    }
                    runs.push(Run { asked_ns: asked, ran_ns });
                    match again {
                        Some(a) if ran_ns + (a.period.as_nanos() as u64) < a.until_ns => {
                            asked = ran_ns + a.period.as_nanos() as u64;
                        }
                        _ => return runs,
                    }
                }
            })
            .context("spawning the victim thread")?;
        let (tid, pinned) = rx.recv_timeout(Duration::from_secs(5)).context("the victim thread never started")?;
        if !pinned {
            bail!("the victim could not pin itself to CPU {cpu}");
        }
        Ok(Victim { tid, name: name.to_owned(), cpu, wake_ns, first_ran, handle: Some(handle) })
    }

    /// When it first ran after its wakeup (CLOCK_MONOTONIC ns), once it has.
    pub fn first_ran_ns(&self) -> Option<u64> {
        Some(self.first_ran.load(Ordering::SeqCst)).filter(|&t| t != 0)
    }

    /// Every wakeup, once the thread is done.
    pub fn join(mut self) -> anyhow::Result<Vec<Run>> {
        let handle = self.handle.take().context("joined twice")?;
        handle.join().map_err(|_| anyhow::anyhow!("the victim thread panicked"))
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t with one CPU set, for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}
