//! `cargo xtask build [--release]`: setup, then `cargo build -p latency-daemon` (whose build.rs
//! builds the kernel program). Out: the daemon binary's path.
use std::env;
use std::path::PathBuf;

use anyhow::{Context as _, bail};

use crate::{cmd, setup, workspace_root};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Build with the release profile.
    #[arg(long)]
    release: bool,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    setup::ensure(setup::Report::ChangesOnly)?;
    let daemon = daemon(args.release)?;
    println!("build: {}", daemon.display());
    Ok(())
}

/// Builds latency-daemon and returns the binary's path.
pub fn daemon(release: bool) -> anyhow::Result<PathBuf> {
    let root = workspace_root();
    let mut build = cmd::cargo()?;
    build.current_dir(&root).args(["build", "--package", "latency-daemon"]);
    if release {
        build.arg("--release");
    }
    cmd::run(&mut build).context("building latency-daemon failed")?;
    let profile = if release { "release" } else { "debug" };
    let binary = target_dir(root).join(profile).join("latency-daemon");
    if !binary.is_file() {
        bail!("cargo build succeeded but {} does not exist", binary.display());
    }
    Ok(binary)
}

/// Cargo's target directory: $CARGO_TARGET_DIR (relative to where cargo ran) or `<root>/target`.
fn target_dir(root: PathBuf) -> PathBuf {
    match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}
