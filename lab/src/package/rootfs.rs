//! A throwaway Debian root to install a .deb into: in, nothing (the host's apt sources); out, a
//! minimal bookworm (mmdebstrap's `essential` variant: dpkg, perl-base, init-system-helpers, a
//! shell) unpacked into a scratch directory, and dpkg run on it with `--root` (maintainer scripts
//! run chrooted there). The root is bootstrapped once (≈40 s) into a tarball cached under
//! /var/cache/runqlat-tools and unpacked per use (≈2 s); it goes with the guard.
//!
//! The root is amd64 and has arm64 added as a foreign architecture, so the arm64 package installs
//! there too: it has no dependencies and its maintainer scripts are shell, so dpkg's whole
//! install/remove/purge path runs without emulating arm64 (its binary is never run).
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;

use crate::{cmd, guard::Scratch};

/// The cached bootstrap.
const CACHE: &str = "/var/cache/runqlat-tools/rootfs-bookworm-essential-amd64.tar";

/// A bookworm root in a scratch directory.
#[derive(Debug)]
pub struct Rootfs {
    dir: PathBuf,
    _scratch: Scratch,
}

impl Rootfs {
    /// Unpacks the cached bootstrap (making it first if needed) into a fresh directory.
    pub fn bookworm() -> anyhow::Result<Rootfs> {
        let cache = Path::new(CACHE);
        if !cache.is_file() {
            bootstrap(cache)?;
        }
        let scratch = Scratch::new("runqlat-rootfs")?;
        let dir = scratch.join("root");
        std::fs::create_dir_all(&dir)?;
        let mut untar = Command::new("tar");
        untar.arg("-C").arg(&dir).arg("-xf").arg(cache);
        cmd::stdout(&mut untar)?;
        let rootfs = Rootfs { dir, _scratch: scratch };
        rootfs.dpkg(&["--add-architecture", "arm64"])?;
        Ok(rootfs)
    }

    /// `dpkg --root=<root> ARGS`: its stdout, or an error with its stderr.
    pub fn dpkg(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut c = Command::new("dpkg");
        c.arg(format!("--root={}", self.dir.display())).args(args).env("DEBIAN_FRONTEND", "noninteractive");
        cmd::stdout(&mut c)
    }

    /// A path inside the root (`/etc/latency-daemon.toml` → `<root>/etc/latency-daemon.toml`).
    pub fn path(&self, inside: &str) -> PathBuf {
        self.dir.join(inside.trim_start_matches('/'))
    }

    /// dpkg's status of `package` in the root (`install ok installed`, `deinstall ok config-files`),
    /// or None when dpkg knows nothing of it.
    pub fn status(&self, package: &str) -> Option<String> {
        self.dpkg(&["-s", package]).ok()?.lines().find_map(|l| l.strip_prefix("Status: ")).map(str::to_owned)
    }
}

/// `mmdebstrap --variant=essential bookworm` into `cache` (written beside it, then renamed).
fn bootstrap(cache: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(cache.parent().context("the cache's directory")?)?;
    let partial = cache.with_extension("partial.tar");
    let mut c = Command::new("mmdebstrap");
    c.args(["--quiet", "--variant=essential", "--architectures=amd64", "bookworm"]).arg(&partial);
    cmd::stdout(&mut c).context("apt-get install mmdebstrap")?;
    std::fs::rename(&partial, cache).with_context(|| format!("moving {} into place", partial.display()))
}
