//! `cargo xtask run [ARGS…]`: setup, release build, then the daemon with ARGS in place of this
//! process. Out: whatever the daemon does, and its exit code.
use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::process::Command;

use anyhow::Context as _;

use crate::{build, setup};

/// The daemon's arguments when none are given: the long-running service with its built-in
/// defaults (every field of deploy/latency-daemon.toml at its default value).
pub const DEFAULT_ARGS: &[&str] = &["run"];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Passed to latency-daemon (default: `run`, the service); put `--` first to pass `--help` and such.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    setup::ensure(setup::Report::ChangesOnly, setup::RUN)?;
    let daemon = build::daemon(true)?;
    let args = if args.args.is_empty() { DEFAULT_ARGS.iter().map(OsString::from).collect() } else { args.args };
    let mut command = Command::new(&daemon);
    command.args(&args);
    println!("run: {}", crate::cmd::show(&command));
    // exec, not spawn + wait: the daemon becomes this process (and `cargo run` execs too), so
    // Ctrl-C from the terminal, SIGTERM from a supervisor and the exit code all go straight
    // between it and the caller, with no forwarding code to get wrong.
    let err = command.exec();
    Err(err).with_context(|| format!("could not start {}", daemon.display()))
}
