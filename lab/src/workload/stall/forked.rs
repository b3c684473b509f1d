//! A forked child that runs one allocation-free body pinned to one CPU: in, the CPU and the body;
//! out, a guard that knows its pid, has heard it is ready, reads its scheduler state, and kills
//! and reaps it when dropped, pass or fail. The child dies with the thread that forked it
//! (PR_SET_PDEATHSIG), so a killed test leaves none behind either.
//!
//! The test process has threads (libtest's, the readers of its children's output), and another
//! may hold malloc's lock at the fork: between fork and `_exit` the child makes raw system calls
//! only (async-signal-safe), never allocates, never panics.
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// What a body may tell its parent: its setup is done, with a number (e.g. a pid) beside it.
#[derive(Debug, Clone, Copy)]
pub struct Ready(pub u32);

/// The child's end of its ready pipe; the body writes on it once.
#[derive(Debug)]
pub struct Tell(i32);

impl Tell {
    /// Writes the ready word (async-signal-safe: one write(2)).
    pub fn ready(&self, value: u32) {
        let bytes = value.to_ne_bytes();
        // SAFETY: write(2) of 4 bytes from a live stack buffer to our own pipe.
        unsafe { libc::write(self.0, bytes.as_ptr().cast(), bytes.len()) };
    }
}

/// A forked child, killed and reaped on drop.
#[derive(Debug)]
pub struct Forked {
    pid: i32,
    what: &'static str,
    reaped: Option<i32>,
}

/// `/proc/<pid>/stat` fields the stall needs: state letter, last CPU, policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub state: char,
    pub cpu: u32,
    pub policy: u32,
    pub rt_priority: u32,
}

pub fn stat(tid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/stat")).ok()?;
    // `pid (comm) state ppid …`: comm may hold spaces and parentheses. After it, field 3 is at
    // index 0, processor (39) at 36, rt_priority (40) at 37, policy (41) at 38.
    let rest: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    Some(Stat {
        state: rest.first()?.chars().next()?,
        cpu: rest.get(36)?.parse().ok()?,
        rt_priority: rest.get(37)?.parse().ok()?,
        policy: rest.get(38)?.parse().ok()?,
    })
}

impl Forked {
    /// Forks a child named `what` (its comm: the first 15 bytes); the child pins itself to `cpu` (if given), closes every descriptor but its ready
    /// pipe and `keep`, runs `body` (which must write its ready word once set up, and may only
    /// make raw system calls), and `_exit`s with what it returns. Waits up to 5 s for the ready
    /// word.
    pub fn spawn(
        what: &'static str,
        cpu: Option<usize>,
        keep: Option<i32>,
        body: impl FnOnce(&Tell) -> i32,
    ) -> anyhow::Result<(Forked, Ready)> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two fds into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error()).context("pipe2");
        }
        let [read, write] = fds;
        // SAFETY: getpid cannot fail.
        let parent = unsafe { libc::getpid() };
        // SAFETY: fork(2); the child runs only raw system calls until _exit (see the module doc).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: the child: async-signal-safe calls only, and it never returns.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                let mut comm = [0u8; 16];
                let n = what.len().min(15);
                comm[..n].copy_from_slice(&what.as_bytes()[..n]);
                libc::prctl(libc::PR_SET_NAME, comm.as_ptr());
                if libc::getppid() != parent {
                    libc::_exit(100);
                }
                // Hold no other descriptor: a pipe whose end of file means "the parent is gone"
                // (the sysctl watchdog's) must see it when the parent goes.
                let mut kept = [write, keep.unwrap_or(write)];
                kept.sort_unstable();
                let mut from = 3;
                for fd in kept {
                    if fd > from {
                        libc::syscall(libc::SYS_close_range, from as u32, (fd - 1) as u32, 0u32);
                    }
                    from = from.max(fd + 1);
                }
                libc::syscall(libc::SYS_close_range, from as u32, u32::MAX, 0u32);
                if let Some(cpu) = cpu {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                        libc::_exit(101);
                    }
                }
                let code = body(&Tell(write));
                libc::_exit(code);
            }
        }
        // SAFETY: our copy of the write end; the child has its own.
        unsafe { libc::close(write) };
        if pid < 0 {
            // SAFETY: our read end.
            unsafe { libc::close(read) };
            return Err(std::io::Error::last_os_error()).with_context(|| format!("fork for {what}"));
        }
        let mut child = Forked { pid, what, reaped: None };
        let ready = child.read_ready(read);
        // SAFETY: our read end, not used again.
        unsafe { libc::close(read) };
        match ready {
            Some(word) => Ok((child, Ready(word))),
            None => {
                let code = child.reap_within(Duration::from_secs(1));
                bail!(
                    "{what} (pid {pid}) did not get ready (exit {code:?}; 100: parent gone, 101: affinity, others: its body)"
                )
            }
        }
    }

    /// The ready word, or None if the child exited (end of file) or stayed silent for 5 s.
    fn read_ready(&self, fd: i32) -> Option<u32> {
        let mut poll = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: poll(2) on one live pollfd.
        if unsafe { libc::poll(&mut poll, 1, 5000) } <= 0 {
            return None;
        }
        let mut word = [0u8; 4];
        // SAFETY: read(2) of at most 4 bytes into a live buffer.
        let n = unsafe { libc::read(fd, word.as_mut_ptr().cast(), word.len()) };
        (n == 4).then(|| u32::from_ne_bytes(word))
    }

    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Its state now (None once it has exited).
    pub fn stat(&self) -> Option<Stat> {
        stat(self.pid as u32)
    }

    /// Waits up to `limit` for it to exit by itself; its wait status.
    pub fn reap_within(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        while self.reaped.is_none() {
            let mut status = 0;
            // SAFETY: waitpid on our own unreaped child, not blocking.
            let got = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if got == self.pid {
                self.reaped = Some(status);
            } else if got < 0 || Instant::now() > deadline {
                break;
            } else {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        self.reaped.map(|s| if libc::WIFEXITED(s) { libc::WEXITSTATUS(s) } else { -libc::WTERMSIG(s) })
    }

    /// Sends `signal` unless reaped (then the pid may be someone else's).
    pub fn signal(&self, signal: i32) {
        if self.reaped.is_none() {
            // SAFETY: kill(2) on our own child, not yet reaped, so its pid is still its own.
            unsafe { libc::kill(self.pid, signal) };
        }
    }

    pub fn what(&self) -> &'static str {
        self.what
    }
}

impl Drop for Forked {
    fn drop(&mut self) {
        if self.reaped.is_none() {
            self.signal(libc::SIGKILL);
            let mut status = 0;
            // SAFETY: waitpid on our own child, blocking: SIGKILL ends even a stopped or
            // killable-sleeping task.
            unsafe { libc::waitpid(self.pid, &mut status, 0) };
            self.reaped = Some(status);
        }
    }
}

/// CLOCK_MONOTONIC in ns, async-signal-safe (vDSO or syscall, no allocation).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps until CLOCK_MONOTONIC reaches `at_ns` (async-signal-safe; restarts after signals).
pub fn sleep_until(at_ns: u64) {
    let ts = libc::timespec { tv_sec: (at_ns / 1_000_000_000) as i64, tv_nsec: (at_ns % 1_000_000_000) as i64 };
    // SAFETY: clock_nanosleep reads one timespec; EINTR just sleeps again.
    while unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) }
        == libc::EINTR
    {}
}
