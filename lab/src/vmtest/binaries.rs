//! What the guest runs besides busybox: in, an architecture, the host's own daemon and xtask, and
//! the folder where another architecture's builds are; out, the (name in /bin, file) pairs to
//! pack — the host's for x86_64; for arm64 static aarch64 ones found in that folder — or an error
//! that says what is missing and how to get past it.
use std::path::{Path, PathBuf};

use anyhow::bail;

use super::arch::{Arch, elf_kind};

pub const DAEMON: &str = "latency-daemon";
/// `xtask workload` is the guest's load.
pub const XTASK: &str = "xtask";

/// The binaries a guest of `arch` gets. For another architecture the daemon must be found; a
/// missing xtask only warns (the guest then runs without load, and the checks that need it say
/// so).
pub fn for_arch(arch: Arch, host: [&Path; 2], dir: &Path) -> anyhow::Result<Vec<(&'static str, PathBuf)>> {
    if arch.is_host() {
        return Ok(vec![(DAEMON, host[0].to_owned()), (XTASK, host[1].to_owned())]);
    }
    let Some(daemon) = find(dir, DAEMON, arch) else {
        bail!(
            "no static {arch} `{DAEMON}` under {} (looked for {DAEMON}, or a file named {DAEMON}* whose path names \
             aarch64, up to 4 folders down): pass --arm64-bins DIR, or --smoke to boot the {arch} kernels without it",
            dir.display()
        );
    };
    let mut found = vec![(DAEMON, daemon)];
    match find(dir, XTASK, arch) {
        Some(xtask) => found.push((XTASK, xtask)),
        None => println!(
            "vmtest: no static {arch} `{XTASK}` under {}: the {arch} guests run without load, so their load checks \
             (sleepers, run_delay, the sleepers' cgroup) fail",
            dir.display()
        ),
    }
    Ok(found)
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
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() && depth > 0 => walk(&path, depth - 1, files),
            Ok(t) if t.is_file() => files.push(path),
            _ => {}
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
        let missing = for_arch(Arch::Arm64, [dir, dir], &dir.join("nowhere"));
        assert!(missing.err().is_some_and(|e| e.to_string().contains("--smoke")));
    }
}
