//! Release artifacts from built `latency-daemon` binaries: in, one static binary per architecture
//! and the release's facts (version, commit, date, maintainer); out, a .deb per architecture
//! ([`deb`]), an OCI image per architecture under one multi-arch index, as an `oci-archive`
//! ([`oci`]), a tarball per architecture for a host installed by hand ([`tarball`]), the man pages and shell completions the .deb ships ([`manual`]), the seccomp profile for each architecture ([`seccomp`]) and a CycloneDX SBOM of the
//! crates compiled into the binary ([`sbom`]).
//!
//! Every artifact is reproducible: file times are the release's commit time, owners are root,
//! archives are sorted and gzip writes no name or time. The external tools are Debian's own:
//! `dpkg-deb`, GNU `tar`, `gzip`, `sha256sum`.
pub mod deb;
pub mod manual;
pub mod oci;
pub mod rootfs;
pub mod runtimes;
pub mod sbom;
pub mod seccomp;
pub mod tarball;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use crate::cmd;

/// An architecture we ship for, by Debian's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::Amd64, Arch::Arm64];

    /// Debian's and OCI's name (`GOARCH`): `amd64`, `arm64`.
    pub fn debian(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// The kernel's and Rust's name: `x86_64`, `aarch64`.
    pub fn uname(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64",
            Arch::Arm64 => "aarch64",
        }
    }

    /// The Rust target the static binaries are built for.
    pub fn musl_target(self) -> String {
        format!("{}-unknown-linux-musl", self.uname())
    }

    /// The OCI platform's variant, where the image spec names one (arm64 is `v8`).
    pub fn oci_variant(self) -> Option<&'static str> {
        match self {
            Arch::Amd64 => None,
            Arch::Arm64 => Some("v8"),
        }
    }

    /// ELF `e_machine` of this architecture's executables.
    fn elf_machine(self) -> u16 {
        match self {
            Arch::Amd64 => 0x3e,
            Arch::Arm64 => 0xb7,
        }
    }

    /// The architecture an ELF executable is for (from its header's `e_machine`).
    pub fn of_elf(path: &Path) -> anyhow::Result<Arch> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        // e_ident: magic, class (2 = 64-bit), data (1 = little-endian); e_machine at offset 18.
        if bytes.len() < 20 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
            bail!("{} is not a 64-bit little-endian ELF file", path.display());
        }
        let machine = u16::from_le_bytes([bytes[18], bytes[19]]);
        match Arch::ALL.into_iter().find(|a| a.elf_machine() == machine) {
            Some(arch) => Ok(arch),
            None => bail!("{} is an ELF file for machine {machine:#x}, neither x86_64 nor aarch64", path.display()),
        }
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.debian())
    }
}

/// A `latency-daemon` binary and the architecture it is packaged as.
#[derive(Debug, Clone)]
pub struct Binary {
    pub path: PathBuf,
    pub arch: Arch,
}

impl Binary {
    /// `path`, whose ELF header must say `arch`.
    pub fn checked(path: &Path, arch: Arch) -> anyhow::Result<Binary> {
        let found = Arch::of_elf(path)?;
        if found != arch {
            bail!("{} is built for {found}, not {arch}", path.display());
        }
        Ok(Binary { path: path.to_owned(), arch })
    }

    /// `path` packaged as `arch` whatever it is built for: only for tests of the artifacts'
    /// structure before the other architecture's binary exists.
    pub fn stand_in(path: &Path, arch: Arch) -> Binary {
        Binary { path: path.to_owned(), arch }
    }
}

/// Everything [`build`] wrote.
#[derive(Debug, Clone)]
pub struct Artifacts {
    /// Per architecture, `latency-daemon-<version>-<arch>-linux-musl.cdx.json`.
    pub sboms: Vec<(Arch, PathBuf)>,
    /// Per architecture, `latency-daemon_<version>-1_<arch>.deb`.
    pub debs: Vec<(Arch, PathBuf)>,
    /// Per architecture, `latency-daemon-<version>-<arch>-linux-musl.tar.gz` ([`tarball`]).
    pub tarballs: Vec<(Arch, PathBuf)>,
    /// `latency-daemon-<version>.oci/` and `.oci.tar`: every architecture under one index.
    pub image: oci::Image,
}

/// Every artifact of a release into `out_dir`: each binary's SBOM, then its .deb (which ships
/// that SBOM and `manual`, the tree [`manual::write`] made), then the image of all of them. `root`
/// is the workspace (its deploy/, docs, lock file).
pub fn build(
    out_dir: &Path,
    binaries: &[Binary],
    release: &Release,
    root: &Path,
    manual: &Path,
) -> anyhow::Result<Artifacts> {
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let mut sboms = Vec::new();
    let mut debs = Vec::new();
    let mut tarballs = Vec::new();
    for binary in binaries {
        let arch = binary.arch;
        let sbom = out_dir.join(format!("latency-daemon-{}-{}-linux-musl.cdx.json", release.version, arch.uname()));
        sbom::write(&sbom, root, binary, release).with_context(|| format!("the {arch} SBOM"))?;
        let deb =
            deb::build(out_dir, binary, release, &sbom, root, manual).with_context(|| format!("the {arch} .deb"))?;
        let tarball =
            tarball::build(out_dir, binary, release, root, manual).with_context(|| format!("the {arch} tarball"))?;
        sboms.push((arch, sbom));
        debs.push((arch, deb));
        tarballs.push((arch, tarball));
    }
    let image = oci::build(out_dir, binaries, release, root).context("the OCI image")?;
    Ok(Artifacts { sboms, debs, tarballs, image })
}

/// What every artifact says about the release.
#[derive(Debug, Clone)]
pub struct Release {
    /// The crate's version (`0.1.0`).
    pub version: String,
    /// The full commit id it was built from, `-dirty` appended for a changed tree.
    pub revision: String,
    /// Seconds since the epoch: the commit's time (`SOURCE_DATE_EPOCH` overrides it). Every file
    /// time and `created` date is this, so two builds of one commit are byte for byte the same.
    pub epoch: u64,
    /// "Name <address>", the .deb's Maintainer.
    pub maintainer: String,
    /// Where the source is published: `repository` of the root Cargo.toml's `[workspace.package]`
    /// (the image's `org.opencontainers.image.source`, `.url` and `.documentation`, the .deb's
    /// `Homepage`, the SBOM's vcs reference). `None` leaves all of them out.
    pub source: Option<String>,
}

impl Release {
    /// From the checkout at `root`: the workspace version, HEAD's id (and `-dirty`), HEAD's time
    /// or `SOURCE_DATE_EPOCH`, `LATENCY_DIST_MAINTAINER` or HEAD's author, the workspace's `repository`.
    pub fn from_checkout(root: &Path) -> anyhow::Result<Release> {
        let git = |args: &[&str]| {
            let mut c = Command::new("git");
            c.arg("-C").arg(root).args(args);
            cmd::stdout(&mut c).map(|s| s.trim().to_owned())
        };
        let mut revision = git(&["rev-parse", "HEAD"])?;
        if !git(&["status", "--porcelain", "--untracked-files=no"])?.is_empty() {
            revision.push_str("-dirty");
        }
        let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
            Ok(s) => s.trim().parse().with_context(|| format!("SOURCE_DATE_EPOCH={s:?} is not whole seconds"))?,
            Err(_) => git(&["log", "-1", "--format=%ct"])?.parse().context("git log: commit time")?,
        };
        let maintainer = match std::env::var("LATENCY_DIST_MAINTAINER") {
            Ok(m) => m,
            Err(_) => git(&["log", "-1", "--format=%an <%ae>"])?,
        };
        let version = workspace_field(root, "version")?;
        let source = workspace_field(root, "repository")?;
        Ok(Release { version, revision, epoch, maintainer, source: Some(source) })
    }

    /// The epoch as RFC 3339 UTC (`2026-12-04T13:12:10Z`), the OCI `created` form.
    pub fn created(&self) -> String {
        rfc3339(self.epoch)
    }
}

/// `<key> = "…"` of `[workspace.package]` in the root Cargo.toml (`version`, `repository`).
pub fn workspace_field(root: &Path, key: &str) -> anyhow::Result<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).context("reading Cargo.toml")?;
    let section = manifest.split("[workspace.package]").nth(1).context("Cargo.toml has no [workspace.package]")?;
    let prefix = format!("{key} = ");
    section
        .lines()
        .take_while(|l| !l.starts_with('['))
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().trim_matches('"').to_owned()))
        .with_context(|| format!("[workspace.package] has no {key}"))
}

/// Seconds since the epoch → `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian, UTC).
pub fn rfc3339(epoch: u64) -> String {
    let (days, secs) = (epoch / 86_400, epoch % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs % 3600 / 60, secs % 60)
}

/// Seconds since the epoch → RFC 2822 (`Fri, 04 Dec 2026 13:12:10 +0000`), Debian changelog's form.
pub fn rfc2822(epoch: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (days, secs) = (epoch / 86_400, epoch % 86_400);
    let (y, m, d) = civil_from_days(days);
    let weekday = DAYS[(days % 7) as usize];
    let month = MONTHS[(m - 1) as usize];
    format!("{weekday}, {d:02} {month} {y} {:02}:{:02}:{:02} +0000", secs / 3600, secs % 3600 / 60, secs % 60)
}

/// Days since 1970-01-01 → (year, month 1–12, day 1–31), Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// The lowercase hex SHA-256 of a file (`sha256sum`).
pub fn sha256_file(path: &Path) -> anyhow::Result<String> {
    let mut c = Command::new("sha256sum");
    c.arg("--").arg(path);
    let out = cmd::stdout(&mut c)?;
    let hex = out.split_whitespace().next().unwrap_or_default();
    if hex.len() != 64 {
        bail!("sha256sum {}: unexpected output {out:?}", path.display());
    }
    Ok(hex.to_owned())
}

/// A reproducible tar of everything under `dir` (names relative to it, `./` first), sorted, owned
/// by root (numeric ids), every time `epoch`: GNU tar's own options for reproducible archives.
/// `gzip` compresses it without a name or time.
pub fn tar_dir(dir: &Path, epoch: u64, out: &Path, gzip: bool) -> anyhow::Result<()> {
    let mut tar = Command::new("tar");
    tar.args(["--sort=name", "--format=posix", "--owner=0", "--group=0", "--numeric-owner"])
        .arg(format!("--mtime=@{epoch}"))
        .arg("--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime")
        .arg("-C")
        .arg(dir)
        .args(["-cf", "-", "."])
        .env("LC_ALL", "C");
    let archive = tar.output().with_context(|| format!("could not start `{}`", cmd::show(&tar)))?;
    if !archive.status.success() {
        bail!("`{}` failed: {}", cmd::show(&tar), String::from_utf8_lossy(&archive.stderr).trim());
    }
    let bytes = if gzip { gzip_bytes(&archive.stdout)? } else { archive.stdout };
    std::fs::write(out, bytes).with_context(|| format!("writing {}", out.display()))
}

/// `gzip -9n` of `bytes`.
pub fn gzip_bytes(bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    use std::io::Write as _;
    let mut gzip = Command::new("gzip");
    gzip.args(["-9", "-n", "-c"]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    let mut child = gzip.spawn().context("could not start gzip")?;
    let mut stdin = child.stdin.take().context("gzip's stdin")?;
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().context("gzip")?;
    writer.join().map_err(|_| anyhow::anyhow!("gzip's writer panicked"))?.context("writing to gzip")?;
    if !out.status.success() {
        bail!("gzip failed ({})", out.status);
    }
    Ok(out.stdout)
}

/// Sets every file time under `dir` (and its own) to `epoch`.
fn touch_tree(dir: &Path, epoch: u64) -> anyhow::Result<()> {
    let mut c = Command::new("find");
    c.arg(dir).args(["-exec", "touch", "--no-dereference", "--date"]).arg(format!("@{epoch}")).args(["{}", "+"]);
    cmd::stdout(&mut c).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_in_both_forms() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc2822(0), "Thu, 01 Jan 1970 00:00:00 +0000");
        // A leap day, and the end of a century's leap year.
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(978_307_199), "2000-12-31T23:59:59Z");
        assert_eq!(rfc3339(1_796_389_013), "2026-12-04T12:56:53Z");
        assert_eq!(rfc2822(1_796_389_013), "Fri, 04 Dec 2026 12:56:53 +0000");
    }

    #[test]
    fn the_elf_header_names_the_architecture() {
        let scratch = crate::guard::Scratch::new("runqlat-package-elf").unwrap_or_else(|e| panic!("{e:#}"));
        let mut header = vec![0u8; 64];
        header[..6].copy_from_slice(b"\x7fELF\x02\x01");
        for (machine, arch) in [(0x3e_u16, Arch::Amd64), (0xb7, Arch::Arm64)] {
            header[18..20].copy_from_slice(&machine.to_le_bytes());
            let path = scratch.join(arch.debian());
            std::fs::write(&path, &header).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(Arch::of_elf(&path).unwrap_or_else(|e| panic!("{e:#}")), arch);
            let other = if arch == Arch::Amd64 { Arch::Arm64 } else { Arch::Amd64 };
            assert!(Binary::checked(&path, other).is_err());
        }
        header[18] = 0x28; // 32-bit ARM
        std::fs::write(scratch.join("arm"), &header).unwrap_or_else(|e| panic!("{e}"));
        assert!(Arch::of_elf(&scratch.join("arm")).is_err());
    }
}
