//! Files from Debian packages of the guest's architecture: in, an architecture and the cache
//! folder; out, a static busybox for it (the host's own, package busybox-static, for x86_64) and
//! for arm64 guests `qemu-x86_64` (qemu-user-static's), which runs the host's xtask as their load
//! while there is no aarch64 build of it. Each package is downloaded once through the kernels'
//! private apt configuration and unpacked with `dpkg -x` into the cache (never installed); only
//! the file wanted is kept.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use super::arch::{Arch, elf_kind};
use super::kernels;
use crate::cmd;

pub const HOST_BUSYBOX: &str = "/bin/busybox";

/// A static busybox that runs on `arch`, checked by its ELF header.
pub fn busybox(arch: Arch, cache: &Path) -> anyhow::Result<PathBuf> {
    let path =
        if arch.is_host() { PathBuf::from(HOST_BUSYBOX) } else { file(arch, cache, "busybox-static", "bin/busybox")? };
    static_for(&path, arch, "busybox-static")?;
    Ok(path)
}

/// qemu-user-static's `qemu-x86_64` for `arch`: x86_64 programs in its guests.
pub fn qemu_x86_64(arch: Arch, cache: &Path) -> anyhow::Result<PathBuf> {
    let path = file(arch, cache, "qemu-user-static", "usr/bin/qemu-x86_64-static")?;
    static_for(&path, arch, "qemu-user-static")?;
    Ok(path)
}

fn static_for(path: &Path, arch: Arch, package: &str) -> anyhow::Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {} (package {package})", path.display()))?;
    match elf_kind(&bytes) {
        Some((machine, false)) if machine == arch.elf_machine() => Ok(()),
        Some((_, true)) => {
            bail!("{} is dynamically linked: install {package} (cargo xtask setup does)", path.display())
        }
        _ => bail!("{} is no {arch} ELF binary", path.display()),
    }
}

/// `inside` of the newest `package` for `arch`, unpacked once into the cache.
fn file(arch: Arch, cache: &Path, package: &str, inside: &str) -> anyhow::Result<PathBuf> {
    let dir = cache.join(format!("unpacked-{}", arch.debian())).join(package);
    let kept = dir.join(inside);
    if kept.is_file() {
        return Ok(kept);
    }
    let apt = kernels::apt(arch, cache)?;
    apt.update(false)?;
    let (_, version, _) = apt
        .versions(&format!("^{package}$"))?
        .into_iter()
        .filter(|(name, _, _)| name == package)
        .max_by_key(|(_, version, _)| kernels::natural(version))
        .with_context(|| format!("no {package} for {} in the kernels' suites", arch.debian()))?;
    println!("vmtest: fetching {package} {version} ({}) for {inside}…", arch.debian());
    let work = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&work);
    let deb = apt.download(package, &version, &work.join("deb"))?;
    let mut unpack = Command::new("dpkg");
    unpack.arg("-x").arg(&deb).arg(work.join("root"));
    cmd::stdout(&mut unpack)?;
    let found = work.join("root").join(inside);
    if !found.is_file() {
        bail!("{} holds no {inside}", deb.display());
    }
    let parent = kept.parent().unwrap_or(&dir);
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    // Renamed last: a half-done download never counts as the cached file.
    std::fs::rename(&found, &kept).with_context(|| format!("moving {} into place", kept.display()))?;
    std::fs::write(dir.join("VERSION"), format!("{version}\n"))?;
    std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    Ok(kept)
}
