//! Builds the kernel program (latency-ebpf, nightly, bpfel-unknown-none) and leaves the object
//! in OUT_DIR for `include_bytes_aligned!`.
use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

fn main() -> anyhow::Result<()> {
    let metadata = cargo_metadata_root()?;
    let ebpf = Package { name: "latency-ebpf", root_dir: &metadata, ..Default::default() };
    aya_build::build_ebpf([ebpf], Toolchain::default())
        .context("building the kernel program failed (is `cargo xtask setup` done?)")
}

/// The kernel crate's directory, a sibling of ours in the workspace.
fn cargo_metadata_root() -> anyhow::Result<String> {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR not set")?;
    let dir = std::path::Path::new(&manifest)
        .parent()
        .ok_or_else(|| anyhow!("no parent of {manifest}"))?
        .join("latency-ebpf");
    Ok(dir.display().to_string())
}
