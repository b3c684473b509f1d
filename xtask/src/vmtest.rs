//! `cargo xtask vmtest [--kernels LIST] [--cpus N]`: setup, the release daemon, then the lab's
//! matrix (`latency_lab::vmtest`), whose guests run this very binary's `workload` as their load
//! (arm64 guests: an aarch64 build from target/dist, or this one under qemu-x86_64).
use anyhow::Context as _;

use crate::{build, setup};

pub fn run(args: &latency_lab::vmtest::Args) -> anyhow::Result<()> {
    setup::ensure(setup::Report::ChangesOnly)?;
    let daemon = build::daemon(true)?;
    let xtask = std::env::current_exe().context("where this xtask binary is")?;
    let mut args = args.clone();
    // The arm64 guests' binaries: where the dist builds go unless told otherwise.
    args.arm64_bins.get_or_insert_with(|| build::target_dir().join("dist"));
    latency_lab::vmtest::run(&args, &daemon, &xtask)
}
