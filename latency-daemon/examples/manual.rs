//! The man pages and shell completions of this command line (`latency_lab::package::manual`):
//! in, the directory to write them to; out, `man/man8/*.8` and `completions/*` there, dated by
//! the checkout's release (`SOURCE_DATE_EPOCH` or HEAD's time). `cargo xtask dist` runs it
//! before packaging; the package test calls the same function.
use anyhow::Context as _;
use clap::CommandFactory as _;
use latency_daemon::{cli::Cli, config::reference};
use latency_lab::package::{Release, manual};

fn main() -> anyhow::Result<()> {
    let out = std::env::args_os().nth(1).context("usage: manual OUT_DIR")?;
    let root = latency_lab::workspace_root();
    let release = Release::from_checkout(&root)?;
    manual::write(Cli::command(), &reference::variables(), &release, &root, out.as_ref())?;
    println!("manual: {}", std::path::Path::new(&out).display());
    Ok(())
}
