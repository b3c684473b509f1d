//! The daemon's own cost during a scheduler storm: its CPU (% of one core), resident memory,
//! `/metrics` latency over 1000 scrapes, and the average drain.
use std::{
    path::Path,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use crate::daemon::{Daemon, status_kib};
use crate::guard::Proc;
use crate::oracle::run_delay;
use crate::web;

#[derive(Debug)]
pub struct Cost {
    pub cpu_percent: f64,
    pub rss_mib: f64,
    pub peak_rss_mib: f64,
    pub metrics_p50_ms: f64,
    pub metrics_p99_ms: f64,
    pub drain_avg_us: f64,
    pub switches_per_s: f64,
}

/// CPU time of every thread of `pid` in seconds, to the nanosecond, from schedstat (utime +
/// stime would be in 10 ms ticks, which a 10 s sample of a daemon this cheap rounds to 0).
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    Ok(run_delay::process_cpu_ns(pid)? as f64 / 1e9)
}

pub fn measure(daemon: &Path) -> anyhow::Result<Cost> {
    println!("bench: the daemon during a storm (10 s, scraped every second), then 1000 scrapes…");
    let ours = Daemon::start_attached(daemon, &["--interval", "1s"])?;
    let pid = ours.pid();
    // The worst case, as in the pairs: both ends of the pipe on one CPU.
    let mut storm = Command::new("taskset");
    storm.args(["-c", "1", "perf", "bench", "sched", "pipe", "-l", "1000000000"]);
    let _storm = Proc::spawn(storm.stdout(Stdio::null()).stderr(Stdio::null()), "perf bench sched pipe")?;
    thread::sleep(Duration::from_secs(2));
    let before = ours.metrics()?;
    let (cpu0, t0) = (cpu_seconds(pid)?, Instant::now());
    for _ in 0..10 {
        thread::sleep(Duration::from_secs(1));
        ours.metrics()?;
    }
    let (cpu1, wall) = (cpu_seconds(pid)?, t0.elapsed().as_secs_f64());
    let after = ours.metrics()?;
    let rss = status_kib(pid, "VmRSS:")?;
    let mut times = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        ours.metrics()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let peak = status_kib(pid, "VmHWM:")?;
    let delta = |name: &str| web::total(&after, name) - web::total(&before, name);
    let drains = delta("runqlat_drain_duration_seconds_count");
    let drain_s = delta("runqlat_drain_duration_seconds_sum");
    let switches = delta("runqlat_context_switches_total");
    drop(ours);
    Ok(Cost {
        cpu_percent: 100.0 * (cpu1 - cpu0) / wall,
        rss_mib: rss / 1024.0,
        peak_rss_mib: peak / 1024.0,
        metrics_p50_ms: times[times.len() / 2],
        metrics_p99_ms: times[times.len() * 99 / 100],
        drain_avg_us: if drains > 0.0 { drain_s / drains * 1e6 } else { f64::NAN },
        switches_per_s: switches / wall,
    })
}

impl Cost {
    pub fn table(&self) -> String {
        format!(
            "daemon CPU {:.3} % of one core at {:.0} switches/s; RSS {:.1} MiB (peak {:.1} MiB); \
             /metrics p50 {:.2} ms, p99 {:.2} ms (1000 scrapes); drain {:.0} µs on average\n",
            self.cpu_percent,
            self.switches_per_s,
            self.rss_mib,
            self.peak_rss_mib,
            self.metrics_p50_ms,
            self.metrics_p99_ms,
            self.drain_avg_us
        )
    }

    pub fn json(&self) -> String {
        format!(
            "{{\"cpu_percent\":{:.3},\"rss_mib\":{:.2},\"peak_rss_mib\":{:.2},\"metrics_p50_ms\":{:.3},\"metrics_p99_ms\":{:.3},\"drain_avg_us\":{:.1},\"switches_per_s\":{:.0}}}",
            self.cpu_percent,
            self.rss_mib,
            self.peak_rss_mib,
            self.metrics_p50_ms,
            self.metrics_p99_ms,
            self.drain_avg_us,
            self.switches_per_s
        )
    }
}
