//! `cargo xtask bench …`: setup and release builds, then the lab's bench driver. In: the bench's
//! flags; out: bench-report/ (or, with `--guard`, a pass or a failure).
use latency_lab::bench::{self, Args, Binaries};

use crate::{build, setup};

pub fn run(args: &Args) -> anyhow::Result<()> {
    setup::ensure(setup::Report::ChangesOnly)?;
    let binaries = Binaries { daemon: build::daemon(true)? };
    bench::run(args, &binaries)
}
