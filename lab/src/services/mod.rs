//! Real components the daemon works with, run for a test on loopback: Prometheus, Alertmanager,
//! VictoriaMetrics (OTLP receivers), cgroups of the test's own, podman and containerd containers. Each is stopped or removed when its guard goes.
mod alertmanager;
mod cgroup;
mod containerd;
mod kube;
pub mod operator;
pub mod otlp_receiver;
mod podman;
mod prometheus;
pub mod victoria;

/// Prometheus 2.53 from Debian trixie, unpacked (not installed) by `cargo xtask setup`: where it is.
pub mod prometheus_trixie {
    use std::path::PathBuf;

    /// Its `prometheus` binary (xtask's setup checks it unpacks exactly there).
    pub fn binary() -> PathBuf {
        PathBuf::from("/var/cache/runqlat-tools/prometheus-trixie/usr/bin/prometheus")
    }
}

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

pub use alertmanager::Alertmanager;
pub use cgroup::{CgroupMount, Inside, TestCgroup, Waker, cgroup_mounts, cgroup_mounts_in};
pub use containerd::{Containerd, Daemon as ContainerdDaemon, Plugins as ContainerdPlugins};
pub use kube::{KubePod, pod_from_daemonset};
pub use podman::{Container, Podman};
pub use prometheus::{Prometheus, Setup};

use crate::guard::Proc;
use crate::web;

/// How long a service may take to answer `/-/ready`.
const READY_LIMIT: Duration = Duration::from_secs(30);

/// Starts `program ARGS`, quiet, and returns it once `addr/-/ready` answers 200 (within 30 s).
fn serve(program: &str, args: &[String], addr: &str) -> anyhow::Result<Proc> {
    serve_until(program, args, || web::get(addr, "/-/ready", &[]).map(|r| r.status).ok() == Some(200))
}

/// Starts `program ARGS`, quiet, and returns it once `ready()` (within 30 s).
fn serve_until(program: &str, args: &[String], ready: impl Fn() -> bool) -> anyhow::Result<Proc> {
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let proc = Proc::spawn(&mut command, program).with_context(|| format!("cargo xtask setup installs {program}"))?;
    let deadline = Instant::now() + READY_LIMIT;
    while !ready() {
        if Instant::now() > deadline {
            bail!("{program} did not become ready within {READY_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(proc)
}
