//! A child's output as the lab reads it: in, a pipe; out, its lines on a thread of their own
//! (never blocking the caller, never leaving the child blocked on a full pipe) one by one, as a
//! log to look at any time, or as one text; or a child spawned and returned once a line says it
//! is ready.
use std::io::{BufRead as _, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use super::child::Proc;
use super::signals::check_interrupted;

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
            // Read to the end even when nobody listens any more: a child writing into a full
            // pipe would block, and a tracer blocked so stalls what it traces.
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(line);
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
            check_interrupted()?;
            let line = self.next(Duration::from_millis(50)).with_context(|| format!("got {:?}", self.seen))?;
            if line.is_some_and(|line| line.contains(needle)) {
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

/// Every line of a child's pipe so far, kept on a thread of their own (a daemon's log), and
/// whether the pipe has closed.
#[derive(Debug, Clone)]
pub struct Log(Arc<Mutex<Vec<String>>>, Arc<std::sync::atomic::AtomicBool>);

impl Log {
    pub fn read(pipe: impl Read + Send + 'static) -> Log {
        let log = Log(Arc::default(), Arc::default());
        let (sink, closed) = (log.0.clone(), log.1.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Ok(mut lines) = sink.lock() {
                    lines.push(line);
                }
            }
            closed.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        log
    }

    /// Every line up to end of file (call after the child exited), waiting at most `limit` for
    /// the reader to get there.
    pub fn to_end(&self, limit: Duration) -> Vec<String> {
        let deadline = Instant::now() + limit;
        while !self.1.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.lines()
    }

    pub fn lines(&self) -> Vec<String> {
        self.0.lock().map(|lines| lines.clone()).unwrap_or_default()
    }

    pub fn contains(&self, needle: &str) -> bool {
        self.0.lock().is_ok_and(|lines| lines.iter().any(|line| line.contains(needle)))
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

/// Which of a child's output streams says it is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Spawns `command` (in our process group) with `stream` piped and the other one discarded, and
/// returns it once a line of `stream` contains `needle`, within `limit`. The rest of `stream`
/// is read and dropped.
pub fn spawn_until_line(
    command: &mut Command,
    what: &str,
    stream: Stream,
    needle: &str,
    limit: Duration,
) -> anyhow::Result<Proc> {
    let (out, err) = match stream {
        Stream::Stdout => (Stdio::piped(), Stdio::null()),
        Stream::Stderr => (Stdio::null(), Stdio::piped()),
    };
    let mut proc = Proc::spawn(command.stdin(Stdio::null()).stdout(out).stderr(err), what)?;
    let mut lines = match stream {
        Stream::Stdout => Lines::read(proc.take_stdout().with_context(|| format!("{what}'s stdout"))?),
        Stream::Stderr => Lines::read(proc.take_stderr().with_context(|| format!("{what}'s stderr"))?),
    };
    lines.wait_for(needle, Instant::now() + limit).with_context(|| format!("{what} never said `{needle}`"))?;
    Ok(proc)
}
