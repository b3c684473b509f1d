//! `--path.procfs`, `--path.sysfs`, `--path.cgroupfs`, `--path.rootfs` (node_exporter's flags, for
//! running in a container with the host's file systems mounted elsewhere): each is where the daemon
//! reads, and a bad one is one line and exit 2 with nothing attached.
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
