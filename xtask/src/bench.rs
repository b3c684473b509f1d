//! `cargo xtask bench …`: setup and release builds of what this run needs (the daemon, or with
//! `--static` dist's shipped one; the floor example; the pipeline benchmark), then the lab's
//! bench driver. In: the bench's flags; out: bench-report/ (or, with `--guard`, a pass or a
//! failure).
use latency_lab::bench::{self, Args, Binaries};

use crate::{build, dist, setup};

pub fn run(args: &Args) -> anyhow::Result<()> {
    setup::ensure(setup::Report::ChangesOnly, setup::ALL)?;
    let binaries = Binaries {
        daemon: dist::daemon(args.static_daemon)?,
        floor: args.needs_floor().then(build::floor).transpose()?,
        pipeline: args.needs_pipeline().then(build::pipeline_bench).transpose()?,
    };
    bench::run(args, &binaries)
}
