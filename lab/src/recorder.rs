//! `latency-daemon record …` in the background: in, the daemon binary and record's arguments;
//! out, a recorder that is attached and measuring, and, once stopped with SIGINT or SIGTERM,
//! what it printed (`record --json`: see `recording` for the demo's typed reading).
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::guard::{Lines, Proc, Slurp, piped};

/// How long `record` may take to load and attach.
const ATTACH_LIMIT: Duration = Duration::from_secs(30);
/// How long it may take to report and detach once signalled.
const STOP_LIMIT: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct Recorder {
    proc: Proc,
    stdout: Slurp,
    stderr: Lines,
    what: String,
}

impl Recorder {
    /// Starts `daemon record ARGS` and returns once it says it is attached (within 30 s).
    pub fn start(daemon: impl AsRef<Path>, args: &[&str]) -> anyhow::Result<Recorder> {
        Recorder::start_by(daemon, args, Instant::now() + ATTACH_LIMIT)
    }

    /// The same, attached by `deadline`.
    pub fn start_by(daemon: impl AsRef<Path>, args: &[&str], deadline: Instant) -> anyhow::Result<Recorder> {
        let what = format!("record {}", args.join(" "));
        let mut command = Command::new(daemon.as_ref());
        command.arg("record").args(args);
        let mut proc = Proc::spawn(piped(&mut command), &what)?;
        let stdout = Slurp::read(proc.take_stdout().context("record's stdout")?);
        let stderr = Lines::read(proc.take_stderr().context("record's stderr")?);
        let mut recorder = Recorder { proc, stdout, stderr, what };
        recorder.stderr.wait_for("attached", deadline).with_context(|| format!("{} did not attach", recorder.what))?;
        Ok(recorder)
    }

    /// SIGINT: it reports what it measured and detaches. Returns its stdout.
    pub fn stop(self) -> anyhow::Result<String> {
        self.stop_with(libc::SIGINT)
    }

    /// The same with `signal` (SIGTERM must behave as SIGINT does).
    pub fn stop_with(mut self, signal: i32) -> anyhow::Result<String> {
        let status = self.proc.stop(signal, STOP_LIMIT)?;
        let stdout = self.stdout.text();
        let stderr = self.stderr.rest();
        if !status.success() {
            bail!("{} failed ({status}): {}", self.what, stderr.join("\n"));
        }
        Ok(stdout)
    }
}
