//! `cargo xtask build [--release]`: setup, then `cargo build -p latency-daemon` (whose build.rs
//! builds the kernel program). Out: the daemon binary's path; and, for the bench, the paths of
//! latency-daemon's floor example and pipeline benchmark; the man pages and completions (its
//! `manual` example, run).
use std::env;
use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context as _, bail};

use crate::{cmd, setup, workspace_root};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Build with the release profile.
    #[arg(long)]
    release: bool,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    setup::ensure(setup::Report::ChangesOnly, setup::RUN)?;
    let daemon = daemon(args.release)?;
    println!("build: {}", daemon.display());
    Ok(())
}

/// Builds latency-daemon and returns the binary's path.
pub fn daemon(release: bool) -> anyhow::Result<PathBuf> {
    let mut args = vec!["build", "--package", "latency-daemon"];
    if release {
        args.push("--release");
    }
    cargo(&args, "building latency-daemon failed")?;
    let profile = if release { "release" } else { "debug" };
    existing(target_dir().join(profile).join("latency-daemon"))
}

/// Builds the bench's floor (latency-daemon's example `floor`) exactly as the test suite builds
/// it, and returns its path. Any profile would do (aya-build always builds the kernel object with
/// --release, and the loader's speed does not matter), but examples get dev-dependencies, and any
/// other package selection or profile resolves features differently and recompiles the library
/// and the kernel programs (25–40 s). After `cargo test --workspace` this takes a second.
pub fn floor() -> anyhow::Result<PathBuf> {
    println!("build: the floor example, as `cargo test --workspace` builds it…");
    cargo(&["test", "--workspace", "--no-run"], "building the floor failed")?;
    existing(target_dir().join("debug").join("examples").join("floor"))
}

/// The man pages and shell completions of the daemon's command line, written into `dir` by
/// latency-daemon's example `manual` (latency_lab::package::manual's tree). An example, not a
/// command of the daemon's: it reads the CLI's definition through the library, and xtask stays
/// free of the daemon's build (which needs the kernel toolchain `setup` installs).
pub fn manual(dir: &std::path::Path) -> anyhow::Result<()> {
    let mut run = cmd::cargo()?;
    run.current_dir(workspace_root())
        .args(["run", "--quiet", "--package", "latency-daemon", "--example", "manual", "--"])
        .arg(dir);
    cmd::run(&mut run).context("writing the man pages and completions failed")
}

/// Builds latency-daemon's bench target `pipeline` and returns its executable, which cargo names
/// with a hash: the `compiler-artifact` message for target `pipeline` says where it is.
pub fn pipeline_bench() -> anyhow::Result<PathBuf> {
    let mut build = cmd::cargo()?;
    build
        .current_dir(workspace_root())
        .args(["bench", "--package", "latency-daemon", "--bench", "pipeline", "--no-run", "--message-format=json"])
        // Cargo's progress (on stderr) streams as usual; the messages come on stdout.
        .stderr(Stdio::inherit());
    let messages = cmd::stdout(&mut build).context("building the pipeline benchmark failed")?;
    let executable = messages.lines().find_map(|line| {
        let message: serde_json::Value = serde_json::from_str(line).ok()?;
        let ours = message["reason"] == "compiler-artifact" && message["target"]["name"] == "pipeline";
        ours.then(|| message["executable"].as_str().map(PathBuf::from)).flatten()
    });
    existing(executable.context("cargo named no executable for the bench target `pipeline`")?)
}

/// `cargo ARGS` in the workspace, output streaming; `failed` says what did not work.
fn cargo(args: &[&str], failed: &'static str) -> anyhow::Result<()> {
    let mut build = cmd::cargo()?;
    build.current_dir(workspace_root()).args(args);
    cmd::run(&mut build).context(failed)
}

/// `path`, if the build really left a file there.
fn existing(path: PathBuf) -> anyhow::Result<PathBuf> {
    if !path.is_file() {
        bail!("cargo build succeeded but {} does not exist", path.display());
    }
    Ok(path)
}

/// Cargo's target directory: $CARGO_TARGET_DIR (relative to where cargo ran) or `<root>/target`.
pub fn target_dir() -> PathBuf {
    let root = workspace_root();
    match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}
