//! `cargo xtask dist`: setup, then a static `latency-daemon` per architecture (musl; why in
//! `binaries`) into the dist folder (`target/dist/`), each checked (its ELF machine, no loader,
//! no shared library, `--version` run: under qemu-user for another architecture), and
//! then from them (`latency_lab::package`) a CycloneDX SBOM, a .deb and a tarball per architecture
//! (with the man pages and shell completions the daemon's `manual` example writes from its CLI) and one
//! multi-arch OCI image (layout and `oci-archive`), the systemd unit and the configuration file
//! the bare binary is installed with (`package::tarball::UNIT_FILES`), and `SHA256SUMS` over everything. Binaries
//! are stripped as Debian strips its own (`--strip-unneeded`, no `.comment`): the .deb, the image and the SBOM's
//! hash are of the file in dist/.
//!
//! `--guest-tools` instead builds only what vmtest's arm64 guests run besides the daemon: a static
//! aarch64 `xtask` (their load, native instead of the host's under qemu-x86_64), into
//! `target/dist-tools/`, beside dist/ and never in it or in SHA256SUMS.
mod binaries;
mod elf;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, bail};

use self::elf::Elf;
use latency_lab::package;

use crate::arch::Arch;
use crate::{build, cmd, setup};

/// The workspace's version, which the daemon's `--version` starts with.
const VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only these architectures (repeat the flag; default: all).
    #[arg(long, value_enum)]
    arch: Vec<Arch>,
    /// Build only the arm64 guests' load for `cargo xtask vmtest` (a static aarch64 `xtask`, into
    /// target/dist-tools/), not the release.
    #[arg(long)]
    guest_tools: bool,
    /// The release, and beside its packaging (which leaves a CPU idle) what `--guest-tools`
    /// builds: the whole suite's dist step in one.
    #[arg(long, conflicts_with = "guest_tools")]
    with_guest_tools: bool,
}

/// One architecture's static binary in the dist folder.
#[derive(Debug, Clone)]
pub struct Built {
    pub arch: Arch,
    /// `<dist>/latency-daemon-<version>-<arch>-linux-musl`.
    pub binary: PathBuf,
    /// Its `--version` line (version, commit, kernel object id).
    pub version: String,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    setup::ensure(setup::Report::ChangesOnly, setup::DIST)?;
    if args.guest_tools {
        let xtask = guest_xtask(Arch::Aarch64)?;
        println!("dist: {}", xtask.display());
        return Ok(());
    }
    let arches = if args.arch.is_empty() { Arch::ALL.to_vec() } else { args.arch.clone() };
    let built = binaries(&arches)?;
    // The build folder is free once the daemon is built: cargo takes it for the guests' xtask
    // while the packaging below runs (single-threaded compression, mostly).
    let tools = args.with_guest_tools.then(|| std::thread::spawn(|| guest_xtask(Arch::Aarch64)));
    for b in &built {
        let size = std::fs::metadata(&b.binary).map(|m| m.len()).unwrap_or_default();
        println!("dist: {} ({:.1} MiB): {}", b.binary.display(), size as f64 / (1 << 20) as f64, b.version);
    }
    let root = latency_lab::workspace_root();
    let release = package::Release::from_checkout(&root)?;
    let binaries = built
        .iter()
        .map(|b| {
            let arch = match b.arch {
                Arch::X86_64 => package::Arch::Amd64,
                Arch::Aarch64 => package::Arch::Arm64,
            };
            package::Binary::checked(&b.binary, arch)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Beside dist/, not in it: the .deb (and a tarball) carry it.
    let manual = build::target_dir().join("dist-build/manual");
    build::manual(&manual)?;
    println!("dist: SBOMs, .debs and the OCI image of {} ({})", release.version, release.revision);
    let artifacts = package::build(&dir(), &binaries, &release, &root, &manual)?;
    let mut files: Vec<&Path> = built.iter().map(|b| b.binary.as_path()).collect();
    files.extend(artifacts.sboms.iter().map(|(_, p)| p.as_path()));
    files.extend(artifacts.debs.iter().map(|(_, p)| p.as_path()));
    files.extend(artifacts.tarballs.iter().map(|(_, p)| p.as_path()));
    files.push(&artifacts.image.archive);
    let unit_files = unit_files(&root, &dir())?;
    files.extend(unit_files.iter().map(PathBuf::as_path));
    for file in &files[built.len()..] {
        println!("dist: {}", file.display());
    }
    println!("dist: image index {} ({})", artifacts.image.index, artifacts.image.reference);
    let sums = sha256sums(&dir(), files)?;
    println!("dist: {}", sums.display());
    if let Some(tools) = tools {
        let xtask = tools.join().map_err(|_| anyhow::anyhow!("the guest tools' build panicked"))??;
        println!("dist: {}", xtask.display());
    }
    Ok(())
}

/// Copies the bare binary's unit and configuration file (`package::tarball::UNIT_FILES`) from the
/// checkout at `root` into `dist` under their file names; returns their paths there.
fn unit_files(root: &Path, dist: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut placed = Vec::new();
    for source in package::tarball::UNIT_FILES {
        let from = root.join(source);
        let to = dist.join(Path::new(source).file_name().context("a unit file has a name")?);
        std::fs::copy(&from, &to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        placed.push(to);
    }
    Ok(placed)
}

/// The dist folder: `<target>/dist` (CARGO_TARGET_DIR honoured).
pub fn dir() -> PathBuf {
    build::target_dir().join("dist")
}

/// `arch`'s static daemon in the dist folder, for the commands that run the shipped binary
/// (`--static`), or an error that says how to build it.
fn static_daemon_of(arch: Arch) -> anyhow::Result<PathBuf> {
    let daemon = dir().join(format!("latency-daemon-{VERSION}-{arch}-linux-musl"));
    if !daemon.is_file() {
        bail!("--static: no {}; build it with `cargo xtask dist`", daemon.display());
    }
    println!("{arch} daemon: {} (static)", daemon.display());
    Ok(daemon)
}

/// The daemon a command runs: dist's static x86_64 binary with `--static`, else the host's
/// release build (made now).
pub fn daemon(static_daemon: bool) -> anyhow::Result<PathBuf> {
    if static_daemon { static_daemon_of(Arch::X86_64) } else { build::daemon(true) }
}

/// Where the guests' tools go: `<target>/dist-tools`, read by vmtest (`--arm64-bins`).
pub fn tools_dir() -> PathBuf {
    build::target_dir().join("dist-tools")
}

/// Builds, checks and places `<tools>/xtask-<arch>-linux-musl`; returns its path.
pub fn guest_xtask(arch: Arch) -> anyhow::Result<PathBuf> {
    let tools = tools_dir();
    std::fs::create_dir_all(&tools).with_context(|| format!("creating {}", tools.display()))?;
    // The daemon's target folder: std and the shared dependencies are built once.
    let compiled = binaries::build(&[arch], binaries::XTASK, &build::target_dir().join("dist-build"))?;
    let compiled = compiled.into_iter().next().context("one binary for one architecture")?;
    check_elf(arch, &compiled)?;
    let binary = tools.join(format!("xtask-{arch}-linux-musl"));
    place(arch, &compiled, &binary)?;
    Ok(binary)
}

/// Builds, checks and places each architecture's binary.
pub fn binaries(arches: &[Arch]) -> anyhow::Result<Vec<Built>> {
    let dist = dir();
    std::fs::create_dir_all(&dist).with_context(|| format!("creating {}", dist.display()))?;
    // Beside the dist folder, not in it: what is in dist/ is only what we ship.
    let target_dir = build::target_dir().join("dist-build");
    let start = Instant::now();
    let mut built: Vec<Built> = Vec::new();
    let compiled = binaries::build(arches, binaries::DAEMON, &target_dir)?;
    for (&arch, compiled) in arches.iter().zip(compiled) {
        check_elf(arch, &compiled)?;
        let binary = dist.join(format!("latency-daemon-{VERSION}-{arch}-linux-musl"));
        place(arch, &compiled, &binary)?;
        let version = binaries::version(arch, &binary).with_context(|| format!("running the {arch} binary"))?;
        let Some((commit, _bpf)) = binaries::parse_version(&version, VERSION) else {
            bail!("{}'s --version is `{version}`, not `latency-daemon {VERSION} (commit …, bpf …)`", binary.display());
        };
        // Each build stamps its commit itself; one run must not mix two trees.
        if let Some(other) = built.first()
            && binaries::parse_version(&other.version, VERSION).map(|(c, _)| c) != Some(commit)
        {
            bail!(
                "the {arch} binary says `{version}`, the {} one `{}`: HEAD moved (or the sources changed) during \
                 the build; run again",
                other.arch,
                other.version
            );
        }
        built.push(Built { arch, binary, version });
    }
    println!("dist: {} binaries in {:.0} s", built.len(), start.elapsed().as_secs_f64());
    Ok(built)
}

/// The right machine, and nothing to load at start.
fn check_elf(arch: Arch, binary: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    let elf = Elf::parse(&bytes).with_context(|| format!("reading {}'s ELF headers", binary.display()))?;
    if elf.machine != arch.elf_machine() {
        bail!("{} is for ELF machine {}, not {arch} ({})", binary.display(), elf.machine, arch.elf_machine());
    }
    if !elf.is_static() {
        bail!("{} is not static: {elf:?}", binary.display());
    }
    Ok(())
}

/// Copies `from` to `to` through a temporary name, so a reader never sees half a binary.
fn place(arch: Arch, from: &Path, to: &Path) -> anyhow::Result<()> {
    let mut partial = to.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    std::fs::copy(from, &partial).with_context(|| format!("copying {} to {}", from.display(), partial.display()))?;
    // Symbols stay in the build folder's copy; a panic's backtrace then shows addresses only.
    cmd::run(
        Command::new(format!("{}-strip", arch.gnu()))
            .args(["--strip-unneeded", "--remove-section=.comment"])
            .arg(&partial),
    )?;
    std::fs::rename(&partial, to).with_context(|| format!("renaming {} to {}", partial.display(), to.display()))
}

/// `sha256sum` of `files` (in `dir`, by name) into `dir/SHA256SUMS`; returns its path. Later
/// steps pass their artifacts too.
pub fn sha256sums<'a>(dir: &Path, files: impl IntoIterator<Item = &'a Path>) -> anyhow::Result<PathBuf> {
    let mut sum = Command::new("sha256sum");
    sum.current_dir(dir);
    for file in files {
        sum.arg(file.file_name().with_context(|| format!("{} names no file", file.display()))?);
    }
    let sums = dir.join("SHA256SUMS");
    std::fs::write(&sums, cmd::stdout(&mut sum)?).with_context(|| format!("writing {}", sums.display()))?;
    Ok(sums)
}
