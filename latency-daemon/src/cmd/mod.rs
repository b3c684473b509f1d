//! Where each command starts: `check`, `record`, `run` and `seccomp-profile`, each an entry that returns the process's
//! exit code (0 ok, 1 the machine or kernel said no, 2 bad input), and what they share: the tokio
//! runtime, the logger, one-line error reporting, and usage errors from clap.
pub mod capture;
pub mod check;
pub mod logger;
pub mod record;
pub mod run;
pub mod seccomp;

use std::process::ExitCode;

/// The machine or the kernel said no (missing capabilities, a failed load, a broken drain).
pub const FAILED: u8 = 1;
/// Bad input: flags, environment or configuration. Nothing was attached.
pub const BAD_INPUT: u8 = 2;

/// `run`'s runtime: HTTP, signals and alert sinks on worker threads, so one busy connection (a
/// large snapshot, a TLS handshake, a bcrypt check) cannot stall the others; as many workers as
/// CPUs, between 2 and 4. The drain loop has a thread of its own. Every thread the runtime starts
/// (its workers, before attach, and its blocking pool) drops every capability first: only the
/// thread that attaches (`block_on` runs `run` on the calling thread) and the drain thread may hold
/// one, and both give them up once attached. The blocking pool (handlers running beside the workers,
/// bcrypt, reloads) is capped at [`BLOCKING_THREADS`] and lets an idle thread go after a second, so a
/// flood of clients leaves no crowd of threads behind: the handlers past the cap run on the worker
/// that took their request, which is all a handoff would have bought.
fn serving_runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    let cpus = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cpus.clamp(2, 4))
        .max_blocking_threads(BLOCKING_THREADS)
        .thread_keep_alive(std::time::Duration::from_secs(1))
        .thread_name("serve")
        .enable_all()
        .on_thread_start(crate::kernel::privileges::drop_this_thread)
        .build()
        .map_err(|e| fail(&format!("cannot start the runtime: {e}")))
}

/// The serving runtime's blocking threads at most, beside its workers, the main thread and the drain
/// thread.
pub const BLOCKING_THREADS: usize = 16;

/// One thread for `record`'s signals and timers; any thread it starts (its blocking pool) drops
/// every capability first.
fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_start(crate::kernel::privileges::drop_this_thread)
        .build()
        .map_err(|e| fail(&format!("cannot start the runtime: {e}")))
}

/// An info event through the logger. New code says its level with `log::{info,warn,error}!`;
/// this stays for call sites written before the logger (other branches), so they too reach it.
pub fn log(message: &str) {
    ::log::info!("{message}");
}

/// Says why in one error event; exit code 1.
fn fail(message: &str) -> ExitCode {
    ::log::error!("{message}");
    ExitCode::from(FAILED)
}

/// Help and version go to stdout with status 0; anything else is one line per problem on stderr,
/// status 2. For `run`, every bad flag and every bad or unknown `RUNQLAT_*` variable is named
/// (clap itself stops at the first); `args` is the whole command line, program name first.
pub fn usage_error(e: clap::Error, args: &[String]) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        // `--help | head`: a reader that left is not an error (print! would panic on EPIPE).
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), e.to_string().as_bytes());
        return ExitCode::SUCCESS;
    }
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand && args.len() <= 1 {
        let command = <crate::cli::Cli as clap::CommandFactory>::command();
        let names: Vec<&str> = command.get_subcommands().map(clap::Command::get_name).collect();
        eprintln!("latency-daemon: a command is needed: {} (see --help)", names.join(", "));
        return ExitCode::from(BAD_INPUT);
    }
    let rendered = e.render().to_string();
    let hints = hints(&rendered);
    if args.get(1).is_some_and(|a| a == "run") {
        let problems = crate::config::usage_problems(&args[2..]);
        if !problems.is_empty() {
            // clap's hint belongs to the argument it stopped at: added to that problem's line.
            let at = e.get(clap::error::ContextKind::InvalidArg).map(ToString::to_string);
            let at = at.as_deref().map(|arg| arg.split([' ', '=']).next().unwrap_or(arg));
            for p in problems {
                let hint = if at.is_some_and(|arg| p.contains(arg)) { hints.as_str() } else { "" };
                eprintln!("latency-daemon: run: {p}{hint} (see --help)");
            }
            return ExitCode::from(BAD_INPUT);
        }
    }
    let line = rendered.lines().find(|l| !l.trim().is_empty()).unwrap_or("invalid arguments");
    let line = line.trim_start_matches("error: ");
    eprintln!("latency-daemon: {line}{hints} (see --help)");
    ExitCode::from(BAD_INPUT)
}

/// What clap adds below its error's first line to help (`[possible values: …]`, `tip: a similar
/// argument exists: …`), joined onto one line: "" when there is none.
fn hints(rendered: &str) -> String {
    rendered
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .skip(1)
        .map(str::trim)
        .filter(|l| l.starts_with("[possible values") || l.starts_with("tip:"))
        .map(|l| format!("; {}", l.trim_start_matches("tip: ")))
        .collect()
}
