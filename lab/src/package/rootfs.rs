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

use anyhow::{Context as _, bail};

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
            let args = ["--variant=essential", "--architectures=amd64", "bookworm", TARBALL_ARG].map(str::to_owned);
            bootstrap(cache, &args, "Debian bookworm, to install the .debs in")?;
        }
        let scratch = Scratch::new("runqlat-rootfs")?;
        let dir = scratch.join("root");
        unpack(cache, &dir)?;
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

impl Rootfs {
    /// The whole life of `deb` (our package) in this root, each step checked: installed, its files
    /// there (the conffile as `conffile_text`, the unit enabled by deb-systemd-helper); an edit of
    /// the conffile kept on removal, which takes the rest and the enablement (dpkg says
    /// `config-files`); all gone on purge, deb-systemd-helper's state included.
    pub fn install_remove_purge(&self, deb: &Path, conffile_text: &[u8]) -> anyhow::Result<()> {
        use super::deb::{CONFFILE, PACKAGE, UNIT};
        let binary = self.path("/usr/bin/latency-daemon");
        let wants = self.path("/etc/systemd/system/multi-user.target.wants/latency-daemon.service");
        let enabled_state = self.path("/var/lib/systemd/deb-systemd-helper-enabled/latency-daemon.service.dsh-also");
        let expect = |ok: bool, what: &str| if ok { Ok(()) } else { bail!("{}: {what}", deb.display()) };

        self.dpkg(&["--install", &deb.to_string_lossy()])?;
        expect(self.status(PACKAGE).as_deref() == Some("install ok installed"), "not installed")?;
        expect(binary.is_file() && self.path(UNIT).is_file(), "no binary or unit after install")?;
        expect(std::fs::read(self.path(CONFFILE)).ok().as_deref() == Some(conffile_text), "the conffile differs")?;
        expect(wants.is_symlink(), "deb-systemd-helper did not enable the unit")?;

        let edited = b"listen = \"127.0.0.1:9954\"\n";
        std::fs::write(self.path(CONFFILE), edited).context("editing the conffile")?;
        self.dpkg(&["--remove", PACKAGE])?;
        expect(self.status(PACKAGE).as_deref() == Some("deinstall ok config-files"), "not config-files after remove")?;
        expect(!binary.exists() && !self.path(UNIT).exists(), "binary or unit left after remove")?;
        expect(
            std::fs::read(self.path(CONFFILE)).ok().as_deref() == Some(edited),
            "the edited conffile went on remove",
        )?;
        expect(!wants.exists(), "still enabled after remove")?;

        self.dpkg(&["--purge", PACKAGE])?;
        expect(self.status(PACKAGE).is_none(), "dpkg still knows it after purge")?;
        expect(!self.path(CONFFILE).exists(), "the conffile stayed after purge")?;
        expect(!self.path("/usr/share/doc/latency-daemon").exists(), "docs left after purge")?;
        expect(!enabled_state.exists(), "deb-systemd-helper's state left after purge")
    }
}

/// Where the tarball goes among `bootstrap`'s arguments.
pub const TARBALL_ARG: &str = "{tarball}";

/// `mmdebstrap ARGS` (`TARBALL_ARG` standing for the tarball) into `tarball`, written beside it
/// and then renamed, so a run that stops half-way leaves nothing a later run would take for a
/// root; its progress shown. `what` says what it is for.
pub(crate) fn bootstrap(tarball: &Path, args: &[String], what: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(tarball.parent().context("the cache's directory")?)?;
    let partial = tarball.with_extension("partial.tar");
    println!("bootstrapping {what} into {} (once; about a minute)", tarball.display());
    let mut c = Command::new("mmdebstrap");
    for arg in args {
        if arg == TARBALL_ARG {
            c.arg(&partial)
        } else {
            c.arg(arg)
        };
    }
    cmd::run(&mut c).with_context(|| format!("bootstrapping {what} (apt-get install mmdebstrap)"))?;
    std::fs::rename(&partial, tarball).with_context(|| format!("moving {} into place", partial.display()))
}

/// A bootstrapped tarball unpacked into `dir` (made if needed).
pub(crate) fn unpack(tarball: &Path, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut untar = Command::new("tar");
    untar.arg("-C").arg(dir).arg("-xf").arg(tarball);
    cmd::stdout(&mut untar).map(drop)
}
