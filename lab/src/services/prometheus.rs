//! A real Prometheus server (Debian's `prometheus`), on loopback, scraping a target every second
//! with native histograms on: in, the target's address; out, its HTTP API for queries. Stopped,
//! and its data removed, when dropped.
//!
//! Two jobs scrape the same daemon: `native` lets Prometheus negotiate protobuf (native
//! histograms), `classic` asks for text with `?format=text` (classic `le` buckets) — Prometheus
//! 2.42 keeps only the native form of a histogram that has one, and `scrape_classic_histograms`
//! to keep both arrived in 2.45.
//!
//! `start_shipped` instead runs what a user deploys: deploy/prometheus/scrape.yml (its jobs
//! `runqlat` and `runqlat_classic`, pointed at the target, every second) and rules.yml, evaluated
//! every second.
use anyhow::{Context as _, bail};
use serde_json::Value;

use super::serve;
use crate::guard::Proc;
use crate::guard::Scratch;
use crate::web;

#[derive(Debug)]
pub struct Prometheus {
    // Stopped before its directory goes.
    _proc: Proc,
    pub addr: String,
    _dir: Scratch,
}

impl Prometheus {
    pub fn start(target: &str) -> anyhow::Result<Prometheus> {
        let dir = Scratch::new("runqlat-prom")?;
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  \
                 - job_name: native\n    static_configs:\n      - targets: ['{target}']\n  \
                 - job_name: classic\n    params:\n      format: [text]\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .with_context(|| format!("writing {}", config.display()))?;
        Prometheus::launch(dir, &config)
    }

    /// Prometheus scraping with one job given as YAML (a `- job_name: …` list item, indented by
    /// two spaces), every second: e.g. over TLS with basic auth.
    pub fn start_job(job: &str) -> anyhow::Result<Prometheus> {
        let dir = Scratch::new("runqlat-prom")?;
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n{job}"),
        )
        .with_context(|| format!("writing {}", config.display()))?;
        Prometheus::launch(dir, &config)
    }

    /// Prometheus with the shipped scrape configuration and rules, scraping `target` every second.
    pub fn start_shipped(target: &str) -> anyhow::Result<Prometheus> {
        let deploy = crate::workspace_root().join("deploy/prometheus");
        let scrape_file = deploy.join("scrape.yml");
        let scrape = std::fs::read_to_string(&scrape_file).with_context(|| format!("{}", scrape_file.display()))?;
        let scrape = shipped_for(&scrape, target)?;
        let dir = Scratch::new("runqlat-prom")?;
        let config = dir.path().join("prometheus.yml");
        let rules = deploy.join("rules.yml");
        std::fs::write(
            &config,
            format!("global:\n  evaluation_interval: 1s\nrule_files:\n  - '{}'\n{scrape}", rules.display()),
        )
        .with_context(|| format!("writing {}", config.display()))?;
        Prometheus::launch(dir, &config)
    }

    fn launch(dir: Scratch, config: &std::path::Path) -> anyhow::Result<Prometheus> {
        let addr = format!("127.0.0.1:{}", web::free_port()?);
        let args = [
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.path().join("data").display()),
            format!("--web.listen-address={addr}"),
            "--enable-feature=native-histograms".to_owned(),
        ];
        let proc = serve("prometheus", &args, &addr)?;
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
}

/// deploy/prometheus/scrape.yml for one local target scraped every second: its example targets
/// and 15 s intervals replaced, and an error if the file no longer has them (so a change to the
/// shipped file cannot silently leave this test scraping nothing).
fn shipped_for(scrape: &str, target: &str) -> anyhow::Result<String> {
    const TARGETS: &str = "['node-1:9954', 'node-2:9954']";
    const INTERVAL: &str = "scrape_interval: 15s";
    let (jobs, intervals) = (scrape.matches(TARGETS).count(), scrape.matches(INTERVAL).count());
    if jobs != 2 || intervals != 2 {
        bail!(
            "deploy/prometheus/scrape.yml: expected 2 jobs with {TARGETS} and {INTERVAL}, found {jobs} and {intervals}"
        );
    }
    Ok(scrape
        .replace(TARGETS, &format!("['{target}']"))
        .replace(INTERVAL, "scrape_interval: 1s\n    scrape_timeout: 900ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_scrape_config_points_at_the_target() {
        let path = crate::workspace_root().join("deploy/prometheus/scrape.yml");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{e}"));
        let local = shipped_for(&text, "127.0.0.1:1").unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(local.matches("['127.0.0.1:1']").count(), 2);
        assert!(local.contains("job_name: runqlat\n") && local.contains("job_name: runqlat_classic\n"));
        assert!(!local.contains("15s"));
        assert!(shipped_for("scrape_configs: []", "x").is_err());
    }
}
