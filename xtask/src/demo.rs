//! `cargo xtask demo …`: setup and a release build (with `--static`, dist's shipped binary
//! instead), then the lab's demo driver with this binary running the workload (`xtask workload
//! …`). In: the demo's flags; out: demo-report/.
use std::time::Instant;

use anyhow::Context as _;
use latency_lab::demo::{self, Args, Tools};

use crate::{dist, setup};

pub fn run(args: &Args) -> anyhow::Result<()> {
    let began = Instant::now();
    args.check()?;
    setup::ensure(setup::Report::ChangesOnly, setup::ALL)?;
    demo::require_root()?;
    let daemon = dist::daemon(args.static_daemon)?;
    let tools = Tools {
        daemon,
        workload: std::env::current_exe().context("finding this xtask binary")?,
        workload_args: vec!["workload".to_owned()],
        prepared_in: began.elapsed(),
    };
    demo::run(args, &tools)
}
