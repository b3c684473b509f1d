//! Independent views of the same quantity: the kernel's own `run_delay` and `perf sched latency`.
use std::{
    collections::HashMap,
    process::{Command, Stdio},
    time::Duration,
};

use super::Guarded;

/// `/proc/<pid>/task/<tid>/schedstat`: (time on CPU, time waiting on a run queue, timeslices).
pub fn schedstat(tid: u32) -> (u64, u64, u64) {
    let pid = std::process::id();
    let path = format!("/proc/{pid}/task/{tid}/schedstat");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let v: Vec<u64> = text.split_whitespace().map(|f| f.parse().unwrap()).collect();
    (v[0], v[1], v[2])
}

/// `perf sched record -a` in the background.
pub struct PerfSched {
    proc: Guarded,
    file: std::path::PathBuf,
}

/// One row of `perf sched latency -p`.
#[derive(Clone, Debug)]
pub struct PerfLatency {
    pub comm: String,
    pub switches: u64,
    pub avg_ms: f64,
    pub max_ms: f64,
}

impl PerfSched {
    pub fn start(dir: &std::path::Path) -> PerfSched {
        super::ensure_tracefs();
        let file = dir.join("perf-sched.data");
        let child = Command::new("perf")
            .args(["sched", "record", "-a", "-m", "16M", "-o"])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn perf (cargo xtask setup installs linux-perf)");
        let p = PerfSched { proc: Guarded { child, what: "perf sched record" }, file };
        // perf needs a moment to open its events on every CPU.
        std::thread::sleep(Duration::from_millis(1500));
        p
    }

    /// Stop recording and return `perf sched latency -p` rows by tid.
    pub fn stop(mut self) -> HashMap<u32, PerfLatency> {
        self.proc.signal(libc::SIGINT);
        let status = self.proc.wait_timeout(Duration::from_secs(30)).expect("perf sched record did not stop");
        let mut err = String::new();
        if let Some(mut e) = self.proc.child.stderr.take() {
            use std::io::Read as _;
            let _ = e.read_to_string(&mut err);
        }
        assert!(
            status.success() || status.code() == Some(130) || status.code().is_none(),
            "perf record: {status} {err}"
        );
        assert!(!err.contains("lost"), "perf lost events, its numbers are incomplete: {err}");
        let out = Command::new("perf").args(["sched", "latency", "-p", "-i"]).arg(&self.file).output().unwrap();
        assert!(out.status.success(), "perf sched latency: {}", String::from_utf8_lossy(&out.stderr));
        parse_latency(&String::from_utf8_lossy(&out.stdout))
    }
}

/// Rows look like `  comm:tid | 12.3 ms | 45 | avg: 1.234 ms | max: 5.678 ms | …`.
pub fn parse_latency(text: &str) -> HashMap<u32, PerfLatency> {
    let mut rows = HashMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split('|').map(str::trim).collect();
        if fields.len() < 5 || !fields[3].starts_with("avg:") {
            continue;
        }
        let Some((comm, tid)) = fields[0].rsplit_once(':') else { continue };
        let Ok(tid) = tid.parse::<u32>() else { continue };
        let ms = |f: &str, tag: &str| -> f64 {
            f.trim_start_matches(tag).trim().trim_end_matches("ms").trim().parse().unwrap()
        };
        rows.insert(
            tid,
            PerfLatency {
                comm: comm.to_string(),
                switches: fields[2].parse().unwrap_or(0),
                avg_ms: ms(fields[3], "avg:"),
                max_ms: ms(fields[4], "max:"),
            },
        );
    }
    rows
}
