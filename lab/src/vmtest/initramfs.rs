//! The guest's whole filesystem: in, its architecture, a static busybox, the daemon and xtask
//! binaries (the load is `xtask workload`; `binaries` chooses them) and the guest's init script;
//! out, an uncompressed newc cpio archive holding them, and its own `dev/console`, so the kernel
//! needs no disk and no modules and no device node has to be made on the host. The host's own
//! binaries go in with their debug info stripped and the shared libraries `ldd` lists; another
//! architecture's must be static (there is no loader or libc of theirs to add) and go in as they
//! are.
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use super::arch::{Arch, elf_kind};
use super::binaries::Binaries;
use crate::cmd;

/// What goes into the archive besides the libraries.
#[derive(Debug)]
pub struct Contents<'a> {
    pub arch: Arch,
    /// Static, for `arch` (`busybox::for_arch`).
    pub busybox: &'a Path,
    /// Installed in /bin: the daemon and xtask, where there are some (a smoke boot packs none).
    pub binaries: &'a Binaries,
    pub init: &'a str,
}

/// Builds the archive at `out` (working files beside it) and returns its size in bytes.
pub fn build(contents: &Contents<'_>, out: &Path) -> anyhow::Result<u64> {
    let work = out.with_extension("d");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let mut cpio = Cpio::default();
    for dir in ["bin", "dev", "etc", "lib", "lib64", "proc", "run", "sys", "tmp", "usr", "usr/lib"] {
        cpio.dir(dir);
    }
    cpio.device("dev/console", 5, 1);
    cpio.file("init", 0o755, contents.init.as_bytes());
    let busybox = std::fs::read(contents.busybox).with_context(|| format!("reading {}", contents.busybox.display()))?;
    cpio.file("bin/busybox", 0o755, &busybox);
    // The interpreter of /init; init.sh installs the other applets itself.
    cpio.symlink("bin/sh", "busybox");
    let mut libraries = Vec::new();
    for (name, text) in &contents.binaries.scripts {
        cpio.file(&format!("bin/{name}"), 0o755, text.as_bytes());
    }
    for (name, binary) in &contents.binaries.files {
        if !is_host_binary(binary)? {
            cpio.file(&format!("bin/{name}"), 0o755, &foreign(binary, contents.arch)?);
            continue;
        }
        let stripped = work.join(name);
        let mut strip = Command::new("objcopy");
        strip.arg("--strip-debug").arg(binary).arg(&stripped);
        cmd::stdout(&mut strip)?;
        let bytes = std::fs::read(&stripped).with_context(|| format!("reading {}", stripped.display()))?;
        cpio.file(&format!("bin/{name}"), 0o755, &bytes);
        // A static one (the musl daemon of --static) has none, and `ldd` fails on it.
        if elf_kind(&bytes).is_some_and(|(_, dynamic)| dynamic) {
            libraries.extend(shared_libraries(binary)?);
        }
    }
    libraries.sort();
    libraries.dedup();
    for library in &libraries {
        let name = library.to_string_lossy();
        let inside = name.trim_start_matches('/');
        for parent in Path::new(inside).ancestors().skip(1).filter(|p| !p.as_os_str().is_empty()) {
            cpio.dir(&parent.to_string_lossy());
        }
        // Follow the symlink: the guest gets the file under the name the loader asks for.
        let bytes = std::fs::read(library).with_context(|| format!("reading {name}"))?;
        cpio.file(inside, 0o755, &bytes);
    }
    let bytes = cpio.finish();
    std::fs::File::create(out)
        .and_then(|mut f| f.write_all(&bytes))
        .with_context(|| format!("writing {}", out.display()))?;
    std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    Ok(bytes.len() as u64)
}

/// Whether `binary` is built for the host (then `objcopy` and `ldd` understand it).
fn is_host_binary(binary: &Path) -> anyhow::Result<bool> {
    let bytes = std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    let host = if cfg!(target_arch = "x86_64") { Arch::X86_64 } else { Arch::Arm64 };
    Ok(elf_kind(&bytes).is_some_and(|(machine, _)| machine == host.elf_machine()))
}

/// Another architecture's binary, if it is one for `arch` and static.
fn foreign(binary: &Path, arch: Arch) -> anyhow::Result<Vec<u8>> {
    let bytes = std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    match elf_kind(&bytes) {
        Some((machine, false)) if machine == arch.elf_machine() => Ok(bytes),
        Some((machine, true)) if machine == arch.elf_machine() => {
            bail!("{} is dynamically linked; a {arch} guest needs a static (musl) build", binary.display())
        }
        _ => bail!("{} is no {arch} ELF binary", binary.display()),
    }
}

/// The absolute paths `ldd` lists for `binary` (the loader included).
fn shared_libraries(binary: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut ldd = Command::new("ldd");
    ldd.arg(binary);
    Ok(parse_ldd(&cmd::stdout(&mut ldd)?))
}

/// `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)` and `/lib64/ld-linux-x86-64.so.2 (0x…)`.
pub fn parse_ldd(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|line| {
            let path = line.split_once("=>").map_or(line, |(_, target)| target).split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// A newc ("070701") archive in memory.
#[derive(Debug, Default)]
struct Cpio {
    bytes: Vec<u8>,
    inode: u32,
    dirs: Vec<String>,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        self.inode += 1;
        let fields = [self.inode, mode, 0, 0, 1, 0, data.len() as u32, 0, 0, rdev.0, rdev.1, name.len() as u32 + 1, 0];
        self.bytes.extend_from_slice(b"070701");
        for field in fields {
            self.bytes.extend_from_slice(format!("{field:08x}").as_bytes());
        }
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        if !self.dirs.iter().any(|d| d == name) {
            self.dirs.push(name.to_owned());
            self.entry(name, 0o040_755, (0, 0), &[]);
        }
    }

    fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100_000 | perm, (0, 0), data);
    }

    fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, 0o120_777, (0, 0), target.as_bytes());
    }

    fn device(&mut self, name: &str, major: u32, minor: u32) {
        self.entry(name, 0o020_600, (major, minor), &[]);
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        // The kernel reads archives in 512-byte blocks' worth; pad like cpio does.
        while !self.bytes.len().is_multiple_of(512) {
            self.bytes.push(0);
        }
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_lines() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x7f)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f)\n\t/lib64/ld-linux-x86-64.so.2 (0x7f)\n";
        let paths = parse_ldd(text);
        assert_eq!(paths.len(), 3);
        assert_eq!(paths[2], PathBuf::from("/lib64/ld-linux-x86-64.so.2"));
    }

    /// The archive as busybox's own cpio lists it: every name, the device node, the data.
    #[test]
    fn busybox_cpio_reads_the_archive() {
        let mut cpio = Cpio::default();
        cpio.dir("bin");
        cpio.dir("bin");
        cpio.device("dev/console", 5, 1);
        cpio.symlink("bin/sh", "busybox");
        cpio.file("init", 0o755, b"#!/bin/sh\necho hi\n");
        let bytes = cpio.finish();
        assert!(bytes.len().is_multiple_of(512));
        let scratch = crate::guard::Scratch::new("runqlat-cpio-test").unwrap_or_else(|e| panic!("{e:#}"));
        std::fs::write(scratch.join("a.cpio"), &bytes).unwrap_or_else(|e| panic!("{e}"));
        let out = Command::new(super::super::unpacked::HOST_BUSYBOX)
            .args(["cpio", "-t", "-v", "-F"])
            .arg(scratch.join("a.cpio"))
            .output()
            .unwrap_or_else(|e| panic!("/bin/busybox (busybox-static, installed by cargo xtask setup): {e}"));
        let listing = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{listing}");
        let lines: Vec<&str> = listing.lines().collect();
        assert_eq!(lines.len(), 4, "{listing}");
        assert!(lines[0].starts_with("drwxr-xr-x") && lines[0].ends_with(" bin"), "{listing}");
        assert!(lines[1].starts_with("crw-------") && lines[1].ends_with(" dev/console"), "{listing}");
        assert!(lines[2].starts_with("lrwxrwxrwx") && lines[2].ends_with(" bin/sh -> busybox"), "{listing}");
        assert!(lines[3].starts_with("-rwxr-xr-x") && lines[3].ends_with(" init"), "{listing}");
    }
}
