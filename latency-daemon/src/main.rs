//! `latency-daemon`: parse the command line, run the command, map failures to exit codes
//! (0 ok, 1 the machine or kernel said no, 2 bad input).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod alert;
mod bench_export;
mod btf;
mod caps;
mod cgroup_series;
mod cgroups;
mod check;
mod cli;
mod clock;
mod config;
mod daemon;
mod distribution;
mod drain;
mod export;
mod http;
mod incident;
mod notify;
mod probe;
mod procstat;
mod record;
mod render;
mod report;
mod routes;
mod system;
mod window;

use std::process::ExitCode;

use clap::Parser as _;

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match cli.command {
        Command::Check => {
            if check::check() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Command::Record(args) => {
            let runtime = match runtime() {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            match runtime.block_on(record::record(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e.to_string()),
            }
        }
        Command::BenchExport(args) => {
            let rows = bench_export::run(&args);
            if args.json {
                match serde_json::to_string_pretty(&rows) {
                    Ok(j) => println!("{j}"),
                    Err(e) => return fail(&e.to_string()),
                }
            } else {
                print!("{}", bench_export::table(&rows));
            }
            ExitCode::SUCCESS
        }
        Command::BenchFloor => {
            let floor = match probe::load_floor() {
                Ok(f) => f,
                Err(e) => return fail(&e.to_string()),
            };
            eprintln!("latency-daemon: floor attached");
            let runtime = match runtime() {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            runtime.block_on(async {
                use tokio::signal::unix::{SignalKind, signal};
                if let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
                {
                    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
                }
            });
            drop(floor);
            ExitCode::SUCCESS
        }
        Command::Run(args) => {
            // Every configuration problem is bad input: one line, exit 2, nothing attached.
            let config = match config::Config::load(&args) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("latency-daemon: {e}");
                    return ExitCode::from(2);
                }
            };
            let runtime = match runtime() {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            match runtime.block_on(daemon::run(config, args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e.to_string()),
            }
        }
    }
}

/// One thread for HTTP and signals; the drain loop has a thread of its own (daemon.rs).
fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| fail(&format!("cannot start the runtime: {e}")))
}

/// Help and version go to stdout with status 0; anything else is one line on stderr, status 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        print!("{e}");
        return ExitCode::SUCCESS;
    }
    let rendered = e.render().to_string();
    let line = rendered.lines().find(|l| !l.trim().is_empty()).unwrap_or("invalid arguments");
    let line = line.trim_start_matches("error: ");
    eprintln!("latency-daemon: {line} (see --help)");
    ExitCode::from(2)
}

fn fail(message: &str) -> ExitCode {
    eprintln!("latency-daemon: {message}");
    ExitCode::from(1)
}
