//! `cargo xtask vmtest [--kernels LIST] [--cpus N] [--static]`: setup, the daemon (the host's
//! release build, or with --static the x86_64 musl one of target/dist), then the lab's matrix
//! (`latency_lab::vmtest`), whose guests run this very binary's `workload` as their load (arm64
//! guests: an aarch64 build from target/dist-tools, or this one under qemu-x86_64).
use anyhow::Context as _;

use crate::{build, dist, setup};

pub fn run(args: &latency_lab::vmtest::Args) -> anyhow::Result<()> {
    setup::ensure(setup::Report::ChangesOnly)?;
    let daemon = if args.static_daemon { dist::static_daemon(dist::Arch::X86_64)? } else { build::daemon(true)? };
    let xtask = std::env::current_exe().context("where this xtask binary is")?;
    let mut args = args.clone();
    // The arm64 guests' binaries: where the dist builds go unless told otherwise.
    if args.arm64_bins.is_empty() {
        args.arm64_bins = vec![dist::dir(), dist::tools_dir()];
    }
    latency_lab::vmtest::run(&args, &daemon, &xtask)
}
