//! What the guest runs besides busybox: in, an architecture, the host's own daemon and xtask, and
//! the folders where another architecture's builds are; out, the files to pack into /bin — the
//! host's for x86_64; for arm64 a static aarch64 daemon found in those folders, and as the load an
//! aarch64 xtask from there too (`cargo xtask dist --guest-tools`) or else the host's under `qemu-x86_64` — or an error that says
//! what is missing and how to get past it.
use std::path::{Path, PathBuf};

use anyhow::bail;

use super::arch::{Arch, elf_kind};
use super::unpacked;

pub const DAEMON: &str = "latency-daemon";
/// `xtask workload` is the guest's load.
pub const XTASK: &str = "xtask";

/// A guest's /bin besides busybox.
#[derive(Debug, Default)]
pub struct Binaries {
    /// (name in /bin, file): a host binary (packed with its libraries) or a static one of the
    /// guest's architecture.
    pub files: Vec<(String, PathBuf)>,
    /// (name in /bin, text): shell wrappers.
    pub scripts: Vec<(String, String)>,
    /// What runs `xtask workload`, for the report.
    pub load: String,
    /// The load is the host's xtask under qemu-x86_64.
    pub emulated: bool,
    /// The daemon, for the report: its file on the host and how it is linked.
    pub daemon: String,
}

/// The binaries a guest of `arch` gets. For another architecture the daemon must be found; the
/// load is an xtask of that architecture if there is one, else the host's, emulated.
pub fn for_arch(arch: Arch, host: [&Path; 2], dirs: &[PathBuf], cache: &Path) -> anyhow::Result<Binaries> {
    let [daemon, xtask] = host;
    if arch.is_host() {
        return Ok(Binaries {
            files: vec![(DAEMON.into(), daemon.to_owned()), (XTASK.into(), xtask.to_owned())],
            scripts: Vec::new(),
            load: format!("{XTASK} ({arch})"),
            emulated: false,
            daemon: described(daemon),
        });
    }
    let shown = dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ");
    let Some(daemon) = find_any(dirs, DAEMON, arch) else {
        bail!(
            "no static {arch} `{DAEMON}` under {shown} (looked for {DAEMON}, or a file named {DAEMON}* whose path names \
             aarch64, up to 4 folders down): pass --arm64-bins DIR, or --smoke to boot the {arch} kernels without it"
        );
    };
    let mut found =
        Binaries { daemon: described(&daemon), files: vec![(DAEMON.into(), daemon)], ..Binaries::default() };
    if let Some(native) = find_any(dirs, XTASK, arch) {
        found.files.push((XTASK.into(), native));
        found.load = format!("{XTASK} ({arch})");
        return Ok(found);
    }
    // The load only has to make threads wait and report what they did: the host's build does that
    // as well under user-mode emulation (each guest thread is a thread of the guest's kernel).
    let qemu = unpacked::qemu_x86_64(arch, cache)?;
    found.files.push(("qemu-x86_64".into(), qemu));
    found.files.push((format!("{XTASK}.x86_64"), xtask.to_owned()));
    found.scripts.push((XTASK.into(), format!("#!/bin/sh\nexec /bin/qemu-x86_64 /bin/{XTASK}.x86_64 \"$@\"\n")));
    found.load = format!(
        "the host's {XTASK} (x86_64) under qemu-x86_64: no {arch} {XTASK} under {shown} \
         (`cargo xtask dist --guest-tools` builds one)"
    );
    found.emulated = true;
    println!("vmtest: {arch} load: {}", found.load);
    Ok(found)
}

/// `path (static)` or `path (dynamic)`, from its ELF headers.
fn described(path: &Path) -> String {
    let linked = match std::fs::read(path).ok().and_then(|bytes| elf_kind(&bytes)) {
        Some((_, false)) => "static",
        Some((_, true)) => "dynamic",
        None => "not an ELF file",
    };
    format!("{} ({linked})", path.display())
}

/// The newest of `find`'s answers over `dirs`.
pub fn find_any(dirs: &[PathBuf], name: &str, arch: Arch) -> Option<PathBuf> {
    dirs.iter()
        .filter_map(|dir| find(dir, name, arch))
        .max_by_key(|path| std::fs::metadata(path).and_then(|m| m.modified()).ok())
}

/// The newest static ELF file for `arch` under `dir` named `name`, or whose name starts with
/// `name` and whose path (below `dir`) names aarch64.
pub fn find(dir: &Path, name: &str, arch: Arch) -> Option<PathBuf> {
    let mut files = Vec::new();
    walk(dir, 4, &mut files);
    files
        .into_iter()
        .filter(|path| {
            let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let below = path.strip_prefix(dir).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
            file == name || (file.starts_with(name) && below.contains("aarch64"))
        })
        .filter(|path| {
            let head = std::fs::read(path).ok();
            head.and_then(|bytes| elf_kind(&bytes)) == Some((arch.elf_machine(), false))
        })
        .max_by_key(|path| std::fs::metadata(path).and_then(|m| m.modified()).ok())
}

fn walk(dir: &Path, depth: u32, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        // Symlinks followed (a dist folder may link its builds); the depth bounds any loop.
        let path = entry.path();
        if path.is_dir() && depth > 0 {
            walk(&path, depth - 1, files);
        } else if path.is_file() {
            files.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF header: 64-bit little-endian, `machine`, no program headers.
    fn elf(machine: u16) -> Vec<u8> {
        let mut bytes = vec![0u8; 64];
        bytes[..6].copy_from_slice(b"\x7fELF\x02\x01");
        bytes[18..20].copy_from_slice(&machine.to_le_bytes());
        bytes
    }

    #[test]
    fn found_by_name_or_by_an_aarch64_path_and_checked_by_header() {
        let scratch = crate::guard::Scratch::new("runqlat-binaries-test").unwrap_or_else(|e| panic!("{e:#}"));
        let dir = scratch.path();
        let write = |rel: &str, bytes: &[u8]| {
            let path = dir.join(rel);
            std::fs::create_dir_all(path.parent().unwrap_or(dir)).unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{e}"));
        };
        assert_eq!(find(dir, DAEMON, Arch::Arm64), None);
        write("x86_64-unknown-linux-musl/latency-daemon", &elf(62));
        write("latency-daemon-aarch64.sha256", b"abc");
        assert_eq!(find(dir, DAEMON, Arch::Arm64), None, "an x86_64 build or a checksum is no aarch64 daemon");
        write("aarch64-unknown-linux-musl/latency-daemon", &elf(183));
        let found = find(dir, DAEMON, Arch::Arm64);
        assert!(found.is_some_and(|p| p.ends_with("aarch64-unknown-linux-musl/latency-daemon")));
        write("xtask-aarch64-unknown-linux-musl", &elf(183));
        assert!(find(dir, XTASK, Arch::Arm64).is_some());
        assert!(find_any(&[dir.join("nowhere"), dir.to_owned()], XTASK, Arch::Arm64).is_some());
        let missing = for_arch(Arch::Arm64, [dir, dir], &[dir.join("nowhere")], dir);
        assert!(missing.err().is_some_and(|e| e.to_string().contains("--smoke")));
    }
}
