//! `latency-daemon`: parse the command line and hand it to the command; see `lib.rs` for the
//! layout of everything behind it.
use std::process::ExitCode;

use clap::Parser as _;
use latency_daemon::{
    cli::{Cli, Command},
    cmd,
};

fn main() -> ExitCode {
    match Cli::try_parse() {
        Ok(cli) => match cli.command {
            Command::Check => cmd::check::main(),
            Command::Record(args) => cmd::record::main(args),
            Command::Run(args) => cmd::run::main(args),
        },
        Err(e) => cmd::usage_error(e),
    }
}
