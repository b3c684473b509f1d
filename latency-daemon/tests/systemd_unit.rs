//! deploy/systemd/latency-daemon.service checked offline by systemd's own tools (PID 1 here is not
//! systemd, so the unit is never started): `systemd-analyze verify` in a scratch root that holds
//! the unit, the daemon at its ExecStart path and the distribution's units; `systemd-analyze
//! security --offline=yes`, whose overall exposure level must not exceed the figure docs/deployment.md states.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use latency_lab::guard::Scratch;

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");
const UNIT: &str = "latency-daemon.service";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn unit_path() -> PathBuf {
    workspace().join("deploy/systemd").join(UNIT)
}

fn output(c: &mut Command) -> (bool, String) {
    let out = c.output().unwrap_or_else(|e| panic!("{c:?}: {e} (cargo xtask setup installs systemd)"));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn systemd_analyze_verify_finds_nothing() {
    let root = Scratch::new("systemd-root").unwrap();
    let r = root.path();
    for dir in ["etc/systemd/system", "usr/local/bin", "usr/bin", "usr/lib/systemd"] {
        std::fs::create_dir_all(r.join(dir)).unwrap();
    }
    std::os::unix::fs::symlink("usr/bin", r.join("bin")).unwrap();
    std::fs::copy(unit_path(), r.join("etc/systemd/system").join(UNIT)).unwrap();
    // ExecStart and ExecReload must name executables inside the root.
    let exec = r.join("usr/local/bin/latency-daemon");
    std::fs::hard_link(DAEMON, &exec).or_else(|_| std::fs::copy(DAEMON, &exec).map(|_| ())).unwrap();
    std::fs::copy("/usr/bin/kill", r.join("usr/bin/kill")).unwrap();
    // The targets it names (network-online.target, multi-user.target, sysinit.target…).
    let (ok, text) = output(Command::new("cp").args(["-a", "/usr/lib/systemd/system"]).arg(r.join("usr/lib/systemd")));
    assert!(ok, "copying the distribution's units: {text}");

    let (ok, text) = output(
        Command::new("systemd-analyze")
            .arg("verify")
            .arg(format!("--root={}", r.display()))
            .arg(format!("/etc/systemd/system/{UNIT}")),
    );
    assert!(ok && text.trim().is_empty(), "systemd-analyze verify:\n{text}");
}

#[test]
fn exposure_level_is_at_most_readmes_figure() {
    let (_, text) = output(Command::new("systemd-analyze").args(["security", "--offline=yes"]).arg(unit_path()));
    let level: f64 = text
        .lines()
        .find_map(|l| l.split_once(&format!("Overall exposure level for {UNIT}: "))?.1.split_whitespace().next())
        .unwrap_or_else(|| panic!("no overall exposure level in:\n{text}"))
        .parse()
        .unwrap();
    let readme = std::fs::read_to_string(workspace().join("docs/deployment.md")).unwrap();
    // docs/deployment.md: "… overall exposure level **1.7** …"
    let stated: f64 = readme
        .split_once("overall exposure level **")
        .and_then(|(_, rest)| rest.split_once("**"))
        .unwrap_or_else(|| panic!("docs/deployment.md states no \"overall exposure level **N**\""))
        .0
        .parse()
        .unwrap();
    eprintln!("exposure level {level} (docs/deployment.md states {stated})");
    assert!(stated <= 2.0, "docs/deployment.md's figure {stated} is over the 2.0 aimed at");
    assert!(level <= stated, "the unit's exposure level {level} exceeds docs/deployment.md's {stated}:\n{text}");
}

/// Every system call the daemon makes — attach, drain, serve, reload, drop its capabilities,
/// detach — is one the unit's SystemCallFilter= allows (the groups as this systemd expands them).
/// Traced with strace, since the filter itself can only be applied by a booted systemd.
#[test]
fn every_system_call_of_the_daemon_passes_the_units_filter() {
    let allowed = unit_filter();
    let scratch = latency_lab::guard::Scratch::new("runqlat-unit-filter").unwrap();
    let args = latency_lab::seccomp::run_args(&scratch.join("captures"));
    let used = latency_lab::seccomp::trace_run(DAEMON.as_ref(), &args.iter().map(String::as_str).collect::<Vec<_>>())
        .unwrap_or_else(|e| panic!("latency-daemon run under strace: {e:#}"));
    assert!(used.contains("rename"), "no capture written: {used:?}");
    latency_lab::oracle::bpftool::nothing_loaded().unwrap_or_else(|e| panic!("{e:#}"));
    assert!(used.contains("bpf") && used.contains("capset"), "strace saw too little: {used:?}");
    eprintln!("{} system calls used: {}", used.len(), used.iter().map(String::as_str).collect::<Vec<_>>().join(" "));
    let denied: Vec<&String> = used.iter().filter(|s| !allowed.contains(s)).collect();
    assert!(denied.is_empty(), "system calls the unit's filter would deny: {denied:?}");
}

/// The system calls `SystemCallFilter=` lines of the unit allow, groups expanded.
fn unit_filter() -> Vec<String> {
    let unit = std::fs::read_to_string(unit_path()).unwrap();
    let mut pending: Vec<String> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("SystemCallFilter="))
        .inspect(|v| assert!(!v.starts_with('~'), "a deny list: extend this test"))
        .flat_map(|v| v.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .collect();
    assert!(!pending.is_empty(), "the unit has no SystemCallFilter=");
    let (mut calls, mut seen) = (Vec::new(), Vec::new());
    while let Some(item) = pending.pop() {
        if !item.starts_with('@') {
            calls.push(item);
            continue;
        }
        if seen.contains(&item) {
            continue;
        }
        let (ok, text) = output(Command::new("systemd-analyze").args(["syscall-filter", &item]));
        assert!(ok, "systemd-analyze syscall-filter {item}: {text}");
        // The group's name and description, then one member per line.
        pending.extend(
            text.lines().skip(1).map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_owned),
        );
        seen.push(item);
    }
    calls
}
