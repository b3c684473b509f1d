//! The daemon's own alerting with real components: a real Alertmanager receives the alert with
//! who waited, who ran instead and the queue depth, and sees it resolve; a quiet workload fires
//! nothing; dead sinks never hurt measurement; the culprit named is the hog that really ran.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::{Read as _, Write as _},
    net::TcpListener,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use latency_lab::{
    daemon::Daemon,
    guard::Scratch,
    logs,
    oracle::bpftool,
    services::{Alertmanager, TestCgroup},
    web::{self, sample},
    workload::{Body, Crew, cpus, gettid, group, set_thread_name},
};
use serde_json::Value;

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");

/// Nothing of ours (a STAMPS map, or a program using one) is loaded within 5 s.
fn assert_nothing_attached() {
    bpftool::nothing_loaded().unwrap_or_else(|e| panic!("{e:#}"));
}

/// A config file alerting only on delays of tasks in `cgroup`, so the machine's own background
/// noise cannot fire anything.
fn cgroup_only_config(cgroup: &str, threshold: &str) -> (Scratch, String) {
    let dir = Scratch::new("runqlat-alert").expect("a scratch directory");
    let file = dir.join("latency-daemon.toml");
    std::fs::write(&file, format!("[alert_cgroup_max_delay]\n\"{cgroup}\" = \"{threshold}\"\n")).unwrap();
    let path = file.to_str().unwrap().to_string();
    (dir, path)
}

/// An Alertmanager, a test cgroup `name`, and a daemon (interval 1 s, window 2 s, then `more`
/// flags) alerting it on that cgroup's delays over 5 ms; the config's scratch directory is the
/// third.
fn alerting_on(name: &str, more: &[&str]) -> (Alertmanager, TestCgroup, Scratch, Daemon) {
    let am = Alertmanager::start().expect("alertmanager (cargo xtask setup installs it)");
    let cg = TestCgroup::new(name).expect("a test cgroup");
    let (dir, file) = cgroup_only_config(&cg.path, "5ms");
    let url = am.url();
    let mut args = vec!["--config", &file, "--interval", "1s", "--window", "2s", "--alertmanager-url", &url];
    args.extend_from_slice(more);
    let daemon = Daemon::start(DAEMON, &args).expect("latency-daemon run");
    (am, cg, dir, daemon)
}

/// The alert events of `kind` (`fired`, `resolved`) in a daemon's log (logfmt, the default), as
/// their pairs; every line of the log must be a well-formed logfmt event.
fn logged(log: &[String], kind: &str) -> Vec<Vec<(String, String)>> {
    log.iter()
        .map(|l| logs::logfmt(l).unwrap_or_else(|e| panic!("not one logfmt event: {e:#}")))
        .filter(|pairs| logs::get(pairs, "event") == Some(kind))
        .collect()
}

fn wait_until<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_breach_reaches_alertmanager_with_who_where_why_and_resolves() {
    let (am, cg, _dir, daemon) = alerting_on("alert", &["--alert-resend", "1s", "--alert-resolve-after", "1"]);
    // 4×CPUs spinners in the cgroup: each waits several ms for its turn.
    let spinners: Vec<_> =
        (0..4 * cpus()).map(|_| cg.spawn(&["sh", "-c", "while :; do :; done"]).expect("a spinner")).collect();
    let started = Instant::now();
    let ours = |label: &str, value: &str| am.ours(label, value).unwrap_or_else(|e| panic!("{e:#}"));
    let alert = wait_until(Duration::from_secs(12), "the alert in Alertmanager", || ours("cgroup", &cg.path).pop());
    let took = started.elapsed();
    eprintln!("fired after {took:?}: {alert:#}");
    // Within two 2 s windows of the load starting (plus a second for the last drain and send).
    assert!(took < Duration::from_secs(6), "fired only after {took:?}");
    let a = &alert["annotations"];
    assert!(alert["labels"]["reason"] == "preempt" || alert["labels"]["reason"] == "wakeup", "{alert}");
    assert!(alert["labels"]["instance"].as_str().is_some_and(|i| !i.is_empty()), "{alert}");
    assert!(a["victim"].as_str().unwrap_or_default().contains("sh"), "victim: {a}");
    assert!(a["culprits"].as_str().unwrap_or_default().contains("sh"), "culprits: {a}");
    // The split of the delay: both parts are there, and the summary names the throttling (the
    // victim's own limit) exactly when there was some.
    let part = |k: &str| a[k].as_str().unwrap_or_else(|| panic!("no {k} annotation: {a}")).to_string();
    let (throttled, irq_steal) = (part("throttled"), part("irq_steal"));
    let summary = a["summary"].as_str().unwrap_or_default();
    assert_eq!(throttled != "0 ns", summary.contains("throttled by the CPU limit of"), "{throttled}: {summary}");
    assert_eq!(irq_steal != "0 ns", summary.contains("in IRQ or steal"), "{irq_steal}: {summary}");
    let depth: u32 =
        a["queue_depth"].as_str().unwrap_or_default().parse().unwrap_or_else(|_| panic!("queue_depth: {a}"));
    assert!(depth >= 1, "spinners queue behind each other: depth {depth}");
    let text = daemon.metrics().expect("GET /metrics");
    assert!(
        text.contains(&format!(
            "runqlat_alert_active{{reason=\"{}\",cgroup=\"{}\"}} 1",
            alert["labels"]["reason"].as_str().unwrap(),
            cg.path
        )),
        "{}",
        text.lines().filter(|l| l.contains("alert")).collect::<Vec<_>>().join("\n")
    );

    drop(spinners);
    wait_until(Duration::from_secs(15), "the alert to resolve", || ours("cgroup", &cg.path).is_empty().then_some(()));
    assert!(!logged(&daemon.log(), "resolved").is_empty(), "no resolve logged: {:?}", daemon.log());
    assert!(daemon.stop().expect("SIGTERM") < Duration::from_secs(2));
    assert_nothing_attached();
}

/// The sleeper reports, through a file, the longest of its own 1 ms sleeps on its own clock.
const SLEEPER: &str = "use Time::HiRes qw(time); my $m = 0; while (1) { my $t = time; \
     select(undef, undef, undef, 0.001); my $d = time - $t; if ($d > $m) { $m = $d; \
     open(my $f, '>', $ARGV[0]) or die; print $f int($m * 1e9); close $f } }";

#[test]
fn a_1ms_sleeper_under_the_same_threshold_fires_nothing() {
    let (am, cg, dir, daemon) = alerting_on("quiet", &[]);
    let longest = dir.join("longest-sleep-ns");
    let _sleeper = cg.spawn(&["perl", "-e", SLEEPER, longest.to_str().unwrap()]).expect("the sleeper");
    std::thread::sleep(Duration::from_secs(30));
    let text = daemon.metrics().expect("GET /metrics");
    let count = sample(&text, &format!("runqlat_cgroup_delay_seconds_count{{cgroup=\"{}\"}}", cg.path)).unwrap_or(0.0);
    assert!(count > 1000.0, "the sleeper was not measured ({count} delays)");
    // This VM's host now and then leaves a vCPU stalled for over 5 ms (seen: a 15 ms wait on
    // an idle CPU, queue depth 0). Such a wait is real, and the sleeper sees it on its own
    // clock; an alert the sleeper did not live through would be ours alone, and fails here.
    let longest_ns: u64 = std::fs::read_to_string(&longest).unwrap_or_default().trim().parse().unwrap_or(0);
    assert!(longest_ns >= 1_000_000, "the sleeper's own record is missing: {longest_ns} ns");
    let fired = logged(&daemon.log(), "fired");
    for alert in &fired {
        let delay: u64 = logs::get(alert, "worst.delay_ns").and_then(|d| d.parse().ok()).unwrap_or(u64::MAX);
        assert!(
            delay <= longest_ns,
            "fired on a {delay} ns wait the sleeper never saw (its longest sleep {longest_ns} ns): {alert:?}"
        );
        eprintln!("alert corroborated by the sleeper's own clock ({delay} ns ≤ {longest_ns} ns): {alert:?}");
    }
    if fired.is_empty() {
        assert!(am.ours("cgroup", &cg.path).expect("alerts").is_empty(), "fired: {:?}", am.alerts());
    }
    let total: f64 = ["wakeup", "preempt"]
        .iter()
        .map(|r| sample(&text, &format!("runqlat_alerts_total{{reason=\"{r}\"}}")).unwrap_or(f64::NAN))
        .sum();
    // The log is read after the counters: everything counted must have been logged.
    assert!(total <= fired.len() as f64, "alerts counted {total}, logged {}: {:?}", fired.len(), daemon.log());
    assert!(daemon.stop().expect("SIGTERM") < Duration::from_secs(2));
    assert_nothing_attached();
}

/// An HTTP server that accepts connections and never answers; it holds every socket.
fn black_hole() -> (String, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let done = stop.clone();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while !done.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((s, _)) => held.push(s),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    (addr, stop)
}

fn rss_kib(pid: u32) -> f64 {
    latency_lab::daemon::status_kib(pid, "VmRSS:").unwrap_or_else(|e| panic!("{e:#}"))
}

#[test]
fn dead_sinks_never_hurt_measurement() {
    let (hole, stop_hole) = black_hole();
    // Nothing listens on this port: every Alertmanager send is refused.
    let refused = format!("http://127.0.0.1:{}", web::free_port().expect("a free port"));
    let daemon = Daemon::start(
        DAEMON,
        &[
            "--interval",
            "1s",
            "--window",
            "1s",
            // Low enough to breach every window on a loaded machine; no cooldown, resolve at once:
            // the alert flaps and every flap is a notification.
            "--alert-max-delay",
            "200us",
            "--alert-cooldown",
            "0s",
            "--alert-resolve-after",
            "1",
            "--alert-resend",
            "200ms",
            "--alertmanager-url",
            &refused,
            "--alert-webhook",
            &format!("http://{hole}/hook"),
        ],
    )
    .expect("latency-daemon run");
    let pid = daemon.pid();
    let load = std::thread::spawn(move || {
        let mut crew = Crew::default();
        crew.phase(group("sinkload", Body::Spin, 2 * cpus()), 34.0).expect("the workload")
    });
    std::thread::sleep(Duration::from_secs(4));
    let rss_early = rss_kib(pid);
    let drains_early = sample(&daemon.metrics().expect("GET /metrics"), "runqlat_drains_total").unwrap();
    let watched = Instant::now();
    let mut slowest = Duration::ZERO;
    // Long enough for the webhook's four 5 s attempts (and backoff) to run out.
    for _ in 0..75 {
        let t = Instant::now();
        let r = web::get(&daemon.addr, "/metrics", &[]).unwrap();
        assert_eq!(r.status, 200);
        slowest = slowest.max(t.elapsed());
        assert_eq!(web::get(&daemon.addr, "/healthz", &[]).unwrap().status, 200, "unhealthy with dead sinks");
        std::thread::sleep(Duration::from_millis(300));
    }
    let text = daemon.metrics().expect("GET /metrics");
    let drains_late = sample(&text, "runqlat_drains_total").unwrap();
    let watched = watched.elapsed().as_secs_f64();
    let rss_late = rss_kib(pid);
    load.join().unwrap();
    stop_hole.store(true, Ordering::SeqCst);

    let failed = |sink: &str| {
        sample(&text, &format!("runqlat_alert_notifications_failed_total{{sink=\"{sink}\"}}")).unwrap_or(0.0)
    };
    let dropped = |sink: &str| {
        sample(&text, &format!("runqlat_alert_notifications_dropped_total{{sink=\"{sink}\"}}")).unwrap_or(0.0)
    };
    let fired: f64 = ["wakeup", "preempt"]
        .iter()
        .filter_map(|r| sample(&text, &format!("runqlat_alerts_total{{reason=\"{r}\"}}")))
        .sum();
    eprintln!(
        "fired {fired}; alertmanager failed {}; webhook failed {} dropped {}; drains {drains_early}→{drains_late}; \
         rss {rss_early}→{rss_late} KiB; slowest /metrics {slowest:?}",
        failed("alertmanager"),
        failed("webhook"),
        dropped("webhook")
    );
    assert!(fired >= 2.0, "the alert did not flap ({fired} fired)");
    assert!(failed("alertmanager") > 0.0, "refused Alertmanager sends not counted");
    assert!(failed("webhook") + dropped("webhook") > 0.0, "the black-hole webhook's losses are not counted");
    // One drain a second, give or take the first and last.
    assert!(
        drains_late - drains_early >= watched - 2.0,
        "draining slowed: {drains_early} → {drains_late} in {watched:.1} s"
    );
    assert!(slowest < Duration::from_millis(500), "/metrics took {slowest:?}");
    assert!(rss_late < rss_early + 8.0 * 1024.0, "memory grew from {rss_early} to {rss_late} KiB");
    assert!(daemon.stop().expect("SIGTERM") < Duration::from_secs(2));
    assert_nothing_attached();
}

/// A webhook receiver that answers 200 and keeps every body.
fn webhook_catcher() -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let keep = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut raw = Vec::new();
            let mut buf = [0u8; 4096];
            // Read the headers, then Content-Length bytes of body.
            let body = loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break None,
                    Ok(n) => raw.extend_from_slice(&buf[..n]),
                }
                if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&raw[..end]).to_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if raw.len() >= end + 4 + len {
                        break Some(raw[end + 4..end + 4 + len].to_vec());
                    }
                }
            };
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            if let Some(b) = body
                && let Ok(v) = serde_json::from_slice::<Value>(&b)
            {
                keep.lock().unwrap().push(v);
            }
        }
    });
    (addr, bodies)
}

fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t, set through the libc macros' function forms, for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn nice(value: i32) {
    // SAFETY: setpriority on this thread's own tid.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, gettid(), value) };
}

/// One named hog is the only other runnable task on a pinned CPU: the alert must name it.
#[test]
fn the_alert_names_the_hog_that_ran() {
    let (catcher, bodies) = webhook_catcher();
    let daemon = Daemon::start(
        DAEMON,
        &[
            "--interval",
            "1s",
            "--window",
            "2s",
            "--alert-max-delay",
            "5ms",
            "--alert-webhook",
            &format!("http://{catcher}/hook"),
        ],
    )
    .expect("latency-daemon run");
    let cpu = cpus() - 1;
    let stop = Arc::new(AtomicBool::new(false));
    let (s1, s2) = (stop.clone(), stop.clone());
    let hog = std::thread::spawn(move || {
        set_thread_name(b"runqlat-hog");
        pin_to(cpu);
        nice(-10);
        let mut x = 0u64;
        while !s1.load(Ordering::Relaxed) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    });
    let victim = std::thread::spawn(move || {
        set_thread_name(b"runqlat-victim");
        pin_to(cpu);
        nice(19);
        while !s2.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let fired = wait_until(Duration::from_secs(15), "a fired alert for runqlat-victim", || {
        bodies
            .lock()
            .unwrap()
            .iter()
            .find(|b| b["event"] == "fired" && b["worst"]["victim_comm"] == "runqlat-victim")
            .cloned()
    });
    stop.store(true, Ordering::SeqCst);
    hog.join().unwrap();
    victim.join().unwrap();
    let worst = &fired["worst"];
    eprintln!("{worst:#}");
    let culprits = worst["culprits"].as_array().unwrap();
    assert!(!culprits.is_empty(), "no culprits: {worst}");
    // Of the runs kept (the last 8 of the wait), the hog's take nearly all the time.
    let ran = |c: &Value| c["ran_ns"].as_u64().unwrap_or(0);
    let hog_ns: u64 = culprits.iter().filter(|c| c["comm"] == "runqlat-hog").map(ran).sum();
    let kept_ns: u64 = culprits.iter().map(ran).sum();
    assert!(hog_ns * 10 >= kept_ns * 8, "the hog ran {hog_ns} of {kept_ns} ns kept: {worst}");
    if !worst["culprits_truncated"].as_bool().unwrap() {
        let delay = worst["delay_ns"].as_u64().unwrap();
        assert!(kept_ns * 10 >= delay * 9, "the runs kept cover {kept_ns} of a {delay} ns wait: {worst}");
    }
    assert_eq!(worst["cpu"].as_u64(), Some(cpu as u64));
    // The parts of the delay that were neither behind the hog nor anyone: carried, and within it.
    let delay = worst["delay_ns"].as_u64().unwrap();
    let throttled = worst["throttled_ns"].as_u64().expect("throttled_ns");
    let irq_steal = worst["irq_steal_ns"].as_u64().expect("irq_steal_ns");
    assert!(throttled + irq_steal <= delay, "{throttled} + {irq_steal} ns of a {delay} ns delay: {worst}");
    assert!(daemon.stop().expect("SIGTERM") < Duration::from_secs(2));
    assert_nothing_attached();
}

/// A task named by its first argument (hex bytes), pinned to CPU `$2` at nice `$3`: a hog that
/// spins (`$4` = hog) or a sleeper that wakes every millisecond.
const NAMED: &str = "import ctypes, os, sys, time
ctypes.CDLL(None).prctl(15, bytes.fromhex(sys.argv[1]))
os.sched_setaffinity(0, [int(sys.argv[2])])
os.setpriority(os.PRIO_PROCESS, 0, int(sys.argv[3]))
while sys.argv[4] == 'hog':
    pass
while True:
    time.sleep(0.001)
";

/// Task and cgroup names that try to break the log (a quote, a newline, `=`, an escape sequence,
/// a byte that is not UTF-8, a forged key): the alert is still one logfmt event whose values read
/// back as the names the kernel kept (invalid UTF-8 replaced), and no key is forged.
#[test]
fn hostile_names_stay_inside_one_logfmt_event() {
    const VICTIM: &[u8] = b"v\"\n=f\x1b\xff\\ x=1";
    const HOG: &[u8] = b"h\"og forged=1\x07";
    // Any byte but `/`, NUL and a newline (the kernel refuses those in a cgroup's name).
    let cg = TestCgroup::new("e\"vil =x\u{1b}[0m\t").expect("a test cgroup with a hostile name");
    // The config file is TOML, whose basic strings take JSON's escapes.
    let (_dir, file) = cgroup_only_config(&cg.path, "5ms");
    std::fs::write(&file, format!("[alert_cgroup_max_delay]\n{} = \"5ms\"\n", Value::from(cg.path.as_str()))).unwrap();
    let daemon =
        Daemon::start(DAEMON, &["--config", &file, "--interval", "1s", "--window", "2s"]).expect("latency-daemon run");
    // Two processes of their own in the cgroup, so that nothing else there (this test's threads)
    // can be the victim the alert names.
    let hex = |name: &[u8]| name.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let cpu = (cpus() - 1).to_string();
    let named = |name: &[u8], nice: &str, what: &str| {
        cg.spawn(&["python3", "-c", NAMED, &hex(name), &cpu, nice, what]).expect("python3 (a named task)")
    };
    let (_hog, _victim) = (named(HOG, "-10", "hog"), named(VICTIM, "19", "sleeper"));
    let (victim_name, hog_name) = (String::from_utf8_lossy(VICTIM), String::from_utf8_lossy(HOG));
    let fired = wait_until(Duration::from_secs(20), "a fired alert for the hostile victim", || {
        logged(&daemon.log(), "fired").into_iter().find(|a| {
            logs::get(a, "key.cgroup") == Some(cg.path.as_str())
                && logs::get(a, "worst.victim_comm") == Some(victim_name.as_ref())
        })
    });
    let (_, log) = daemon.stop_with_log().expect("SIGTERM");
    eprintln!("{fired:?}");
    assert_eq!(logs::get(&fired, "worst.cgroup"), Some(cg.path.as_str()), "{fired:?}");
    assert!(victim_name.contains('\u{fffd}'), "{victim_name:?}");
    // Wherever the hog is a culprit, by its name and in its cgroup (read from /proc/<pid>/cgroup,
    // whose line ends in the name's tab). Other tasks on a busy machine may fill the 8 runs kept,
    // so the hog is not always among them.
    let mut hog_seen = 0;
    for event in logged(&log, "fired") {
        for (k, v) in &event {
            let Some((n, "comm")) = k.strip_prefix("worst.culprits.").and_then(|k| k.split_once('.')) else { continue };
            if v == hog_name.as_ref() {
                let cgroup = logs::get(&event, &format!("worst.culprits.{n}.cgroup"));
                assert_eq!(cgroup, Some(cg.path.as_str()), "the hog's cgroup: {event:?}");
                hog_seen += 1;
            }
        }
    }
    eprintln!("the hog named as a culprit {hog_seen} times");
    // Every line of the whole log, alerts and all, is one event (`logged` parses each) with no
    // forged key and no raw control character.
    for pairs in logged(&log, "fired") {
        assert!(pairs.iter().all(|(k, _)| k != "forged" && k != "x"), "a key forged: {pairs:?}");
    }
    assert!(log.iter().all(|l| !l.contains(['\u{1b}', '\u{7}', '\t'])), "a raw control character: {log:?}");
    assert_nothing_attached();
}
