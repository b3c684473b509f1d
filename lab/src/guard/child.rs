//! Child processes: in, a command; out, a guard that knows the child's pid, signals it, stops it
//! within a time limit, and kills and reaps it when dropped, pass or fail, together with what it
//! started itself (by their pids, never by name); and a registry of every pid spawned, so a
//! driver can check that none is left running.
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
    let alive = spawned.iter().copied().filter(|&pid| parent_of(pid) == Some(me)).collect();
    (spawned.len(), alive)
}

/// The parent pid of `pid`, from /proc/<pid>/stat (`pid (comm) state ppid …`; comm may hold
/// spaces and parentheses).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Stops `root` and, level by level, every process it started that is still there, with
/// SIGSTOP: a stopped process neither forks nor reaps, so none of these pids can go to someone
/// else while we hold them. Returns them deepest first, `root` last.
fn freeze_tree(root: u32) -> Vec<u32> {
    let stop = |pid: u32| {
        // SAFETY: kill(2) on our child or on a process it started; see above why the pid is
        // still theirs.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    };
    stop(root);
    let mut frozen = vec![root];
    let mut level = vec![root];
    while !level.is_empty() {
        let Ok(procs) = std::fs::read_dir("/proc") else { break };
        let below: Vec<u32> = procs
            .flatten()
            .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| !frozen.contains(&pid) && parent_of(pid).is_some_and(|ppid| level.contains(&ppid)))
            .collect();
        below.iter().copied().for_each(stop);
        frozen.extend(&below);
        level = below;
    }
    frozen.reverse();
    frozen
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
    /// Kills the child and what it started (`perf bench sched pipe` forks its other end, which
    /// would outlive it), then reaps the child.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            for pid in freeze_tree(self.child.id()) {
                // SAFETY: kill(2) on a process frozen above, whose pid is still its own.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
            let _ = self.child.wait();
        }
    }
}

/// Quiet stdio for a child: stdin closed, stdout and stderr piped.
pub fn piped(command: &mut Command) -> &mut Command {
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped())
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead as _, BufReader};

    use super::*;

    /// Whether `pid` is still running (a zombie is not: it waits only to be reaped).
    fn running(pid: u32) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_some_and(|state| state != "Z")
    }

    #[test]
    fn what_the_child_started_goes_with_it() {
        let mut sh = Command::new("sh");
        sh.args(["-c", "sleep 30 & echo $!; wait"]).stdin(Stdio::null()).stdout(Stdio::piped());
        let mut proc = Proc::spawn(&mut sh, "sh").unwrap_or_else(|e| panic!("{e:#}"));
        let stdout = proc.take_stdout().unwrap_or_else(|| panic!("no stdout"));
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap_or_else(|e| panic!("{e}"));
        let sleep: u32 = line.trim().parse().unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert!(running(sleep), "the grandchild never ran");
        let shell = proc.pid();
        drop(proc);
        assert!(!running(shell));
        // The grandchild, killed, is reparented and reaped by someone else: it may be a zombie
        // for a moment.
        let deadline = Instant::now() + Duration::from_secs(2);
        while running(sleep) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!running(sleep), "sleep (pid {sleep}) outlived the shell's guard");
        let (started, alive) = children_alive();
        assert!(started >= 1 && !alive.contains(&shell));
    }
}

/// A fork of this process that runs `body` and then exits: for a child that makes only raw
/// system calls (so forking a multi-threaded test is fine). It dies with this process
/// (`PR_SET_PDEATHSIG`), and is killed and reaped on drop.
#[derive(Debug)]
pub struct Forked {
    pid: libc::pid_t,
}

impl Forked {
    /// # Safety
    /// `body` must make only async-signal-safe calls (raw system calls on its own stack): it runs
    /// in a child forked from a possibly multi-threaded process.
    pub unsafe fn spawn(body: impl FnOnce()) -> anyhow::Result<Forked> {
        // SAFETY: the caller's promise above; the child never returns from here.
        match unsafe { libc::fork() } {
            -1 => Err(std::io::Error::last_os_error()).context("fork"),
            0 => {
                // SAFETY: a raw system call; the child dies with its parent even if that is killed.
                unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
                body();
                // SAFETY: ends the child without running the parent's destructors.
                unsafe { libc::_exit(0) }
            }
            pid => Ok(Forked { pid }),
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid as u32
    }
}

impl Drop for Forked {
    fn drop(&mut self) {
        // SAFETY: our own child, killed and reaped once.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}
