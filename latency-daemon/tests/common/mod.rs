//! Shared by the integration tests: the real daemon binary, real oracles (`perf sched`, the
//! kernel's `run_delay`, `bpftool`), named workload threads, and guards that restore the machine
//! whether a test passes or panics.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod alertmanager;
pub mod cgroup;
pub mod daemon;
pub mod oracle;
pub mod prometheus;
pub mod web;
pub mod workload;

use std::{
    io::{BufRead as _, BufReader, Read as _},
    process::{Child, ChildStdout, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

pub const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");

/// Sets a sysctl for the life of the guard and restores the old value afterwards.
pub struct Sysctl {
    path: String,
    old: String,
}

impl Sysctl {
    pub fn set(name: &str, value: &str) -> Sysctl {
        let path = format!("/proc/sys/{}", name.replace('.', "/"));
        let old = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        std::fs::write(&path, value).unwrap_or_else(|e| panic!("write {value} to {path}: {e}"));
        Sysctl { path, old: old.trim().to_string() }
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(&self.path, &self.old) {
            eprintln!("could not restore {} to {}: {e}", self.path, self.old);
        }
    }
}

/// A child process that is killed (and reaped) when the guard goes, pass or fail.
pub struct Guarded {
    pub child: Child,
    pub what: &'static str,
}

impl Guarded {
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Wait up to `limit` for exit; None if it is still running.
    pub fn wait_timeout(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `latency-daemon record …` running in the background, attached and measuring.
pub struct Recorder {
    proc: Guarded,
    stdout: Option<std::thread::JoinHandle<String>>,
    stderr: mpsc::Receiver<String>,
    pub stderr_lines: Vec<String>,
}

impl Recorder {
    /// Start `record` with `args` and return once it says it is attached.
    pub fn start(args: &[&str]) -> Recorder {
        let mut child = Command::new(DAEMON)
            .arg("record")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn latency-daemon");
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let proc = Guarded { child, what: "latency-daemon record" };
        let out = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = BufReader::new(stdout).read_to_string(&mut s);
            s
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut r = Recorder { proc, stdout: Some(out), stderr: rx, stderr_lines: Vec::new() };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match r.stderr.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    let attached = line.contains("attached");
                    r.stderr_lines.push(line);
                    if attached {
                        return r;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("latency-daemon record exited before attaching: {:?}", r.stderr_lines)
                }
            }
            assert!(Instant::now() < deadline, "latency-daemon record did not attach in 30 s: {:?}", r.stderr_lines);
        }
    }

    /// Stop it with SIGINT (it reports what it measured) and return its stdout.
    pub fn stop(self) -> String {
        self.stop_with(libc::SIGINT)
    }

    /// Stop it with `signal` and return its stdout.
    pub fn stop_with(mut self, signal: i32) -> String {
        self.proc.signal(signal);
        let status = self.proc.wait_timeout(Duration::from_secs(20)).expect("record did not exit after SIGINT");
        let out = self.stdout.take().unwrap().join().unwrap();
        while let Ok(line) = self.stderr.try_recv() {
            self.stderr_lines.push(line);
        }
        assert!(status.success(), "record failed: {status}; stderr: {:?}", self.stderr_lines);
        out
    }
}

/// Panics if a program of ours is still loaded: a program that uses a map named STAMPS, or
/// such a map. Uses bpftool, an independent view of the kernel. The kernel frees programs and
/// maps a little after their last fd closes (RCU, a work queue), so this waits up to 5 s.
pub fn assert_nothing_attached() {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match leftovers() {
            None => return,
            Some(what) if Instant::now() > deadline => panic!("still loaded 5 s after exit: {what}"),
            Some(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn leftovers() -> Option<String> {
    let progs = bpftool(&["prog", "show"]);
    let maps = bpftool(&["map", "show"]);
    let ours: std::collections::HashSet<u64> =
        maps.as_array().unwrap().iter().filter(|m| m["name"] == "STAMPS").filter_map(|m| m["id"].as_u64()).collect();
    let leftover: Vec<String> = progs
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["map_ids"].as_array().is_some_and(|ids| ids.iter().filter_map(|i| i.as_u64()).any(|i| ours.contains(&i)))
        })
        .map(|p| format!("{} (id {})", p["name"], p["id"]))
        .collect();
    if leftover.is_empty() && ours.is_empty() {
        None
    } else {
        Some(format!("programs {leftover:?}, STAMPS maps {ours:?}"))
    }
}

fn bpftool(args: &[&str]) -> serde_json::Value {
    let out =
        Command::new("bpftool").arg("-j").args(args).output().expect("run bpftool (cargo xtask setup installs it)");
    assert!(out.status.success(), "bpftool {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim().is_empty() {
        return serde_json::Value::Array(Vec::new());
    }
    serde_json::from_str(&text).expect("bpftool JSON")
}

/// tracefs where perf looks for event formats.
pub fn ensure_tracefs() {
    if !std::path::Path::new("/sys/kernel/tracing/events/sched").exists() {
        let status = Command::new("mount").args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"]).status().unwrap();
        assert!(status.success(), "mount tracefs");
    }
}
