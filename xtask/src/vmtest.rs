//! `cargo xtask vmtest [--kernels LIST] [--cpus N]`: setup, the release daemon, then the lab's
//! matrix (`latency_lab::vmtest`), whose guests run this very binary's `workload` as their load.
use anyhow::Context as _;

use crate::{build, setup};

pub fn run(args: &latency_lab::vmtest::Args) -> anyhow::Result<()> {
    setup::ensure(setup::Report::ChangesOnly)?;
    let daemon = build::daemon(true)?;
    let xtask = std::env::current_exe().context("where this xtask binary is")?;
    latency_lab::vmtest::run(args, &daemon, &xtask)
}
