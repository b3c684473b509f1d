//! `cargo xtask bench`: what the monitor costs the machine it watches. In: a release build of
//! the daemon and the floor program, perf, hackbench, runqlat. Out: tables on stdout and
//! bench-report/{bench,drain}.{md,json}.
//!
//! - overhead.rs: added time per scheduler event of each tracer, from interleaved off/on pairs;
//! - cost.rs: the daemon's own CPU, memory and scrape latency during a storm;
//! - drain.rs: what a drain and an encode cost, by CPU count.
mod cost;
mod drain;
mod overhead;

use std::time::Instant;

use anyhow::bail;

use crate::{build, setup, workspace_root};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Off/on pairs per workload and tracer (medians are reported).
    #[arg(long, default_value_t = 11)]
    pairs: usize,
    /// The CI guard: pinned `perf bench sched pipe` only, runqlat vs ours, few pairs; fails
    /// only if ours costs more than runqlat (a gross regression), writes no report.
    #[arg(long)]
    guard: bool,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    setup::ensure(setup::Report::ChangesOnly)?;
    let daemon = build::daemon(true)?;
    let started = Instant::now();
    if args.guard {
        let rows = overhead::measure(&daemon, &overhead::guard_plan(args.pairs.min(7)))?;
        print!("{}", overhead::table(&rows));
        let ours = overhead::median_of(&rows, "ours (default)");
        let runqlat = overhead::median_of(&rows, "runqlat");
        println!(
            "bench guard: ours {ours:.0} ns/event, runqlat {runqlat:.0} ns/event ({:.1} s)",
            started.elapsed().as_secs_f64()
        );
        if ours > runqlat {
            bail!("ours adds {ours:.0} ns per scheduler event, more than runqlat's {runqlat:.0}");
        }
        return Ok(());
    }
    let rows = overhead::measure(&daemon, &overhead::full_plan(args.pairs))?;
    let overhead_table = overhead::table(&rows);
    print!("{overhead_table}");
    let cost = cost::measure(&daemon)?;
    print!("{}", cost.table());
    drain::run(&daemon, 10)?;

    let dir = workspace_root().join("bench-report");
    std::fs::create_dir_all(&dir)?;
    let md = format!(
        "# What the monitor costs\n\n`cargo xtask bench --pairs {}` on {} CPUs, {:.0} s.\n\n\
         ## Added time per scheduler event (medians of interleaved off/on pairs)\n\n```\n{overhead_table}```\n\n\
         ## The daemon itself during a storm\n\n```\n{}```\n",
        args.pairs,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        started.elapsed().as_secs_f64(),
        cost.table()
    );
    std::fs::write(dir.join("bench.md"), md)?;
    let json = format!("{{\"overhead\":{},\"daemon\":{}}}\n", overhead::json(&rows), cost.json());
    std::fs::write(dir.join("bench.json"), json)?;
    println!("bench: wrote {} ({:.0} s)", dir.join("bench.md").display(), started.elapsed().as_secs_f64());
    Ok(())
}
