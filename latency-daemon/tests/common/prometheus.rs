//! A real Prometheus server (Debian's `prometheus`), on loopback, scraping the daemon every
//! second with native histograms on; its HTTP API for queries. Stopped when dropped.
//!
//! Two jobs scrape the same daemon: `native` lets Prometheus negotiate protobuf (native
//! histograms), `classic` asks for text with `?format=text` (classic `le` buckets) — Prometheus
//! 2.42 keeps only the native form of a histogram that has one, and `scrape_classic_histograms`
//! to keep both arrived in 2.45.
use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{Guarded, web};

pub struct Prometheus {
    _proc: Guarded,
    pub addr: String,
    dir: PathBuf,
}

impl Prometheus {
    pub fn start(target: &str) -> Prometheus {
        let dir = std::env::temp_dir().join(format!("runqlat-prom-{}-{}", std::process::id(), web::free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  \
                 - job_name: native\n    static_configs:\n      - targets: ['{target}']\n  \
                 - job_name: classic\n    params:\n      format: [text]\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", web::free_port());
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--enable-feature=native-histograms")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus (cargo xtask setup installs it)");
        let p = Prometheus { _proc: Guarded { child, what: "prometheus" }, addr, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while web::get(&p.addr, "/-/ready", &[]).map(|r| r.status).ok() != Some(200) {
            assert!(Instant::now() < deadline, "prometheus did not become ready");
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    /// An instant query's result vector (`data.result`).
    pub fn query(&self, promql: &str) -> Vec<Value> {
        let r = web::get(&self.addr, &format!("/api/v1/query?query={}", web::urlencode(promql)), &[]).unwrap();
        let v: Value = serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{promql}: {e}: {}", r.text()));
        assert_eq!(v["status"], "success", "{promql}: {v}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The single value of a query that returns one float sample.
    pub fn scalar(&self, promql: &str) -> Option<f64> {
        let result = self.query(promql);
        let sample = result.first()?;
        sample["value"][1].as_str()?.parse().ok()
    }

    /// Scrape health as Prometheus sees it: `up` and the last error.
    pub fn target_health(&self) -> String {
        let r = web::get(&self.addr, "/api/v1/targets", &[]).unwrap();
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let targets = v["data"]["activeTargets"].as_array().cloned().unwrap_or_default();
        targets
            .iter()
            .map(|t| format!("{} {} {}", t["health"], t["labels"]["job"], t["lastError"]))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
