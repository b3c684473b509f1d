//! The experiment's tasks, each a forked child of the demo pinned to one CPU: in, a name, a CPU
//! and what it does (spin, or sleep a period and wake, forever); out, a guard that knows its
//! pid and kills and reaps it when dropped, pass or fail. The child dies with the thread that
//! forked it (PR_SET_PDEATHSIG), so a killed demo leaves none behind either.
//!
//! The demo has threads (the readers of its children's output), and another may hold malloc's
//! lock at the fork: the child makes raw system calls only and never allocates.
use std::time::Duration;

use anyhow::Context as _;

/// What the child does until it is killed.
#[derive(Debug, Clone, Copy)]
pub enum Body {
    /// `while :; do :; done`.
    Spin,
    /// Sleeps this long, wakes, sleeps again.
    Sleep(Duration),
}

#[derive(Debug)]
pub struct Task {
    pid: libc::pid_t,
}

impl Task {
    /// Forks a child named `comm` (at most 15 bytes) that runs `body` on `cpu` only.
    pub fn start(comm: &'static str, cpu: usize, body: Body) -> anyhow::Result<Task> {
        let mut name = [0u8; 16];
        let n = comm.len().min(15);
        name[..n].copy_from_slice(&comm.as_bytes()[..n]);
        let ts = match body {
            Body::Spin => None,
            Body::Sleep(d) => {
                Some(libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as libc::c_long })
            }
        };
        // SAFETY: getpid cannot fail.
        let parent = unsafe { libc::getpid() };
        // SAFETY: fork(2); the child runs only raw system calls and never returns (module doc).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: the child: async-signal-safe calls on its own stack only.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                libc::prctl(libc::PR_SET_NAME, name.as_ptr());
                if libc::getppid() != parent {
                    libc::_exit(100);
                }
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    libc::_exit(101);
                }
                match ts {
                    None => loop {
                        std::hint::spin_loop();
                    },
                    Some(ts) => loop {
                        libc::nanosleep(&ts, std::ptr::null_mut());
                    },
                }
            }
        }
        if pid < 0 {
            return Err(std::io::Error::last_os_error()).with_context(|| format!("fork for {comm}"));
        }
        let task = Task { pid };
        // Wait until it is on its CPU (or gone): the scenario's span starts with it in place.
        for _ in 0..200 {
            if task.on_cpu(cpu) {
                return Ok(task);
            }
            let mut status = 0;
            // SAFETY: waitpid on our own child, not blocking.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                std::mem::forget(task);
                anyhow::bail!("{comm} (pid {pid}) exited at once (status {status}; 100: parent gone, 101: affinity)");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        anyhow::bail!("{comm} (pid {pid}) not pinned to CPU {cpu} within 1 s")
    }

    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Whether its affinity is `cpu` alone (it set it itself, first thing).
    fn on_cpu(&self, cpu: usize) -> bool {
        // SAFETY: sched_getaffinity writes one cpu_set_t for our own child's pid.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(self.pid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0
                && libc::CPU_COUNT(&set) == 1
                && libc::CPU_ISSET(cpu, &set)
        }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // SAFETY: our own child, not yet reaped (so the pid is still its own), killed and reaped once.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}
