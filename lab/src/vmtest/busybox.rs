//! The guest's busybox: in, an architecture and the cache folder; out, a static busybox for it —
//! the host's own (package busybox-static) for x86_64, Debian's busybox-static of that
//! architecture otherwise, downloaded once through the kernels' private apt configuration and
//! unpacked with `dpkg -x` into the cache (never installed).
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use super::arch::{Arch, elf_kind};
use super::kernels;
use crate::cmd;

pub const HOST: &str = "/bin/busybox";
const PACKAGE: &str = "busybox-static";

/// A static busybox that runs on `arch`, checked by its ELF header.
pub fn for_arch(arch: Arch, cache: &Path) -> anyhow::Result<PathBuf> {
    let path = if arch.is_host() { PathBuf::from(HOST) } else { unpacked(arch, cache)? };
    let bytes = std::fs::read(&path).with_context(|| format!("reading {} (package {PACKAGE})", path.display()))?;
    match elf_kind(&bytes) {
        Some((machine, false)) if machine == arch.elf_machine() => Ok(path),
        Some((_, true)) => {
            bail!("{} is dynamically linked: install {PACKAGE} (cargo xtask setup does)", path.display())
        }
        _ => bail!("{} is no {arch} ELF binary", path.display()),
    }
}

fn unpacked(arch: Arch, cache: &Path) -> anyhow::Result<PathBuf> {
    let dir = cache.join(format!("busybox-{}", arch.debian()));
    let binary = dir.join("bin/busybox");
    if binary.is_file() {
        return Ok(binary);
    }
    let apt = kernels::apt(arch, cache)?;
    apt.update(false)?;
    let (_, version, _) = apt
        .versions(&format!("^{PACKAGE}$"))?
        .into_iter()
        .filter(|(name, _, _)| name == PACKAGE)
        .max_by_key(|(_, version, _)| kernels::natural(version))
        .with_context(|| format!("no {PACKAGE} for {} in the kernels' suites", arch.debian()))?;
    println!("vmtest: fetching {PACKAGE} {version} ({})…", arch.debian());
    let work = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&work);
    let deb = apt.download(PACKAGE, &version, &work.join("deb"))?;
    let mut unpack = Command::new("dpkg");
    unpack.arg("-x").arg(&deb).arg(work.join("root"));
    cmd::stdout(&mut unpack)?;
    let found = work.join("root/bin/busybox");
    if !found.is_file() {
        bail!("{} holds no bin/busybox", deb.display());
    }
    std::fs::create_dir_all(dir.join("bin")).with_context(|| format!("creating {}", dir.display()))?;
    // Renamed last: a half-done download never counts as the cached binary.
    std::fs::rename(&found, &binary).with_context(|| format!("moving {} into place", binary.display()))?;
    std::fs::write(dir.join("VERSION"), format!("{version}\n"))?;
    std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    Ok(binary)
}
