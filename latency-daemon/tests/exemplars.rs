//! Exemplars name the worst task, end to end: a nice-19 sleeper with a known comm shares one CPU
//! with a nice −10 hog, so its wakeups wait the longest; real Prometheus servers with exemplar
//! storage scrape the daemon, and their exemplars API must return, for each window whose worst
//! wakeup was the sleeper's, that wait exactly as the daemon's own report (`/api/v1/snapshot`'s
//! `window_max`) has it: tid, comm, value and timestamp. Prometheus 2.53 scrapes protobuf (classic
//! buckets and the native histogram), Debian's 2.42 OpenMetrics (classic only). Needs root.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use latency_lab::{
    daemon::Daemon,
    guard::Proc,
    services::{Prometheus, Setup},
    workload::cpus,
};
use serde_json::Value;

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");
const VICTIM: &str = "rqx-victim";

/// One window's worst wakeup, as the daemon's report gives it.
#[derive(Debug, Clone, PartialEq)]
struct Worst {
    delay_ns: u64,
    end_unix_ns: u64,
    tid: u32,
    comm: String,
}

/// One exemplar as Prometheus returns it, with the series it is on.
#[derive(Debug)]
struct Stored {
    series: Value,
    labels: Value,
    value: f64,
    at: f64,
}

fn now_unix() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs_f64()
}

fn spawn(argv: &[&str], what: &str) -> Proc {
    let mut command = Command::new(argv[0]);
    command.args(&argv[1..]).stdout(Stdio::null()).stderr(Stdio::null());
    Proc::spawn(&mut command, what).unwrap_or_else(|e| panic!("{e:#}"))
}

/// The last closed window's worst wakeup (None: no report yet, or no wakeup), keyed by the
/// window's end.
fn worst_wakeup(daemon: &Daemon) -> Option<(u64, Option<Worst>)> {
    let r = daemon.get("/api/v1/snapshot").ok().filter(|r| r.status == 200)?;
    let v: Value = serde_json::from_slice(&r.body).expect("snapshot JSON");
    let end = v["end_ns"].as_u64()?;
    let worst = v["window_max"]
        .as_array()?
        .iter()
        .filter(|m| m["reason"] == "wakeup")
        .max_by_key(|m| m["delay_ns"].as_u64().unwrap_or(0))
        .map(|m| Worst {
            delay_ns: m["delay_ns"].as_u64().expect("delay_ns"),
            end_unix_ns: m["end_unix_ns"].as_u64().expect("end_unix_ns"),
            tid: m["victim"]["tid"].as_u64().expect("tid") as u32,
            comm: m["victim"]["comm"].as_str().expect("comm").to_owned(),
        });
    Some((end, worst))
}

/// Every exemplar Prometheus holds for the series `selector` picks, since `start`.
fn stored(prom: &Prometheus, selector: &str, start: f64) -> Vec<Stored> {
    let series = prom.query_exemplars(selector, start, now_unix() + 1.0).unwrap_or_else(|e| panic!("{e:#}"));
    let mut out = Vec::new();
    for s in series {
        for x in s["exemplars"].as_array().into_iter().flatten() {
            out.push(Stored {
                series: s["seriesLabels"].clone(),
                labels: x["labels"].clone(),
                value: x["value"].as_str().and_then(|v| v.parse().ok()).expect("a value"),
                at: x["timestamp"].as_f64().expect("a timestamp"),
            });
        }
    }
    out
}

/// Each of `windows` is among `stored`: same tid and comm, the same value, its timestamp to the
/// millisecond Prometheus keeps; every exemplar's labels are the task's and within OpenMetrics's
/// 128 characters; a classic bucket's exemplar lies in it.
fn check(what: &str, stored: &[Stored], windows: &[Worst]) {
    for x in stored {
        let labels = x.labels.as_object().expect("labels");
        assert!(labels.keys().all(|k| ["tid", "comm", "pod"].contains(&k.as_str())), "{what}: labels {labels:?}");
        let chars: usize =
            labels.iter().map(|(k, v)| k.chars().count() + v.as_str().unwrap_or("").chars().count()).sum();
        assert!(chars <= 128, "{what}: {chars} characters of labels in {labels:?}");
        if let Some(le) = x.series["le"].as_str() {
            let le: f64 = if le == "+Inf" { f64::INFINITY } else { le.parse().expect("le") };
            assert!(x.value <= le, "{what}: exemplar {} on le={le}", x.value);
        }
    }
    for w in windows {
        let value = w.delay_ns as f64 / 1e9;
        let at = w.end_unix_ns as f64 / 1e9;
        let found = stored.iter().find(|x| (x.at - at).abs() < 0.0015 && (x.value - value).abs() <= value * 1e-12);
        let Some(x) = found else {
            let near: Vec<String> = stored
                .iter()
                .filter(|x| (x.at - at).abs() < 5.0)
                .map(|x| format!("{} {} @{:.3}", x.labels, x.value, x.at))
                .collect();
            panic!("{what}: no exemplar for the window's worst wakeup {w:?} ({value} s at {at:.3}); near it: {near:?}");
        };
        assert_eq!(x.labels["tid"], w.tid.to_string(), "{what}: {w:?} stored as {x:?}");
        assert_eq!(x.labels["comm"], w.comm.as_str(), "{what}: {w:?} stored as {x:?}");
    }
}

#[test]
fn prometheus_stores_exemplars_naming_the_windows_worst_task() {
    let daemon = Daemon::start(DAEMON, &["--interval", "1s", "--window", "2s"]).expect("latency-daemon run");
    let native = Prometheus::start_shipped(&Setup::trixie_both().with_features(&["exemplar-storage"]), &daemon.addr)
        .expect("prometheus 2.53 (cargo xtask setup unpacks it)");
    let classic = Prometheus::start_shipped(&Setup::debian().with_features(&["exemplar-storage"]), &daemon.addr)
        .expect("Debian's prometheus 2.42");
    let start = now_unix();
    // Only windows served after both have scraped count: an earlier one no one stored.
    let deadline = Instant::now() + Duration::from_secs(30);
    for prom in [&native, &classic] {
        while prom.scalar("up{job=\"latency-daemon\"}").ok().flatten() != Some(1.0) {
            assert!(Instant::now() < deadline, "no successful scrape within 30 s: {:?}", prom.target_health());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    // The victim wakes every millisecond and waits for the hog's slices: the system's longest
    // wakeup waits, about one a window.
    let cpu = (cpus() - 1).to_string();
    let hog = spawn(&["taskset", "-c", &cpu, "nice", "-n", "-10", "sh", "-c", "while :; do :; done"], "the hog");
    let script = format!("$0 = '{VICTIM}'; select(undef, undef, undef, 0.001) while 1");
    let victim = spawn(&["taskset", "-c", &cpu, "nice", "-n", "19", "perl", "-e", &script], "the victim");

    // Each closed window's worst wakeup, as the daemon reports it, until four were the victim's.
    let mut windows: Vec<(u64, Option<Worst>)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while windows.iter().filter(|(_, w)| w.as_ref().is_some_and(|w| w.comm == VICTIM)).count() < 4 {
        assert!(Instant::now() < deadline, "fewer than 4 windows whose worst wakeup was {VICTIM}'s: {windows:?}");
        if let Some(w) = worst_wakeup(&daemon)
            && windows.last().map(|l| l.0) != Some(w.0)
        {
            windows.push(w);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    drop(victim);
    drop(hog);
    // Two more scrapes of the last window's exemplars.
    std::thread::sleep(Duration::from_secs(3));
    let victims: Vec<Worst> = windows.iter().filter_map(|(_, w)| w.clone()).filter(|w| w.comm == VICTIM).collect();
    eprintln!("the victim's windows: {victims:?}");

    for (what, prom) in [("2.53, protobuf", &native), ("2.42, OpenMetrics", &classic)] {
        let health = prom.target_health().expect("prometheus targets");
        assert!(!health.contains("\"down\""), "{what}: scrapes failing: {health}");
        let buckets = stored(prom, "runqlat_delay_seconds_bucket{job=\"latency-daemon\",reason=\"wakeup\"}", start);
        eprintln!("{what}: {} classic bucket exemplars", buckets.len());
        check(&format!("{what}, classic buckets"), &buckets, &victims);
    }
    // 2.53 also keeps the native histogram's own exemplars (on the series without `le`).
    let histogram = stored(&native, "runqlat_delay_seconds{job=\"latency-daemon\",reason=\"wakeup\"}", start);
    eprintln!("2.53: {} native histogram exemplars", histogram.len());
    check("2.53, native histogram", &histogram, &victims);

    drop(native);
    drop(classic);
    assert!(daemon.stop().expect("SIGTERM") < Duration::from_secs(2));
}
