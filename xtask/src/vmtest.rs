//! `cargo xtask vmtest [--kernels LIST] [--cpus N] [--static] [--deb]`: setup, the daemon (the
//! host's release build, or with --static the x86_64 musl one of target/dist), then the lab's matrix
//! (`latency_lab::vmtest`), whose guests run this very binary's `workload` as their load (arm64
//! guests: an aarch64 build from target/dist-tools, or this one under qemu-x86_64); with --deb,
//! target/dist's amd64 .deb and its bare release files (the x86_64 binary, the unit, the
//! configuration) for the lab's systemd guests.
use anyhow::Context as _;

use crate::{dist, setup};

pub fn run(args: &latency_lab::vmtest::Args) -> anyhow::Result<()> {
    // Inside a guest (its init runs this binary): no setup, no build, only the stall.
    if let Some(addr) = &args.guest_stall {
        return latency_lab::vmtest::stall::guest(addr, &args.guest_stall_pid);
    }
    // Before any binary is looked for: `cargo xtask test` fetches while dist builds them. The
    // downloads need the lab's tools only (its apt configuration, mmdebstrap), not a toolchain.
    if args.fetch_only {
        setup::ensure(setup::Report::ChangesOnly, &[setup::Part::Lab])?;
        return latency_lab::vmtest::fetch(args);
    }
    setup::ensure(setup::Report::ChangesOnly, setup::ALL)?;
    let daemon = dist::daemon(args.static_daemon)?;
    let xtask = std::env::current_exe().context("where this xtask binary is")?;
    let mut args = args.clone();
    // The arm64 guests' binaries: where the dist builds go unless told otherwise.
    if args.arm64_bins.is_empty() {
        args.arm64_bins = vec![dist::dir(), dist::tools_dir()];
    }
    if args.deb && args.deb_file.is_none() {
        args.deb_file = Some(deb()?);
    }
    if args.deb && args.bare_release.is_none() {
        args.bare_release = Some(bare_release()?);
    }
    latency_lab::vmtest::run(&args, &daemon, &xtask)
}

/// target/dist's amd64 .deb of this version, which `--deb` boots.
fn deb() -> anyhow::Result<std::path::PathBuf> {
    let deb = dist::dir().join(format!("latency-daemon_{}-1_amd64.deb", env!("CARGO_PKG_VERSION")));
    if !deb.is_file() {
        anyhow::bail!("--deb boots {}, which is not there: `cargo xtask dist` builds it", deb.display());
    }
    Ok(deb)
}

/// target/dist's files the bare route installs (docs/install.md's `## The binary`): the x86_64
/// static binary of this version and `package::tarball::UNIT_FILES`, each listed in SHA256SUMS with its hash
/// (the release uploads what SHA256SUMS lists: a user can download and check each).
fn bare_release() -> anyhow::Result<latency_lab::vmtest::bare::Release> {
    let dist = dist::dir();
    let binary = dist.join(format!("latency-daemon-{}-x86_64-linux-musl", env!("CARGO_PKG_VERSION")));
    let others: Vec<std::path::PathBuf> = latency_lab::package::tarball::UNIT_FILES
        .iter()
        .filter_map(|source| std::path::Path::new(source).file_name().map(|name| dist.join(name)))
        .collect();
    let sums_path = dist.join("SHA256SUMS");
    let sums = std::fs::read_to_string(&sums_path).unwrap_or_default();
    for file in std::iter::once(&binary).chain(&others) {
        if !file.is_file() {
            anyhow::bail!(
                "--deb installs {} as docs/install.md says: it is not there; `cargo xtask dist` builds it",
                file.display()
            );
        }
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        let hash = latency_lab::package::sha256_file(file)?;
        if !sums.lines().any(|l| l.split_whitespace().eq([hash.as_str(), name.as_ref()])) {
            anyhow::bail!(
                "{} does not list {name} with its sha256 {hash}: the release would not carry it; `cargo xtask dist` \
                 writes both",
                sums_path.display()
            );
        }
    }
    Ok(latency_lab::vmtest::bare::Release { binary, others, docs: crate::workspace_root().join("docs/install.md") })
}
