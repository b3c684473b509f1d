//! The hog of a stall: in, a CPU, a SCHED_FIFO priority and a bounded time; out, a forked
//! child that spins on that CPU above every normal task and then exits by itself (the machine
//! always gets its CPU back), and the guard that lets it: RT throttling off
//! (`kernel.sched_rt_runtime_us` = -1) for the guard's life, restored on drop and on panic, and
//! by a watchdog process if this one is killed.
use std::time::Duration;

use anyhow::{Context as _, bail};

use super::forked::{Forked, monotonic_ns};
use crate::guard::Sysctl;

const RT_RUNTIME: &str = "kernel.sched_rt_runtime_us";
const RT_RUNTIME_PATH: &[u8] = b"/proc/sys/kernel/sched_rt_runtime_us\0";

/// RT throttling off while it lives.
#[derive(Debug)]
pub struct RtUnthrottled {
    sysctl: Sysctl,
    /// Writing a byte here tells the watchdog we restored it ourselves.
    watchdog: Option<(i32, Forked)>,
}

impl RtUnthrottled {
    pub fn new() -> anyhow::Result<RtUnthrottled> {
        let sysctl = Sysctl::set(RT_RUNTIME, "-1")?;
        let old = sysctl.old().to_owned();
        let watchdog = match watchdog(&old) {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!("stall: no watchdog for {RT_RUNTIME} ({e:#}); restored only if this process unwinds");
                None
            }
        };
        eprintln!("stall: {RT_RUNTIME} {old} -> -1 (RT throttling off; restored on drop)");
        Ok(RtUnthrottled { sysctl, watchdog })
    }

    pub fn old(&self) -> &str {
        self.sysctl.old()
    }
}

impl Drop for RtUnthrottled {
    fn drop(&mut self) {
        match self.sysctl.restore() {
            Ok(()) => eprintln!("stall: {RT_RUNTIME} restored to {}", self.sysctl.old()),
            Err(e) => eprintln!("stall: {e:#}"),
        }
        if let Some((fd, mut child)) = self.watchdog.take() {
            // SAFETY: write(2) of one byte, then close, on our end of the watchdog's pipe.
            unsafe {
                libc::write(fd, b"r".as_ptr().cast(), 1);
                libc::close(fd);
            }
            child.reap_within(Duration::from_secs(2));
        }
    }
}

/// A child blocked reading a pipe whose only writer is this process: end of file (we died
/// without restoring) makes it write `old` back; a byte (we restored) makes it just exit.
fn watchdog(old: &str) -> anyhow::Result<(i32, Forked)> {
    let mut value = [0u8; 24];
    if old.len() > value.len() {
        bail!("{RT_RUNTIME} is {old:?}");
    }
    value[..old.len()].copy_from_slice(old.as_bytes());
    let len = old.len();
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two fds into the array; close-on-exec so no exec'd child holds them.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe2");
    }
    let [read, write] = fds;
    let spawned = Forked::spawn("stall-watchdog", None, Some(read), move |tell| {
        // SAFETY (whole body): raw system calls on our own descriptors and a static path.
        unsafe {
            // Not killed with the parent: that is when it has work to do.
            libc::prctl(libc::PR_SET_PDEATHSIG, 0);
            tell.ready(0);
            let mut byte = [0u8; 1];
            let n = libc::read(read, byte.as_mut_ptr().cast(), 1);
            if n == 0 {
                let fd = libc::open(RT_RUNTIME_PATH.as_ptr().cast(), libc::O_WRONLY);
                if fd >= 0 {
                    libc::write(fd, value.as_ptr().cast(), len);
                    libc::close(fd);
                }
            }
            0
        }
    });
    // SAFETY: our copy of the read end.
    unsafe { libc::close(read) };
    match spawned {
        Ok((child, _)) => Ok((write, child)),
        Err(e) => {
            // SAFETY: our write end, unused.
            unsafe { libc::close(write) };
            Err(e)
        }
    }
}

/// The highest SCHED_FIFO priority a spinner may take: above every normal task, below the
/// kernel's own RT threads (migration, watchdogs at 99, irq threads at 50).
pub const MAX_PRIORITY: i32 = 10;
/// The longest a spinner may hold its CPU.
pub const MAX_SPIN: Duration = Duration::from_secs(10);

/// A SCHED_FIFO child spinning on one CPU until a fixed moment, then exiting by itself.
#[derive(Debug)]
pub struct Spinner {
    child: Forked,
    /// When it started spinning, and when it stops (CLOCK_MONOTONIC ns).
    pub began_ns: u64,
    pub ends_ns: u64,
    pub cpu: usize,
}

impl Spinner {
    /// Spins on `cpu` at SCHED_FIFO `priority` (1..=10) for `spin` (at most 10 s). Needs RT
    /// throttling off to hold the CPU whole (`RtUnthrottled`); even then, the kernel's fair
    /// server still gives normal tasks on that CPU 50 ms of every second.
    pub fn start(cpu: usize, priority: i32, spin: Duration) -> anyhow::Result<Spinner> {
        if !(1..=MAX_PRIORITY).contains(&priority) || spin > MAX_SPIN {
            bail!("a spinner takes priority 1..={MAX_PRIORITY} and at most {MAX_SPIN:?}, not {priority} for {spin:?}");
        }
        let ends_ns = monotonic_ns() + spin.as_nanos() as u64;
        let (child, _) = Forked::spawn(super::SPINNER, Some(cpu), None, move |tell| {
            // Zeroed, then the priority: musl's sched_param has more fields than glibc's (the
            // guests' static xtask is built for musl).
            // SAFETY: sched_param is plain integers; all zeros is a valid value.
            let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
            param.sched_priority = priority;
            // SAFETY: sched_setscheduler on ourselves with a valid parameter.
            if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
                return 2;
            }
            tell.ready(0);
            let mut x = 0u64;
            while monotonic_ns() < ends_ns {
                for _ in 0..1000 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
            0
        })
        .with_context(|| {
            format!("starting a SCHED_FIFO {priority} spinner on CPU {cpu} (exit 2: sched_setscheduler)")
        })?;
        let began_ns = monotonic_ns();
        let s = child.stat();
        eprintln!("stall: spinner pid {} SCHED_FIFO {priority} on CPU {cpu} for {spin:?} (now {s:?})", child.pid());
        Ok(Spinner { child, began_ns, ends_ns, cpu })
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Waits for it to stop by itself (up to a second past its end); fails if it did not, or
    /// exited with an error.
    pub fn finish(&mut self) -> anyhow::Result<()> {
        let left = self.ends_ns.saturating_sub(monotonic_ns());
        let code = self.child.reap_within(Duration::from_nanos(left) + Duration::from_secs(1));
        match code {
            Some(0) => Ok(()),
            other => bail!("the spinner (pid {}) ended with {other:?}", self.child.pid()),
        }
    }
}
