//! Prometheus 2.53 for the tests that compare Prometheus versions (Debian 12's is 2.42, in
//! /usr/bin). In: Debian trixie's `prometheus` package, fetched through a private apt
//! configuration (never /etc/apt); out: its files unpacked with `dpkg -x` under
//! /var/cache/runqlat-tools/prometheus-trixie (never installed, so 2.42 stays the system's).
use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, bail};
use latency_lab::services::prometheus_trixie;
use latency_lab::vmtest::{Apt, Mirrors, source_line};

use super::Check;
use crate::cmd;

/// The private apt configuration (sources, indexes, downloaded .deb files).
const APT_DIR: &str = "/var/cache/runqlat-tools/apt-trixie";
const SUITE: &str = "trixie";
/// The release the tests expect (the last 2.x with `scrape_classic_histograms`).
const WANT: &str = "2.53.";

#[derive(Debug)]
pub struct PrometheusTrixie;

impl Check for PrometheusTrixie {
    fn name(&self) -> &'static str {
        "Prometheus 2.53 (trixie, unpacked)"
    }
    fn doing(&self) -> &'static str {
        "downloading"
    }
    /// The binary and the version file written after a complete unpack.
    fn is_done(&self) -> anyhow::Result<bool> {
        let version = std::fs::read_to_string(prometheus_trixie::version_file()).unwrap_or_default();
        Ok(version.starts_with(WANT) && prometheus_trixie::binary().is_file())
    }
    fn do_it(&self) -> anyhow::Result<()> {
        let mirrors = Mirrors::of_host()?;
        let apt = Apt::new(Path::new(APT_DIR), &[source_line(&mirrors.archive, SUITE)])?;
        apt.update(false)?;
        let version = apt
            .versions("^prometheus$")?
            .into_iter()
            .find(|(name, version, suite)| name == "prometheus" && suite == SUITE && version.starts_with(WANT))
            .map(|(_, version, _)| version)
            .with_context(|| format!("{SUITE} has no prometheus {WANT}x"))?;
        let debs = Path::new(APT_DIR).join("debs");
        // A previous run's .deb of another version would be found first.
        let _ = std::fs::remove_dir_all(&debs);
        let deb = apt.download("prometheus", &version, &debs)?;
        // Unpack beside the final directory, then swap it in: a half-unpacked tree never counts.
        let dir = prometheus_trixie::dir();
        let partial = dir.with_extension("partial");
        let _ = std::fs::remove_dir_all(&partial);
        let mut unpack = Command::new("dpkg");
        unpack.arg("-x").arg(&deb).arg(&partial);
        println!("  $ {}", cmd::show(&unpack));
        cmd::run(&mut unpack)?;
        if !partial.join("usr/bin/prometheus").is_file() {
            bail!("{} holds no usr/bin/prometheus", deb.display());
        }
        std::fs::write(partial.join("VERSION"), format!("{version}\n")).context("writing VERSION")?;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&partial, &dir).with_context(|| format!("moving {} into place", partial.display()))?;
        Ok(())
    }
}
