//! perf's own trace of the irq tracepoints on one CPU, an oracle for the IRQ time the daemon
//! times with `--irq-tracepoints`: in, a CPU and a trace file; out, the time that CPU spent in
//! device IRQ handlers and softirqs while perf traced it (a hard IRQ inside a softirq counted
//! once), and perf's complaint about lost events.
use std::path::{Path, PathBuf};
use std::process::Command;

use super::perf::Recording;
use crate::cmd;

const EVENTS: &str = "irq:irq_handler_entry,irq:irq_handler_exit,irq:softirq_entry,irq:softirq_exit";

#[derive(Debug)]
pub struct PerfIrq {
    recording: Recording,
    file: PathBuf,
}

#[derive(Debug, Clone)]
pub struct IrqTrace {
    /// Time in IRQ handlers and softirqs, seconds.
    pub irq_s: f64,
    /// Entries and exits in the trace.
    pub events: u64,
    /// perf's own complaint about lost events, if any.
    pub lost: Option<String>,
}

impl PerfIrq {
    /// `perf record` of the four irq tracepoints on CPU `cpu` into `file`.
    pub fn start(cpu: usize, file: &Path) -> anyhow::Result<PerfIrq> {
        let cpu = cpu.to_string();
        let args = ["record", "-q", "-e", EVENTS, "-C", &cpu, "-m", "64M", "-o"];
        Ok(PerfIrq { recording: Recording::start(&args, file, "perf record (irq)")?, file: file.to_owned() })
    }

    /// Returns once perf has had the time it needs to open its events.
    pub fn wait_ready(&mut self) -> anyhow::Result<()> {
        self.recording.wait_ready()
    }

    /// SIGINT (perf finishes its file), then the trace's IRQ time.
    pub fn stop(self) -> anyhow::Result<IrqTrace> {
        let lost = self.recording.stop()?;
        let mut script = Command::new("perf");
        // Nanoseconds: a softirq here lasts about a microsecond, and perf's default microsecond
        // times (truncated) made its sum 10–60 % short.
        script.args(["script", "-F", "time,event", "--ns", "-i"]).arg(&self.file);
        let (irq_s, events) = irq_seconds(&cmd::stdout(&mut script)?);
        Ok(IrqTrace { irq_s, events, lost })
    }
}

/// `perf script -F time,event --ns` lines (`  70508.055425123:     irq:softirq_entry: `) of one
/// CPU: the time from each softirq's entry to its exit, plus each handler's that did not run
/// inside a softirq (one inside is part of the softirq's time). An exit without its entry (the
/// trace began inside it) is skipped, and so is an entry left open at the end.
pub fn irq_seconds(text: &str) -> (f64, u64) {
    let (mut soft, mut hard, mut total, mut events) = (None::<f64>, None::<f64>, 0.0f64, 0u64);
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(time), Some(event)) = (fields.next(), fields.next()) else { continue };
        let Ok(t) = time.trim_end_matches(':').parse::<f64>() else { continue };
        events += 1;
        match event {
            "irq:softirq_entry:" => soft = Some(t),
            "irq:irq_handler_entry:" => hard = Some(t),
            "irq:softirq_exit:" => total += soft.take().map_or(0.0, |s| t - s),
            "irq:irq_handler_exit:" => {
                let began = hard.take();
                if soft.is_none() {
                    total += began.map_or(0.0, |s| t - s);
                }
            }
            _ => events -= 1,
        }
    }
    (total, events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handler_inside_a_softirq_counts_once_and_an_unmatched_exit_is_skipped() {
        let text = "\
            100.000000000:      irq:softirq_exit: \n\
            100.000010000:     irq:softirq_entry: \n\
            100.000020000: irq:irq_handler_entry: \n\
            100.000030000:  irq:irq_handler_exit: \n\
            100.000050500:      irq:softirq_exit: \n\
            100.000100000: irq:irq_handler_entry: \n\
            100.000104000:  irq:irq_handler_exit: \n\
            100.000200000:     irq:softirq_entry: \n";
        let (s, events) = irq_seconds(text);
        assert!((s - 44.5e-6).abs() < 1e-10, "{s}");
        assert_eq!(events, 8);
    }
}
