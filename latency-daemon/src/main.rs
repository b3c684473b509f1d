//! `latency-daemon`: parse the command line and hand it to the command; see `lib.rs` for the
//! layout of everything behind it.
use std::process::ExitCode;

use clap::Parser as _;
use latency_daemon::{
    cli::{Cli, Command},
    cmd::{self, logger},
    config::args::{LogFormat, LogLevel},
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    // `run` sets its own level and format as soon as it has read them.
    logger::init(LogLevel::default(), LogFormat::default());
    match Cli::try_parse_from(&args) {
        Ok(cli) => match cli.command {
            Command::Check(args) => cmd::check::main(args),
            Command::Record(args) => cmd::record::main(args),
            Command::Run(args) => cmd::run::main(args),
            Command::SeccompProfile(args) => cmd::seccomp::main(args),
            Command::Capture(args) => cmd::capture::main(&args),
        },
        Err(e) => cmd::usage_error(e, &args),
    }
}
