//! The image archive checked by the runtimes that will run it: in, an `oci-archive`; out,
//! containerd's `ctr images import` of it (a containerd of our own: root, state, socket and
//! configuration in a scratch directory, stopped when done) and podman's `load` of it, the
//! platforms its index names, and the amd64 image run with the DaemonSet's confinement.
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::{
    guard::Scratch,
    services::{ContainerdDaemon as Daemon, ContainerdPlugins as Plugins, Podman},
    web,
};

/// A containerd nobody else talks to (`services::ContainerdDaemon`): its own socket, root
/// and state (not /run/containerd), and no CRI plugin.
#[derive(Debug)]
pub struct OwnContainerd {
    daemon: Daemon,
    _scratch: Scratch,
}

impl OwnContainerd {
    /// Starts it and waits (up to 20 s) for `ctr version` to answer.
    pub fn start() -> anyhow::Result<OwnContainerd> {
        let scratch = Scratch::new("runqlat-ctr")?;
        let daemon = Daemon::start(&scratch, &scratch.join("state"), Plugins::NoCri)?;
        Ok(OwnContainerd { daemon, _scratch: scratch })
    }

    /// `ctr --address <ours> ARGS` (default namespace).
    pub fn ctr(&self, args: &[&str]) -> anyhow::Result<String> {
        self.daemon.ctr("default", args)
    }

    /// `ctr images import --all-platforms ARCHIVE`, then `ctr images check` (every blob of every
    /// platform present): out, the check's table.
    pub fn import(&self, archive: &Path) -> anyhow::Result<String> {
        let archive = archive.to_string_lossy();
        self.ctr(&["images", "import", "--all-platforms", &archive])?;
        self.ctr(&["images", "check"])
    }
}

/// The image as podman sees it after `podman load`.
#[derive(Debug)]
pub struct Loaded {
    /// What `podman load` printed (`Loaded image: …`).
    pub load: String,
    /// `podman manifest inspect` of a manifest list made from the archive's index (`--all`).
    pub manifest: serde_json::Value,
}

/// `podman load -i archive`, and the archive's index added whole to a manifest list of our own
/// (`podman manifest add --all`), whose inspection names every platform; the list goes again.
pub fn podman_load(podman: &Podman, archive: &Path) -> anyhow::Result<Loaded> {
    let archive = archive.to_string_lossy();
    let load = podman.podman(&["load", "--input", &archive])?;
    let list = format!("localhost/runqlat-package-list:{}", std::process::id());
    podman.podman(&["manifest", "create", &list])?;
    let inspected = (|| {
        podman.podman(&["manifest", "add", "--all", &list, &format!("oci-archive:{archive}")])?;
        let text = podman.podman(&["manifest", "inspect", &list])?;
        serde_json::from_str(&text).context("podman manifest inspect: not JSON")
    })();
    let removed = podman.podman(&["manifest", "rm", &list]);
    let manifest = inspected?;
    removed?;
    Ok(Loaded { load, manifest })
}

/// A container's output, stdout and stderr (`podman logs` writes the container's stderr to its own).
fn logs(podman: &Podman, name: &str) -> String {
    let mut c = Command::new("podman");
    c.env("CONTAINERS_CONF", podman.scratch_file("containers.conf")).args(["logs", name]);
    match c.output() {
        Ok(out) => format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        Err(e) => format!("(podman logs: {e})"),
    }
}

/// What the confined run showed.
#[derive(Debug)]
pub struct Confined {
    pub version: String,
    /// The body of one /metrics scrape.
    pub metrics: String,
    /// /proc/<pid>/status lines that show the confinement (CapEff, CapBnd, Seccomp, NoNewPrivs, Uid).
    pub status: Vec<String>,
    /// A second scrape as Prometheus asks (`Accept-Encoding: gzip`): its Content-Encoding, its
    /// size, and its body decompressed (empty if it was not gzip).
    pub gzipped: (Option<String>, usize, String),
}

/// Runs `image` (the host's architecture) as deploy/kubernetes/base/daemonset.yaml declares it:
/// uid 0, every capability dropped but BPF and PERFMON, `seccomp` as its profile,
/// no-new-privileges, a read-only root, the host's PID namespace and its read-only host mounts
/// (those that exist here), the configuration in /etc/latency-daemon. First `--version`, then
/// `run` until /metrics answers (within 30 s), scraped plain and gzipped; the container is removed
/// after.
pub fn podman_run_confined(podman: &Podman, image: &str, seccomp: &Path) -> anyhow::Result<Confined> {
    let confine = |extra: &mut Vec<String>| {
        for a in ["--user", "0", "--cap-drop", "ALL", "--cap-add", "CAP_BPF,CAP_PERFMON", "--read-only"] {
            extra.push(a.to_owned());
        }
        extra.extend(["--security-opt".to_owned(), format!("seccomp={}", seccomp.display())]);
        extra.extend(["--security-opt".to_owned(), "no-new-privileges".to_owned()]);
    };
    let mut version = vec!["run".to_owned(), "--rm".to_owned()];
    confine(&mut version);
    version.extend([image.to_owned(), "--version".to_owned()]);
    let version = podman.podman(&version.iter().map(String::as_str).collect::<Vec<_>>())?;

    let port = web::free_port()?;
    let config = podman.scratch_file("package-config");
    std::fs::create_dir_all(&config)?;
    std::fs::write(
        config.join("latency-daemon.toml"),
        format!("listen = \"127.0.0.1:{port}\"\ninterval = \"200ms\"\nwindow = \"400ms\"\n"),
    )?;
    let name = format!("runqlat-{}-package", std::process::id());
    let mut run = vec!["run".to_owned(), "-d".to_owned(), "--name".to_owned(), name.clone()];
    confine(&mut run);
    run.extend(["--pid", "host", "--network", "host"].map(str::to_owned));
    run.extend(["--volume".to_owned(), format!("{}:/etc/latency-daemon:ro", config.display())]);
    for host in
        ["/sys/kernel/btf", "/sys/fs/cgroup", "/run/containerd", "/run/k3s/containerd", "/run/containers/storage"]
    {
        if Path::new(host).is_dir() {
            run.extend(["--volume".to_owned(), format!("{host}:{host}:ro")]);
        }
    }
    run.extend([image, "run", "--config", "/etc/latency-daemon/latency-daemon.toml"].map(str::to_owned));
    podman.podman(&run.iter().map(String::as_str).collect::<Vec<_>>())?;
    let result = (|| {
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        let metrics = loop {
            // Until the first drain the delay histogram has nothing to show: wait for it.
            if let Ok(r) = web::get(&addr, "/metrics", &[])
                && r.status == 200
                && r.text().contains("runqlat_delay_seconds_count")
            {
                break r.text();
            }
            let running = podman.podman(&["inspect", "--format", "{{.State.Running}}", &name]).unwrap_or_default();
            if running.trim() != "true" || Instant::now() > deadline {
                let why = if running.trim() == "true" { "did not answer within 30 s" } else { "exited" };
                bail!("the daemon {why} (/metrics at {addr}); log:\n{}", logs(podman, &name));
            }
            std::thread::sleep(Duration::from_millis(300));
        };
        let zipped = web::get(&addr, "/metrics", &[("Accept-Encoding", "gzip")])?;
        let encoding =
            zipped.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("Content-Encoding")).map(|(_, v)| v.clone());
        let mut unzipped = String::new();
        if encoding.as_deref() == Some("gzip") {
            std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&zipped.body[..]), &mut unzipped)
                .context("the gzipped scrape does not decompress")?;
        }
        let gzipped = (encoding, zipped.body.len(), unzipped);
        let pid = podman.podman(&["inspect", "--format", "{{.State.Pid}}", &name])?;
        let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim())).unwrap_or_default();
        let status = status
            .lines()
            .filter(|l| ["CapEff:", "CapBnd:", "Seccomp:", "NoNewPrivs:", "Uid:"].iter().any(|k| l.starts_with(k)))
            .map(str::to_owned)
            .collect();
        Ok(Confined { version: version.trim().to_owned(), metrics, status, gzipped })
    })();
    let removed = podman.podman(&["rm", "--force", "--time", "2", &name]);
    let confined = result?;
    removed.context("removing the container")?;
    Ok(confined)
}
