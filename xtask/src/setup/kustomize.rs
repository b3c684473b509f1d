//! kustomize 5.6 for the manifest tests (Debian 12 has none; kubectl's built-in one would need a
//! kubectl). In: Debian trixie's `kustomize` package, fetched through a private apt configuration
//! (never /etc/apt); out: its files unpacked with `dpkg -x` under /var/cache/runqlat-tools/kustomize
//! (never installed), with a VERSION file written last.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use latency_lab::vmtest::{Apt, Mirrors, source_line};

use super::Check;
use crate::cmd;

/// The private apt configuration: the same directory and sources as the Prometheus 2.53 check
/// (one set of trixie indexes), but its own download directory.
const APT_DIR: &str = "/var/cache/runqlat-tools/apt-trixie";
const SUITE: &str = "trixie";
/// The release the tests were written against.
const WANT: &str = "5.6.";
const DIR: &str = "/var/cache/runqlat-tools/kustomize";

/// The unpacked kustomize binary.
pub fn binary() -> PathBuf {
    Path::new(DIR).join("usr/bin/kustomize")
}

fn version_file() -> PathBuf {
    Path::new(DIR).join("VERSION")
}

#[derive(Debug)]
pub struct Kustomize;

impl Check for Kustomize {
    fn name(&self) -> &'static str {
        "kustomize 5.6 (trixie, unpacked)"
    }
    fn doing(&self) -> &'static str {
        "downloading"
    }
    fn is_done(&self) -> anyhow::Result<bool> {
        let version = std::fs::read_to_string(version_file()).unwrap_or_default();
        Ok(version.starts_with(WANT) && binary().is_file())
    }
    fn do_it(&self) -> anyhow::Result<()> {
        let mirrors = Mirrors::of_host()?;
        let apt = Apt::new(Path::new(APT_DIR), &[source_line(&mirrors.archive, SUITE)])?;
        apt.update(false)?;
        let version = apt
            .versions("^kustomize$")?
            .into_iter()
            .find(|(name, version, suite)| name == "kustomize" && suite == SUITE && upstream(version).starts_with(WANT))
            .map(|(_, version, _)| version)
            .with_context(|| format!("{SUITE} has no kustomize {WANT}x"))?;
        let debs = Path::new(APT_DIR).join("debs-kustomize");
        // A previous run's .deb of another version would be found first.
        let _ = std::fs::remove_dir_all(&debs);
        let deb = apt.download("kustomize", &version, &debs)?;
        // Unpack beside the final directory, then swap it in: a half-unpacked tree never counts.
        let dir = Path::new(DIR);
        let partial = dir.with_extension("partial");
        let _ = std::fs::remove_dir_all(&partial);
        let mut unpack = Command::new("dpkg");
        unpack.arg("-x").arg(&deb).arg(&partial);
        println!("  $ {}", cmd::show(&unpack));
        cmd::run(&mut unpack)?;
        if !partial.join("usr/bin/kustomize").is_file() {
            bail!("{} holds no usr/bin/kustomize", deb.display());
        }
        std::fs::write(partial.join("VERSION"), format!("{}\n", upstream(&version))).context("writing VERSION")?;
        let _ = std::fs::remove_dir_all(dir);
        std::fs::rename(&partial, dir).with_context(|| format!("moving {} into place", partial.display()))?;
        Ok(())
    }
}

/// `5.6.0-1+b2` → `5.6.0`; an epoch goes too.
fn upstream(version: &str) -> &str {
    let version = version.split_once(':').map_or(version, |(_, v)| v);
    version.rsplit_once('-').map_or(version, |(v, _)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debian_versions_to_upstream() {
        assert_eq!(upstream("5.6.0-1+b2"), "5.6.0");
        assert_eq!(upstream("1:5.6.0-1"), "5.6.0");
        assert_eq!(upstream("5.6.0"), "5.6.0");
    }
}
