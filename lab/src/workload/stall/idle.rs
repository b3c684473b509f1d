//! Tasks that sit on the stalled CPU without waiting for it: in, a CPU; out, a process stopped
//! by SIGSTOP (state T) and one blocked uninterruptibly (state D: a parent in vfork, waiting for
//! its child to exit). Neither is runnable, so neither may ever be listed as waiting. Both are
//! put in their state before the stall begins: a task signalled during it would have to run on
//! that CPU to stop, and would wait like any other.
use std::time::{Duration, Instant};

use anyhow::bail;

use super::forked::{Forked, monotonic_ns, sleep_until};

/// How long the children live at most, whatever happens to us.
const LIFETIME: Duration = Duration::from_secs(120);

/// A process that slept in a loop on `cpu`, then was stopped with SIGSTOP.
#[derive(Debug)]
pub struct Stopped {
    child: Forked,
}

impl Stopped {
    pub fn start(cpu: usize) -> anyhow::Result<Stopped> {
        let until = monotonic_ns() + LIFETIME.as_nanos() as u64;
        let (child, _) = Forked::spawn("stall-stopped", Some(cpu), None, move |tell| {
            tell.ready(0);
            let mut at = monotonic_ns();
            while at < until {
                at += 10_000_000;
                sleep_until(at);
            }
            0
        })?;
        child.signal(libc::SIGSTOP);
        wait_for_state(&child, 'T', cpu)?;
        Ok(Stopped { child })
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Its state letter now.
    pub fn state(&self) -> Option<char> {
        self.child.stat().map(|s| s.state)
    }
}

/// A process on `cpu` blocked in clone(CLONE_VFORK) (TASK_KILLABLE: 'D') until its child exits;
/// the child, with memory of its own (no CLONE_VM), sleeps.
#[derive(Debug)]
pub struct Uninterruptible {
    parent: Forked,
    /// The sleeping child's pid.
    child: u32,
}

impl Uninterruptible {
    pub fn start(cpu: usize) -> anyhow::Result<Uninterruptible> {
        let until = monotonic_ns() + LIFETIME.as_nanos() as u64;
        let (parent, ready) = Forked::spawn("stall-vfork", Some(cpu), None, move |tell| {
            // SAFETY: clone(2) with CLONE_VFORK and no CLONE_VM or new stack: like fork (the
            // child runs on a copy of our memory), except that we block until it exits.
            let pid = unsafe {
                libc::syscall(
                    libc::SYS_clone,
                    (libc::CLONE_VFORK | libc::SIGCHLD) as libc::c_ulong,
                    0usize,
                    0usize,
                    0usize,
                    0usize,
                )
            };
            if pid == 0 {
                // Dies with its parent (the death signal is not inherited across clone).
                // SAFETY: prctl on ourselves; getpid has no preconditions.
                unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
                tell.ready(unsafe { libc::getpid() } as u32);
                sleep_until(until);
                return 0;
            }
            if pid < 0 {
                return 3;
            }
            // Here once the child is gone (or never, if we are killed first): reap it, so that
            // no zombie is left to whoever adopts it.
            // SAFETY: waitpid on our own child.
            unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), 0) };
            0
        })?;
        let d = Uninterruptible { child: ready.0, parent };
        wait_for_state(&d.parent, 'D', cpu)?;
        Ok(d)
    }

    pub fn pid(&self) -> u32 {
        self.parent.pid()
    }

    /// The pid of the sleeping child it waits for.
    pub fn child(&self) -> u32 {
        self.child
    }

    pub fn state(&self) -> Option<char> {
        self.parent.stat().map(|s| s.state)
    }
}

impl Drop for Uninterruptible {
    fn drop(&mut self) {
        // The child first, while the parent (blocked, or a zombie we have not reaped) keeps
        // it from being reaped by anyone else: its pid is still its own. The parent then
        // wakes, reaps it and exits; we reap the parent (Forked's drop kills it if it did not).
        if super::forked::stat(self.child).is_some() && parent_of(self.child) == Some(self.parent.pid()) {
            // SAFETY: kill(2) on our grandchild, see above.
            unsafe { libc::kill(self.child as i32, libc::SIGKILL) };
            self.parent.reap_within(Duration::from_secs(1));
        }
    }
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Waits up to 2 s for `child` to be in `state` on `cpu`.
fn wait_for_state(child: &Forked, state: char, cpu: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let now = child.stat();
        if now.is_some_and(|s| s.state == state && s.cpu as usize == cpu) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{} (pid {}) is not in state {state} on CPU {cpu}: {now:?}", child.what(), child.pid());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
