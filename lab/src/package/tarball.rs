//! The release tarball of one architecture, for a host installed by hand: in, the static binary,
//! the man pages and completions ([`super::manual`]) and the repository's unit, configuration and
//! licences; out, `latency-daemon-<version>-<arch>-linux-musl.tar.gz`, reproducible like every
//! artifact, everything under one directory of the same name:
//!
//! | in the tarball | from |
//! |---|---|
//! | `latency-daemon` | the static binary (0755) |
//! | `latency-daemon.service` | deploy/systemd/ (starts `/usr/local/bin/latency-daemon`) |
//! | `latency-daemon.toml` | deploy/ (every setting commented out at its default) |
//! | `man/man8/*.8`, `completions/*` | the manual's tree |
//! | `README.md`, `CHANGELOG.md`, `LICENSE-*` | the repository |
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::{Binary, Release, manual};

/// The files a user installs the bare binary with, by path in the repository (released under
/// their file names, on their own and in the tarball): the unit as deploy/ has it
/// (`ExecStart=/usr/local/bin/latency-daemon`), the configuration file as the .deb ships it
/// (every setting commented out at its default).
pub const UNIT_FILES: [&str; 2] = ["deploy/systemd/latency-daemon.service", "deploy/latency-daemon.toml"];

/// What the tarball holds from the repository, by path there, under the same file name.
pub const FROM_REPOSITORY: [&str; 7] =
    [UNIT_FILES[0], UNIT_FILES[1], "README.md", "CHANGELOG.md", "LICENSE-APACHE", "LICENSE-MIT", "LICENSE-GPL-2.0"];

/// The directory every file of the tarball is under (and the tarball's name without `.tar.gz`).
pub fn top(release: &Release, binary: &Binary) -> String {
    format!("latency-daemon-{}-{}-linux-musl", release.version, binary.arch.uname())
}

/// Writes the tarball of `binary` into `out_dir`; returns its path.
pub fn build(
    out_dir: &Path,
    binary: &Binary,
    release: &Release,
    root: &Path,
    manual_dir: &Path,
) -> anyhow::Result<PathBuf> {
    let top = top(release, binary);
    let staging = out_dir.join(format!(".{top}.staging"));
    let _ = std::fs::remove_dir_all(&staging);
    let dir = staging.join(&top);
    let copy = |from: &Path, to: &Path, mode: u32| -> anyhow::Result<()> {
        std::fs::create_dir_all(to.parent().context("a file in the tarball has a directory")?)?;
        std::fs::copy(from, to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("chmod {}", to.display()))
    };
    copy(&binary.path, &dir.join("latency-daemon"), 0o755)?;
    for file in FROM_REPOSITORY {
        let name = Path::new(file).file_name().context("a repository file has a name")?;
        copy(&root.join(file), &dir.join(name), 0o644)?;
    }
    for (tree, _) in manual::files(manual_dir)? {
        copy(&manual_dir.join(&tree), &dir.join(&tree), 0o644)?;
    }
    let tarball = out_dir.join(format!("{top}.tar.gz"));
    let made = super::tar_dir(&staging, release.epoch, &tarball, true);
    let _ = std::fs::remove_dir_all(&staging);
    made.with_context(|| format!("packing {}", tarball.display()))?;
    Ok(tarball)
}
