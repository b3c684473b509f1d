//! The daemon's seccomp profile, from what it really calls: `latency-daemon check`, `record` and a
//! `run` that is scraped in every format, reloaded (SIGHUP), sent the signals it ignores and stopped
//! (SIGTERM), each under `strace -f`; out, an OCI/docker seccomp profile allowing exactly
//! those system calls (plus the few any process needs to exit and return from a signal), everything
//! else refused with EPERM; of every build that runs in the image (glibc and static musl).
//! `cargo xtask seccomp` writes it to deploy/seccomp/latency-daemon.json;
//! the container tests run the daemon's image under it.
use std::{
    collections::BTreeSet,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{
    cmd,
    guard::{Proc, Scratch},
    web,
};

/// Where the profile lives in the repository.
pub const PROFILE: &str = "deploy/seccomp/latency-daemon.json";

/// Needed by any process whatever the trace saw (a signal handler's return, a restarted sleep, exit).
const ALWAYS: [&str; 5] = ["exit", "exit_group", "rt_sigreturn", "restart_syscall", "execve"];

/// What the runtime calls between installing the filter and exec'ing the daemon, with
/// no-new-privileges (Kubernetes' `allowPrivilegeEscalation: false`, podman's
/// `--security-opt no-new-privileges`): runc checks /proc/self/fd with `fstatfs` (found by removing
/// each candidate in turn: without it runc fails with "ensure /proc/self/fd is on procfs"), and its Go
/// runtime may preempt or park a thread meanwhile. Without no-new-privileges runc installs the filter
/// earlier, before it drops capabilities and changes user, and this profile is not enough.
const RUNTIME: [&str; 5] = ["fstatfs", "getpid", "tgkill", "nanosleep", "sched_yield"];

/// The system calls `daemon` makes across check, record and a scraped, reloaded, stopped run (with
/// alerting on, so the attribution programs and the alert log are in it too, and captures: the
/// directory made, each capture written and renamed into place, the older one removed by the cap).
pub fn trace(daemon: &Path) -> anyhow::Result<BTreeSet<String>> {
    let scratch = Scratch::new("runqlat-seccomp")?;
    let mut calls = BTreeSet::new();
    println!("seccomp: tracing `check`");
    calls.extend(strace_to_end(&scratch, "check", daemon, &["check"])?);
    println!("seccomp: tracing `record --duration 1s`");
    calls.extend(strace_to_end(&scratch, "record", daemon, &["record", "--duration", "1s"])?);
    println!("seccomp: tracing `run` (scrapes in every format, SIGHUP, SIGUSR1/2, SIGPIPE, SIGTERM; captures)");
    let args = run_args(&scratch.join("captures"));
    calls.extend(trace_run(daemon, &args.iter().map(String::as_str).collect::<Vec<_>>())?);
    Ok(calls)
}

/// The flags `run` is traced with: an alert at 1 µs (so the attribution programs and the alert
/// log run) and captures into `captures` (an alert's, and one on demand that a cap of one prunes).
pub fn run_args(captures: &Path) -> Vec<String> {
    let captures = captures.to_string_lossy().into_owned();
    ["--alert-max-delay", "1us", "--capture-dir", &captures, "--capture-max-files", "1", "--capture-demand", "1s"]
        .map(str::to_owned)
        .to_vec()
}

/// The system calls of `daemon run ARGS` from start to exit: attach, drain, scrapes of every
/// endpoint and format, SIGHUP (reload), SIGUSR1 (a capture on demand, with a capture directory),
/// the signals it ignores (SIGUSR2, SIGPIPE), and SIGTERM (detach). Fails if it dies on any but
/// the last.
pub fn trace_run(daemon: &Path, args: &[&str]) -> anyhow::Result<BTreeSet<String>> {
    let scratch = Scratch::new("runqlat-seccomp")?;
    let addr = format!("127.0.0.1:{}", web::free_port()?);
    let out = scratch.join("run.trace");
    let mut command = Command::new("strace");
    command
        .args(["-f", "-qq", "-o"])
        .arg(&out)
        .arg("--")
        .arg(daemon)
        .args(["run", "--listen", &addr, "--interval", "200ms", "--window", "400ms", "--per-task"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut strace = Proc::spawn(&mut command, "strace").context("cargo xtask setup installs strace")?;
    let pid = traced_child(strace.pid())?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while web::get(&addr, "/healthz", &[]).map(|r| r.status).ok() != Some(200) {
        if Instant::now() > deadline {
            bail!("the traced daemon did not become healthy within 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1200));
    let scrapes: [(&str, &[(&str, &str)]); 7] = [
        ("/metrics", &[]),
        ("/metrics", &[("Accept", "application/openmetrics-text; version=1.0.0")]),
        (
            "/metrics",
            &[(
                "Accept",
                "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited",
            )],
        ),
        ("/api/v1/snapshot", &[]),
        ("/", &[]),
        ("/heatmap.svg", &[]),
        ("/nothing-here", &[]),
    ];
    for (path, headers) in scrapes {
        web::get(&addr, path, headers).with_context(|| format!("GET {path}"))?;
    }
    for signal in [libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2, libc::SIGPIPE, libc::SIGTERM] {
        if traced_child(strace.pid()).ok() != Some(pid) {
            bail!("the traced daemon died before signal {signal} (it must survive all but SIGTERM)");
        }
        // SAFETY: kill(2) on the daemon this function started, still strace's child (checked above).
        unsafe { libc::kill(pid as i32, signal) };
        std::thread::sleep(Duration::from_millis(300));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::metadata(format!("/proc/{pid}")).is_ok() {
        if Instant::now() > deadline {
            strace.signal(libc::SIGKILL);
            bail!("the traced daemon did not stop within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(strace);
    Ok(syscalls(&std::fs::read_to_string(&out).context("reading the run trace")?))
}

/// `strace -f daemon ARGS` until it exits; the system calls it made.
fn strace_to_end(scratch: &Scratch, name: &str, daemon: &Path, args: &[&str]) -> anyhow::Result<BTreeSet<String>> {
    let out = scratch.join(&format!("{name}.trace"));
    let mut command = Command::new("strace");
    command.args(["-f", "-qq", "-o"]).arg(&out).arg("--").arg(daemon).args(args);
    cmd::stdout(&mut command).with_context(|| format!("strace {} {}", daemon.display(), args.join(" ")))?;
    Ok(syscalls(&std::fs::read_to_string(&out).context("reading the trace")?))
}

/// The process strace started (its only child).
fn traced_child(strace: u32) -> anyhow::Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{strace}/task/{strace}/children")).unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next().and_then(|p| p.parse().ok()) {
            return Ok(pid);
        }
        if Instant::now() > deadline {
            bail!("strace started no child within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// System call names in `strace -f` output: `PID name(…`, and `PID <... name resumed>`.
pub fn syscalls(trace: &str) -> BTreeSet<String> {
    fn name(s: &str) -> Option<&str> {
        let end = s.find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))?;
        (end > 0).then(|| &s[..end])
    }
    trace
        .lines()
        .filter_map(|line| {
            let rest = line.split_once(' ').map_or(line, |(_, r)| r).trim_start();
            if let Some(resumed) = rest.strip_prefix("<... ") {
                return name(resumed);
            }
            let n = name(rest)?;
            rest[n.len()..].starts_with('(').then_some(n)
        })
        .map(str::to_owned)
        .collect()
}

/// An OCI/docker seccomp profile allowing the `traced` calls, those any process needs and those the
/// runtime makes after installing it, on x86-64 (its 32-bit ABIs refused).
pub fn profile(traced: &BTreeSet<String>) -> serde_json::Value {
    let mut calls = traced.clone();
    calls.extend(ALWAYS.iter().chain(&RUNTIME).map(|s| (*s).to_owned()));
    serde_json::json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [{ "names": calls, "action": "SCMP_ACT_ALLOW" }],
    })
}

/// `cargo xtask seccomp`: trace each of `daemons` (the glibc build and the static musl one call
/// different system calls for the same work: musl's `open`, `stat`, `mremap`, `clone`…) and write
/// the profile allowing what any of them calls under `root`.
pub fn write(daemons: &[&Path], root: &Path) -> anyhow::Result<()> {
    let mut calls = BTreeSet::new();
    for daemon in daemons {
        println!("seccomp: {}", daemon.display());
        calls.extend(trace(daemon)?);
    }
    let profile = profile(&calls);
    let path = root.join(PROFILE);
    std::fs::create_dir_all(path.parent().context("profile path")?)?;
    let text = serde_json::to_string_pretty(&profile)? + "\n";
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    let allowed = profile["syscalls"][0]["names"].as_array().map_or(0, Vec::len);
    println!("seccomp: {} system calls traced, {allowed} allowed, written to {}", calls.len(), path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_every_kind_of_strace_line() {
        let trace = "\
123 execve(\"/x\", [\"/x\"], 0x7ffd /* 20 vars */) = 0
123 bpf(BPF_MAP_CREATE, {map_type=BPF_MAP_TYPE_ARRAY}, 72) = 3
124 futex(0x7f, FUTEX_WAIT_PRIVATE, 0, NULL <unfinished ...>
123 epoll_wait(4,  <unfinished ...>
124 <... futex resumed>) = 0
123 --- SIGHUP {si_signo=SIGHUP, si_code=SI_USER} ---
123 rt_sigreturn({mask=[]}) = 202
124 +++ exited with 0 +++
123 perf_event_open({type=PERF_TYPE_TRACEPOINT}, -1, 0, -1, PERF_FLAG_FD_CLOEXEC) = 7
";
        let got: Vec<String> = syscalls(trace).into_iter().collect();
        assert_eq!(got, ["bpf", "epoll_wait", "execve", "futex", "perf_event_open", "rt_sigreturn"]);
    }

    #[test]
    fn the_profile_refuses_by_default() {
        let p = profile(&["read".to_owned()].into());
        assert_eq!(p["defaultAction"], "SCMP_ACT_ERRNO");
        let names: Vec<&str> =
            p["syscalls"][0]["names"].as_array().into_iter().flatten().filter_map(|n| n.as_str()).collect();
        assert!(names.contains(&"read") && names.contains(&"fstatfs") && names.contains(&"exit_group"), "{names:?}");
    }
}
