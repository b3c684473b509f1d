//! Private apt configurations in our cache (never /etc/apt): in, the suites wanted and the host's
//! own Debian sources (for the mirror's address) and, for a foreign architecture's packages,
//! its name; out, `apt-get`/`apt-cache` commands that see those suites, index refreshes at most
//! once a day, and package versions by suite. Shared by vmtest's kernels and guests and by
//! xtask's setup (QEMU from backports, the cross tools, trixie's tools).
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail};

use crate::cmd;

/// Where kernels and apt indexes are kept between runs (never under target/, which `cargo
/// clean` empties): $XDG_CACHE_HOME/runqlat-vmtest, else /var/cache/runqlat-vmtest.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("runqlat-vmtest"),
        _ => PathBuf::from("/var/cache/runqlat-vmtest"),
    }
}

const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
/// Indexes older than this are refreshed before a lookup (a kernel ABI moves every few weeks).
const STALE: Duration = Duration::from_secs(24 * 3600);

/// One private apt setup: its own source list, lists and cache under `dir`.
#[derive(Debug, Clone)]
pub struct Apt {
    dir: PathBuf,
}

/// The host's mirrors, as its own apt sources name them: the archive and the security archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirrors {
    pub archive: String,
    pub security: String,
}

impl Mirrors {
    /// Finds the URIs that serve the host's release (`bookworm`) and its security suite in
    /// /etc/apt/sources.list and /etc/apt/sources.list.d (one-line and deb822 forms).
    pub fn of_host() -> anyhow::Result<Mirrors> {
        let release = std::fs::read_to_string("/etc/os-release").context("reading /etc/os-release")?;
        let codename = release
            .lines()
            .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
            .map(|c| c.trim_matches('"').to_owned())
            .context("/etc/os-release names no VERSION_CODENAME")?;
        let mut text = std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
        if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
            for entry in dir.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.ends_with(".list") || name.ends_with(".sources") {
                    text.push_str("\n\n");
                    text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
                }
            }
        }
        let sources = parse_sources(&text);
        let uri_of = |suite: &str| sources.iter().find(|(_, s)| s == suite).map(|(u, _)| u.clone());
        let security = format!("{codename}-security");
        match (uri_of(&codename), uri_of(&security)) {
            (Some(archive), Some(security)) => Ok(Mirrors { archive, security }),
            _ => bail!("the host's apt sources name no Debian archive for {codename} and {security}"),
        }
    }
}

/// (URI, suite) pairs of every `deb` source in one-line or deb822 form.
pub fn parse_sources(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for line in text.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("deb ") else { continue };
        let rest = match rest.trim_start().strip_prefix('[') {
            Some(options) => options.split_once(']').map_or("", |(_, after)| after),
            None => rest,
        };
        let mut words = rest.split_whitespace();
        if let (Some(uri), Some(suite)) = (words.next(), words.next()) {
            found.push((uri.trim_end_matches('/').to_owned(), suite.to_owned()));
        }
    }
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(':'))).map(str::trim)
        };
        if field("Types").is_some_and(|t| t.split_whitespace().any(|t| t == "deb"))
            && let (Some(uris), Some(suites)) = (field("URIs"), field("Suites"))
        {
            for uri in uris.split_whitespace() {
                for suite in suites.split_whitespace() {
                    found.push((uri.trim_end_matches('/').to_owned(), suite.to_owned()));
                }
            }
        }
    }
    found
}

/// A suite and the mirror that serves it.
pub fn source_line(uri: &str, suite: &str) -> String {
    format!("deb [signed-by={KEYRING}] {uri} {suite} main\n")
}

impl Apt {
    /// Writes (or rewrites) the configuration under `dir` for these `deb` lines.
    pub fn new(dir: &Path, lines: &[String]) -> anyhow::Result<Apt> {
        Apt::configure(dir, lines, None)
    }

    /// The same for another architecture's packages (Debian's name, `arm64`): its indexes and
    /// downloads only, never installed, and the host's dpkg is not told about it.
    pub fn for_arch(dir: &Path, lines: &[String], arch: &str) -> anyhow::Result<Apt> {
        Apt::configure(dir, lines, Some(arch))
    }

    fn configure(dir: &Path, lines: &[String], arch: Option<&str>) -> anyhow::Result<Apt> {
        for sub in ["lists/partial", "cache/archives/partial", "sources.list.d"] {
            std::fs::create_dir_all(dir.join(sub)).with_context(|| format!("creating {}", dir.join(sub).display()))?;
        }
        let list = dir.join("sources.list");
        let body = lines.concat();
        if std::fs::read_to_string(&list).ok().as_deref() != Some(body.as_str()) {
            std::fs::write(&list, &body).with_context(|| format!("writing {}", list.display()))?;
            // New suites: the old indexes do not cover them.
            let _ = std::fs::remove_file(dir.join("lists/updated"));
        }
        let d = dir.display();
        let mut conf = format!(
            "Dir::Etc::SourceList \"{d}/sources.list\";\nDir::Etc::SourceParts \"{d}/sources.list.d\";\n\
             Dir::State::Lists \"{d}/lists\";\nDir::Cache \"{d}/cache\";\nAcquire::Languages \"none\";\n\
             APT::Sandbox::User \"root\";\n"
        );
        if let Some(arch) = arch {
            conf.push_str(&format!("APT::Architecture \"{arch}\";\nAPT::Architectures {{ \"{arch}\"; }};\n"));
        }
        let path = dir.join("apt.conf");
        std::fs::write(&path, conf).with_context(|| format!("writing {}", path.display()))?;
        Ok(Apt { dir: dir.to_owned() })
    }

    /// `program` (apt-get, apt-cache) reading this configuration.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env("APT_CONFIG", self.dir.join("apt.conf"));
        command
    }

    /// `apt-get update` unless the indexes are less than a day old; `force` refreshes anyway.
    pub fn update(&self, force: bool) -> anyhow::Result<()> {
        let stamp = self.dir.join("lists/updated");
        let age = std::fs::metadata(&stamp).and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
        if !force && age.is_some_and(|age| age < STALE) {
            return Ok(());
        }
        let mut update = self.command("apt-get");
        update.args(["-q", "update"]);
        println!("vmtest: $ {}", cmd::show(&update));
        cmd::stdout(&mut update)?;
        std::fs::write(&stamp, format!("{:?}\n", SystemTime::now())).context("stamping the apt indexes")?;
        Ok(())
    }

    /// Every (package, version, suite) whose name matches the regular expression `names`.
    pub fn versions(&self, names: &str) -> anyhow::Result<Vec<(String, String, String)>> {
        let mut search = self.command("apt-cache");
        search.args(["search", "--names-only", names]);
        let found: Vec<String> =
            cmd::stdout(&mut search)?.lines().filter_map(|l| l.split(" - ").next()).map(str::to_owned).collect();
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let mut madison = self.command("apt-cache");
        madison.arg("madison").args(&found);
        Ok(parse_madison(&cmd::stdout(&mut madison)?))
    }

    /// `apt-get download package=version` into `dir`; returns the .deb's path.
    pub fn download(&self, package: &str, version: &str, dir: &Path) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut download = self.command("apt-get");
        download.current_dir(dir).args(["-q", "download", &format!("{package}={version}")]);
        println!("vmtest: $ {}", cmd::show(&download));
        cmd::stdout(&mut download)?;
        let prefix = format!("{package}_");
        let deb = std::fs::read_dir(dir)?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                name.starts_with(&prefix) && name.ends_with(".deb")
            })
            .with_context(|| format!("apt-get download left no {prefix}*.deb in {}", dir.display()))?;
        Ok(deb)
    }
}

/// `apt-cache madison` lines (`name | version | uri suite/main amd64 Packages`) → (name,
/// version, suite).
pub fn parse_madison(text: &str) -> Vec<(String, String, String)> {
    text.lines()
        .filter_map(|line| {
            let mut cols = line.split('|').map(str::trim);
            let (name, version, source) = (cols.next()?, cols.next()?, cols.next()?);
            let suite = source.split_whitespace().nth(1)?.split('/').next()?;
            source.ends_with("Packages").then(|| (name.to_owned(), version.to_owned(), suite.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_in_both_forms() {
        let text = "deb [signed-by=/k.gpg arch=amd64] http://m/debian/ bookworm main\n# deb http://x y z\n\n\
                    Types: deb\nURIs: http://m/debian-security\nSuites: bookworm-security other\nComponents: main\n\n\
                    Types: deb-src\nURIs: http://src\nSuites: bookworm\n";
        assert_eq!(
            parse_sources(text),
            [
                ("http://m/debian".to_owned(), "bookworm".to_owned()),
                ("http://m/debian-security".to_owned(), "bookworm-security".to_owned()),
                ("http://m/debian-security".to_owned(), "other".to_owned()),
            ]
        );
    }

    #[test]
    fn madison_rows_carry_their_suite() {
        let text = " linux-image-6.12.95+deb12-amd64-unsigned | 6.12.95-1~bpo12+1 | http://m/debian bookworm-backports/main amd64 Packages\n\
                     linux-image-5.10.0-46-amd64-unsigned | 5.10.262-1 | http://m/debian-security bullseye-security/main amd64 Packages\n\
                     linux-signed | 1.0 | http://m/debian bookworm/main Sources\n";
        let rows = parse_madison(text);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].1, "6.12.95-1~bpo12+1");
        assert_eq!(rows[0].2, "bookworm-backports");
        assert_eq!(rows[1].2, "bullseye-security");
    }
}
