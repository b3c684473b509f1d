//! Static `latency-daemon` (or, for the arm64 guests' load, `xtask`) binaries: in, the
//! architectures, the `Program` and the musl folders setup made for them; out, per architecture
//! the release binary of one `cargo +nightly build -Z build-std` for every
//! `<arch>-unknown-linux-musl` asked (361 s cold for both on 2 CPUs, against 375 s one after the
//! other), in a target folder of its own.
//!
//! Why musl, not static glibc: the daemon resolves its alert sinks' host names, and glibc's
//! `getaddrinfo` loads NSS modules (libnss_dns, libnss_files) at run time even in a static
//! binary, so it breaks or silently differs on a host whose glibc is another version, or that
//! has none (a `FROM scratch` image). musl's resolver is built in and reads /etc/resolv.conf and
//! /etc/hosts itself. Why build-std: rustup cannot download the musl targets' `rust-std` here,
//! so std is compiled from nightly's rust-src; what that component would bring besides std
//! (musl's libc.a and start files, libunwind) comes from Debian (`setup::cross`).
//!
//! The kernel object stays what it is on every host: latency-daemon's build.rs (aya-build)
//! builds it for bpfel with `bpf_target_arch` set from CARGO_CFG_TARGET_ARCH, the *target's*
//! architecture, so the aarch64 daemon embeds an object built for aarch64 kernels.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, bail};

use super::Arch;
use crate::cmd;
use crate::setup::cross::Musl;

/// A binary of the workspace that `build` makes static.
#[derive(Debug, Clone, Copy)]
pub struct Program {
    pub package: &'static str,
    pub bin: &'static str,
}

/// What we ship.
pub const DAEMON: Program = Program { package: "latency-daemon", bin: "latency-daemon" };
/// The arm64 guests' load (`xtask workload`); a tool for vmtest, never shipped.
pub const XTASK: Program = Program { package: "xtask", bin: "xtask" };

/// Builds `program` for every one of `arches` in one cargo run under `target_dir` (cargo then
/// keeps both CPUs busy through each target's serial stretches: its last crates, the kernel
/// object's build); returns each binary's path there, in `arches`' order.
pub fn build(arches: &[Arch], program: Program, target_dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut build = Command::new("rustup");
    // $CARGO_HOME/bin on PATH, as for every build: aya-build runs bpf-linker from there.
    if let Some((_, Some(path))) = cmd::cargo()?.get_envs().find(|(key, _)| *key == "PATH") {
        build.env("PATH", path);
    }
    // Whatever flags the caller's environment has would replace the per-target ones below.
    for key in ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_RUSTFLAGS", "CARGO_BUILD_TARGET"] {
        build.env_remove(key);
    }
    build
        .current_dir(crate::workspace_root())
        .args(["run", "nightly", "cargo", "build", "--release", "--package", program.package])
        .args(["--bin", program.bin])
        // panic_abort is only built beside std's default panic_unwind: the binary unwinds on a
        // panic like the glibc build (tokio turns a task's panic into a JoinError).
        .args(["-Z", "build-std=std,panic_abort"])
        .arg("--target-dir")
        .arg(target_dir);
    for &arch in arches {
        target_env(&mut build, arch)?;
        build.args(["--target", arch.triple()]);
    }
    let shown: Vec<String> = arches.iter().map(ToString::to_string).collect();
    let shown = shown.join(" and ");
    println!("dist: {shown}: $ {}", cmd::show(&build));
    let start = Instant::now();
    cmd::run(&mut build).with_context(|| format!("building the {shown} {} failed", program.bin))?;
    let binaries = arches
        .iter()
        .map(|arch| {
            let binary = target_dir.join(arch.triple()).join("release").join(program.bin);
            if !binary.is_file() {
                bail!("cargo build succeeded but {} does not exist", binary.display());
            }
            Ok(binary)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    println!("dist: {shown}: {} built in {:.0} s", program.bin, start.elapsed().as_secs_f64());
    Ok(binaries)
}

/// One target's compilers and link, as cc-rs's and cargo's per-target variables
/// (`CC_aarch64_unknown_linux_musl`, `CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER`).
fn target_env(build: &mut Command, arch: Arch) -> anyhow::Result<()> {
    let musl = Musl(arch);
    let gcc = format!("{}-gcc", arch.gnu());
    let gcc_include = cmd::stdout(Command::new(&gcc).arg("-print-file-name=include"))?;
    let cc_suffix = arch.triple().replace('-', "_");
    let cargo_prefix = format!("CARGO_TARGET_{}", cc_suffix.to_uppercase());
    build
        // ring's C and assembly: the GNU cross compiler, but with musl's headers only.
        .env(format!("CC_{cc_suffix}"), &gcc)
        .env(format!("AR_{cc_suffix}"), format!("{}-ar", arch.gnu()))
        .env(
            format!("CFLAGS_{cc_suffix}"),
            format!("-nostdinc -isystem {} -isystem {}", musl.include().display(), gcc_include.trim()),
        )
        // The link: gcc as the driver only. musl targets link "self-contained" when crt-static
        // (their default): rustc passes -nostartfiles -nodefaultlibs and names the start files
        // itself, finding them, libc.a and libunwind.a in this folder, which comes before gcc's
        // own (glibc's) search paths.
        .env(format!("{cargo_prefix}_LINKER"), &gcc)
        .env(format!("{cargo_prefix}_RUSTFLAGS"), format!("-L native={}", musl.lib().display()));
    Ok(())
}

/// What `latency-daemon --version` prints: `latency-daemon 0.1.0 (commit 86a45293eb72, bpf
/// d54bcf1d14de)`; run under QEMU for another architecture.
pub fn version(arch: Arch, binary: &Path) -> anyhow::Result<String> {
    let mut run = match arch.runner() {
        Some(runner) => {
            let mut run = Command::new(runner);
            run.arg(binary);
            run
        }
        None => Command::new(binary),
    };
    run.arg("--version");
    Ok(cmd::stdout(&mut run)?.trim().to_owned())
}

/// The commit and the kernel object's id in a `--version` line of the crate's `version`.
pub fn parse_version<'a>(line: &'a str, version: &str) -> Option<(&'a str, &'a str)> {
    let rest = line.strip_prefix("latency-daemon ")?.strip_prefix(version)?.strip_prefix(" (commit ")?;
    let (commit, rest) = rest.split_once(", bpf ")?;
    Some((commit, rest.strip_suffix(')')?))
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn version_lines() {
        let line = "latency-daemon 0.1.0 (commit 86a45293eb72+dirty, bpf d54bcf1d14de)";
        assert_eq!(parse_version(line, "0.1.0"), Some(("86a45293eb72+dirty", "d54bcf1d14de")));
        assert_eq!(parse_version(line, "0.2.0"), None);
        assert_eq!(parse_version("latency-daemon 0.1.0", "0.1.0"), None);
    }
}
