//! libbpf-tools `runqlat`, an oracle with programs of its own on the same tracepoints: in, its
//! arguments (`-p PID`, or an interval to keep it quiet); out, a running tracer and, on SIGINT,
//! its log2-µs histogram.
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::guard::{Lines, Proc, piped};

const STOP_LIMIT: Duration = Duration::from_secs(30);

/// `runqlat ARGS`, attached once `wait_ready` returns; detached when dropped.
#[derive(Debug)]
pub struct Runqlat {
    proc: Proc,
    stdout: Lines,
}

impl Runqlat {
    pub fn start(args: &[&str]) -> anyhow::Result<Runqlat> {
        // stdbuf: runqlat's stdout is a pipe here, and its "Tracing…" line (printed once its
        // programs are attached) would otherwise sit in the stdio buffer until it exits.
        let mut command = Command::new("stdbuf");
        command.args(["-oL", "runqlat"]).args(args);
        let mut proc = Proc::spawn(piped(&mut command), "runqlat")?;
        let stdout = Lines::read(proc.take_stdout().context("runqlat's stdout")?);
        Ok(Runqlat { proc, stdout })
    }

    pub fn wait_ready(&mut self, deadline: Instant) -> anyhow::Result<()> {
        self.stdout.wait_for("Tracing", deadline).context("runqlat did not start tracing")
    }

    /// SIGINT: it prints its histogram and exits. Returns counts by log2 slot.
    pub fn stop(mut self) -> anyhow::Result<Vec<u64>> {
        let status = self.proc.stop(libc::SIGINT, STOP_LIMIT)?;
        let text = self.stdout.rest().join("\n");
        if !status.success() {
            bail!("runqlat failed ({status}): {text}");
        }
        Ok(parse_runqlat(&text))
    }
}

/// `  low -> high : count |***|` rows: slot k holds ⌊delay in µs⌋ in [2^k, 2^(k+1)), slot 0 also
/// holds 0 µs (runqlat takes log2 of the truncated µs value, with log2(0) = 0).
pub fn parse_runqlat(text: &str) -> Vec<u64> {
    let mut slots = Vec::new();
    for line in text.lines() {
        let Some((range, rest)) = line.split_once(':') else { continue };
        let Some((low, _high)) = range.split_once("->") else { continue };
        let (Ok(low), Some(Ok(count))) =
            (low.trim().parse::<u64>(), rest.split('|').next().map(|c| c.trim().parse::<u64>()))
        else {
            continue;
        };
        let slot = if low == 0 { 0 } else { low.ilog2() as usize };
        if slots.len() <= slot {
            slots.resize(slot + 1, 0);
        }
        slots[slot] += count;
    }
    slots
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runqlat_slots_follow_the_low_bound() {
        let text = "Tracing run queue latency... Hit Ctrl-C to end.\n\n     usecs               : count    distribution\n\
                    \x20        0 -> 1          : 3        |****   |\n         2 -> 3          : 0        |       |\n\
                    \x20        4 -> 7          : 12       |*******|\n     16384 -> 32767      : 2        |*      |\n";
        let slots = parse_runqlat(text);
        assert_eq!(slots.len(), 15);
        assert_eq!((slots[0], slots[1], slots[2], slots[14]), (3, 0, 12, 2));
        assert_eq!(slots.iter().sum::<u64>(), 17);
    }
}
