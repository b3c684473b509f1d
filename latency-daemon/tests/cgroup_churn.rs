//! Cgroups that come and go at 30/s under the cgroup2 mount (found in mountinfo), each with a
//! short-lived process that waits on a run queue inside it, while the daemon runs with small
//! per-cgroup maps and `--top-cgroups 1000`: no delay may be lost to a full map, every removed
//! cgroup is retired promptly, no log line per cgroup, series bounded, RSS flat, and every
//! cgroup's wait split by holder adds up to its delay time.
//!
//! CI runs 20 s with `--max-cgroups 256` (600 cgroups: more than the slots and the overflow map
//! hold, so removed cgroups must be reclaimed); `RUNQLAT_CHURN_SECONDS=60 RUNQLAT_CHURN_MAX=1024`
//! is the measurement README's "cgroup churn" quotes (about 2,000 cgroups with the default maps).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use latency_lab::{daemon::Daemon, guard::Proc, services::TestCgroup, web::sample};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn rss_kib(pid: u32) -> f64 {
    latency_lab::daemon::status_kib(pid, "VmRSS:").unwrap_or_else(|e| panic!("{e:#}"))
}

fn metric(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no {series} in the exposition"))
}

#[test]
fn cgroups_coming_and_going_lose_no_delay() {
    let seconds = env_or("RUNQLAT_CHURN_SECONDS", 20);
    let max = env_or("RUNQLAT_CHURN_MAX", 256).to_string();
    let daemon =
        Daemon::start(DAEMON, &["--interval", "1s", "--window", "5s", "--max-cgroups", &max, "--top-cgroups", "1000"])
            .expect("the daemon starts");
    let parent = TestCgroup::new("churn").expect("a test cgroup");

    // 30 cgroups a second; each lives while its process sleeps 10 ms (one wakeup delay inside
    // it, at least) and is removed right after. A few live at any moment.
    let started = Instant::now();
    let mut live: Vec<(TestCgroup, Proc)> = Vec::new();
    let (mut created, mut rss_mid) = (0u64, 0.0);
    while started.elapsed() < Duration::from_secs(seconds) {
        let due = started + Duration::from_millis(created * 1000 / 30);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let cg = parent.child(&format!("c{created}")).expect("a child cgroup");
        let proc = cg.spawn(&["sleep", "0.01"]).expect("a sleeper in the child");
        live.push((cg, proc));
        created += 1;
        // Reap the finished ones, oldest first; dropping the guard removes the directory.
        live.retain_mut(|(_, p)| !p.exited());
        if rss_mid == 0.0 && started.elapsed() >= Duration::from_secs(seconds / 2) {
            rss_mid = rss_kib(daemon.pid());
        }
    }
    drop(live);
    // Two drains: the last removals are retired.
    std::thread::sleep(Duration::from_secs(3));
    let text = daemon.metrics().unwrap();
    let rss_end = rss_kib(daemon.pid());

    let lost = metric(&text, "runqlat_lost_total{map=\"cgroups\"}");
    let lines = daemon.log().len();
    println!(
        "cgroup churn: {created} cgroups in {seconds} s (--max-cgroups {max}): lost {lost}, RSS {:.1} MiB at half \
         time, {:.1} MiB at the end, {lines} log lines",
        rss_mid / 1024.0,
        rss_end / 1024.0
    );
    assert_eq!(lost, 0.0, "delays lost to a full per-cgroup map");
    assert!(lines < 20, "{lines} log lines: one per cgroup?\n{:#?}", daemon.log());
    assert!(rss_end < rss_mid * 1.25 + 4096.0, "RSS grew from {rss_mid} KiB to {rss_end} KiB");
    let missed = metric(&text, "runqlat_lost_total{map=\"cgroup_removed\"}");
    let retired = metric(&text, "runqlat_cgroups_pruned_total");
    let series = text.lines().filter(|l| l.starts_with("runqlat_cgroup_delay_seconds_count{")).count();
    println!("cgroup churn: removals missed {missed}, retired {retired}, {series} cgroup series");
    assert_eq!(missed, 0.0, "removals the kernel's ring overwrote unread");
    assert!(retired >= created as f64, "only {retired} of {created} removed cgroups retired");
    assert!(series <= 1001, "{series} series with --top-cgroups 1000");
    // Who held the CPU, through slots, the overflow map and retirement alike: every cgroup's
    // split by holder adds up to its delay time.
    let mut checked = 0;
    for line in text.lines().filter(|l| l.starts_with("runqlat_cgroup_delay_seconds_sum{")) {
        let (series, waited) = line.rsplit_once(' ').unwrap();
        let waited: f64 = waited.parse().unwrap();
        let labels = series.trim_start_matches("runqlat_cgroup_delay_seconds_sum{").trim_end_matches('}');
        let (cgroup, rest) = labels.split_once(',').unwrap_or((labels, ""));
        let rest = if rest.is_empty() { String::new() } else { format!(",{rest}") };
        let by: f64 = ["same", "other", "kernel", "idle"]
            .iter()
            .map(|b| metric(&text, &format!("runqlat_cgroup_wait_by_seconds_total{{{cgroup},by=\"{b}\"{rest}}}")))
            .sum();
        assert!((by - waited).abs() <= 1e-6 * waited.max(1.0), "{series}: {waited} s waited, {by} s by holder");
        checked += 1;
    }
    assert!(checked > 1, "{checked} cgroup series checked");
    daemon.stop().unwrap();
}
