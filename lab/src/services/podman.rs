//! Real containers for a test, run by podman with runc (crun refuses hybrid cgroup hosts) and the
//! explicit limits this host needs, from a `FROM scratch` image holding only busybox (built locally
//! in under a second: no registry). In: a name, annotations, a command; out: the container's id and
//! its cgroup v2 path as the daemon labels it. Every container is removed when the guard goes.
use std::{path::PathBuf, process::Command};

use anyhow::{Context as _, bail};

use super::cgroup::RuntimeCgroups;
use crate::{cmd, guard::Scratch};

/// The image every test container runs: busybox, nothing else.
pub const IMAGE: &str = "localhost/runqlat-busybox:test";

const BUSYBOX: &str = "/bin/busybox";

/// The parent cgroup podman's cgroupfs manager puts containers (and `conmon`) under.
const PARENT: &str = "libpod_parent";

/// runc, and limits runc can set here (root lacks CAP_SYS_RESOURCE on this VM, so the defaults fail).
const CONTAINERS_CONF: &str = "[containers]\n\
default_ulimits = [\"nofile=20000:20000\", \"nproc=4096:4096\"]\n\
[engine]\n\
runtime = \"runc\"\n";

#[derive(Debug)]
pub struct Podman {
    scratch: Scratch,
    /// Full names of the containers we started (`runqlat-<our pid>-<name>`), removed on drop.
    started: Vec<String>,
    /// podman's parent cgroup (`libpod_parent`), removed on drop where it did not exist before us.
    _parents: RuntimeCgroups,
}

/// One running container.
#[derive(Debug, Clone)]
pub struct Container {
    pub name: String,
    pub id: String,
    pub pid: u32,
    /// Its cgroup v2 path ("0::" line of /proc/<pid>/cgroup).
    pub cgroup: String,
}

impl Podman {
    /// Writes the containers.conf and builds the image if it is not there yet.
    pub fn new() -> anyhow::Result<Podman> {
        let scratch = Scratch::new("runqlat-podman")?;
        std::fs::write(scratch.join("containers.conf"), CONTAINERS_CONF).context("writing containers.conf")?;
        let podman = Podman { _parents: RuntimeCgroups::new(PARENT), scratch, started: Vec::new() };
        if podman.command().args(["image", "exists", IMAGE]).status().map(|s| !s.success()).unwrap_or(true) {
            podman.build()?;
        }
        Ok(podman)
    }

    fn command(&self) -> Command {
        let mut c = Command::new("podman");
        c.env("CONTAINERS_CONF", self.scratch.join("containers.conf"));
        c
    }

    fn build(&self) -> anyhow::Result<()> {
        let context = self.scratch.join("image");
        std::fs::create_dir_all(&context)?;
        std::fs::copy(BUSYBOX, context.join("busybox"))
            .with_context(|| format!("copying {BUSYBOX} (cargo xtask setup installs busybox-static)"))?;
        std::fs::write(
            context.join("Containerfile"),
            "FROM scratch\nCOPY busybox /bin/busybox\nENTRYPOINT [\"/bin/busybox\"]\n",
        )?;
        self.build_context(&context, IMAGE).context("cargo xtask setup installs podman and runc")
    }

    /// `podman build` of `context` (its Containerfile) as `tag`.
    fn build_context(&self, context: &std::path::Path, tag: &str) -> anyhow::Result<()> {
        let mut build = self.command();
        build.args(["build", "--quiet", "--tag", tag, "--file"]).arg(context.join("Containerfile")).arg(context);
        cmd::stdout(&mut build).map(drop)
    }

    /// The noisy-neighbour scene the Kubernetes tests share: a hog pod (`batch/hog-pod`, container
    /// `spin`: four busy loops) and a victim pod (`web/victim-pod`, container `sleeper`: nice 19,
    /// sleeping 1 ms at a time), both pinned to CPU 0 and annotated as Kubernetes' runtimes annotate
    /// containers, so every sleep of the victim ends in a wait of several ms behind the hog. `prefix`
    /// names the two containers. Out: (hog, victim).
    pub fn hog_and_victim_pods(&mut self, prefix: &str) -> anyhow::Result<(Container, Container)> {
        const SPIN: &str = "while :; do :; done";
        let pin = ["--cpuset-cpus", "0"];
        let pod = |ns: &'static str, pod: &'static str, container: &'static str| {
            [
                ("io.kubernetes.pod.namespace", ns),
                ("io.kubernetes.pod.name", pod),
                ("io.kubernetes.container.name", container),
            ]
        };
        let spinners = format!("{SPIN} & {SPIN} & {SPIN} & {SPIN}");
        let hog =
            self.run(&format!("{prefix}-hog"), &pod("batch", "hog-pod", "spin"), &pin, &["sh", "-c", &spinners])?;
        let victim = self.run(
            &format!("{prefix}-victim"),
            &pod("web", "victim-pod", "sleeper"),
            &pin,
            &["sh", "-c", "renice -n 19 -p $$ && while :; do usleep 1000; done"],
        )?;
        Ok((hog, victim))
    }

    /// `podman run -d` of busybox `argv` with `annotations` (e.g. `io.kubernetes.pod.name`) and any
    /// `extra` options, without a network.
    pub fn run(
        &mut self,
        name: &str,
        annotations: &[(&str, &str)],
        extra: &[&str],
        argv: &[&str],
    ) -> anyhow::Result<Container> {
        let full = format!("runqlat-{}-{name}", std::process::id());
        let mut run = self.command();
        run.args(["run", "-d", "--network", "none", "--name", &full]);
        for (k, v) in annotations {
            run.arg("--annotation").arg(format!("{k}={v}"));
        }
        run.args(extra).arg(IMAGE).args(argv);
        self.started.push(full.clone());
        let id = cmd::stdout(&mut run)?.trim().to_owned();
        let mut inspect = self.command();
        inspect.args(["inspect", "--format", "{{.State.Pid}}", &full]);
        let pid: u32 = cmd::stdout(&mut inspect)?.trim().parse().context("podman inspect: pid")?;
        let cgroup = cgroup_v2_path(pid)?;
        Ok(Container { name: full, id, pid, cgroup })
    }

    /// Stops and removes a container now (the guard would at the end).
    pub fn remove(&mut self, container: &Container) -> anyhow::Result<()> {
        self.started.retain(|n| n != &container.name);
        let mut rm = self.command();
        rm.args(["rm", "--force", "--time", "0", &container.name]);
        cmd::stdout(&mut rm).map(drop)
    }

    /// The daemon's own image, `FROM scratch`: the binary, the shared libraries `ldd` lists (at their
    /// paths) and nothing else — no shell, no package manager — running as nobody (65534).
    /// Capabilities come from the runtime (BPF and PERFMON; podman and Docker make added
    /// capabilities ambient for a non-root user).
    pub fn build_daemon_image(&self, binary: &std::path::Path, tag: &str) -> anyhow::Result<()> {
        let context = self.scratch.join("daemon-image");
        let rootfs = context.join("rootfs");
        let _ = std::fs::remove_dir_all(&context);
        std::fs::create_dir_all(&rootfs)?;
        std::fs::copy(binary, rootfs.join("latency-daemon"))
            .with_context(|| format!("copying {}", binary.display()))?;
        let mut ldd = Command::new("ldd");
        ldd.arg(binary);
        for lib in cmd::stdout(&mut ldd)?.split_whitespace().filter(|w| w.starts_with('/')) {
            let to = rootfs.join(lib.trim_start_matches('/'));
            std::fs::create_dir_all(to.parent().context("library path")?)?;
            std::fs::copy(lib, &to).with_context(|| format!("copying {lib}"))?;
        }
        std::fs::write(
            context.join("Containerfile"),
            "FROM scratch\nCOPY rootfs/ /\nUSER 65534:65534\nEXPOSE 9954\nENTRYPOINT [\"/latency-daemon\"]\nCMD [\"run\"]\n",
        )?;
        self.build_context(&context, tag)
    }

    /// Runs `podman ARGS` with our configuration; its stdout, or an error with its stderr.
    pub fn podman(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut c = self.command();
        c.args(args);
        cmd::stdout(&mut c)
    }

    /// Container `name`'s log: what it wrote on stdout and on stderr (`podman logs` replays each on
    /// its own stream).
    pub fn logs(&self, name: &str) -> anyhow::Result<String> {
        let mut c = self.command();
        c.args(["logs", name]);
        let out = c.output().with_context(|| cmd::show(&c))?;
        anyhow::ensure!(out.status.success(), "{}: {}", cmd::show(&c), String::from_utf8_lossy(&out.stderr).trim());
        Ok(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }

    /// A path in this guard's scratch directory.
    pub fn scratch_file(&self, name: &str) -> PathBuf {
        self.scratch.join(name)
    }

    /// The test image as an OCI archive (for `ctr images import`).
    pub fn save(&self, archive: &std::path::Path) -> anyhow::Result<()> {
        let mut save = self.command();
        save.args(["save", "--quiet", "--format", "oci-archive", "--output"]).arg(archive).arg(IMAGE);
        cmd::stdout(&mut save).map(drop)
    }

    /// Where podman keeps a container's OCI config (the runtime bundle).
    pub fn config_path(container: &Container) -> PathBuf {
        PathBuf::from(format!("/var/lib/containers/storage/overlay-containers/{}/userdata/config.json", container.id))
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        if !self.started.is_empty() {
            let mut rm = self.command();
            rm.args(["rm", "--force", "--time", "0", "--ignore"]).args(&self.started);
            if let Err(e) = cmd::stdout(&mut rm) {
                eprintln!("podman: removing {:?} failed: {e:#}", self.started);
            }
        }
        // `_parents` goes after this: conmon outlives `podman rm` by a moment; it retries.
    }
}

/// The "0::" (cgroup v2) line of /proc/<pid>/cgroup.
pub(super) fn cgroup_v2_path(pid: u32) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).with_context(|| format!("cgroup of {pid}"))?;
    match text.lines().find_map(|l| l.strip_prefix("0::")) {
        Some(path) => Ok(path.to_owned()),
        None => bail!("{pid} has no cgroup v2 line in /proc/{pid}/cgroup"),
    }
}
