//! A real Prometheus server on loopback, scraping a target every second: in, which Prometheus
//! (Debian 12's 2.42, or 2.53 from Debian trixie) with which feature flags, and the target's
//! address; out, its HTTP API for queries. Stopped, and its data removed, when dropped.
//!
//! `start_shipped` runs what a user deploys: deploy/prometheus/scrape.yml (its one job
//! `latency-daemon`, pointed at the target, every second) and the rules the mixin generates
//! (deploy/prometheus/rules.yml), evaluated every second. Which histogram forms it stores
//! depends on the `Setup`: classic buckets only (2.42 at its defaults: OpenMetrics), the native
//! histogram only (2.42 with native histograms: protobuf), or both (2.53 with native histograms
//! and the job's `scrape_classic_histograms: true`).
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::{prometheus_trixie, serve};
use crate::guard::Proc;
use crate::guard::Scratch;
use crate::web;

/// Which Prometheus binary, with which flags, and whether the shipped job keeps the classic
/// buckets beside the native histogram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    pub binary: PathBuf,
    /// `--enable-feature=native-histograms`: Prometheus asks for protobuf and stores native
    /// histograms.
    pub native_histograms: bool,
    /// Uncomment the shipped job's `scrape_classic_histograms: true` (2.45 and later).
    pub classic_too: bool,
    /// Further `--enable-feature` values, e.g. `exemplar-storage`, `otlp-write-receiver` (2.47+).
    pub features: Vec<&'static str>,
}

impl Setup {
    /// Debian 12's Prometheus 2.42 at its defaults: no feature flags, so it negotiates
    /// OpenMetrics and stores the classic buckets only.
    pub fn debian() -> Setup {
        Setup {
            binary: PathBuf::from("prometheus"),
            native_histograms: false,
            classic_too: false,
            features: Vec::new(),
        }
    }

    /// Debian 12's 2.42 with native histograms: protobuf, the native form only.
    pub fn debian_native() -> Setup {
        Setup { native_histograms: true, ..Setup::debian() }
    }

    /// Prometheus 2.53 (Debian trixie's, unpacked by `cargo xtask setup`) with native histograms
    /// and `scrape_classic_histograms: true`: both forms from one scrape.
    pub fn trixie_both() -> Setup {
        Setup { binary: prometheus_trixie::binary(), native_histograms: true, classic_too: true, features: Vec::new() }
    }

    /// The same with further feature flags.
    pub fn with_features(self, features: &[&'static str]) -> Setup {
        Setup { features: [self.features, features.to_vec()].concat(), ..self }
    }

    /// What the histograms are stored as, for messages.
    pub fn describe(&self) -> String {
        let stores = match (self.native_histograms, self.classic_too) {
            (false, _) => "classic only",
            (true, false) => "native only",
            (true, true) => "native and classic",
        };
        let features =
            if self.features.is_empty() { String::new() } else { format!(", features {}", self.features.join(",")) };
        format!("{} ({stores}{features})", self.binary.display())
    }

    fn flags(&self) -> Vec<String> {
        let mut features = self.features.clone();
        if self.native_histograms {
            features.insert(0, "native-histograms");
        }
        if features.is_empty() { Vec::new() } else { vec![format!("--enable-feature={}", features.join(","))] }
    }
}

#[derive(Debug)]
pub struct Prometheus {
    // Stopped before its directory goes.
    _proc: Proc,
    pub addr: String,
    _dir: Scratch,
}

impl Prometheus {
    /// Prometheus 2.42 with native histograms, scraping with one job given as YAML (a
    /// `- job_name: …` list item, indented by two spaces), every second: e.g. over TLS with basic
    /// auth.
    pub fn start_job(job: &str) -> anyhow::Result<Prometheus> {
        let dir = Scratch::new("runqlat-prom")?;
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n{job}"),
        )
        .with_context(|| format!("writing {}", config.display()))?;
        Prometheus::launch(&Setup::debian_native(), dir, &config)
    }

    /// Prometheus as `setup` says, with the shipped scrape configuration and rules, scraping
    /// `target` every second.
    pub fn start_shipped(setup: &Setup, target: &str) -> anyhow::Result<Prometheus> {
        let deploy = crate::workspace_root().join("deploy/prometheus");
        let scrape_file = deploy.join("scrape.yml");
        let scrape = std::fs::read_to_string(&scrape_file).with_context(|| format!("{}", scrape_file.display()))?;
        let scrape = shipped_for(&scrape, target, setup.classic_too)?;
        let dir = Scratch::new("runqlat-prom")?;
        let config = dir.path().join("prometheus.yml");
        let rules = deploy.join("rules.yml");
        std::fs::write(
            &config,
            format!("global:\n  evaluation_interval: 1s\nrule_files:\n  - '{}'\n{scrape}", rules.display()),
        )
        .with_context(|| format!("writing {}", config.display()))?;
        Prometheus::launch(setup, dir, &config)
    }

    fn launch(setup: &Setup, dir: Scratch, config: &Path) -> anyhow::Result<Prometheus> {
        let addr = format!("127.0.0.1:{}", web::free_port()?);
        let mut args = vec![
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.path().join("data").display()),
            format!("--web.listen-address={addr}"),
        ];
        args.extend(setup.flags());
        let program = setup.binary.to_string_lossy();
        let proc = serve(&program, &args, &addr).with_context(|| setup.describe())?;
        Ok(Prometheus { _proc: proc, addr, _dir: dir })
    }

    /// An instant query's result vector (`data.result`).
    pub fn query(&self, promql: &str) -> anyhow::Result<Vec<Value>> {
        self.api(&format!("/api/v1/query?query={}", web::urlencode(promql)), promql)
    }

    /// An instant query at Unix time `at` (s).
    pub fn query_at(&self, promql: &str, at: f64) -> anyhow::Result<Vec<Value>> {
        self.api(&format!("/api/v1/query?query={}&time={at:.3}", web::urlencode(promql)), promql)
    }

    /// A range query from `start` to `end` (Unix s) every `step` seconds: its series (`data.result`).
    pub fn query_range(&self, promql: &str, start: f64, end: f64, step: f64) -> anyhow::Result<Vec<Value>> {
        let path =
            format!("/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step={step}", web::urlencode(promql));
        self.api(&path, promql)
    }

    /// The exemplars of the series `promql` selects between `start` and `end` (Unix s): one entry
    /// per series, `{seriesLabels, exemplars: [{labels, value, timestamp}]}`.
    pub fn query_exemplars(&self, promql: &str, start: f64, end: f64) -> anyhow::Result<Vec<Value>> {
        let path = format!("/api/v1/query_exemplars?query={}&start={start:.3}&end={end:.3}", web::urlencode(promql));
        self.api(&path, promql)
    }

    /// The values of `label` on the series matching `selector` (what Grafana's `label_values`
    /// asks), from `start` on.
    pub fn label_values(&self, selector: &str, label: &str, start: f64) -> anyhow::Result<Vec<String>> {
        let path = format!("/api/v1/label/{label}/values?match[]={}&start={start:.3}", web::urlencode(selector));
        let values = self.api(&path, selector)?;
        Ok(values.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
    }

    /// GET an API path; its `data.result` (or `data`, when that is the list), failing unless
    /// the status is success. `what` names the request in errors.
    fn api(&self, path: &str, what: &str) -> anyhow::Result<Vec<Value>> {
        let r = web::get(&self.addr, path, &[])?;
        let v: Value = serde_json::from_slice(&r.body).with_context(|| format!("{what}: {}", r.text()))?;
        if v["status"] != "success" {
            bail!("{what}: {v}");
        }
        let data = if v["data"].is_array() { &v["data"] } else { &v["data"]["result"] };
        Ok(data.as_array().cloned().unwrap_or_default())
    }

    /// The single value of a query that returns one float sample; None if it returns none.
    pub fn scalar(&self, promql: &str) -> anyhow::Result<Option<f64>> {
        let result = self.query(promql)?;
        Ok(result.first().and_then(|sample| sample["value"][1].as_str()?.parse().ok()))
    }

    /// Scrape health as Prometheus sees it: `up` and the last error, per target.
    pub fn target_health(&self) -> anyhow::Result<String> {
        let r = web::get(&self.addr, "/api/v1/targets", &[])?;
        let v: Value = serde_json::from_slice(&r.body).with_context(|| format!("targets: {}", r.text()))?;
        let targets = v["data"]["activeTargets"].as_array().cloned().unwrap_or_default();
        Ok(targets
            .iter()
            .map(|t| format!("{} {} {}", t["health"], t["labels"]["job"], t["lastError"]))
            .collect::<Vec<_>>()
            .join("; "))
    }

    /// Debian's Prometheus 2.42 at its defaults (no feature flags) with `yaml` as its whole
    /// prometheus.yml; `reload` replaces it.
    pub fn start_with_config(yaml: &str) -> anyhow::Result<Prometheus> {
        Prometheus::start_setup(&Setup::debian(), yaml)
    }

    /// Prometheus as `setup` says, with `yaml` as its whole prometheus.yml.
    pub fn start_setup(setup: &Setup, yaml: &str) -> anyhow::Result<Prometheus> {
        let dir = Scratch::new("runqlat-prom")?;
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, yaml).with_context(|| format!("writing {}", config.display()))?;
        Prometheus::launch(setup, dir, &config)
    }

    /// Rewrites prometheus.yml with `yaml` and has Prometheus reload it (SIGHUP); returns once
    /// `/api/v1/status/config` serves the new file (within 10 s).
    pub fn reload(&mut self, yaml: &str) -> anyhow::Result<()> {
        let config = self._dir.path().join("prometheus.yml");
        std::fs::write(&config, yaml).with_context(|| format!("writing {}", config.display()))?;
        self._proc.signal(libc::SIGHUP);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let want: Value = serde_norway::from_str(yaml).context("the new configuration")?;
        let jobs = |v: &Value| -> Vec<String> {
            v["scrape_configs"].as_array().into_iter().flatten().map(|j| j["job_name"].to_string()).collect()
        };
        loop {
            let r = web::get(&self.addr, "/api/v1/status/config", &[])?;
            let v: Value = serde_json::from_slice(&r.body).unwrap_or_default();
            let loaded: Value =
                serde_norway::from_str(v["data"]["yaml"].as_str().unwrap_or_default()).unwrap_or_default();
            if jobs(&loaded) == jobs(&want)
                && loaded["scrape_configs"].to_string().matches("targets").count()
                    == want["scrape_configs"].to_string().matches("targets").count()
            {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                bail!("Prometheus did not load the new configuration within 10 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}

/// deploy/prometheus/scrape.yml for one local target scraped every second: its example targets
/// and 15 s interval replaced, `scrape_classic_histograms: true` uncommented if `classic_too`, and
/// an error if the file no longer has them (so a change to the shipped file cannot silently leave
/// this test scraping nothing).
fn shipped_for(scrape: &str, target: &str, classic_too: bool) -> anyhow::Result<String> {
    const TARGETS: &str = "['node-1:9954', 'node-2:9954']";
    const INTERVAL: &str = "scrape_interval: 15s";
    const CLASSIC: &str = "# scrape_classic_histograms: true";
    let counts = [TARGETS, INTERVAL, CLASSIC].map(|s| scrape.matches(s).count());
    if counts != [1, 1, 1] {
        bail!(
            "deploy/prometheus/scrape.yml: expected one job with {TARGETS}, {INTERVAL} and `{CLASSIC}`, found {counts:?}"
        );
    }
    let scrape = scrape
        .replace(TARGETS, &format!("['{target}']"))
        .replace(INTERVAL, "scrape_interval: 1s\n    scrape_timeout: 900ms");
    Ok(if classic_too { scrape.replace(CLASSIC, "scrape_classic_histograms: true") } else { scrape })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_scrape_config_points_at_the_target() {
        let path = crate::workspace_root().join("deploy/prometheus/scrape.yml");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{e}"));
        let local = shipped_for(&text, "127.0.0.1:1", false).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(local.matches("['127.0.0.1:1']").count(), 1);
        assert_eq!(local.matches("job_name:").count(), 1);
        assert!(local.contains("job_name: latency-daemon\n"));
        assert!(!local.contains("15s") && !local.contains("\n    scrape_classic_histograms"));
        let both = shipped_for(&text, "127.0.0.1:1", true).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(both.contains("\n    scrape_classic_histograms: true\n"), "{both}");
        assert!(shipped_for("scrape_configs: []", "x", false).is_err());
    }
}
