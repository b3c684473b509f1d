//! Running external programs: a command in, its success (or stdout) out, and the command line
//! in every error so a failure says what was run.
use std::env;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, bail};

/// The command line as a user would type it, for messages.
pub fn show(cmd: &Command) -> String {
    // PATH is left out: we only ever append $CARGO_HOME/bin, and it would drown the rest.
    let envs = cmd
        .get_envs()
        .filter(|(k, _)| *k != "PATH")
        .filter_map(|(k, v)| Some(format!("{}={}", k.to_string_lossy(), v?.to_string_lossy())));
    let words = std::iter::once(cmd.get_program()).chain(cmd.get_args());
    envs.chain(words.map(|w| w.to_string_lossy().into_owned())).collect::<Vec<_>>().join(" ")
}

/// Runs with the terminal attached (its output streams as it comes); fails unless it exits 0.
pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let status = cmd.status().with_context(|| format!("could not start `{}`", show(cmd)))?;
    if !status.success() {
        bail!("`{}` failed ({status})", show(cmd));
    }
    Ok(())
}

/// Runs quietly and returns stdout; fails unless it exits 0, quoting its stderr.
pub fn stdout(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("could not start `{}`", show(cmd)))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        bail!("`{}` failed ({}): {}", show(cmd), out.status, stderr.trim());
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{}` printed non-UTF-8", show(cmd)))
}

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
