//! A containerd of the test's own (its socket and content store in a scratch dir; its runtime state
//! where containerd keeps it, /run/containerd, which is where the daemon looks for OCI configs),
//! running the busybox test image with `ctr run --cgroup`: any cgroup path form and any annotations,
//! as the CRI plugin would write them for a Kubernetes pod. Tasks, containers, the daemon and the
//! cgroups it made are removed when the guard goes.
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::{
    Container, Podman,
    cgroup::RuntimeCgroups,
    podman::{IMAGE, cgroup_v2_path},
};
use crate::{cmd, guard::Proc, guard::Scratch};

/// containerd's namespace for Kubernetes pods.
const NAMESPACE: &str = "k8s.io";

/// Its default runtime state directory: the task bundles (config.json) live below it.
const STATE: &str = "/run/containerd";

#[derive(Debug)]
pub struct Containerd {
    started: Vec<String>,
    /// Declared after `started` so the daemon outlives the tasks' removal (fields drop in order).
    daemon: Daemon,
    _state: Option<StateDir>,
    _kubepods: RuntimeCgroups,
    scratch: Scratch,
}

/// /run/containerd, removed on drop if it did not exist before us.
#[derive(Debug)]
struct StateDir;

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(STATE);
    }
}

impl Containerd {
    /// Starts containerd and imports the test image (built by podman) into the `k8s.io` namespace.
    pub fn start() -> anyhow::Result<Containerd> {
        let kubepods = RuntimeCgroups::new("kubepods");
        let state = (!std::path::Path::new(STATE).exists()).then_some(StateDir);
        let scratch = Scratch::new("runqlat-containerd")?;
        let daemon = Daemon::start(&scratch, Path::new(STATE), Plugins::Default)?;
        let containerd = Containerd { started: Vec::new(), daemon, _state: state, _kubepods: kubepods, scratch };
        let archive = containerd.scratch.join("image.tar");
        let podman = Podman::new()?;
        podman.save(&archive)?;
        containerd.ctr(&["images", "import", &archive.to_string_lossy()])?;
        Ok(containerd)
    }

    fn ctr(&self, args: &[&str]) -> anyhow::Result<String> {
        self.daemon.ctr(NAMESPACE, args)
    }

    /// `ctr run -d --cgroup CGROUP` of busybox `argv` as container `id` with `annotations`.
    pub fn run(
        &mut self,
        cgroup: &str,
        id: &str,
        annotations: &[(&str, &str)],
        argv: &[&str],
    ) -> anyhow::Result<Container> {
        let mut args: Vec<String> = vec!["run".into(), "-d".into(), "--cgroup".into(), cgroup.into()];
        for (k, v) in annotations {
            args.push("--annotation".into());
            args.push(format!("{k}={v}"));
        }
        args.extend([IMAGE.to_owned(), id.to_owned(), "/bin/busybox".to_owned()]);
        args.extend(argv.iter().map(|a| (*a).to_owned()));
        self.started.push(id.to_owned());
        self.ctr(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
        let tasks = self.ctr(&["tasks", "list"])?;
        let pid: u32 = tasks
            .lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                (f.next() == Some(id)).then(|| f.next()?.parse().ok())?
            })
            .with_context(|| format!("ctr tasks list shows no pid for {id}:\n{tasks}"))?;
        Ok(Container { name: id.to_owned(), id: id.to_owned(), pid, cgroup: cgroup_v2_path(pid)? })
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        for id in std::mem::take(&mut self.started) {
            let _ = self.ctr(&["tasks", "kill", "--signal", "SIGKILL", &id]);
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.ctr(&["tasks", "delete", &id]).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            if let Err(e) = self.ctr(&["containers", "delete", &id]) {
                eprintln!("containerd: removing {id} failed: {e:#}");
            }
        }
    }
}

/// Which plugins a [`Daemon`] loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugins {
    /// containerd's defaults, the CRI plugin included.
    Default,
    /// Without the CRI plugin (which wants CNI and a stream port): images and `ctr` only.
    NoCri,
}

/// A containerd process nobody else talks to: its socket and content store (`root/`) in a
/// scratch directory, its runtime state where the caller says; stopped when dropped.
#[derive(Debug)]
pub struct Daemon {
    socket: PathBuf,
    _proc: Proc,
}

impl Daemon {
    /// Starts it and waits (up to 20 s) for `ctr version` to answer.
    pub fn start(scratch: &Scratch, state: &Path, plugins: Plugins) -> anyhow::Result<Daemon> {
        let socket = scratch.join("containerd.sock");
        let mut command = Command::new("containerd");
        if plugins == Plugins::NoCri {
            let config = scratch.join("config.toml");
            std::fs::write(&config, "version = 2\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n")?;
            command.arg("--config").arg(config);
        }
        command
            .arg("--address")
            .arg(&socket)
            .arg("--root")
            .arg(scratch.join("root"))
            .arg("--state")
            .arg(state)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let proc = Proc::spawn(&mut command, "containerd").context("cargo xtask setup installs containerd")?;
        let daemon = Daemon { socket, _proc: proc };
        let deadline = Instant::now() + Duration::from_secs(20);
        while daemon.ctr("default", &["--connect-timeout", "1s", "version"]).is_err() {
            if Instant::now() > deadline {
                bail!("containerd did not answer on {} within 20 s", daemon.socket.display());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(daemon)
    }

    /// `ctr --address <ours> --namespace NAMESPACE ARGS`: its stdout.
    pub fn ctr(&self, namespace: &str, args: &[&str]) -> anyhow::Result<String> {
        let mut c = Command::new("ctr");
        c.arg("--address").arg(&self.socket).args(["--namespace", namespace]).args(args);
        cmd::stdout(&mut c)
    }
}
