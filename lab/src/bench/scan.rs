//! What the wait scan costs: the daemon's own `runqlat_wait_scan_seconds_total` over
//! `runqlat_wait_scans_total` (one scan per drain: the kernel's task iterator over every task, and
//! reading its records), with the host's tasks alone, with 10,000 more sleeping threads, and with
//! those at `kernel.pid_max` 4194304 (restored afterwards). The stamps array grows with pid_max;
//! the scan walks tasks, not stamps, so its cost should follow the tasks.
use std::{
    sync::{Arc, Barrier},
    thread,
    time::Duration,
};

use crate::daemon::Daemon;
use crate::guard::Sysctl;
use crate::web;

/// Threads added for the "10 k tasks" cases.
const THREADS: usize = 10_000;

#[derive(Debug)]
pub struct ScanCost {
    pub case: String,
    pub tasks: usize,
    pub pid_max: String,
    pub scans: f64,
    pub us_per_scan: f64,
}

/// Tasks on the host now (every thread of every process).
fn tasks() -> usize {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .map(|pid| std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |t| t.count()))
                .sum()
        })
        .unwrap_or(0)
}

/// 10,000 threads that sleep until the returned barrier is passed by the caller.
fn sleepers() -> anyhow::Result<(Arc<Barrier>, Vec<thread::JoinHandle<()>>)> {
    let gate = Arc::new(Barrier::new(THREADS + 1));
    let mut handles = Vec::with_capacity(THREADS);
    for _ in 0..THREADS {
        let g = Arc::clone(&gate);
        handles.push(thread::Builder::new().stack_size(64 * 1024).spawn(move || {
            g.wait();
        })?);
    }
    Ok((gate, handles))
}

fn one(daemon: &std::path::Path, case: &str) -> anyhow::Result<ScanCost> {
    let ours = Daemon::start_attached(daemon, &["--interval", "100ms"])?;
    thread::sleep(Duration::from_millis(500));
    let before = ours.metrics()?;
    thread::sleep(Duration::from_secs(5));
    let after = ours.metrics()?;
    drop(ours);
    let delta = |name: &str| web::total(&after, name) - web::total(&before, name);
    let scans = delta("runqlat_wait_scans_total");
    let seconds = delta("runqlat_wait_scan_seconds_total");
    anyhow::ensure!(scans > 0.0, "{case}: the daemon ran no wait scan (runqlat_wait_scans_total did not move)");
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")?.trim().to_owned();
    Ok(ScanCost { case: case.to_owned(), tasks: tasks(), pid_max, scans, us_per_scan: seconds / scans * 1e6 })
}

pub fn measure(daemon: &std::path::Path) -> anyhow::Result<Vec<ScanCost>> {
    println!(
        "bench: the wait scan's cost (5 s at 10 scans/s per case: host tasks; +{THREADS} threads; at pid_max 4194304)…"
    );
    let mut rows = vec![one(daemon, "the host's tasks")?];
    let (gate, handles) = sleepers()?;
    let many = one(daemon, "+10 k sleeping threads");
    let wide = Sysctl::set("kernel.pid_max", "4194304").and_then(|mut guard| {
        let row = one(daemon, "+10 k threads, pid_max 4194304");
        guard.restore()?;
        row
    });
    gate.wait();
    for h in handles {
        let _ = h.join();
    }
    rows.push(many?);
    rows.push(wide?);
    Ok(rows)
}

pub fn table(rows: &[ScanCost]) -> String {
    let mut out = String::from("| case | tasks | pid_max | scans | µs per scan |\n|---|---:|---:|---:|---:|\n");
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.0} |\n",
            r.case, r.tasks, r.pid_max, r.scans, r.us_per_scan
        ));
    }
    out
}
