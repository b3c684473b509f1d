//! The kernels the matrix boots: in, a list of ids (`5.10`, `6.1-rt`, `6.12-arm64`, …) and the
//! cache folder; out, for each its boot image (x86_64: the ELF `vmlinux`; arm64: the uncompressed
//! `Image`) and its `config`, fetched once from Debian's archive through a private apt
//! configuration per architecture (the newest package of its suite, resolved at run time, with
//! the probe's package as fallback) and kept extracted in the cache (the .deb is deleted).
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use super::arch::Arch::{self, Arm64, X86_64};
use super::vmlinux;
use crate::apt::{Apt, Mirrors, source_line};
use crate::cmd;

/// One kernel of the matrix.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub id: &'static str,
    /// generic, cloud or rt.
    pub flavour: &'static str,
    pub arch: Arch,
    /// Where it may come from, preferred first.
    pub suites: &'static [&'static str],
    /// Its packages' names after `linux-image-`: this prefix, digits, this suffix.
    name: (&'static str, &'static str),
    /// A package and version known to exist (the probe's), if the lookup finds nothing.
    fallback: (&'static str, &'static str),
}

const PACKAGE: &str = "linux-image-";

/// One kernel: id, flavour, architecture, suites (preferred first), package name after
/// `linux-image-` (prefix, digits, suffix), and the probe's package (after `linux-image-`) and
/// version as fallback.
const fn entry(
    id: &'static str,
    flavour: &'static str,
    arch: Arch,
    suites: &'static [&'static str],
    name: (&'static str, &'static str),
    fallback: (&'static str, &'static str),
) -> Spec {
    Spec { id, flavour, arch, suites, name, fallback }
}

// bullseye-security lists rt images it does not serve (404): the download falls back to the
// next suite, bullseye's own. The arm64 kernels are booted only when named (`--kernels`): under
// TCG on an x86_64 host each guest costs about twice an x86_64 one.
#[rustfmt::skip]
pub const SPECS: [Spec; 10] = [
    entry("5.10", "generic", X86_64, &["bullseye-security", "bullseye"], ("5.10.0-", "-amd64-unsigned"), ("5.10.0-46-amd64-unsigned", "5.10.262-1")),
    entry("5.10-rt", "rt", X86_64, &["bullseye-security", "bullseye"], ("5.10.0-", "-rt-amd64-unsigned"), ("5.10.0-32-rt-amd64-unsigned", "5.10.223-1")),
    entry("6.1", "generic", X86_64, &["bookworm-security", "bookworm"], ("6.1.0-", "-amd64-unsigned"), ("6.1.0-57-amd64-unsigned", "6.1.192-3")),
    entry("6.1-rt", "rt", X86_64, &["bookworm-security", "bookworm"], ("6.1.0-", "-rt-amd64-unsigned"), ("6.1.0-57-rt-amd64-unsigned", "6.1.192-3")),
    entry("6.1-cloud", "cloud", X86_64, &["bookworm-security", "bookworm"], ("6.1.0-", "-cloud-amd64-unsigned"), ("6.1.0-57-cloud-amd64-unsigned", "6.1.192-3")),
    entry("6.12", "generic", X86_64, &["bookworm-security"], ("6.12.", "+deb12-amd64-unsigned"), ("6.12.118+deb12-amd64-unsigned", "6.12.118-1~deb12u1")),
    entry("6.12-trixie", "generic", X86_64, &["trixie-security", "trixie"], ("6.12.", "+deb13-amd64-unsigned"), ("6.12.118+deb13-amd64-unsigned", "6.12.118-1")),
    entry("6.12-bpo", "generic", X86_64, &["bookworm-backports"], ("6.12.", "+deb12-amd64-unsigned"), ("6.12.95+deb12-amd64-unsigned", "6.12.95-1~bpo12+1")),
    entry("6.1-arm64", "generic", Arm64, &["bookworm-security", "bookworm"], ("6.1.0-", "-arm64-unsigned"), ("6.1.0-57-arm64-unsigned", "6.1.192-3")),
    entry("6.12-arm64", "generic", Arm64, &["bookworm-security"], ("6.12.", "+deb12-arm64-unsigned"), ("6.12.118+deb12-arm64-unsigned", "6.12.118-1~deb12u1")),
];

/// The ids a plain `cargo xtask vmtest` boots: every x86_64 kernel.
pub fn default_ids() -> Vec<String> {
    SPECS.iter().filter(|s| s.arch == X86_64).map(|s| s.id.to_owned()).collect()
}

/// The ids of one architecture.
pub fn ids_of(arch: Arch) -> Vec<String> {
    SPECS.iter().filter(|s| s.arch == arch).map(|s| s.id.to_owned()).collect()
}

/// The suites one architecture's kernel lookups need, and the mirror of each.
fn source_lines(mirrors: &Mirrors, arch: Arch) -> Vec<String> {
    let mut suites: Vec<&str> =
        SPECS.iter().filter(|s| s.arch == arch).flat_map(|s| s.suites.iter().copied()).collect();
    suites.sort_unstable();
    suites.dedup();
    suites
        .iter()
        .map(|s| source_line(if s.ends_with("-security") { &mirrors.security } else { &mirrors.archive }, s))
        .collect()
}

pub fn spec(id: &str) -> anyhow::Result<Spec> {
    SPECS.iter().copied().find(|s| s.id == id).with_context(|| {
        format!("unknown kernel `{id}`; known: {}", SPECS.iter().map(|s| s.id).collect::<Vec<_>>().join(", "))
    })
}

/// A kernel ready to boot.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Kernel {
    pub id: String,
    pub flavour: String,
    /// Reports written before arm64 was booted hold x86_64 kernels only.
    #[serde(default)]
    pub arch: Arch,
    pub package: String,
    pub version: String,
    pub suite: String,
    /// `uname -r` of the guest, from the file names in ./boot.
    pub release: String,
    /// How vmlinuz was compressed (`none`: arm64's plain Image).
    pub compression: String,
    /// CONFIG_PREEMPT_RT=y in its config.
    pub preempt_rt: bool,
    #[serde(skip)]
    pub dir: PathBuf,
}

impl Kernel {
    /// What QEMU's `-kernel` gets.
    pub fn image(&self) -> PathBuf {
        self.dir.join(image_name(self.arch))
    }
}

/// x86_64: the ELF vmlinux (booted through its PVH note); arm64: the raw Image.
fn image_name(arch: Arch) -> &'static str {
    match arch {
        X86_64 => "vmlinux",
        Arm64 => "Image",
    }
}

impl Spec {
    /// Whether `package` is one of this kernel's.
    fn matches(&self, package: &str) -> bool {
        let (prefix, suffix) = self.name;
        let middle =
            package.strip_prefix(PACKAGE).and_then(|p| p.strip_prefix(prefix)).and_then(|p| p.strip_suffix(suffix));
        middle.is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
    }
}

/// Candidates for `spec`, best first: the newest of each suite, in the spec's order of suites
/// (a suite that 404s one package — bullseye-security's rt images — tends to 404 them all).
fn candidates(spec: &Spec, found: &[(String, String, String)]) -> Vec<(String, String, String)> {
    let mut list = Vec::new();
    for suite in spec.suites {
        let newest = found
            .iter()
            .filter(|(name, _, s)| s == suite && spec.matches(name))
            .max_by_key(|(_, version, _)| natural(version));
        list.extend(newest.cloned());
    }
    list
}

/// A version as its runs of digits, for ordering 5.10.262-1 after 5.10.223-1.
pub fn natural(version: &str) -> Vec<u64> {
    version.split(|c: char| !c.is_ascii_digit()).filter_map(|d| d.parse().ok()).collect()
}

/// The private apt configuration for one architecture's kernels (and its busybox): the suites
/// its kernels come from (the x86_64 one keeps the folder it always had, so its indexes stay).
pub fn apt(arch: Arch, cache: &Path) -> anyhow::Result<Apt> {
    let lines = source_lines(&Mirrors::of_host()?, arch);
    match arch {
        X86_64 => Apt::new(&cache.join("apt-kernels"), &lines),
        other => Apt::for_arch(&cache.join(format!("apt-kernels-{}", other.debian())), &lines, other.debian()),
    }
}

/// Every kernel in `ids`, fetched if not cached, in the order given. A kernel that cannot be
/// had fails the call.
pub fn fetch(ids: &[String], cache: &Path) -> anyhow::Result<Vec<Kernel>> {
    let specs = ids.iter().map(|id| spec(id)).collect::<anyhow::Result<Vec<_>>>()?;
    let mut kernels = Vec::new();
    for arch in [X86_64, Arm64] {
        if !specs.iter().any(|s| s.arch == arch) {
            continue;
        }
        let apt = apt(arch, cache)?;
        // Offline with everything cached is fine; the lookup below then finds what is cached.
        let updated = apt.update(false);
        if let Err(e) = &updated {
            println!("vmtest: apt-get update ({arch}) failed ({e:#}); using cached kernels where there are some");
        }
        // One lookup for all: apt-cache rebuilds its cache of every index on each call.
        let found = apt.versions(&format!("^linux-image-.*-{}-unsigned$", arch.debian())).unwrap_or_default();
        for spec in specs.iter().filter(|s| s.arch == arch) {
            let kernel = fetch_one(spec, &apt, &found, cache).with_context(|| format!("kernel {}", spec.id))?;
            kernels.push(kernel);
        }
    }
    kernels.sort_by_key(|k| ids.iter().position(|id| *id == k.id));
    Ok(kernels)
}

fn fetch_one(spec: &Spec, apt: &Apt, found: &[(String, String, String)], cache: &Path) -> anyhow::Result<Kernel> {
    let mut candidates = candidates(spec, found);
    let (fb_package, fb_version) = (format!("{PACKAGE}{}", spec.fallback.0), spec.fallback.1);
    if !candidates.iter().any(|c| c.0 == fb_package && c.1 == fb_version) {
        candidates.push((fb_package, fb_version.to_owned(), spec.suites[0].to_owned()));
    }
    let dir = cache.join("kernels").join(spec.id);
    // Packages an index lists but the mirror does not serve (404), remembered so each run does
    // not ask again.
    let missing_file = dir.join("unavailable");
    let missing = std::fs::read_to_string(&missing_file).unwrap_or_default();
    let available = candidates.iter().filter(|c| !missing.lines().any(|l| l == format!("{}={}", c.0, c.1)));
    for (package, version, suite) in available {
        let slot = dir.join(format!("{package}_{version}"));
        if let Some(kernel) = cached(&slot) {
            return Ok(kernel);
        }
        println!("vmtest: kernel {}: fetching {package} {version} ({suite})…", spec.id);
        match unpack(spec, apt, package, version, suite, &slot) {
            Ok(kernel) => return Ok(kernel),
            Err(e) => {
                println!("vmtest: kernel {}: {package} {version}: {e:#}; trying the next", spec.id);
                let _ = std::fs::remove_dir_all(&slot);
                if format!("{e:#}").contains("404") {
                    use std::io::Write as _;
                    let file = std::fs::OpenOptions::new().create(true).append(true).open(&missing_file);
                    let _ = file.and_then(|mut f| writeln!(f, "{package}={version}"));
                }
            }
        }
    }
    // Offline: whatever was fetched before.
    let slots = std::fs::read_dir(&dir).into_iter().flatten().flatten();
    if let Some(kernel) = slots.filter_map(|e| cached(&e.path())).max_by_key(|k| natural(&k.version)) {
        println!("vmtest: kernel {}: using the cached {} {}", spec.id, kernel.package, kernel.version);
        return Ok(kernel);
    }
    bail!(
        "no package {PACKAGE}{}N{} could be fetched from {} (tried {} candidates)",
        spec.name.0,
        spec.name.1,
        spec.suites.join(", "),
        candidates.len()
    )
}

/// A finished cache slot (its `kernel.json` is written last).
fn cached(slot: &Path) -> Option<Kernel> {
    let text = std::fs::read_to_string(slot.join("kernel.json")).ok()?;
    let mut kernel: Kernel = serde_json::from_str(&text).ok()?;
    kernel.dir = slot.to_owned();
    kernel.image().is_file().then_some(kernel)
}

fn unpack(spec: &Spec, apt: &Apt, package: &str, version: &str, suite: &str, slot: &Path) -> anyhow::Result<Kernel> {
    let _ = std::fs::remove_dir_all(slot);
    let work = slot.join("work");
    let started = std::time::Instant::now();
    let deb = apt.download(package, version, &work)?;
    let size = std::fs::metadata(&deb).map_or(0, |m| m.len());
    println!(
        "vmtest: kernel {}: {:.0} MB in {:.0} s; unpacking ./boot and the boot image…",
        spec.id,
        size as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    let mut tar = Command::new("sh");
    tar.arg("-c").arg("dpkg-deb --fsys-tarfile \"$0\" | tar -x -C \"$1\" ./boot").arg(&deb).arg(&work);
    cmd::stdout(&mut tar)?;
    let boot = work.join("boot");
    let vmlinuz = std::fs::read_dir(&boot)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")))
        .context("the package has no boot/vmlinuz-*")?;
    let release = vmlinuz.file_name().map(|n| n.to_string_lossy().replacen("vmlinuz-", "", 1)).unwrap_or_default();
    let config = std::fs::read_to_string(boot.join(format!("config-{release}"))).unwrap_or_default();
    if !config.lines().any(|l| l == "CONFIG_DEBUG_INFO_BTF=y") {
        bail!("{release} is built without CONFIG_DEBUG_INFO_BTF");
    }
    let image = slot.join(image_name(spec.arch));
    let compression = match spec.arch {
        X86_64 => vmlinux::extract(&vmlinuz, &image)?,
        Arm64 => vmlinux::arm64_image(&vmlinuz, &image)?,
    };
    std::fs::write(slot.join("config"), &config)?;
    std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    let kernel = Kernel {
        id: spec.id.to_owned(),
        flavour: spec.flavour.to_owned(),
        arch: spec.arch,
        package: package.to_owned(),
        version: version.to_owned(),
        suite: suite.to_owned(),
        release,
        compression: compression.to_owned(),
        preempt_rt: config.lines().any(|l| l == "CONFIG_PREEMPT_RT=y"),
        dir: slot.to_owned(),
    };
    std::fs::write(slot.join("kernel.json"), serde_json::to_string_pretty(&kernel)?)?;
    Ok(kernel)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, version: &str, suite: &str) -> (String, String, String) {
        (name.to_owned(), version.to_owned(), suite.to_owned())
    }

    #[test]
    fn the_newest_of_each_suite_in_the_specs_order() {
        let found = [
            row("linux-image-5.10.0-32-rt-amd64-unsigned", "5.10.223-1", "bullseye"),
            row("linux-image-5.10.0-44-rt-amd64-unsigned", "5.10.237-1", "bullseye-security"),
            row("linux-image-5.10.0-46-rt-amd64-unsigned", "5.10.262-1", "bullseye-security"),
            row("linux-image-5.10.0-46-rt-amd64-unsigned", "5.10.262-1", "trixie"),
        ];
        let order: Vec<String> = candidates(&SPECS[1], &found).into_iter().map(|c| c.1).collect();
        assert_eq!(order, ["5.10.262-1", "5.10.223-1"]);
    }

    #[test]
    fn names_are_prefix_digits_suffix() {
        let rt = SPECS[1];
        assert!(rt.matches("linux-image-5.10.0-32-rt-amd64-unsigned"));
        assert!(!rt.matches("linux-image-5.10.0-32-amd64-unsigned"));
        assert!(!SPECS[2].matches("linux-image-6.1.0-0.deb11.48-amd64-unsigned"));
        assert!(spec("6.12-bpo").is_ok_and(|s| s.matches("linux-image-6.12.95+deb12-amd64-unsigned")));
        let arm = spec("6.1-arm64").unwrap_or_else(|e| panic!("{e:#}"));
        assert!(
            arm.matches("linux-image-6.1.0-57-arm64-unsigned") && !arm.matches("linux-image-6.1.0-57-amd64-unsigned")
        );
        assert!(!SPECS[2].matches("linux-image-6.1.0-57-arm64-unsigned"));
    }

    #[test]
    fn versions_order_numerically() {
        assert!(natural("6.12.118-1~deb12u1") > natural("6.12.95-1~bpo12+1"));
        assert!(natural("5.10.262-1") > natural("5.10.223-1"));
    }

    #[test]
    fn ids_are_unique_and_unknown_ones_are_named() {
        let mut ids: Vec<&str> = SPECS.iter().map(|s| s.id).collect();
        ids.dedup();
        assert_eq!(ids.len(), SPECS.len());
        assert!(spec("4.19").err().is_some_and(|e| e.to_string().contains("5.10-rt")));
    }

    /// A plain run boots what it always did; arm64 only when named.
    #[test]
    fn the_default_is_every_x86_64_kernel() {
        assert_eq!(default_ids(), ["5.10", "5.10-rt", "6.1", "6.1-rt", "6.1-cloud", "6.12", "6.12-trixie", "6.12-bpo"]);
        assert_eq!(ids_of(Arm64), ["6.1-arm64", "6.12-arm64"]);
        assert!(SPECS.iter().all(|s| s.name.1.ends_with(&format!("-{}-unsigned", s.arch.debian()))));
    }
}
