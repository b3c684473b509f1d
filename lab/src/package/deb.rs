//! The Debian package: in, a `latency-daemon` binary, the release's facts, its SBOM, the man
//! pages and completions (`manual`'s tree) and the repository's files (the systemd unit, the example configuration, the docs, deploy/debian/'s
//! maintainer scripts, copyright and lintian overrides); out, `latency-daemon_<version>-1_<arch>.deb`
//! built by `dpkg-deb --root-owner-group --build`, and readers of a built one for the checks.
//!
//! What goes where:
//!
//! | file | from |
//! |---|---|
//! | /usr/bin/latency-daemon | the binary, byte for byte (its SHA-256 is the SBOM's) |
//! | /etc/latency-daemon.toml (conffile) | deploy/latency-daemon.toml: what the unit's `--config` reads |
//! | /usr/lib/systemd/system/latency-daemon.service | deploy/systemd/, `ExecStart` moved from /usr/local/bin to /usr/bin, `Documentation=` the man page |
//! | /usr/share/man/man8/latency-daemon.8.gz, latency-daemon-<command>.8.gz | `manual`: the CLI's own, and deploy/debian/latency-daemon.8.in |
//! | /usr/share/bash-completion/completions/latency-daemon, /usr/share/zsh/vendor-completions/_latency-daemon, /usr/share/fish/vendor_completions.d/latency-daemon.fish | `manual`: the CLI's own |
//! | /usr/share/doc/latency-daemon/ | copyright, changelog.Debian.gz, changelog.gz (CHANGELOG.md), README, SECURITY, docs/*.md, the SBOM |
//! | /usr/share/lintian/overrides/latency-daemon | deploy/debian/lintian-overrides, each with its reason |
//! | DEBIAN/{postinst,prerm,postrm} | deploy/debian/: deb-systemd-helper / deb-systemd-invoke |
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use super::{Binary, Release};
use crate::{cmd, guard::Scratch};

/// The package's name, the unit's and the binary's.
pub const PACKAGE: &str = "latency-daemon";
/// The Debian revision of every package we build from an upstream version.
pub const REVISION: &str = "1";
/// Where the unit's `ExecStart` finds the binary in the repository's unit, and where the package puts it.
const UNIT_BINARY: (&str, &str) = ("/usr/local/bin/latency-daemon", "/usr/bin/latency-daemon");
/// The conffile: the path the unit's `ExecStart` passes to `--config`.
pub const CONFFILE: &str = "/etc/latency-daemon.toml";
pub const UNIT: &str = "/usr/lib/systemd/system/latency-daemon.service";
const DOC: &str = "usr/share/doc/latency-daemon";
pub const MAN_PAGE: &str = "/usr/share/man/man8/latency-daemon.8.gz";
/// The SBOM's name in the doc directory (the copyright file points there).
pub const SBOM_NAME: &str = "latency-daemon.cdx.json";

/// The package's file name for `release` on `arch` (`latency-daemon_0.1.0-1_amd64.deb`).
pub fn file_name(release: &Release, arch: super::Arch) -> String {
    format!("{PACKAGE}_{}-{REVISION}_{}.deb", release.version, arch.debian())
}

/// Builds the .deb of `binary` into `out_dir`, with `sbom` (that binary's CycloneDX file) among
/// its docs and `manual` (the tree `manual::write` made) installed; the repository's files come
/// from `root`. Out: the .deb's path.
pub fn build(
    out_dir: &Path,
    binary: &Binary,
    release: &Release,
    sbom: &Path,
    root: &Path,
    manual: &Path,
) -> anyhow::Result<PathBuf> {
    let scratch = Scratch::new("runqlat-deb")?;
    let tree = scratch.join("tree");
    let put = |path: &str, bytes: &[u8], mode: u32| write(&tree, path, bytes, mode);
    let read = |path: &str| std::fs::read(root.join(path)).with_context(|| format!("reading {path}"));

    let binary_bytes = std::fs::read(&binary.path).with_context(|| format!("reading {}", binary.path.display()))?;
    put(UNIT_BINARY.1, &binary_bytes, 0o755)?;
    put(CONFFILE, &read("deploy/latency-daemon.toml")?, 0o644)?;
    put(UNIT, unit(&String::from_utf8(read("deploy/systemd/latency-daemon.service")?)?)?.as_bytes(), 0o644)?;
    for (file, installed) in super::manual::files(manual)? {
        let bytes =
            std::fs::read(manual.join(&file)).with_context(|| format!("reading {}", manual.join(&file).display()))?;
        let bytes = if installed.ends_with(".gz") { super::gzip_bytes(&bytes)? } else { bytes };
        put(&installed, &bytes, 0o644)?;
    }
    put(&format!("/{DOC}/copyright"), &read("deploy/debian/copyright")?, 0o644)?;
    put(&format!("/{DOC}/changelog.Debian.gz"), &super::gzip_bytes(changelog(release).as_bytes())?, 0o644)?;
    put(&format!("/{DOC}/changelog.gz"), &super::gzip_bytes(&read("CHANGELOG.md")?)?, 0o644)?;
    for doc in ["README.md", "SECURITY.md"] {
        put(&format!("/{DOC}/{doc}.gz"), &super::gzip_bytes(&read(doc)?)?, 0o644)?;
    }
    for doc in markdown_docs(root)? {
        put(&format!("/{DOC}/docs/{doc}.gz"), &super::gzip_bytes(&read(&format!("docs/{doc}"))?)?, 0o644)?;
    }
    put(&format!("/{DOC}/{SBOM_NAME}"), &std::fs::read(sbom).context("reading the SBOM")?, 0o644)?;
    put("/usr/share/lintian/overrides/latency-daemon", &read("deploy/debian/lintian-overrides")?, 0o644)?;

    let installed_kib = installed_size(&tree)?;
    let md5sums = md5sums(&tree)?;
    for script in ["postinst", "prerm", "postrm"] {
        put(&format!("/DEBIAN/{script}"), &read(&format!("deploy/debian/{script}"))?, 0o755)?;
    }
    put("/DEBIAN/conffiles", format!("{CONFFILE}\n").as_bytes(), 0o644)?;
    put("/DEBIAN/md5sums", md5sums.as_bytes(), 0o644)?;
    put("/DEBIAN/control", control(release, binary.arch, installed_kib).as_bytes(), 0o644)?;
    super::touch_tree(&tree, release.epoch)?;

    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let deb = out_dir.join(file_name(release, binary.arch));
    let mut build = Command::new("dpkg-deb");
    build
        .args(["--root-owner-group", "-Zxz", "--build"])
        .arg(&tree)
        .arg(&deb)
        .env("SOURCE_DATE_EPOCH", release.epoch.to_string());
    cmd::stdout(&mut build)?;
    Ok(deb)
}

/// The repository's unit with `ExecStart` at the packaged binary, and the packaged man page as
/// its documentation.
fn unit(text: &str) -> anyhow::Result<String> {
    let (from, to) = UNIT_BINARY;
    let exec = format!("ExecStart={from} ");
    if text.lines().filter(|l| l.starts_with(&exec)).count() != 1 {
        bail!("the unit has no single `{exec}…` line to point at {to}");
    }
    let Some(description) = text.lines().find(|l| l.starts_with("Description=")) else {
        bail!("the unit has no Description= line");
    };
    let documented = format!("{description}\nDocumentation=man:latency-daemon(8)");
    Ok(text.replacen(&exec, &format!("ExecStart={to} "), 1).replacen(description, &documented, 1))
}

/// The Debian changelog: one entry for this build.
fn changelog(release: &Release) -> String {
    format!(
        "{PACKAGE} ({}-{REVISION}) unstable; urgency=medium\n\n  * Built from upstream commit {}.\n\n -- {}  {}\n",
        release.version,
        release.revision,
        release.maintainer,
        super::rfc2822(release.epoch)
    )
}

fn control(release: &Release, arch: super::Arch, installed_kib: u64) -> String {
    let homepage = release.source.as_deref().map(|s| format!("Homepage: {s}\n")).unwrap_or_default();
    format!(
        "Package: {PACKAGE}\n\
         Version: {}-{REVISION}\n\
         Architecture: {}\n\
         Maintainer: {}\n\
         Installed-Size: {installed_kib}\n\
         Section: admin\n\
         Priority: optional\n\
         {homepage}\
         Description: run-queue latency monitor (eBPF) with a Prometheus endpoint\n \
         latency-daemon measures how long runnable tasks wait for a CPU, with a kernel\n \
         program attached to the scheduler's tracepoints, and serves the delays as\n \
         Prometheus histograms per reason and per cgroup (with container and pod names),\n \
         with optional alerting.\n \
         .\n \
         The service runs as a dynamic user with CAP_BPF and CAP_PERFMON only, which it\n \
         drops once its programs are attached; it needs Linux 5.8 or later with BTF.\n \
         Its configuration is /etc/latency-daemon.toml.\n",
        release.version,
        arch.debian(),
        release.maintainer,
    )
}

/// docs/*.md, sorted.
fn markdown_docs(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .context("reading docs/")?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".md"))
        .collect();
    docs.sort();
    Ok(docs)
}

/// Writes `bytes` at `path` (absolute, as installed) under `tree` with `mode`; directories 0755.
fn write(tree: &Path, path: &str, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    let to = tree.join(path.trim_start_matches('/'));
    let mut dir = to.parent().context("a path with a parent")?.to_owned();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // Every directory up to the tree: the umask must not decide their modes.
    while dir.starts_with(tree) {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        if !dir.pop() {
            break;
        }
    }
    std::fs::write(&to, bytes).with_context(|| format!("writing {}", to.display()))?;
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", to.display()))
}

/// Installed-Size as dpkg-gencontrol counts it: KiB of each file, rounded up, plus one per directory.
fn installed_size(tree: &Path) -> anyhow::Result<u64> {
    let mut kib = 0;
    for entry in walk(tree)? {
        let meta = std::fs::symlink_metadata(&entry)?;
        kib += if meta.is_file() { meta.len().div_ceil(1024) } else { 1 };
    }
    Ok(kib)
}

/// `md5sum` of every file, relative to the tree, sorted (DEBIAN/md5sums).
fn md5sums(tree: &Path) -> anyhow::Result<String> {
    let mut files: Vec<PathBuf> = walk(tree)?.into_iter().filter(|p| p.is_file()).collect();
    files.sort();
    let mut md5 = Command::new("md5sum");
    md5.current_dir(tree).args(files.iter().map(|p| p.strip_prefix(tree).unwrap_or(p)));
    cmd::stdout(&mut md5)
}

/// Every path below `dir` (not `dir` itself), DEBIAN/ left out.
fn walk(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            if path.strip_prefix(dir).is_ok_and(|p| p.starts_with("DEBIAN")) {
                continue;
            }
            if path.is_dir() {
                pending.push(path.clone());
            }
            found.push(path);
        }
    }
    Ok(found)
}

/// A built package's control fields (`dpkg-deb --field`), continuation lines joined with `\n`.
pub fn fields(deb: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut c = Command::new("dpkg-deb");
    c.arg("--field").arg(deb);
    let text = cmd::stdout(&mut c)?;
    let mut fields = BTreeMap::new();
    let mut last: Option<String> = None;
    for line in text.lines() {
        if let (Some(name), Some(rest)) = (&last, line.strip_prefix(' ')) {
            if let Some(value) = fields.get_mut(name) {
                let value: &mut String = value;
                value.push('\n');
                value.push_str(rest);
            }
        } else if let Some((name, value)) = line.split_once(':') {
            fields.insert(name.to_owned(), value.trim().to_owned());
            last = Some(name.to_owned());
        }
    }
    Ok(fields)
}

/// One member of a built package's data (`dpkg-deb --contents`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `-rwxr-xr-x`, `drwxr-xr-x`.
    pub mode: String,
    /// `root/root`.
    pub owner: String,
    /// Absolute, without a trailing slash for directories (`/usr/bin`).
    pub path: String,
}

/// A built package's data members.
pub fn contents(deb: &Path) -> anyhow::Result<Vec<Entry>> {
    let mut c = Command::new("dpkg-deb");
    c.arg("--contents").arg(deb);
    let text = cmd::stdout(&mut c)?;
    text.lines()
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words[..] {
                [mode, owner, _size, _date, _time, path, ..] => Ok(Entry {
                    mode: mode.to_owned(),
                    owner: owner.to_owned(),
                    path: path.trim_start_matches('.').trim_end_matches('/').to_owned(),
                }),
                _ => bail!("dpkg-deb --contents: unexpected line {line:?}"),
            }
        })
        .filter(|e| e.as_ref().map_or(true, |e| !e.path.is_empty()))
        .collect()
}

/// A member of the package's control archive (`postinst`, `conffiles`).
pub fn control_file(deb: &Path, name: &str) -> anyhow::Result<String> {
    let mut c = Command::new("dpkg-deb");
    c.arg("--info").arg(deb).arg(name);
    cmd::stdout(&mut c)
}

/// lintian's tags for a built package (`E:`/`W:`/`I:`/`P:` lines; the package's own overrides
/// applied, as lintian does), whatever its exit status.
pub fn lintian(deb: &Path) -> anyhow::Result<Vec<String>> {
    let mut c = Command::new("lintian");
    c.args(["--display-info", "--pedantic", "--tag-display-limit", "0"]).arg(deb);
    let out = c.output().with_context(|| format!("could not start `{}` (apt-get install lintian)", cmd::show(&c)))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // Error, warning, info, pedantic, experimental; `N:` lines are notes, not tags.
    let tags: Vec<String> = text
        .lines()
        .filter(|l| ["E: ", "W: ", "I: ", "P: ", "X: "].iter().any(|k| l.starts_with(k)))
        .map(str::to_owned)
        .collect();
    // Non-zero with tags is a verdict (2: an error tag); non-zero without any is lintian failing.
    if !out.status.success() && tags.is_empty() {
        bail!("`{}` failed ({}): {}", cmd::show(&c), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(tags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_runs_the_packaged_binary() {
        let text = "[Unit]\nDescription=d\n[Service]\nExecStart=/usr/local/bin/latency-daemon run --config /c\n";
        assert_eq!(
            unit(text).unwrap_or_else(|e| panic!("{e:#}")),
            "[Unit]\nDescription=d\nDocumentation=man:latency-daemon(8)\n[Service]\nExecStart=/usr/bin/latency-daemon run --config /c\n"
        );
        assert!(unit("[Unit]\nDescription=d\n[Service]\nExecStart=/opt/x run\n").is_err());
    }

    #[test]
    fn the_shipped_unit_reads_the_conffile() {
        let root = crate::workspace_root();
        let text = std::fs::read_to_string(root.join("deploy/systemd/latency-daemon.service"))
            .unwrap_or_else(|e| panic!("{e}"));
        let packaged = unit(&text).unwrap_or_else(|e| panic!("{e:#}"));
        let exec = packaged.lines().find(|l| l.starts_with("ExecStart=")).unwrap_or_default();
        assert_eq!(exec, format!("ExecStart={} run --config {CONFFILE}", UNIT_BINARY.1));
    }
}
