//! Real containers (podman, runc) on this host: the daemon labels their delays with the namespace,
//! pod and container names that the runtime wrote into each container's OCI config, and with the
//! container id, with no Kubernetes API. A victim sleeping 1 ms at a time shares CPU 0 with a hog;
//! on CPU 1, a container under a CPU limit waits mostly for its limit, its neighbours' victim for them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use latency_lab::{
    daemon::Daemon,
    oracle::throttle::CpuCgroup,
    services::{Alertmanager, Container, Containerd, Podman},
    web::sample,
};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");

/// The labels of `container`'s cgroup series, as the daemon should print them: cgroup, then
/// `extra`, then the container's names.
fn labels(c: &Container, names: Option<(&str, &str, &str)>, extra: &str) -> String {
    let (namespace, pod, container) = names.unwrap_or(("", "", &c.id[..12]));
    let mut labels = format!("cgroup=\"{}\"{extra}", c.cgroup);
    for (k, v) in [("namespace", namespace), ("pod", pod), ("container", container), ("container_id", c.id.as_str())] {
        if !v.is_empty() {
            labels.push_str(&format!(",{k}=\"{v}\""));
        }
    }
    labels
}

/// The labels of `container`'s delay-count series, as the daemon should print them.
fn count_series(c: &Container, names: Option<(&str, &str, &str)>) -> String {
    format!("runqlat_cgroup_delay_seconds_count{{{}}}", labels(c, names, ""))
}

fn held_series(c: &Container, names: Option<(&str, &str, &str)>) -> String {
    format!("runqlat_cgroup_held_others_seconds_total{{{}}}", labels(c, names, ""))
}

/// The causes of a wait, as the daemon labels them, in its order.
const CAUSES: [&str; 6] = ["throttled", "irq_steal", "same", "other", "kernel", "idle"];

fn cause_series(c: &Container, names: Option<(&str, &str, &str)>, cause: &str) -> String {
    format!("runqlat_cgroup_wait_cause_seconds_total{{{}}}", labels(c, names, &format!(",cause=\"{cause}\"")))
}

#[test]
fn podman_containers_are_named_by_their_annotations() {
    let mut podman = Podman::new().unwrap_or_else(|e| panic!("{e:#}"));
    let pin = ["--cpuset-cpus", "0"];
    let hog = podman
        .run("hog", &[], &pin, &["sh", "-c", "while :; do :; done & while :; do :; done"])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let victim = podman
        .run(
            "victim",
            &[
                ("io.kubernetes.pod.name", "victim-pod"),
                ("io.kubernetes.pod.namespace", "testns"),
                ("io.kubernetes.container.name", "victim"),
            ],
            &pin,
            &["sh", "-c", "while :; do usleep 1000; done"],
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(victim.cgroup.contains(&victim.id), "podman put the victim in {}", victim.cgroup);

    let daemon = Daemon::start(DAEMON, &["--interval", "500ms", "--window", "1s"]).expect("latency-daemon run");
    let want_victim = count_series(&victim, Some(("testns", "victim-pod", "victim")));
    let want_hog = count_series(&hog, None);
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = daemon.metrics().unwrap_or_else(|e| panic!("{e:#}"));
        let seen = |series: &str| sample(&text, series).is_some_and(|n| n > 0.0);
        if seen(&want_victim) && seen(&want_hog) {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "no delays under {want_victim} and {want_hog} within 20 s; cgroup series:\n{}",
            text.lines().filter(|l| l.starts_with("runqlat_cgroup_delay_seconds_count")).collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    // Both configs exist, so nothing went unresolved.
    assert_eq!(sample(&text, "runqlat_container_unresolved_total"), Some(0.0), "{text}");
    // A pod's delay is one query away.
    assert!(text.lines().any(|l| l.contains("pod=\"victim-pod\"") && l.contains("namespace=\"testns\"")));

    // Who took the victim's CPU: another cgroup, and of the containers the hog's is the one that
    // held others back most (the host's own cgroups share CPU 0 too: other tests, builds).
    let victim_names = Some(("testns", "victim-pod", "victim"));
    let victim_other = cause_series(&victim, victim_names, "other");
    let hog_held = held_series(&hog, None);
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = daemon.metrics().unwrap_or_else(|e| panic!("{e:#}"));
        let seen = |series: &str| sample(&text, series).is_some_and(|n| n > 0.0);
        if seen(&victim_other) && seen(&hog_held) {
            // A few more windows, so the totals are not one window's luck.
            std::thread::sleep(Duration::from_secs(3));
            break daemon.metrics().unwrap_or_else(|e| panic!("{e:#}"));
        }
        assert!(
            Instant::now() < deadline,
            "no {victim_other} and {hog_held} within 20 s; series:\n{}",
            text.lines().filter(|l| l.starts_with("runqlat_cgroup_")).collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let value = |series: &str| sample(&text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
    let waited = value(&format!("runqlat_cgroup_delay_seconds_sum{{{}}}", labels(&victim, victim_names, "")));
    let by: Vec<f64> = CAUSES.iter().map(|cause| value(&cause_series(&victim, victim_names, cause))).collect();
    let (held, other) = (value(&hog_held), value(&victim_other));
    let victim_held = value(&held_series(&victim, victim_names));
    let held_most = text
        .lines()
        .filter(|l| l.starts_with("runqlat_cgroup_held_others_seconds_total{") && l.contains("container_id="))
        .filter_map(|l| Some((l.rsplit(' ').next()?.parse::<f64>().ok()?, l)))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, l)| l.to_string())
        .unwrap_or_default();
    println!(
        "victim waited {waited:.6} s, by {CAUSES:?}: {by:?}; held others back: the hog {held:.6} s, \
         the victim {victim_held:.6} s"
    );
    println!("held others back most, of the containers: {held_most}");
    println!(
        "held others back, every cgroup:\n{}",
        text.lines()
            .filter(|l| l.starts_with("runqlat_cgroup_held_others_seconds_total{"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Nothing unclassified: the split adds up to the victim's delay time.
    assert!((by.iter().sum::<f64>() - waited).abs() <= 1e-6 * waited.max(1.0), "{by:?} vs {waited}");
    // The victim shares CPU 0 with two spinners of the hog, which run through its waits; the
    // hog's own waits end when the victim's brief runs do, and only those runs count, so the
    // victim, which barely runs, is not named for them.
    assert!(other > 0.0 && held > victim_held, "the hog held others back {held} s, the victim {victim_held} s");
    assert!(held_most.starts_with(&hog_held), "the hog does not lead held-others among containers: {held_most}");

    podman.remove(&victim).unwrap_or_else(|e| panic!("{e:#}"));
    podman.remove(&hog).unwrap_or_else(|e| panic!("{e:#}"));
    daemon.stop().expect("SIGTERM");
}

/// One scrape at the close of a window (`--window` = `--interval`: a window closes at each drain),
/// and the limited container's cpu.stat read right after it, so both cover the same span.
struct AtWindow {
    text: String,
    drains: f64,
    throttled_ns: u64,
    local_throttled_ns: Option<u64>,
}

/// Polls /metrics until a drain after `after` is published, then reads `cpu`'s throttled time.
fn at_window(daemon: &Daemon, cpu: &CpuCgroup, after: f64) -> AtWindow {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = daemon.metrics().unwrap_or_else(|e| panic!("{e:#}"));
        let drains =
            sample(&text, "runqlat_drains_total").unwrap_or_else(|| panic!("no runqlat_drains_total in\n{text}"));
        if drains > after {
            let throttled_ns = cpu.throttled_ns().unwrap_or_else(|e| panic!("{e:#}"));
            return AtWindow { text, drains, throttled_ns, local_throttled_ns: cpu.throttled_local_ns() };
        }
        assert!(Instant::now() < deadline, "no drain after {after} within 10 s; log:\n{}", daemon.log().join("\n"));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The scene: a container limited by `--cpus` (one busy loop), an unlimited noisy
/// neighbour (one busy loop) and a victim sleeping 1 ms at a time, all three pinned to CPU 1. Over
/// ~6 s (two scrapes at the close of a window): the limited container's waits are mostly its limit
/// (cause="throttled", and as long as its cpu.stat says it was throttled, to two periods), the
/// victim's mostly the other containers (cause="other"); each cgroup's six causes add up to its
/// delay sum.
#[test]
fn a_cpu_limited_containers_waits_are_throttled_and_its_neighbours_victims_wait_on_other_cgroups() {
    // Once its period refills, the limited loop waits behind whatever else is runnable on CPU 1
    // until it has run its quota: about quota × competitors of "other" per period beside
    // period − quota × (competitors + 1) throttled. A twentieth of a CPU keeps "mostly throttled"
    // true beside up to three busy competitors (the neighbour and two of a shared host's builds;
    // a tenth allows one).
    const LIMIT: &str = "0.05";
    let began = Instant::now();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(cpus >= 2, "the scene pins to CPU 1; this host has {cpus} CPU(s)");
    let mut podman = Podman::new().unwrap_or_else(|e| panic!("{e:#}"));
    let pin = ["--cpuset-cpus", "1"];
    let spin = ["sh", "-c", "while :; do :; done"];
    let limited =
        podman.run("limited", &[], &["--cpus", LIMIT, "--cpuset-cpus", "1"], &spin).unwrap_or_else(|e| panic!("{e:#}"));
    let noisy = podman.run("noisy", &[], &pin, &spin).unwrap_or_else(|e| panic!("{e:#}"));
    // Sleeps without a fork (`usleep` would be one, and each exit wakes kernel threads that then
    // end the victim's waits): a timed read of a FIFO that it holds open at both ends.
    let sleeper = "mkfifo /wake && exec 3<>/wake && while :; do read -t 0.001 x <&3; done";
    let victim = podman.run("noisys-victim", &[], &pin, &["sh", "-c", sleeper]).unwrap_or_else(|e| panic!("{e:#}"));
    let cpu = CpuCgroup::of(limited.pid).unwrap_or_else(|e| panic!("{e:#}"));
    let (quota_us, period_us) = cpu
        .limit_us()
        .unwrap_or_else(|e| panic!("{e:#}"))
        .unwrap_or_else(|| panic!("--cpus {LIMIT} set no limit on {}", cpu.dir.display()));
    eprintln!("limited: {} (v1: {}), quota {quota_us} µs per {period_us} µs", cpu.dir.display(), cpu.v1);

    let daemon = Daemon::start(DAEMON, &["--interval", "1s", "--window", "1s"]).expect("latency-daemon run");
    let sum_series = |c: &Container| format!("runqlat_cgroup_delay_seconds_sum{{{}}}", labels(c, None, ""));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut first = at_window(&daemon, &cpu, 0.0);
    while ![&limited, &noisy, &victim].iter().all(|c| sample(&first.text, &sum_series(c)).is_some_and(|s| s > 0.0)) {
        assert!(
            Instant::now() < deadline,
            "not all three containers have delays within 20 s; cgroup series:\n{}",
            first
                .text
                .lines()
                .filter(|l| l.starts_with("runqlat_cgroup_delay_seconds_sum"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        first = at_window(&daemon, &cpu, first.drains);
    }
    let throttle_split = sample(&first.text, "runqlat_feature_info{feature=\"throttle_split\",state=\"on\"}").is_some();
    std::thread::sleep(Duration::from_millis(5500));
    let last = at_window(&daemon, &cpu, first.drains + 5.0);
    let span = last.drains - first.drains;

    // A container's delay sum and its six causes: over the span, and since the daemon started.
    let value = |text: &str, series: &str| sample(text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
    let causes = |text: &str, c: &Container| -> Vec<f64> {
        CAUSES.iter().map(|cause| value(text, &cause_series(c, None, cause))).collect()
    };
    let split = |c: &Container| {
        let (end, start) = (causes(&last.text, c), causes(&first.text, c));
        let by: Vec<f64> = end.iter().zip(&start).map(|(e, s)| e - s).collect();
        let sum = value(&last.text, &sum_series(c));
        (sum - value(&first.text, &sum_series(c)), by, sum, end)
    };
    let part = |by: &[f64], cause: &str| by[CAUSES.iter().position(|c| *c == cause).expect("one of CAUSES")];
    let stat_s = (last.throttled_ns - first.throttled_ns) as f64 / 1e9;
    let local_s = first.local_throttled_ns.zip(last.local_throttled_ns).map(|(a, b)| (b - a) as f64 / 1e9);
    let tasks = cpu.threads().unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!(
        "{span} windows; throttle_split {}; limited's cpu.stat throttled_time {stat_s:.6} s (cpu.stat.local \
         {local_s:?} s), {tasks} task(s) in its cgroup",
        if throttle_split { "on" } else { "not on" }
    );
    for (what, c) in [("limited", &limited), ("noisy", &noisy), ("victim", &victim)] {
        let (waited, by, sum, totals) = split(c);
        let shares: Vec<String> = CAUSES
            .iter()
            .zip(&by)
            .map(|(cause, s)| format!("{cause} {s:.6} s ({:.1} %)", 100.0 * s / waited))
            .collect();
        eprintln!("{what} waited {waited:.6} s: {}", shares.join(", "));
        // Nothing unclassified: the six add up to the delay sum (both are sums of whole ns).
        let eps = |x: f64| 1e-9 * x.max(1.0);
        assert!((by.iter().sum::<f64>() - waited).abs() <= eps(waited), "{what}: {by:?} vs {waited}");
        assert!((totals.iter().sum::<f64>() - sum).abs() <= eps(sum), "{what}: {totals:?} vs {sum}");
    }

    let (waited, by, _, _) = split(&limited);
    let throttled = part(&by, "throttled");
    eprintln!(
        "limited: throttled {throttled:.6} s = {:.1} % of its waits, {:.1} % of cpu.stat's throttled time",
        100.0 * throttled / waited,
        100.0 * throttled / stat_s
    );
    assert!(stat_s > 0.5 * span, "the limited container was throttled only {stat_s} s in {span} windows");
    if throttle_split {
        assert!(throttled >= 0.8 * waited, "limited: {by:?} of {waited} s");
        // Its one task waits through every throttle of its group; the windows' edges and the reads
        // of cpu.stat differ by a drain's lag: two periods.
        let slack = 2.0 * period_us as f64 / 1e6;
        assert!(throttled <= stat_s * tasks as f64 + slack, "limited: throttled {throttled} s, cpu.stat {stat_s} s");
        assert!(throttled >= 0.5 * stat_s, "limited: throttled {throttled} s, cpu.stat {stat_s} s");
    } else {
        eprintln!("throttle_split is not on: every wait is charged to who held the CPU");
        assert_eq!(throttled, 0.0, "limited: {by:?}");
    }
    // The victim waits behind the neighbour and the limited container, never for a limit.
    let (waited, by, _, _) = split(&victim);
    assert!(part(&by, "other") >= 0.7 * waited, "victim: {by:?} of {waited} s");
    assert!(part(&by, "throttled") < 0.01 * waited, "victim: {by:?} of {waited} s");

    podman.remove(&victim).unwrap_or_else(|e| panic!("{e:#}"));
    podman.remove(&noisy).unwrap_or_else(|e| panic!("{e:#}"));
    podman.remove(&limited).unwrap_or_else(|e| panic!("{e:#}"));
    daemon.stop().expect("SIGTERM");
    eprintln!("took {:?}", began.elapsed());
}

/// A hog pod and a victim pod (podman containers with `io.kubernetes.*` annotations) pinned to one
/// CPU: the victim's pod is named in the snapshot's cgroups, on the live view and in the alert that
/// reaches a real Alertmanager, whose annotations name the hog's pod as where the CPU went. When the
/// containers are removed, their series leave /metrics within a window and a drain, and the daemon
/// forgets their names.
#[test]
fn pods_are_named_everywhere_and_leave_with_their_containers() {
    let am = Alertmanager::start().expect("alertmanager (cargo xtask setup installs it)");
    let mut podman = Podman::new().unwrap_or_else(|e| panic!("{e:#}"));
    // Nice 19 behind four nice-0 spinners: each 1 ms sleep ends in a wait of several ms, always
    // behind the hog.
    let (hog, victim) = podman.hog_and_victim_pods("pod").unwrap_or_else(|e| panic!("{e:#}"));
    let (window, interval) = (Duration::from_secs(1), Duration::from_millis(500));
    let daemon = Daemon::start(
        DAEMON,
        &[
            "--interval",
            "500ms",
            "--window",
            "1s",
            "--alert-max-delay",
            "5ms",
            "--alertmanager-url",
            &am.url(),
            "--alert-resend",
            "1s",
        ],
    )
    .expect("latency-daemon run");

    // The alert: the victim's pod as labels, the hog's pod among the culprits. The alert keeps the
    // worst delay while it fires, and the first may be behind the start-up of the daemon (a debug
    // build loading its programs) too: wait for one the hog is part of (re-sent every second).
    let deadline = Instant::now() + Duration::from_secs(20);
    let behind_hog = |a: &serde_json::Value| {
        a["annotations"]["culprit_pods"].as_str().is_some_and(|c| c.contains("pod batch/hog-pod "))
    };
    let mut seen = None;
    let alert = loop {
        let ours = am.ours("pod", "victim-pod").unwrap_or_else(|e| panic!("{e:#}"));
        if let Some(a) = ours.iter().find(|a| behind_hog(a)) {
            break a.clone();
        }
        seen = ours.into_iter().next().or(seen);
        assert!(
            Instant::now() < deadline,
            "no alert for pod victim-pod naming the hog's pod within 20 s; the last: {seen:#?}; log:\n{}",
            daemon.log().join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!("{alert:#}");
    assert_eq!((&alert["labels"]["namespace"], &alert["labels"]["container"]), (&"web".into(), &"sleeper".into()));
    assert_eq!(alert["labels"]["cgroup"], victim.cgroup.as_str());
    let culprit_pods = alert["annotations"]["culprit_pods"].as_str().unwrap_or_default();
    assert!(culprit_pods.contains("pod batch/hog-pod"), "culprit_pods: {culprit_pods}");
    assert!(alert["annotations"]["culprits"].as_str().unwrap_or_default().contains("(pod batch/hog-pod)"), "{alert}");
    assert!(
        alert["annotations"]["victim"]
            .as_str()
            .unwrap_or_default()
            .ends_with("in pod web/victim-pod container sleeper")
    );

    // The snapshot lists the victim's cgroup by its names; the live view shows its pod.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let snapshot: serde_json::Value =
            serde_json::from_str(&daemon.get("/api/v1/snapshot").unwrap_or_else(|e| panic!("{e:#}")).text())
                .unwrap_or_default();
        let in_snapshot = snapshot["cgroups"].as_array().is_some_and(|cgroups| {
            cgroups.iter().any(|c| {
                c["cgroup"] == victim.cgroup.as_str()
                    && c["namespace"] == "web"
                    && c["pod"] == "victim-pod"
                    && c["container"] == "sleeper"
                    && c["container_id"] == victim.id.as_str()
                    && c["count"].as_u64() > Some(0)
            })
        });
        let page = daemon.get("/").unwrap_or_else(|e| panic!("{e:#}")).text();
        let on_page = page.contains("pod web/victim-pod</span>") && page.contains("data-pod=\"victim-pod\"");
        if in_snapshot && on_page {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "victim-pod not in the snapshot ({in_snapshot}) or on / ({on_page}) within 20 s; cgroups: {}",
            snapshot["cgroups"]
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // Removed: their series go within a window and a drain (plus a second for this VM's scheduling),
    // and so do their names.
    let ours = |l: &str| {
        l.starts_with("runqlat_cgroup_delay_seconds")
            && (l.contains("pod=\"victim-pod\"") || l.contains("pod=\"hog-pod\""))
    };
    let text = daemon.metrics().unwrap_or_else(|e| panic!("{e:#}"));
    assert!(text.lines().any(ours), "no series of either pod before the removal:\n{text}");
    let names_before = sample(&text, "runqlat_container_names").expect("runqlat_container_names");
    podman.remove(&victim).unwrap_or_else(|e| panic!("{e:#}"));
    podman.remove(&hog).unwrap_or_else(|e| panic!("{e:#}"));
    let removed = Instant::now();
    let limit = window + interval + Duration::from_secs(1);
    let text = loop {
        let text = daemon.metrics().unwrap_or_else(|e| panic!("{e:#}"));
        if !text.lines().any(ours) {
            break text;
        }
        assert!(
            removed.elapsed() < limit,
            "series still there {:?} after the removal:\n{}",
            removed.elapsed(),
            text.lines().filter(|l| ours(l)).collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("series gone {:?} after podman rm returned", removed.elapsed());
    let names_after = sample(&text, "runqlat_container_names").expect("runqlat_container_names");
    assert!(names_after + 2.0 <= names_before, "names held: {names_before} before, {names_after} after");
    daemon.stop().expect("SIGTERM");
}

/// A Kubernetes pod's container as containerd's CRI plugin lays it out: cgroup
/// `/kubepods/besteffort/pod<uid>/<id>` (cgroupfs driver) and the CRI annotations in the task's
/// config.json under /run/containerd.
#[test]
fn a_containerd_pod_under_kubepods_is_named_by_its_cri_annotations() {
    let mut containerd = Containerd::start().unwrap_or_else(|e| panic!("{e:#}"));
    let id = format!("{:064x}", u128::from(std::process::id()) << 64 | 0xc0ffee);
    let cgroup = format!("/kubepods/besteffort/pod0c0ffee0-1111-2222-3333-{:012x}/{id}", std::process::id());
    let victim = containerd
        .run(
            &cgroup,
            &id,
            &[
                ("io.kubernetes.cri.container-type", "container"),
                ("io.kubernetes.cri.container-name", "victim"),
                ("io.kubernetes.cri.sandbox-name", "cripod"),
                ("io.kubernetes.cri.sandbox-namespace", "crins"),
            ],
            &["sh", "-c", "while :; do usleep 1000; done"],
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(victim.cgroup, cgroup, "ctr run --cgroup");

    let daemon = Daemon::start(DAEMON, &["--interval", "500ms", "--window", "1s"]).expect("latency-daemon run");
    let want = count_series(&victim, Some(("crins", "cripod", "victim")));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = daemon.metrics().unwrap_or_else(|e| panic!("{e:#}"));
        if sample(&text, &want).is_some_and(|n| n > 0.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no delays under {want} within 20 s; cgroup series:\n{}",
            text.lines().filter(|l| l.starts_with("runqlat_cgroup_delay_seconds_count")).collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    daemon.stop().expect("SIGTERM");
}

/// The daemon's own image (`FROM scratch`) under podman with only CAP_BPF and CAP_PERFMON, the shipped
/// seccomp profile, no-new-privileges, the host's PID namespace and read-only host mounts: `check`, as
/// the image's own user (nobody), is ready and sizes its stamps from the host's pid_max; `run`, as
/// uid 0 with the same two capabilities, serves metrics that name another container by its
/// annotations.
#[test]
fn the_daemons_image_runs_with_two_capabilities_and_the_shipped_seccomp_profile() {
    let mut podman = Podman::new().unwrap_or_else(|e| panic!("{e:#}"));
    let tag = format!("localhost/latency-daemon:test-{}", std::process::id());
    podman.build_daemon_image(DAEMON.as_ref(), &tag).unwrap_or_else(|e| panic!("{e:#}"));
    let profile = latency_lab::workspace_root().join(latency_lab::seccomp::PROFILE);
    let seccomp = format!("seccomp={}", profile.display());
    let confined = [
        "--cap-drop=ALL",
        "--cap-add=BPF,PERFMON",
        "--security-opt",
        seccomp.as_str(),
        "--security-opt=no-new-privileges",
        "--pid=host",
        "--read-only",
        "--volume=/sys/fs/cgroup:/sys/fs/cgroup:ro",
        "--volume=/var/lib/containers/storage/overlay-containers:/var/lib/containers/storage/overlay-containers:ro",
    ];
    let untag = |podman: &Podman| drop(podman.podman(&["rmi", "--force", &tag]));

    let check = podman.podman(&[&["run", "--rm", "--network=none"][..], &confined, &[&tag, "check"]].concat());
    let check = check.unwrap_or_else(|e| {
        untag(&podman);
        panic!("check in the image: {e:#}")
    });
    assert!(check.lines().any(|l| l == "ready"), "{check}");
    assert!(check.contains("capabilities: ok (CAP_BPF, CAP_PERFMON)"), "{check}");
    // The host's pid_max, or one past a running tid above it (pid_max lowered after that task
    // started): either way the host's, never the container's namespace's.
    let host_pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
    let highest = latency_daemon::host::system::highest_tid();
    let want = if highest >= host_pid_max {
        format!("{} stamp slots = one past the highest tid running", highest + 1)
    } else {
        format!("{host_pid_max} stamp slots = kernel.pid_max of the host PID namespace")
    };
    assert!(check.contains(&want), "{check}");

    let victim = podman
        .run(
            "named",
            &[("io.kubernetes.pod.name", "named-pod"), ("io.kubernetes.pod.namespace", "imagens")],
            &["--cpuset-cpus", "0"],
            &["sh", "-c", "while :; do usleep 1000; done & while :; do :; done"],
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
    let port = latency_lab::web::free_port().unwrap();
    let listen = format!("--listen=127.0.0.1:{port}");
    let name = format!("runqlat-{}-daemon", std::process::id());
    let run = podman.podman(
        // uid 0, still with only the two capabilities: the runtimes keep their state root-only
        // (0700), and reading a file one owns needs no capability (nobody would need
        // CAP_DAC_READ_SEARCH, and Kubernetes gives a non-root container no ambient capabilities).
        &[
            &["run", "-d", "--name", &name, "--network=host", "--user=0", "--tmpfs=/captures"][..],
            &confined,
            &[&tag, "run", &listen, "--window", "1s", "--capture-dir=/captures/runqlat", "--capture-demand=1s"],
        ]
        .concat(),
    );
    let stop = |podman: &Podman| {
        drop(podman.podman(&["rm", "--force", "--time", "5", &name]));
        untag(podman);
    };
    if let Err(e) = run {
        stop(&podman);
        panic!("run in the image: {e:#}");
    }
    let want = "namespace=\"imagens\",pod=\"named-pod\"";
    let deadline = Instant::now() + Duration::from_secs(30);
    let found = loop {
        let text = latency_lab::web::get(&format!("127.0.0.1:{port}"), "/metrics", &[]).map(|r| r.text());
        if let Ok(text) = &text
            && text.lines().any(|l| l.starts_with("runqlat_cgroup_delay_seconds_count{") && l.contains(want))
        {
            break Ok(());
        }
        if Instant::now() > deadline {
            let log = podman.logs(&name).unwrap_or_else(|e| format!("{e:#}"));
            break Err(format!("no series with {want} within 30 s; last scrape: {text:?}; daemon log:\n{log}"));
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let caps = podman.podman(&["exec", &name, "/latency-daemon", "--version"]).map(drop);
    // A capture on demand under the profile: its directory made, written, renamed into place.
    let asked = podman.podman(&["kill", "--signal", "USR1", &name]).map(drop);
    let deadline = Instant::now() + Duration::from_secs(15);
    let captured = loop {
        let log = podman.logs(&name).unwrap_or_else(|e| format!("{e:#}"));
        if log.contains("capture on demand written") || log.contains("not written") || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    stop(&podman);
    podman.remove(&victim).unwrap_or_else(|e| panic!("{e:#}"));
    found.unwrap_or_else(|e| panic!("{e}"));
    caps.unwrap_or_else(|e| panic!("the image has the daemon as its only program: {e:#}"));
    asked.unwrap_or_else(|e| panic!("podman kill --signal USR1: {e:#}"));
    assert!(
        captured.contains("capture on demand written") && !captured.contains("not written"),
        "a capture under the shipped seccomp profile: {captured}"
    );
}

/// The DaemonSet itself: its pod template, as shipped (securityContext, seccomp profile, read-only
/// root and host mounts, probes, ports), run by `podman kube play` with the daemon's image: it
/// attaches, serves /healthz and /metrics on its port, and runs confined as declared.
#[test]
fn the_daemonsets_pod_template_runs_as_declared() {
    let podman = Podman::new().unwrap_or_else(|e| panic!("{e:#}"));
    let tag = format!("localhost/latency-daemon:kube-{}", std::process::id());
    podman.build_daemon_image(DAEMON.as_ref(), &tag).unwrap_or_else(|e| panic!("{e:#}"));
    let root = latency_lab::workspace_root();
    let manifest = std::fs::read_to_string(root.join("deploy/kubernetes/base/daemonset.yaml")).unwrap();
    let name = format!("runqlat-{}-kube", std::process::id());
    let pod = latency_lab::services::pod_from_daemonset(&manifest, &name, &tag).unwrap_or_else(|e| panic!("{e:#}"));
    // The ConfigMap its --config file comes from, beside the pod as podman kube play takes it.
    let config = std::fs::read_to_string(root.join("deploy/kubernetes/base/configmap.yaml")).unwrap();
    let pod = format!("{pod}---\n{config}");
    // The Localhost profile, where kubelet (and podman's --seccomp-profile-root) looks for it.
    let profiles = podman.scratch_file("seccomp");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::copy(root.join(latency_lab::seccomp::PROFILE), profiles.join("latency-daemon.json")).unwrap();
    // Deepest first: removed in this order if the play made them.
    let host_dirs = ["/run/containerd", "/run/containers/storage", "/run/k3s/containerd", "/run/k3s"];
    let result = {
        let played = latency_lab::services::KubePod::play(&podman, &pod, &profiles, &host_dirs);
        let check = || -> Result<(), String> {
            played.as_ref().map_err(|e| format!("podman kube play: {e:#}"))?;
            let container = format!("{name}-latency-daemon");
            let inspect =
                |format: &str| podman.podman(&["inspect", &container, "--format", format]).unwrap_or_default();
            let deadline = Instant::now() + Duration::from_secs(30);
            let metrics = loop {
                let ip = podman
                    .podman(&["pod", "inspect", &name, "--format", "{{.InfraContainerID}}"])
                    .ok()
                    .and_then(|infra| {
                        podman
                            .podman(&[
                                "inspect",
                                infra.trim(),
                                "--format",
                                "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                            ])
                            .ok()
                    })
                    .unwrap_or_default();
                let addr = format!("{}:9954", ip.trim());
                let healthy = latency_lab::web::get(&addr, "/healthz", &[]).is_ok_and(|r| r.status == 200);
                if healthy && let Ok(r) = latency_lab::web::get(&addr, "/metrics", &[]) {
                    break r.text();
                }
                if Instant::now() > deadline {
                    let log = podman.podman(&["logs", &container]).unwrap_or_default();
                    return Err(format!(
                        "not healthy at {addr} within 30 s; state {}; log:\n{log}",
                        inspect("{{.State.Status}}")
                    ));
                }
                std::thread::sleep(Duration::from_millis(500));
            };
            if !sample(&metrics, "runqlat_delay_seconds_count{reason=\"wakeup\"}").is_some_and(|n| n > 0.0) {
                return Err(format!("no delays measured:\n{metrics}"));
            }
            let pid = inspect("{{.State.Pid}}");
            let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim())).unwrap_or_default();
            let field =
                |k: &str| status.lines().find_map(|l| l.strip_prefix(k)).map(str::trim).unwrap_or("?").to_owned();
            // Bounding set at most BPF (39) and PERFMON (38); seccomp filtering; no privilege gain.
            let bounding = u64::from_str_radix(&field("CapBnd:"), 16).unwrap_or(u64::MAX);
            let declared = [
                ("CapBnd ⊆ {BPF, PERFMON}", bounding & !(1 << 38 | 1 << 39) == 0),
                ("Seccomp: 2 (a filter)", field("Seccomp:") == "2"),
                ("NoNewPrivs: 1", field("NoNewPrivs:") == "1"),
                ("read-only root", inspect("{{.HostConfig.ReadonlyRootfs}}").trim() == "true"),
                ("every mount read-only", !inspect("{{range .Mounts}}{{.RW}} {{end}}").contains("true")),
                ("uid 0", field("Uid:").split_whitespace().next() == Some("0")),
            ];
            let broken: Vec<&str> = declared.iter().filter(|(_, ok)| !ok).map(|(what, _)| *what).collect();
            if !broken.is_empty() {
                return Err(format!("not as declared: {broken:?}\n{status}"));
            }
            Ok(())
        };
        check()
    };
    drop(podman.podman(&["rmi", "--force", &tag]));
    result.unwrap_or_else(|e| panic!("{e}"));
}

/// The seccomp-installer component's init container as declared (its args read from the component;
/// the runtime's default seccomp profile, no capabilities, uid 0, read-only root, no_new_privs):
/// it writes the shipped profile, byte for byte, into the directory standing in for the node's
/// /var/lib/kubelet/seccomp, where the daemon's container's Localhost profile then points.
#[test]
fn the_seccomp_installers_init_container_writes_the_shipped_profile() {
    let podman = Podman::new().unwrap_or_else(|e| panic!("{e:#}"));
    let tag = format!("localhost/latency-daemon:installer-{}", std::process::id());
    podman.build_daemon_image(DAEMON.as_ref(), &tag).unwrap_or_else(|e| panic!("{e:#}"));
    let root = latency_lab::workspace_root();
    let component =
        std::fs::read_to_string(root.join("deploy/kubernetes/components/seccomp-installer/kustomization.yaml"))
            .unwrap();
    let args = component.lines().find_map(|l| l.trim().strip_prefix("args: ")).expect("the init container's args");
    let args: Vec<String> = serde_json::from_str(args).expect("args as a flow list of strings");
    assert!(component.contains("mountPath: /host-seccomp\n") && component.contains("path: /var/lib/kubelet/seccomp\n"));
    let host = podman.scratch_file("host-seccomp");
    std::fs::create_dir_all(&host).unwrap();
    let volume = format!("{}:/host-seccomp", host.display());
    let mut run: Vec<&str> = vec!["run", "--rm", "--read-only", "--cap-drop=ALL", "--user", "0"];
    run.extend(["--security-opt", "no-new-privileges", "--volume", &volume, &tag]);
    run.extend(args.iter().map(String::as_str));
    let result = podman.podman(&run);
    drop(podman.podman(&["rmi", "--force", &tag]));
    result.unwrap_or_else(|e| panic!("{args:?}: {e:#}"));
    let written = std::fs::read(host.join("latency-daemon.json")).expect("the profile on the host");
    assert!(written == std::fs::read(root.join(latency_lab::seccomp::PROFILE)).unwrap(), "not the shipped profile");
}

/// The families served with a native form too (protobuf); the other histograms stay classic,
/// which Prometheus stores as bucket series even with native histograms on (checked against 2.42).
const NATIVE_FAMILIES: [&str; 1] = ["runqlat_delay_seconds"];

/// Family → (sample lines in the text format, series with native histograms): a classic histogram
/// is a line per `le` plus `_sum` and `_count`; as a native histogram it is one series per label set.
fn series_by_family(text: &str) -> std::collections::BTreeMap<String, (usize, usize)> {
    let mut out: std::collections::BTreeMap<String, (usize, std::collections::BTreeSet<String>)> = Default::default();
    let mut family = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            family = rest.split_whitespace().next().unwrap_or_default().to_owned();
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let labels = line.split_once('{').map_or("", |(_, l)| l.rsplit_once('}').map_or("", |(l, _)| l));
        let without_le: Vec<&str> =
            labels.split("\",").map(|kv| kv.trim_end_matches('"')).filter(|kv| !kv.starts_with("le=")).collect();
        let entry = out.entry(family.clone()).or_default();
        entry.0 += 1;
        entry.1.insert(without_le.join("\","));
    }
    out.into_iter()
        .map(|(f, (lines, sets))| {
            let native = if NATIVE_FAMILIES.contains(&f.as_str()) { sets.len() } else { lines };
            (f, (lines, native))
        })
        .collect()
}

/// The series budget of one node at the daemon's defaults (README "Kubernetes"): 40 podman
/// containers in 20 annotated pods, each waking every few ms for a short burst of work, watched by
/// `latency-daemon run` with no flags for three windows; prints series per family and the daemon's
/// RSS. Not part of the suite (a minute, and a measurement, not a check); run it with
/// `SERIES_BUDGET_DAEMON=target/release/latency-daemon cargo test -p latency-daemon --test containers
/// series_budget -- --ignored --nocapture` (the debug binary otherwise).
#[test]
#[ignore = "a measurement for README; run by hand"]
fn series_budget_at_defaults() {
    let daemon_binary = std::env::var("SERIES_BUDGET_DAEMON").unwrap_or_else(|_| DAEMON.to_owned());
    let mut podman = Podman::new().unwrap_or_else(|e| panic!("{e:#}"));
    let work = "while :; do i=0; while [ $i -lt 300 ]; do i=$((i+1)); done; usleep 3000; done";
    let mut started = Vec::new();
    for n in 0..40 {
        let (pod, container) = (format!("app-{}", n / 2), format!("c{}", n % 2));
        let annotations = [
            ("io.kubernetes.pod.namespace", "budget"),
            ("io.kubernetes.pod.name", pod.as_str()),
            ("io.kubernetes.container.name", container.as_str()),
        ];
        started.push(
            podman
                .run(&format!("budget-{n}"), &annotations, &[], &["sh", "-c", work])
                .unwrap_or_else(|e| panic!("{e:#}")),
        );
    }
    let daemon = Daemon::start(&daemon_binary, &[]).expect("latency-daemon run");
    std::thread::sleep(Duration::from_secs(47));
    let text = daemon.metrics().unwrap_or_else(|e| panic!("{e:#}"));
    let kib = |key: &str| latency_lab::daemon::status_kib(daemon.pid(), key).unwrap_or(f64::NAN);
    let (rss, hwm) = (kib("VmRSS:"), kib("VmHWM:"));
    let families = series_by_family(&text);
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("{} on {cpus} CPUs, 40 containers in 20 pods, defaults, after 3 windows:", daemon_binary);
    println!("| family | series (classic, text) | series (native histograms) |\n|---|---:|---:|");
    let (mut classic, mut native) = (0, 0);
    for (family, (lines, sets)) in &families {
        println!("| `{family}` | {lines} | {sets} |");
        classic += lines;
        native += sets;
    }
    println!("| **all** | **{classic}** | **{native}** |");
    let pods: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("runqlat_cgroup_delay_seconds_count{"))
        .filter_map(|l| l.split("pod=\"").nth(1)?.split('"').next())
        .collect();
    println!("pods with a series: {}; daemon RSS {rss:.0} KiB (peak {hwm:.0} KiB)", pods.len());
    daemon.stop().expect("SIGTERM");
    for c in &started {
        podman.remove(c).unwrap_or_else(|e| panic!("{e:#}"));
    }
}
