//! Running external programs: a command in, its success (or stdout) out, and the command line
//! in every error so a failure says what was run. `show`, `run` and `stdout` are the lab's; this
//! adds what only the build needs: cargo with bpf-linker on PATH.
use std::env;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

use anyhow::Context as _;
pub use latency_lab::cmd::{run, show, stdout};

/// $CARGO_HOME, where `cargo install` puts binaries and where we keep bpf-linker's LLVM prefix.
pub fn cargo_home() -> anyhow::Result<PathBuf> {
    if let Some(home) = env::var_os("CARGO_HOME") {
        return Ok(PathBuf::from(home));
    }
    let home = env::var_os("HOME").context("neither CARGO_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cargo"))
}

/// `cargo` (the one running us, if known) with $CARGO_HOME/bin on PATH: aya-build looks up
/// bpf-linker on PATH, and setup accepts it in $CARGO_HOME/bin even when PATH lacks that.
pub fn cargo() -> anyhow::Result<Command> {
    let mut cmd = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    let bin = cargo_home()?.join("bin");
    let path = env::var_os("PATH").unwrap_or_default();
    if !env::split_paths(&path).any(|dir| dir == bin) {
        let dirs = env::split_paths(&path).chain(std::iter::once(bin));
        let joined: OsString = env::join_paths(dirs).context("PATH holds a directory with ':'")?;
        cmd.env("PATH", joined);
    }
    Ok(cmd)
}
