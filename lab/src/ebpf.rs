//! The kernel program in variants latency-daemon's build does not make: in, a feature set; out,
//! the object's path, built the way latency-daemon's build.rs (aya-build) builds the default one.
//! For the bench (what diagnostics cost) and the daemon's tests (what they print).
use std::path::PathBuf;

use anyhow::Context as _;

use crate::workspace_root;

/// Builds the kernel program with `--features no-diag` (aya-log diagnostics compiled out: `diag::rare`
/// is nothing) the way latency-daemon's build.rs (aya-build) builds the default one, into
/// target/ebpf-no-diag (≈ 50 s the first time, incremental after); returns the object's path.
pub fn no_diag_object() -> anyhow::Result<PathBuf> {
    let target_dir = workspace_root().join("target").join("ebpf-no-diag");
    let arch = std::env::consts::ARCH;
    let mut build = std::process::Command::new("rustup");
    build
        .args(["run", "nightly", "cargo", "build", "--package", "latency-ebpf", "--bins", "--release"])
        .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core", "--features", "no-diag"])
        .arg("--target-dir")
        .arg(&target_dir)
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            format!("--cfg=bpf_target_arch=\"{arch}\"\x1f-Cdebuginfo=2\x1f-Clink-arg=--btf"),
        )
        // The outer cargo's toolchain and wrappers must not leak into the nightly build.
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTUP_TOOLCHAIN")
        .current_dir(workspace_root());
    crate::cmd::run(&mut build).context("building latency-ebpf --features no-diag")?;
    Ok(target_dir.join("bpfel-unknown-none").join("release").join("latency-ebpf"))
}
