//! `latency-daemon run` in the background on a loopback port of its own: in, the daemon binary
//! and run's arguments (and a wrapper such as setpriv); out, a daemon that is attached or
//! healthy, its HTTP endpoints and log, and a stop that must be clean (SIGTERM, exit 0).
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::guard::{Log, Proc};
use crate::web::{self, Response};

/// How long the daemon may take to attach and serve.
const START_LIMIT: Duration = Duration::from_secs(30);
/// How long it may take to exit after SIGTERM.
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// When `start` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ready {
    /// The daemon logged that its programs are attached.
    Attached,
    /// /healthz answers 200: it attached, serves and drains.
    Healthy,
}

#[derive(Debug)]
pub struct Daemon {
    proc: Proc,
    /// `127.0.0.1:PORT`, where it serves.
    pub addr: String,
    log: Log,
}

impl Daemon {
    /// `daemon run --listen ADDR ARGS`, returned once /healthz answers 200.
    pub fn start(daemon: impl AsRef<Path>, args: &[&str]) -> anyhow::Result<Daemon> {
        Daemon::launch(daemon.as_ref(), &[], args, Ready::Healthy)
    }

    /// The same, started through `wrapper` (e.g. setpriv and its arguments).
    pub fn start_under(daemon: impl AsRef<Path>, wrapper: &[&str], args: &[&str]) -> anyhow::Result<Daemon> {
        Daemon::launch(daemon.as_ref(), wrapper, args, Ready::Healthy)
    }

    /// `daemon run --listen ADDR ARGS`, returned as soon as it says it is attached (the bench:
    /// its cost counts from then).
    pub fn start_attached(daemon: impl AsRef<Path>, args: &[&str]) -> anyhow::Result<Daemon> {
        Daemon::launch(daemon.as_ref(), &[], args, Ready::Attached)
    }

    fn launch(daemon: &Path, wrapper: &[&str], args: &[&str], ready: Ready) -> anyhow::Result<Daemon> {
        let addr = format!("127.0.0.1:{}", web::free_port()?);
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(daemon);
                c
            }
            None => Command::new(daemon),
        };
        command.args(["run", "--listen", &addr]).args(args);
        let mut proc = Proc::spawn(
            command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()),
            "latency-daemon run",
        )?;
        let log = Log::read(proc.take_stderr().context("the daemon's stderr")?);
        let mut d = Daemon { proc, addr, log };
        let deadline = Instant::now() + START_LIMIT;
        loop {
            let up = match ready {
                Ready::Attached => d.log.contains("attached"),
                Ready::Healthy => d.get("/healthz").is_ok_and(|r| r.status == 200),
            };
            if up {
                return Ok(d);
            }
            if d.proc.exited() {
                bail!("latency-daemon run exited: {:?}", d.log());
            }
            if Instant::now() > deadline {
                bail!("latency-daemon run not {ready:?} within {START_LIMIT:?}: {:?}", d.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Sends `signal` (e.g. SIGHUP: reload) unless it has exited.
    pub fn signal(&mut self, signal: i32) {
        self.proc.signal(signal);
    }

    pub fn get(&self, path: &str) -> anyhow::Result<Response> {
        web::get(&self.addr, path, &[])
    }

    /// /metrics as text; fails unless the status is 200.
    pub fn metrics(&self) -> anyhow::Result<String> {
        let r = self.get("/metrics")?;
        if r.status != 200 {
            bail!("GET /metrics: status {}: {}", r.status, r.text());
        }
        Ok(r.text())
    }

    /// Its stderr so far, a line each.
    pub fn log(&self) -> Vec<String> {
        self.log.lines()
    }

    /// Waits until a line of its log contains `needle`; fails after `limit`, showing the log.
    pub fn wait_for_log(&self, needle: &str, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        while !self.log.contains(needle) {
            if Instant::now() > deadline {
                bail!("no {needle:?} in the log within {limit:?}: {:?}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// SIGTERM; returns how long it took to exit, which must be with status 0.
    pub fn stop(self) -> anyhow::Result<Duration> {
        self.stop_with_log().map(|(took, _)| took)
    }

    /// The same, and its whole log to the last line.
    pub fn stop_with_log(mut self) -> anyhow::Result<(Duration, Vec<String>)> {
        let t = Instant::now();
        let status = self.proc.stop(libc::SIGTERM, STOP_LIMIT)?;
        let took = t.elapsed();
        let log = self.log.to_end(Duration::from_secs(2));
        if !status.success() {
            bail!("latency-daemon run exited with {status} after SIGTERM; log: {log:?}");
        }
        Ok((took, log))
    }
}

/// A `kB` field of /proc/<pid>/status (`VmRSS:`, `VmHWM:`), in KiB.
pub fn status_kib(pid: u32, key: &str) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no {key} in /proc/{pid}/status"))
}
