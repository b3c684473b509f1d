//! A real Prometheus server (Debian's `prometheus`), on loopback, scraping a target every second
//! with native histograms on: in, the target's address; out, its HTTP API for queries. Stopped,
//! and its data removed, when dropped.
//!
//! Two jobs scrape the same daemon: `native` lets Prometheus negotiate protobuf (native
//! histograms), `classic` asks for text with `?format=text` (classic `le` buckets) — Prometheus
//! 2.42 keeps only the native form of a histogram that has one, and `scrape_classic_histograms`
//! to keep both arrived in 2.45.
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
        let r = web::get(&self.addr, &format!("/api/v1/query?query={}", web::urlencode(promql)), &[])?;
        let v: Value = serde_json::from_slice(&r.body).with_context(|| format!("{promql}: {}", r.text()))?;
        if v["status"] != "success" {
            bail!("{promql}: {v}");
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
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
