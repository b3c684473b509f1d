//! `--path.procfs`, `--path.sysfs`, `--path.cgroupfs`, `--path.rootfs` (node_exporter's flags, for
//! running in a container with the host's file systems mounted elsewhere): each is where the daemon
//! reads, and a bad one is one line and exit 2 with nothing attached. Each CPU's steal is the
//! host's /proc/stat's, read there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use latency_lab::{
    daemon::Daemon,
    guard::{Proc, Scratch},
    services::TestCgroup,
    web::sample,
};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");

fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(DAEMON).arg("run").args(["--listen", "127.0.0.1:0"]).args(args).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn assert_nothing_attached() {
    latency_lab::oracle::bpftool::nothing_loaded().unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn a_path_that_does_not_exist_is_one_line_and_exit_2() {
    for (flag, field) in [
        ("--path.procfs", "path_procfs"),
        ("--path.sysfs", "path_sysfs"),
        ("--path.cgroupfs", "path_cgroupfs"),
        ("--path.rootfs", "path_rootfs"),
    ] {
        let (code, err) = run(&[flag, "/nonexistent/runqlat"]);
        assert_eq!(code, Some(2), "{flag}: {err}");
        assert_eq!(err.lines().count(), 1, "{flag}: one line: {err}");
        assert!(err.contains(&format!("{field}: /nonexistent/runqlat: No such file or directory")), "{flag}: {err}");
    }
    // The variable too, like every flag's.
    let out = Command::new(DAEMON).arg("run").env("RUNQLAT_PATH_SYSFS", "/etc/hostname").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("path_sysfs: /etc/hostname is not a directory"), "{err}");
    assert_nothing_attached();
}

/// An empty directory as procfs or sysfs: the daemon reads there, so it fails naming the file it
/// looked for (pid_max or the kernel's BTF), not /proc's or /sys's.
#[test]
fn procfs_and_sysfs_are_where_it_reads() {
    let empty = Scratch::new("runqlat-paths").unwrap();
    let dir = empty.path().display().to_string();
    let (code, err) = run(&["--path.sysfs", &dir, "--per-cgroup=false"]);
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains(&format!("{dir}/kernel/btf/vmlinux")), "--path.sysfs not honoured: {err}");
    let (code, err) = run(&["--path.procfs", &dir, "--per-cgroup=false"]);
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains(&format!("{dir}/sys/kernel/pid_max")), "--path.procfs not honoured: {err}");
    assert_nothing_attached();
}

/// Unmounts on drop (before the cgroup it shows is removed: a mounted cgroup cannot be).
struct BindMount(PathBuf);

impl BindMount {
    fn new(from: &Path, to: &Path) -> BindMount {
        let status = Command::new("mount").arg("--bind").arg(from).arg(to).status().unwrap();
        assert!(status.success(), "mount --bind {} {}", from.display(), to.display());
        BindMount(to.to_path_buf())
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A subtree of the cgroup2 hierarchy bind-mounted elsewhere, named by `--path.cgroupfs`: the
/// daemon picks that mount from its mount table (over the real one), so a cgroup inside is labelled
/// relative to it.
#[test]
fn cgroupfs_picks_the_mount_below_it() {
    let parent = TestCgroup::new("paths").unwrap();
    let busy = parent.child("busy").unwrap();
    let scratch = Scratch::new("runqlat-cgroupfs").unwrap();
    let mount_point = scratch.join("cgroup");
    std::fs::create_dir(&mount_point).unwrap();
    let cgroup_dir = {
        let names = latency_daemon::host::cgroups::CgroupNames::discover().unwrap();
        names.mount().join(parent.path.trim_start_matches('/'))
    };
    let bind = BindMount::new(&cgroup_dir, &mount_point);

    let daemon = Daemon::start(
        DAEMON,
        &["--interval", "1s", "--window", "2s", "--path.cgroupfs", mount_point.to_str().unwrap()],
    )
    .expect("the daemon starts");
    let spinners: Vec<Proc> =
        (0..2).map(|_| busy.spawn(&["taskset", "-c", "0", "sh", "-c", "while :; do :; done"]).unwrap()).collect();
    let series = "runqlat_cgroup_delay_seconds_count{cgroup=\"/busy\"}";
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = daemon.metrics().unwrap();
        if sample(&text, series).is_some_and(|n| n > 0.0) {
            break;
        }
        if Instant::now() > deadline {
            let cgroups: Vec<&str> =
                text.lines().filter(|l| l.starts_with("runqlat_cgroup_delay_seconds_count")).collect();
            panic!("no {series} after 20 s (--path.cgroupfs {} not honoured?): {cgroups:#?}", mount_point.display());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let log = daemon.log();
    assert!(
        log.iter().any(|l| l.contains("per-cgroup delays on") && l.contains(mount_point.to_str().unwrap())),
        "the log names another mount: {log:#?}"
    );
    drop(spinners);
    daemon.stop().unwrap();
    drop(bind);
}

/// Each `cpuN` line's steal (its 8th value) in ticks, read by the test itself; lines with fewer
/// values are left out.
fn steal_ticks(stat: &str) -> Vec<(String, u64)> {
    stat.lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f[0].trim_start_matches("cpu").to_string(), f.get(8)?.parse().ok()?))
        })
        .collect()
}

fn proc_stat_steal() -> Vec<(String, u64)> {
    steal_ticks(&std::fs::read_to_string("/proc/stat").unwrap())
}

/// USER_HZ, from `getconf` (not the daemon's code).
fn user_hz() -> f64 {
    let out = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn steal_series(cpu: &str) -> String {
    format!("runqlat_cpu_steal_seconds_total{{cpu=\"{cpu}\"}}")
}

/// Against the real /proc/stat, twice a few seconds apart: each CPU's counter lies between the
/// kernel's steal read before the drain it came from and after the scrape (within one tick), and
/// never goes back.
#[test]
fn steal_per_cpu_is_the_kernels() {
    let hz = user_hz();
    let daemon = Daemon::start(DAEMON, &["--interval", "1s", "--window", "2s", "--per-cgroup=false"]).expect("starts");
    daemon.wait_for_log("attached", Duration::from_secs(30)).unwrap();
    let mut last: Option<Vec<f64>> = None;
    for round in 0..2 {
        let before = proc_stat_steal();
        assert!(!before.is_empty(), "no cpuN line with steal in /proc/stat");
        // Past the next drain: what the scrape shows was read after `before`.
        std::thread::sleep(Duration::from_millis(2_500));
        let text = daemon.metrics().unwrap();
        let after = proc_stat_steal();
        let families = text.lines().filter(|l| l.starts_with("runqlat_cpu_steal_seconds_total{")).count();
        assert_eq!(families, before.len(), "one series per CPU of /proc/stat: {before:?}");
        let mut now = Vec::new();
        for ((cpu, b), (cpu_after, a)) in before.iter().zip(&after) {
            assert_eq!(cpu, cpu_after);
            let got = sample(&text, &steal_series(cpu)).unwrap_or_else(|| panic!("no steal series for CPU {cpu}"));
            let (low, high) = (*b as f64 / hz, *a as f64 / hz);
            eprintln!("round {round}, CPU {cpu}: /proc/stat {low:.2} s before, {high:.2} s after; scraped {got:.3} s");
            assert!(
                got >= low - 1.0 / hz && got <= high + 1.0 / hz,
                "CPU {cpu}: scraped {got} s, /proc/stat read {low} s before and {high} s after"
            );
            if let Some(last) = &last {
                assert!(got >= last[now.len()], "CPU {cpu} went back: {} s then {got} s", last[now.len()]);
            }
            now.push(got);
        }
        last = Some(now);
    }
    daemon.stop().unwrap();
}

/// A procfs that is the host's but for its `stat`: symlinks to every other entry of /proc.
fn procfs_with_stat(scratch: &Scratch, stat: &str) -> PathBuf {
    let dir = scratch.join("proc");
    std::fs::create_dir(&dir).unwrap();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        if name != "stat" {
            std::os::unix::fs::symlink(Path::new("/proc").join(&name), dir.join(&name)).unwrap();
        }
    }
    std::fs::write(dir.join("stat"), stat).unwrap();
    dir
}

/// Steal is read under `--path.procfs`: a procfs whose stat says 123.45 s and 6.78 s (and a line
/// too short to hold steal) is what the counter shows; one without cpu lines leaves the family out,
/// logs one line for it however many drains fail, and the rest of the scrape is served.
#[test]
fn steal_is_read_under_the_procfs_and_a_bad_stat_leaves_only_it_out() {
    let hz = user_hz();
    let scratch = Scratch::new("runqlat-steal").unwrap();
    let stat = "cpu  1 2 3 4 5 6 7 12423 0 0\ncpu0 1 2 3 4 5 6 7 12345 0 0\ncpu1 1 2 3 4 5 6 7 678 0 0\n\
                cpu2 1 2 3 4 5 6 7\nbtime 1700000000\n";
    let procfs = procfs_with_stat(&scratch, stat);
    let daemon = Daemon::start(
        DAEMON,
        &["--interval", "1s", "--window", "2s", "--per-cgroup=false", "--path.procfs", procfs.to_str().unwrap()],
    )
    .expect("starts");
    std::thread::sleep(Duration::from_millis(2_500));
    let text = daemon.metrics().unwrap();
    assert_eq!(sample(&text, &steal_series("0")), Some(12345.0 / hz), "--path.procfs not honoured?");
    assert_eq!(sample(&text, &steal_series("1")), Some(678.0 / hz));
    assert_eq!(sample(&text, &steal_series("2")), None, "a line without steal is skipped");
    daemon.stop().unwrap();

    std::fs::write(procfs.join("stat"), "intr 0\nbtime 1700000000\n").unwrap();
    let daemon = Daemon::start(
        DAEMON,
        &["--interval", "1s", "--window", "2s", "--per-cgroup=false", "--path.procfs", procfs.to_str().unwrap()],
    )
    .expect("starts");
    std::thread::sleep(Duration::from_millis(3_500));
    let text = daemon.metrics().unwrap();
    assert!(!text.contains("runqlat_cpu_steal_seconds"), "a steal family from a stat without cpu lines");
    assert!(sample(&text, "runqlat_drains_total").is_some_and(|n| n >= 2.0), "the scrape is served");
    assert_eq!(sample(&text, "runqlat_drain_errors_total"), Some(0.0), "steal is not a drain error");
    let (_, log) = daemon.stop_with_log().unwrap();
    let warned: Vec<&String> = log.iter().filter(|l| l.contains("steal per CPU is not exported")).collect();
    assert_eq!(warned.len(), 1, "one line however many drains: {log:#?}");
    assert!(warned[0].contains(&procfs.join("stat").display().to_string()), "{}", warned[0]);
}
