//! Tools the tests need in newer versions than Debian 12 ships: in, a package of Debian trixie,
//! fetched through a private apt configuration (never /etc/apt); out, its files unpacked with
//! `dpkg -x` under /var/cache/runqlat-tools/<name> (never installed, so the system's own
//! versions stay), with a VERSION file written last.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use latency_lab::apt::{Apt, Mirrors, source_line};

use super::Check;
use crate::cmd;

/// The private apt configuration: one set of trixie indexes for every package below.
const APT_DIR: &str = "/var/cache/runqlat-tools/apt-trixie";
const SUITE: &str = "trixie";

/// One trixie package, unpacked.
#[derive(Debug)]
pub struct Unpacked {
    /// Shown by setup.
    pub name: &'static str,
    pub package: &'static str,
    /// The upstream release the tests were written against (a prefix, e.g. `2.53.`).
    pub want: &'static str,
    /// Where it is unpacked.
    pub dir: &'static str,
    /// The binary, relative to `dir`, that must be there.
    pub binary: &'static str,
}

/// Prometheus 2.53, for the tests that compare Prometheus versions (Debian 12's is 2.42, in
/// /usr/bin): the last 2.x with `scrape_classic_histograms`. Where the lab looks for it.
pub const PROMETHEUS: Unpacked = Unpacked {
    name: "Prometheus 2.53 (trixie, unpacked)",
    package: "prometheus",
    want: "2.53.",
    dir: "/var/cache/runqlat-tools/prometheus-trixie",
    binary: "usr/bin/prometheus",
};

/// kustomize 5.6 for the manifest tests (Debian 12 has none; kubectl's built-in one would need a
/// kubectl).
pub const KUSTOMIZE: Unpacked = Unpacked {
    name: "kustomize 5.6 (trixie, unpacked)",
    package: "kustomize",
    want: "5.6.",
    dir: "/var/cache/runqlat-tools/kustomize",
    binary: "usr/bin/kustomize",
};

/// VictoriaMetrics 1.112 for the OTLP push tests: a second OTLP receiver (victoria-metrics) and
/// an OTLP gateway into Prometheus's remote-write receiver (vmagent, in the same package), since
/// Debian builds Prometheus without its own OTLP receiver.
pub const VICTORIA_METRICS: Unpacked = Unpacked {
    name: "VictoriaMetrics 1.112 (trixie, unpacked)",
    package: "victoria-metrics",
    want: "1.112.",
    dir: "/var/cache/runqlat-tools/victoria-metrics",
    binary: "usr/bin/victoria-metrics",
};

impl Unpacked {
    pub fn binary(&self) -> PathBuf {
        Path::new(self.dir).join(self.binary)
    }

    fn version_file(&self) -> PathBuf {
        Path::new(self.dir).join("VERSION")
    }
}

impl Check for Unpacked {
    fn name(&self) -> &'static str {
        self.name
    }
    fn doing(&self) -> &'static str {
        "downloading"
    }
    /// The binary, and the version file written after a complete unpack.
    fn is_done(&self) -> anyhow::Result<bool> {
        let version = std::fs::read_to_string(self.version_file()).unwrap_or_default();
        Ok(version.starts_with(self.want) && self.binary().is_file())
    }
    fn do_it(&self) -> anyhow::Result<()> {
        let mirrors = Mirrors::of_host()?;
        let apt = Apt::new(Path::new(APT_DIR), &[source_line(&mirrors.archive, SUITE)])?;
        apt.update(false)?;
        let version = apt
            .versions(&format!("^{}$", self.package))?
            .into_iter()
            .find(|(name, version, suite)| {
                name == self.package && suite == SUITE && upstream(version).starts_with(self.want)
            })
            .map(|(_, version, _)| version)
            .with_context(|| format!("{SUITE} has no {} {}x", self.package, self.want))?;
        let debs = Path::new(APT_DIR).join(format!("debs-{}", self.package));
        // A previous run's .deb of another version would be found first.
        let _ = std::fs::remove_dir_all(&debs);
        let deb = apt.download(self.package, &version, &debs)?;
        // Unpack beside the final directory, then swap it in: a half-unpacked tree never counts.
        let dir = Path::new(self.dir);
        let partial = dir.with_extension("partial");
        let _ = std::fs::remove_dir_all(&partial);
        let mut unpack = Command::new("dpkg");
        unpack.arg("-x").arg(&deb).arg(&partial);
        println!("  $ {}", cmd::show(&unpack));
        cmd::run(&mut unpack)?;
        if !partial.join(self.binary).is_file() {
            bail!("{} holds no {}", deb.display(), self.binary);
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
        assert_eq!(upstream("2.53.3+ds1-2"), "2.53.3+ds1");
        assert_eq!(upstream("5.6.0"), "5.6.0");
    }

    #[test]
    fn the_lab_looks_where_prometheus_is_unpacked() {
        assert_eq!(PROMETHEUS.binary(), latency_lab::services::prometheus_trixie::binary());
        assert_eq!(VICTORIA_METRICS.binary(), latency_lab::services::victoria::binary());
    }
}
