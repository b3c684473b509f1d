//! Child processes: in, a command; out, a guard that knows the child's pid, signals it, stops it
//! within a time limit, and kills and reaps it (that pid only) when dropped, pass or fail; and a
//! registry of every pid spawned, so a driver can check that none is left running.
use std::os::unix::process::CommandExt as _;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use super::signals;
use crate::cmd;

/// Every child the lab started in this process, by pid.
static SPAWNED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// (how many children this process started, those of them still alive). A pid counts as ours
/// only while its parent is this process: a reaped child's pid may already belong to someone
/// else.
pub fn children_alive() -> (usize, Vec<u32>) {
    let spawned = SPAWNED.lock().map(|s| s.clone()).unwrap_or_default();
    let me = std::process::id();
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
        stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
    };
    let alive = spawned.iter().copied().filter(|&pid| parent(pid) == Some(me)).collect();
    (spawned.len(), alive)
}

/// A running child, killed and reaped on drop unless it already exited.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    what: String,
}

impl Proc {
    /// Spawns `command`. While this process catches signals (`catch_signals`, the demo), the
    /// child gets a process group of its own: Ctrl-C on the terminal then reaches only us, and we
    /// stop the children in order (perf killed mid-write leaves a broken file; a recorder must
    /// report before the workload exits). Otherwise (a test, the bench) it stays in ours, so
    /// Ctrl-C ends it with us: our guards do not run when a signal kills us.
    pub fn spawn(command: &mut Command, what: &str) -> anyhow::Result<Proc> {
        if signals::catching() {
            command.process_group(0);
        }
        let child = command.spawn().with_context(|| format!("could not start `{}`", cmd::show(command)))?;
        if let Ok(mut spawned) = SPAWNED.lock() {
            spawned.push(child.id());
        }
        Ok(Proc { child, what: what.to_owned() })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }

    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }

    /// Sends `signal` unless the child has exited (then its pid may belong to someone else).
    pub fn signal(&mut self, signal: i32) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on our own child's pid, not yet reaped, so not reused.
            unsafe { libc::kill(self.child.id() as i32, signal) };
        }
    }

    /// Sends `signal` (none if 0) and waits up to `limit` for the exit status.
    pub fn stop(&mut self, signal: i32, limit: Duration) -> anyhow::Result<ExitStatus> {
        self.signal(signal);
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().with_context(|| format!("waiting for {}", self.what))? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("{} (pid {}) did not exit within {limit:?} of signal {signal}", self.what, self.pid());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether it has exited (and is reaped).
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Quiet stdio for a child: stdin closed, stdout and stderr piped.
pub fn piped(command: &mut Command) -> &mut Command {
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped())
}
