//! A real Alertmanager (Debian's `prometheus-alertmanager`) on loopback, clustering off, routing
//! everything to a receiver that sends nothing: in, nothing; out, its URL and its v2 API to read
//! alerts. Stopped, and its data removed, when dropped.
use anyhow::{Context as _, bail};
use serde_json::Value;

use super::serve;
use crate::guard::Proc;
use crate::guard::Scratch;
use crate::web;

#[derive(Debug)]
pub struct Alertmanager {
    // Stopped before its directory goes.
    _proc: Proc,
    pub addr: String,
    _dir: Scratch,
}

impl Alertmanager {
    pub fn start() -> anyhow::Result<Alertmanager> {
        let dir = Scratch::new("runqlat-am")?;
        let config = dir.path().join("alertmanager.yml");
        std::fs::write(&config, "route:\n  receiver: nowhere\n  group_wait: 1s\nreceivers:\n  - name: nowhere\n")
            .with_context(|| format!("writing {}", config.display()))?;
        let addr = format!("127.0.0.1:{}", web::free_port()?);
        let args = [
            format!("--config.file={}", config.display()),
            format!("--storage.path={}", dir.path().join("data").display()),
            format!("--web.listen-address={addr}"),
            "--cluster.listen-address=".to_owned(),
        ];
        let proc = serve("prometheus-alertmanager", &args, &addr)?;
        Ok(Alertmanager { _proc: proc, addr, _dir: dir })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Active alerts (Alertmanager drops resolved ones from this list).
    pub fn alerts(&self) -> anyhow::Result<Vec<Value>> {
        let r = web::get(&self.addr, "/api/v2/alerts?active=true&silenced=true&inhibited=true", &[])?;
        if r.status != 200 {
            bail!("alerts: status {}: {}", r.status, r.text());
        }
        let v: Value = serde_json::from_slice(&r.body).with_context(|| format!("alerts: {}", r.text()))?;
        Ok(v.as_array().cloned().unwrap_or_default())
    }

    /// Our alerts (`RunQueueDelayHigh`) whose `label` equals `value`.
    pub fn ours(&self, label: &str, value: &str) -> anyhow::Result<Vec<Value>> {
        Ok(self
            .alerts()?
            .into_iter()
            .filter(|a| a["labels"]["alertname"] == "RunQueueDelayHigh" && a["labels"][label] == value)
            .collect())
    }
}
