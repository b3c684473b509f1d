//! A rare condition in the kernel program reaches the daemon's log through aya-log: a per-task
//! map of one entry is full at once, and the kernel says so (once per CPU, then rate-limited),
//! while the count stays in `runqlat_lost_total{map="tasks"}`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use latency_lab::{daemon::Daemon, web::sample};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");

#[test]
fn a_full_map_in_the_kernel_is_one_rate_limited_log_line_per_cpu() {
    let daemon =
        Daemon::start(DAEMON, &["--interval", "1s", "--per-task", "--max-tasks", "1"]).expect("the daemon starts");
    let line = "kernel: the per-task map is full";
    let deadline = Instant::now() + Duration::from_secs(10);
    while !daemon.log().iter().any(|l| l.contains(line)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    let log = daemon.log();
    let lines = log.iter().filter(|l| l.contains(line)).count();
    let lost = sample(&daemon.metrics().unwrap(), "runqlat_lost_total{map=\"tasks\"}").unwrap();
    println!("kernel diagnostics: {lines} line(s) for {lost} tasks lost:\n{}", log.join("\n"));
    assert!(lines >= 1, "no kernel line {line:?} in the log:\n{}", log.join("\n"));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(lines <= cpus, "{lines} lines on {cpus} CPUs within 10 s: not rate-limited");
    assert!(lost > lines as f64, "{lost} lost, {lines} lines: every loss logged?");
    daemon.stop().unwrap();
}
