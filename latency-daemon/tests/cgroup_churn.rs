//! Cgroups that come and go at 1,000 a second for 60 s beside 300 that stay, under the cgroup2
//! mount (found in mountinfo), with the default per-cgroup maps (`--max-cgroups 1024`): each
//! short-lived cgroup gets a process that wakes every millisecond for a few milliseconds (a
//! wakeup delay or more inside it), then is left and removed. No delay may be lost to a full map,
//! no removal may be missed, every removed cgroup is retired and its delays reach the `other`
//! series, no log line per cgroup, series bounded, RSS flat, and every cgroup's wait split by
//! holder adds up to its delay time.
//!
//! `LAB_CHURN_SECONDS`, `LAB_CHURN_RATE`, `LAB_CHURN_LIVE` and `LAB_CHURN_MAX`
//! change the form (the figures in docs/design.md come from these defaults and a few others).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use latency_lab::{
    daemon::Daemon,
    oracle::run_delay::process_cpu_seconds,
    services::{TestCgroup, Waker},
    web::sample,
};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");

/// Threads creating and removing cgroups, each with its own waker to move in and out.
const CHURNERS: u64 = 8;
/// How long a short-lived cgroup holds its waker (about three wakeups).
const INSIDE: Duration = Duration::from_millis(3);

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn rss_kib(pid: u32) -> f64 {
    latency_lab::daemon::status_kib(pid, "VmRSS:").unwrap_or_else(|e| panic!("{e:#}"))
}

fn metric(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no {series} in the exposition"))
}

fn sum_of(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// `live` cgroups that stay, each with a process waking every 100 ms.
fn stayers(parent: &TestCgroup, live: u64) -> Vec<(Waker, TestCgroup)> {
    (0..live)
        .map(|i| {
            let cg = parent.child(&format!("live{i}")).expect("a live cgroup");
            let waker = Waker::spawn(Duration::from_millis(100)).expect("a waker");
            cg.enter(waker.pid()).expect("the waker moves in");
            (waker, cg)
        })
        .collect()
}

/// Cgroups created and removed under `parent` at `rate` a second for `seconds`, by `CHURNERS`
/// threads each moving its waker into a new cgroup for `INSIDE`, back `home`, and removing it;
/// `meanwhile` runs on this thread. Returns how many were created (and removed).
fn churn(parent: &TestCgroup, home: &TestCgroup, rate: u64, seconds: u64, meanwhile: impl FnOnce()) -> u64 {
    let created = AtomicU64::new(0);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    std::thread::scope(|s| {
        for k in 0..CHURNERS {
            let created = &created;
            s.spawn(move || {
                let waker = Waker::spawn(Duration::from_millis(1)).expect("a waker");
                home.enter(waker.pid()).expect("the waker moves home");
                let per_thread = rate as f64 / CHURNERS as f64;
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let due = started + Duration::from_secs_f64(n as f64 / per_thread);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let cg = parent.child(&format!("t{k}-{n}")).expect("a short-lived cgroup");
                    cg.enter(waker.pid()).expect("the waker moves in");
                    std::thread::sleep(INSIDE);
                    home.enter(waker.pid()).expect("the waker moves out");
                    // Dropping the guard removes the directory.
                    drop(cg);
                    created.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            });
        }
        meanwhile();
    });
    created.load(Ordering::Relaxed)
}

#[test]
fn cgroups_coming_and_going_fast_lose_nothing() {
    let seconds = env_or("LAB_CHURN_SECONDS", 60);
    let rate = env_or("LAB_CHURN_RATE", 1000);
    let live = env_or("LAB_CHURN_LIVE", 300);
    let max = env_or("LAB_CHURN_MAX", 1024).to_string();
    let daemon =
        Daemon::start(DAEMON, &["--interval", "1s", "--window", "5s", "--max-cgroups", &max, "--top-cgroups", "1000"])
            .expect("the daemon starts");
    let parent = TestCgroup::new("churn").expect("a test cgroup");
    let home = parent.child("home").expect("a home for the churners' wakers");

    // The cgroups that stay, each with a process waking every 100 ms: slots and overflow
    // entries the churn must not push out.
    let stayers = stayers(&parent, live);
    std::thread::sleep(Duration::from_secs(2));
    let rss_before = rss_kib(daemon.pid());

    let cpu_before = process_cpu_seconds(daemon.pid()).unwrap();
    let started = Instant::now();
    let mut rss_mid = 0.0;
    let created = churn(&parent, &home, rate, seconds, || {
        std::thread::sleep(Duration::from_secs(seconds / 2));
        rss_mid = rss_kib(daemon.pid());
    });
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = (process_cpu_seconds(daemon.pid()).unwrap() - cpu_before) / elapsed;
    // A window closes after the last removal: the removed cgroups' last deltas are in `other`.
    std::thread::sleep(Duration::from_secs(7));
    let text = daemon.metrics().unwrap();
    let rss_end = rss_kib(daemon.pid());
    drop(stayers);

    let lost = metric(&text, "runqlat_lost_total{map=\"cgroups\"}");
    let missed = metric(&text, "runqlat_lost_total{map=\"cgroup_removed\"}");
    let retired = metric(&text, "runqlat_cgroups_pruned_total");
    let series = text.lines().filter(|l| l.starts_with("runqlat_cgroup_delay_seconds_count{")).count();
    let other = metric(&text, "runqlat_cgroup_delay_seconds_count{cgroup=\"other\"}");
    let by_cgroup = sum_of(&text, "runqlat_cgroup_delay_seconds_count{");
    let machine = sum_of(&text, "runqlat_delay_seconds_count{");
    let lines = daemon.log().len();
    let drains = metric(&text, "runqlat_drain_duration_seconds_count");
    let drain_ms = metric(&text, "runqlat_drain_duration_seconds_sum") / drains * 1e3;
    println!("cgroup churn: drains took {drain_ms:.1} ms on average ({drains} drains)");
    println!(
        "cgroup churn: {created} cgroups created and removed in {elapsed:.1} s ({:.0}/s) beside {live} live \
         (--max-cgroups {max}): lost {lost}, removals missed {missed}, retired {retired}, {series} cgroup series, \
         {other} delays in other, {by_cgroup} in all cgroup series vs {machine} machine-wide, RSS {:.1} MiB before, \
         {:.1} MiB at half time, {:.1} MiB at the end, daemon CPU {:.1} % of a core ({} build), {lines} log lines",
        created as f64 / elapsed,
        rss_before / 1024.0,
        rss_mid / 1024.0,
        rss_end / 1024.0,
        cpu * 100.0,
        if cfg!(debug_assertions) { "debug" } else { "release" }
    );
    assert!(
        created as f64 >= 0.9 * rate as f64 * seconds as f64,
        "the churn reached only {created} cgroups of {} planned: this machine could not keep the rate",
        rate * seconds
    );
    assert_eq!(lost, 0.0, "delays lost to a full per-cgroup map");
    assert_eq!(missed, 0.0, "removals the kernel's ring had no room for");
    assert!(retired >= created as f64, "only {retired} of {created} removed cgroups retired");
    // Each short-lived cgroup held a waker for ~3 wakeups: their delays must be somewhere.
    assert!(other >= created as f64, "{other} delays in other for {created} removed cgroups");
    assert!(lines < 20, "{lines} log lines: one per cgroup?\n{:#?}", daemon.log());
    assert!(rss_end < rss_mid * 1.25 + 4096.0, "RSS grew from {rss_mid} KiB to {rss_end} KiB");
    assert!(series <= 1001, "{series} series with --top-cgroups 1000");
    // Why it waited, through slots, the overflow map and retirement alike: every cgroup's split
    // by cause adds up to its delay time.
    let mut checked = 0;
    for line in text.lines().filter(|l| l.starts_with("runqlat_cgroup_delay_seconds_sum{")) {
        let (series, waited) = line.rsplit_once(' ').unwrap();
        let waited: f64 = waited.parse().unwrap();
        let labels = series.trim_start_matches("runqlat_cgroup_delay_seconds_sum{").trim_end_matches('}');
        let (cgroup, rest) = labels.split_once(',').unwrap_or((labels, ""));
        let rest = if rest.is_empty() { String::new() } else { format!(",{rest}") };
        let by: f64 = ["throttled", "irq_steal", "same", "other", "kernel", "idle"]
            .iter()
            .map(|c| metric(&text, &format!("runqlat_cgroup_wait_cause_seconds_total{{{cgroup},cause=\"{c}\"{rest}}}")))
            .sum();
        assert!((by - waited).abs() <= 1e-6 * waited.max(1.0), "{series}: {waited} s waited, {by} s by cause");
        checked += 1;
    }
    assert!(checked > 1, "{checked} cgroup series checked");
    daemon.stop().unwrap();
}

/// The daemon stopped (SIGSTOP) for 12 s while cgroups come and go at 1,000 a second: the kernel's
/// ring of removals fills. What it could not hold is counted and logged once, never silent; once
/// the daemon runs again, a sweep of the maps against a walk of the hierarchy retires the removed
/// cgroups the ring lost, and the churn that follows loses no delay.
#[test]
fn removals_missed_while_stopped_are_counted_then_swept() {
    let daemon = Daemon::start(DAEMON, &["--interval", "1s", "--window", "5s", "--top-cgroups", "1000"])
        .expect("the daemon starts");
    let parent = TestCgroup::new("churn-stop").expect("a test cgroup");
    let home = parent.child("home").expect("a home for the churners' wakers");
    let stayers = stayers(&parent, 100);
    std::thread::sleep(Duration::from_secs(2));
    let pid = daemon.pid() as libc::pid_t;
    let lost = |t: &str| metric(t, "runqlat_lost_total{map=\"cgroups\"}");
    let (mut recovered, mut later, mut took) = (String::new(), String::new(), Duration::ZERO);
    let created = churn(&parent, &home, 1000, 45, || {
        std::thread::sleep(Duration::from_secs(5));
        // SAFETY: signals to the daemon this test started.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_secs(12));
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        // The ring drains at once; a window closes, its sweep finds the rest, a drain retires
        // them (a loaded machine may need a second window): recovered once the delays lost stay
        // put over three seconds of churn.
        let resumed = Instant::now();
        let mut before = None;
        while resumed.elapsed() < Duration::from_secs(18) {
            std::thread::sleep(Duration::from_secs(3));
            recovered = daemon.metrics().unwrap();
            took = resumed.elapsed();
            if before.replace(lost(&recovered)) == Some(lost(&recovered)) {
                break;
            }
        }
        // Then the churn goes on (to 27 s after the daemon resumed) and must lose nothing more.
        std::thread::sleep((resumed + Duration::from_secs(27)).saturating_duration_since(Instant::now()));
        later = daemon.metrics().unwrap();
    });
    std::thread::sleep(Duration::from_secs(7));
    let text = daemon.metrics().unwrap();
    drop(stayers);

    let missed = metric(&text, "runqlat_lost_total{map=\"cgroup_removed\"}");
    let retired = metric(&text, "runqlat_cgroups_pruned_total");
    let (lost_recovered, lost_later, lost_end) = (lost(&recovered), lost(&later), lost(&text));
    let log = daemon.log();
    let warned = log.iter().filter(|l| l.contains("ring of removed cgroups was full")).count();
    println!(
        "cgroup churn with the daemon stopped 12 s: {created} cgroups, removals missed {missed}, retired {retired} \
         ({:.0} by the sweep), delays lost {lost_recovered} when it recovered ({:.0} s after it resumed), \
         {lost_later} 27 s after it resumed, {lost_end} at the end; {warned} \
         warning, {} log lines",
        retired - (created as f64 - missed),
        took.as_secs_f64(),
        log.len()
    );
    assert!(missed > 0.0, "the ring never filled: the daemon was not stopped long enough?");
    assert_eq!(warned, 1, "one warning for a full ring, not {warned}:\n{log:#?}");
    // Every removal the ring held is retired, plus those of the missed ones that still held an
    // entry (the sweep); a missed one whose delays all found the maps full has nothing to retire.
    let swept = retired - (created as f64 - missed);
    assert!(swept > 0.0, "{retired} retired for {created} removed, {missed} missed: the sweep retired none");
    assert!(retired <= created as f64 + 50.0, "{retired} retired for {created} removed: some counted twice");
    assert_eq!(lost_later, lost_recovered, "delays lost after the daemon recovered");
    assert_eq!(lost_end, lost_recovered, "delays lost after the daemon recovered");
    assert!(log.len() < 20, "{} log lines: one per cgroup?\n{log:#?}", log.len());
    daemon.stop().unwrap();
}
