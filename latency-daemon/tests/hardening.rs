//! `latency-daemon run` as an exposed agent: no capability left once attached (as root, as nobody
//! with CAP_BPF+CAP_PERFMON, with and without CAP_SETPCAP) while it keeps draining and serving;
//! stray signals that do not stop it; every bad flag and unknown variable named at once; leveled
//! logfmt/JSON log lines.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{process::Command, time::Duration};

use latency_lab::{daemon::Daemon, logs, oracle::bpftool, web::sample};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");
const CAP_PERFMON: u64 = 1 << 38;
const CAP_BPF: u64 = 1 << 39;

fn assert_nothing_attached() {
    bpftool::nothing_loaded().unwrap_or_else(|e| panic!("{e:#}"));
}

/// CapEff, CapPrm, CapInh, CapBnd, CapAmb of one task's status.
fn cap_sets(status: &str) -> [u64; 5] {
    ["CapEff:", "CapPrm:", "CapInh:", "CapBnd:", "CapAmb:"].map(|key| {
        let hex = status.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_else(|| panic!("no {key}: {status}"));
        u64::from_str_radix(hex.trim(), 16).unwrap()
    })
}

/// The five sets of every thread of `pid` (the drain thread and the runtime's too).
fn every_thread(pid: u32) -> Vec<(String, [u64; 5])> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|t| {
            let t = t.unwrap().path();
            let status = std::fs::read_to_string(t.join("status")).unwrap();
            (t.display().to_string(), cap_sets(&status))
        })
        .collect()
}

fn drains(daemon: &Daemon) -> f64 {
    sample(&daemon.metrics().expect("GET /metrics"), "runqlat_drains_total").expect("runqlat_drains_total")
}

/// Capabilities stay dropped while the daemon drains (the counter advances over 3 s) and serves.
fn assert_dropped_while_serving(daemon: &Daemon, bounding: u64, what: &str) {
    let before = drains(daemon);
    std::thread::sleep(Duration::from_secs(3));
    let threads = every_thread(daemon.pid());
    assert!(threads.len() >= 2, "{what}: the drain thread is missing: {threads:?}");
    for (task, [eff, prm, inh, bnd, amb]) in &threads {
        assert_eq!((*eff, *prm, *inh, *amb), (0, 0, 0, 0), "{what}: {task} keeps Eff/Prm/Inh/Amb capabilities");
        assert_eq!(*bnd, bounding, "{what}: {task} bounding set {bnd:016x}");
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).unwrap();
    assert!(status.contains("NoNewPrivs:\t1"), "{what}: no_new_privs not set: {status}");
    let after = drains(daemon);
    assert!(after >= before + 2.0, "{what}: drains went {before} → {after} in 3 s without capabilities");
    let delays = sample(&daemon.metrics().unwrap(), "runqlat_delay_seconds_count{reason=\"wakeup\"}").unwrap();
    assert!(delays > 0.0, "{what}: no delays measured");
}

#[test]
fn capabilities_are_all_dropped_once_attached_as_root() {
    let mut daemon = Daemon::start(DAEMON, &["--interval", "500ms", "--window", "1s"]).expect("latency-daemon run");
    assert_dropped_while_serving(&daemon, 0, "root");
    assert!(
        daemon.log().iter().any(|l| l.contains("msg=\"after attach: every capability dropped\"")),
        "{:?}",
        daemon.log()
    );
    // The drop's own warnings (other warnings depend on the host: a container runtime's state, say).
    let drop_warned = |l: &String| l.contains("level=warn") && l.contains("target=latency_daemon::kernel::privileges");
    assert!(!daemon.log().iter().any(drop_warned), "the drop warned: {:?}", daemon.log());
    // A reload that needs no privilege still works without any.
    daemon.signal(libc::SIGHUP);
    wait_for_log(&daemon, "reloaded the configuration");
    assert!(daemon.get("/healthz").unwrap().status == 200);
    assert!(daemon.stop().expect("SIGTERM") < Duration::from_secs(2));
    assert_nothing_attached();
}

/// As deploy/systemd grants it: nobody with CAP_BPF and CAP_PERFMON in every set. Without
/// CAP_SETPCAP the bounding set cannot shrink further (it is already the two, as a container
/// runtime would leave it) and the log says so; with it, it empties too.
#[test]
fn capabilities_are_dropped_once_attached_as_nobody() {
    for (caps, bounding) in [("-all,+bpf,+perfmon", CAP_BPF | CAP_PERFMON), ("-all,+bpf,+perfmon,+setpcap", 0)] {
        let (inh, amb, bnd) =
            (format!("--inh-caps={caps}"), format!("--ambient-caps={caps}"), format!("--bounding-set={caps}"));
        let wrapper = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", &inh, &amb, &bnd, "--"];
        let daemon = Daemon::start_under(DAEMON, &wrapper, &["--interval", "500ms", "--window", "1s"])
            .unwrap_or_else(|e| panic!("latency-daemon run as nobody with {caps}: {e:#}"));
        assert_dropped_while_serving(&daemon, bounding, caps);
        let said = daemon.log().iter().any(|l| l.contains("the bounding set stays CAP_PERFMON, CAP_BPF"));
        assert_eq!(said, bounding != 0, "{caps}: {:?}", daemon.log());
        assert!(daemon.stop().expect("SIGTERM") < Duration::from_secs(2));
        assert_nothing_attached();
    }
}

#[test]
fn sigusr1_sigusr2_sigpipe_do_not_stop_it() {
    let mut daemon = Daemon::start(DAEMON, &["--interval", "500ms", "--window", "1s"]).expect("latency-daemon run");
    for signal in [libc::SIGUSR1, libc::SIGUSR2, libc::SIGPIPE] {
        daemon.signal(signal);
    }
    // Without capture_dir, SIGUSR1 (a capture on demand) is refused in one line.
    wait_for_log(&daemon, "SIGUSR1 asks for a capture, but captures are off");
    wait_for_log(&daemon, "SIGUSR2 received");
    let before = drains(&daemon);
    std::thread::sleep(Duration::from_secs(1));
    assert!(drains(&daemon) > before, "stopped draining after the signals");
    // SIGTERM: exit 0 within 2 s, everything detached.
    assert!(daemon.stop().expect("SIGTERM after SIGUSR1/SIGUSR2/SIGPIPE") < Duration::from_secs(2));
    assert_nothing_attached();
}

#[test]
fn every_bad_flag_and_unknown_variable_at_once() {
    let run = |args: &[&str], vars: &[(&str, &str)]| {
        let mut c = Command::new(DAEMON);
        c.arg("run").args(args);
        for (k, v) in vars {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let vars = [("RUNQLAT_TOP_CGROUP", "5"), ("RUNQLAT_FLAVOUR", "vanilla")];
    let out = run(&["--bogus", "--interval", "soon", "--top-cgroups", "many"], &vars);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 5, "one line per problem: {err}");
    for needle in ["'--bogus'", "'soon'", "'many'", "RUNQLAT_FLAVOUR:", "RUNQLAT_TOP_CGROUP:"] {
        assert_eq!(lines.iter().filter(|l| l.contains(needle)).count(), 1, "{needle} not on a line of its own: {err}");
    }
    // Flags fine, variables not: still each named, exit 2, nothing attached.
    let out = run(&["--interval", "1s"], &vars);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(err.contains("RUNQLAT_FLAVOUR") && err.contains("RUNQLAT_TOP_CGROUP"), "{err}");
    assert_nothing_attached();
}

/// Every line on stderr is one event: logfmt with time, level, target and msg (an alert's event
/// with time, level, msg and event, its data flattened), or all of them JSON on request.
#[test]
fn logfmt_by_default_json_on_request_and_levels_filter() {
    let args = ["--interval", "500ms", "--window", "1s", "--alert-max-delay", "1us"];
    let daemon = Daemon::start(DAEMON, &args).expect("latency-daemon run");
    wait_for_log(&daemon, "event=fired");
    let (took, log) = daemon.stop_with_log().expect("SIGTERM");
    assert!(took < Duration::from_secs(2));
    let mut alerts = 0;
    for line in &log {
        let pairs = logs::logfmt(line).unwrap_or_else(|e| panic!("{e:#}"));
        let keys: Vec<&str> = pairs.iter().take(4).map(|(k, _)| k.as_str()).collect();
        if let Some(event) = logs::get(&pairs, "event") {
            assert_eq!(keys, ["time", "level", "msg", "event"], "{line}");
            assert_eq!(logs::get(&pairs, "msg"), Some(format!("alert {event}").as_str()), "{line}");
            assert!(logs::get(&pairs, "worst.delay_ns").is_some_and(|d| d.parse::<u64>().is_ok()), "{line}");
            assert!(logs::get(&pairs, "summary").is_some_and(|s| !s.is_empty()), "{line}");
            alerts += usize::from(event == "fired");
        } else {
            assert_eq!(keys, ["time", "level", "target", "msg"], "{line}");
        }
        assert!(logs::is_timestamp(logs::get(&pairs, "time").unwrap()), "{line}");
        assert!(["debug", "info", "warn", "error"].contains(&logs::get(&pairs, "level").unwrap()), "{line}");
    }
    assert!(alerts > 0, "{log:?}");
    assert!(log.iter().any(|l| l.contains("level=info") && l.contains("msg=stopped")), "{log:?}");
    // The first line names the build, as `--version` does.
    let version = std::process::Command::new(DAEMON).arg("--version").output().expect("--version").stdout;
    let version = String::from_utf8_lossy(&version).trim().to_owned();
    let first = logs::logfmt(&log[0]).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(logs::get(&first, "msg"), Some(format!("{version} starting").as_str()), "{log:?}");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(logs::get(&first, "kernel"), Some(release.trim()), "the first line names the kernel: {log:?}");

    let daemon = Daemon::start(DAEMON, &[&args[..], &["--log.format=json", "--log.level=debug"]].concat())
        .expect("latency-daemon run --log.format=json");
    wait_for_log(&daemon, "\"event\":\"fired\"");
    let (took, log) = daemon.stop_with_log().expect("SIGTERM");
    assert!(took < Duration::from_secs(2));
    let mut alerts = 0;
    for line in &log {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(logs::is_timestamp(v["time"].as_str().unwrap_or_default()), "{line}");
        assert!(v["level"].is_string() && v["msg"].is_string(), "{line}");
        alerts += usize::from(v["event"] == "fired");
    }
    assert!(alerts > 0 && log.iter().any(|l| l.contains("\"msg\":\"after attach:")), "{log:?}");

    // warn: no info event (the attach line, the drop, "stopped"), and nothing else either.
    let daemon = Daemon::start(DAEMON, &["--interval", "500ms", "--window", "1s", "--log.level=warn"])
        .expect("latency-daemon run --log.level=warn");
    let (took, log) = daemon.stop_with_log().expect("SIGTERM");
    assert!(took < Duration::from_secs(2));
    assert!(log.iter().all(|l| !l.contains("level=info") && !l.contains("level=debug")), "{log:?}");
    assert_nothing_attached();
}

fn wait_for_log(daemon: &Daemon, needle: &str) {
    daemon.wait_for_log(needle, Duration::from_secs(15)).unwrap_or_else(|e| panic!("{e:#}"));
}
