//! Where each command starts: `check`, `record` and `run`, each an entry that returns the process's
//! exit code (0 ok, 1 the machine or kernel said no, 2 bad input), and what they share: the tokio
//! runtime, one-line error reporting, and usage errors from clap.
pub mod check;
pub mod record;
pub mod run;

use std::process::ExitCode;

/// The machine or the kernel said no (missing capabilities, a failed load, a broken drain).
pub const FAILED: u8 = 1;
/// Bad input: flags, environment or configuration. Nothing was attached.
pub const BAD_INPUT: u8 = 2;

/// One thread for HTTP and signals; `run`'s drain loop has a thread of its own.
fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| fail(&format!("cannot start the runtime: {e}")))
}

/// One line on stderr, prefixed so it can be told apart in a journal.
pub fn log(message: &str) {
    eprintln!("latency-daemon: {message}");
}

/// Records of the `log` facade (the kernel program's lines, through aya-log) as `log` lines,
/// unless a logger is installed already.
pub fn install_logger() {
    struct Stderr;
    impl log::Log for Stderr {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, record: &log::Record<'_>) {
            log(&format!("{}: {}", record.level().as_str().to_lowercase(), record.args()));
        }
        fn flush(&self) {}
    }
    if log::set_logger(&Stderr).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}

/// Says why on one line; exit code 1.
fn fail(message: &str) -> ExitCode {
    log(message);
    ExitCode::from(FAILED)
}

/// Help and version go to stdout with status 0; anything else is one line on stderr, status 2.
pub fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        print!("{e}");
        return ExitCode::SUCCESS;
    }
    let rendered = e.render().to_string();
    let line = rendered.lines().find(|l| !l.trim().is_empty()).unwrap_or("invalid arguments");
    let line = line.trim_start_matches("error: ");
    log(&format!("{line} (see --help)"));
    ExitCode::from(BAD_INPUT)
}
