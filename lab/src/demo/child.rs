//! The demo's child processes: in, a command; out, a guard that knows the child's pid and kills
//! it (that pid only) when dropped, and line readers for its output that never block the demo.
use std::io::{BufRead as _, BufReader, Read};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use super::guard;
use crate::cmd;

/// Every child the demo started, by pid.
static SPAWNED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// (how many children the demo started, those of them still alive). A pid counts as ours only
/// while its parent is this process: a reaped child's pid may already belong to someone else.
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
    /// Spawns `command` in a process group of its own: Ctrl-C on the terminal then reaches only
    /// the demo, which stops its children in order (a recorder killed before the workload is
    /// released would, say, miss nothing, but perf killed mid-write leaves a broken file).
    pub fn spawn(command: &mut Command, what: &str) -> anyhow::Result<Proc> {
        command.process_group(0);
        let child = command.spawn().with_context(|| format!("could not start `{}`", cmd::show(command)))?;
        if let Ok(mut spawned) = SPAWNED.lock() {
            spawned.push(child.id());
        }
        Ok(Proc { child, what: what.to_owned() })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn take_stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.child.stdout.take()
    }

    pub fn take_stderr(&mut self) -> Option<std::process::ChildStderr> {
        self.child.stderr.take()
    }

    pub fn take_stdin(&mut self) -> Option<std::process::ChildStdin> {
        self.child.stdin.take()
    }

    /// Sends `signal` unless the child has exited (then its pid may belong to someone else).
    pub fn signal(&mut self, signal: i32) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on our own child's pid, not yet reaped, so not reused.
            unsafe { libc::kill(self.child.id() as i32, signal) };
        }
    }

    /// Sends `signal` and waits up to `limit` for the exit status.
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

/// Lines of a child's pipe, read on a thread of their own.
#[derive(Debug)]
pub struct Lines {
    rx: Receiver<String>,
    reader: Option<JoinHandle<()>>,
    pub seen: Vec<String>,
}

impl Lines {
    pub fn read(pipe: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines { rx, reader: Some(reader), seen: Vec::new() }
    }

    /// The next line within `limit`: Ok(None) on timeout, an error once the pipe closed.
    pub fn next(&mut self, limit: Duration) -> anyhow::Result<Option<String>> {
        match self.rx.recv_timeout(limit) {
            Ok(line) => {
                self.seen.push(line.clone());
                Ok(Some(line))
            }
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => bail!("the pipe closed"),
        }
    }

    /// Waits until a line contains `needle`; fails at `deadline`, on Ctrl-C or when the pipe closes.
    pub fn wait_for(&mut self, needle: &str, deadline: Instant) -> anyhow::Result<()> {
        loop {
            guard::check_interrupted()?;
            if let Some(line) = self.next(Duration::from_millis(50))?
                && line.contains(needle)
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("no line with `{needle}` in time; got {:?}", self.seen);
            }
        }
    }

    /// Everything up to end of file (call after the child exited).
    pub fn rest(mut self) -> Vec<String> {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.seen.extend(self.rx.try_iter());
        std::mem::take(&mut self.seen)
    }
}

/// A child's whole stdout as one string, read on a thread (for `record --json`).
#[derive(Debug)]
pub struct Slurp(JoinHandle<String>);

impl Slurp {
    pub fn read(mut pipe: impl Read + Send + 'static) -> Slurp {
        Slurp(std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        }))
    }

    pub fn text(self) -> String {
        self.0.join().unwrap_or_default()
    }
}

/// Quiet stdio for a child: stdin closed, stdout and stderr piped.
pub fn piped(command: &mut Command) -> &mut Command {
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped())
}
