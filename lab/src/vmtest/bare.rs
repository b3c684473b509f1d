//! The bare binary's route, as docs/install.md tells it: in, the release's files (the static
//! binary, the unit, the configuration file, from target/dist) and the shell block that follows
//! `<!-- tested: bare install -->` in its "## The binary" section; out, that block run by the
//! guest's root in a chroot (files in its current folder, as a user has them after downloading),
//! with what it installed and the checks only the chroot can show. `systemd` then boots the root
//! and judges the unit with the .deb's checker.
//!
//! No systemd runs in the chroot, so `systemctl` there is a shim (`SYSTEMCTL`): it records each
//! call, and runs the root's own systemctl offline without `--now` (`enable` makes the
//! multi-user.target.wants link as on a booted machine; `daemon-reload`, `status` and the start
//! of `--now` need a running manager, and systemctl offline skips or refuses them). The boot that
//! follows is the start: the unit must come up from what the block left, and the calls show the
//! block reloads systemd and starts the unit on a running machine.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use super::arch::elf_kind;
use super::checks::Check;
use super::deb_checks::{Installed, UNIT};

/// What marks the tested block in docs/install.md.
pub const MARKER: &str = "<!-- tested: bare install -->";
/// The section it is in.
const SECTION: &str = "## The binary";
/// Where the unit's ExecStart points (deploy/systemd's unit).
const BINARY: &str = "usr/local/bin/latency-daemon";
/// The block's current folder inside the root: where the release's files are.
const FOLDER: &str = "root/release";
const SCRIPT: &str = "tmp/vmtest-bare-install.sh";
const CALLS: &str = "tmp/vmtest-systemctl.calls";
/// Before /usr/bin and /bin in the chroot's PATH.
const SHIM: &str = "usr/local/sbin/systemctl";
const SYSTEMCTL: &str = r#"#!/bin/sh
# vmtest's systemctl in the chroot (lab/src/vmtest/bare.rs): records the call, then the root's own
# systemctl offline, without --now (no manager runs here; the boot starts what is enabled).
echo "$*" >> /tmp/vmtest-systemctl.calls
for arg do
  shift
  [ "$arg" = --now ] || set -- "$@" "$arg"
done
SYSTEMD_OFFLINE=1 exec /bin/systemctl "$@"
"#;

/// The release's files the block installs, by their names in target/dist.
#[derive(Debug, Clone)]
pub struct Release {
    /// The x86_64 static binary (`latency-daemon-<version>-x86_64-linux-musl`).
    pub binary: PathBuf,
    /// `latency-daemon.service` and `latency-daemon.toml`.
    pub others: Vec<PathBuf>,
    /// docs/install.md.
    pub docs: PathBuf,
}

/// The shell block after `MARKER` in `markdown`'s "## The binary" section.
pub fn block(markdown: &str) -> anyhow::Result<String> {
    let start =
        markdown.lines().position(|l| l.trim_end() == SECTION).with_context(|| format!("no `{SECTION}` section"))?;
    let section: Vec<&str> = markdown.lines().skip(start + 1).take_while(|l| !l.starts_with("## ")).collect();
    let marker = section
        .iter()
        .position(|l| l.trim() == MARKER)
        .with_context(|| format!("`{SECTION}` has no `{MARKER}` line before its shell block"))?;
    let mut rest = section[marker + 1..].iter().skip_while(|l| l.trim().is_empty());
    if rest.next().map(|l| l.trim_end()) != Some("```sh") {
        bail!("`{MARKER}` is not followed by a ```sh block");
    }
    let lines: Vec<&str> = rest.by_ref().take_while(|l| l.trim_end() != "```").copied().collect();
    if lines.iter().all(|l| l.trim().is_empty()) {
        bail!("the block after `{MARKER}` is empty or never closed");
    }
    Ok(lines.join("\n") + "\n")
}

/// Copies the release's files into the root's `FOLDER` (not executable, as downloaded), runs the
/// docs' block there chrooted under `sh -e` (the first failing line fails it) with the
/// `systemctl` shim, and removes what only the run needed.
pub fn install(root: &Path, release: &Release) -> anyhow::Result<Installed> {
    let docs = std::fs::read_to_string(&release.docs).with_context(|| format!("reading {}", release.docs.display()))?;
    let block = block(&docs).with_context(|| format!("{}: the bare install's block", release.docs.display()))?;
    let folder = root.join(FOLDER);
    std::fs::create_dir_all(&folder).with_context(|| format!("creating {}", folder.display()))?;
    for file in std::iter::once(&release.binary).chain(&release.others) {
        let name = file.file_name().with_context(|| format!("{} names no file", file.display()))?;
        let to = folder.join(name);
        std::fs::copy(file, &to).with_context(|| format!("copying {} into the root", file.display()))?;
        std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    }
    let write = |path: &str, text: &str, mode: u32| -> anyhow::Result<()> {
        let path = root.join(path);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .with_context(|| format!("chmod {}", path.display()))
    };
    write(SCRIPT, &block, 0o644)?;
    write(SHIM, SYSTEMCTL, 0o755)?;
    let mut sh = Command::new("chroot");
    sh.arg(root)
        // `-x`: each command before what it printed, in the report.
        .args(["/bin/sh", "-c", &format!("cd /{FOLDER} && exec /bin/sh -ex /{SCRIPT} 2>&1")])
        .env_clear()
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .env("HOME", "/root")
        .env("LANG", "C.UTF-8");
    let out = sh.output().context("running the docs' block chrooted")?;
    let mut log: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
    log.extend(String::from_utf8_lossy(&out.stderr).lines().map(str::to_owned));
    let calls: Vec<String> =
        std::fs::read_to_string(root.join(CALLS)).unwrap_or_default().lines().map(str::to_owned).collect();
    for path in [SCRIPT, SHIM, CALLS] {
        let _ = std::fs::remove_file(root.join(path));
    }
    std::fs::remove_dir_all(&folder).with_context(|| format!("removing {}", folder.display()))?;

    let sha256 = crate::package::sha256_file(&release.binary)?;
    let bytes = std::fs::read(&release.binary).with_context(|| format!("reading {}", release.binary.display()))?;
    let installed = root.join(BINARY);
    let placed = installed.is_file() && crate::package::sha256_file(&installed)? == sha256;
    let enabled = root.join("etc/systemd/system/multi-user.target.wants").join(UNIT).is_symlink();
    let exit = out.status.code().map_or_else(|| out.status.to_string(), |c| format!("exit {c}"));
    let checks = vec![
        Check::new(
            "the docs' block ran",
            out.status.success(),
            format!("{} lines of docs/install.md's `{SECTION}`, chrooted under `sh -e`: {exit}", block.lines().count()),
        ),
        Check::new(
            "binary installed",
            placed,
            format!("/{BINARY} {}", if placed { "is target/dist's" } else { "is missing or not target/dist's" }),
        ),
        Check::new(
            "systemctl calls",
            reloads_and_starts(&calls),
            format!("`systemctl {}`", calls.join("`, `systemctl ")),
        ),
        Check::new("enabled by the block", enabled, format!("multi-user.target.wants/{UNIT}")),
    ];
    Ok(Installed {
        sha256,
        static_binary: elf_kind(&bytes).is_some_and(|(machine, dynamic)| machine == 62 && !dynamic),
        checks,
        log,
    })
}

/// The block reloads systemd, then enables and starts the unit.
fn reloads_and_starts(calls: &[String]) -> bool {
    let words = |c: &String| c.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let reload = calls.iter().position(|c| words(c) == ["daemon-reload"]);
    let start = calls.iter().position(|c| {
        let w = words(c);
        w.first().is_some_and(|v| v == "enable")
            && w.iter().any(|a| a == "--now")
            && w.iter().any(|a| a == "latency-daemon" || a == UNIT)
    });
    matches!((reload, start), (Some(r), Some(s)) if r < s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCS: &str = "# Installing\n\n## The binary\n\nSome words.\n\n<!-- tested: bare install -->\n```sh\n\
        install -m 0755 a /usr/local/bin/latency-daemon\nsystemctl daemon-reload\n```\n\nMore.\n\n## Next\n";

    #[test]
    fn the_marked_block_of_the_section() {
        assert_eq!(
            block(DOCS).unwrap_or_else(|e| panic!("{e:#}")),
            "install -m 0755 a /usr/local/bin/latency-daemon\nsystemctl daemon-reload\n"
        );
        let unmarked = DOCS.replace(MARKER, "");
        let err = format!("{:#}", block(&unmarked).err().unwrap_or_else(|| panic!("an unmarked block was taken")));
        assert!(err.contains("no `<!-- tested: bare install -->`"), "{err}");
        // A marker in another section does not count.
        let elsewhere = DOCS.replace(MARKER, "").replace("## Next\n", &format!("## Next\n{MARKER}\n```sh\nx\n```\n"));
        assert!(block(&elsewhere).is_err());
        assert!(block(&DOCS.replace("```sh", "```")).is_err());
        assert!(block(&DOCS.replace("## The binary", "## A binary")).is_err());
    }

    /// docs/install.md has the block, and it installs the three release files where the unit
    /// and the checker expect them.
    #[test]
    fn the_docs_have_the_block() {
        let path = crate::workspace_root().join("docs/install.md");
        let docs = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let block = block(&docs).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        for wanted in ["/usr/local/bin/latency-daemon", "/etc/latency-daemon.toml", "/etc/systemd/system/"] {
            assert!(block.contains(wanted), "the block installs nothing to {wanted}:\n{block}");
        }
    }

    #[test]
    fn calls_must_reload_then_enable_and_start() {
        let calls = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(reloads_and_starts(&calls(&["daemon-reload", "enable --now latency-daemon", "status latency-daemon"])));
        assert!(reloads_and_starts(&calls(&["daemon-reload", "enable latency-daemon.service --now"])));
        assert!(!reloads_and_starts(&calls(&["daemon-reload", "enable latency-daemon"])));
        assert!(!reloads_and_starts(&calls(&["enable --now latency-daemon"])));
        assert!(!reloads_and_starts(&calls(&["enable --now latency-daemon", "daemon-reload"])));
        assert!(!reloads_and_starts(&calls(&["daemon-reload", "enable --now other"])));
    }
}
