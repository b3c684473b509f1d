//! A real Alertmanager (Debian's `prometheus-alertmanager`) on loopback, clustering off, routing
//! everything to a receiver that sends nothing: in, nothing; out, its URL and its v2 API to read
//! alerts. Stopped, and its data removed, when dropped.
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::{serve, serve_until};
use crate::guard::Proc;
use crate::guard::Scratch;
use crate::web;

#[derive(Debug)]
pub struct Alertmanager {
    // Stopped before its directory goes.
    _proc: Proc,
    pub addr: String,
    _dir: Scratch,
    /// With a web config: the CA to trust and `user:password`, for `curl`.
    tls: Option<(PathBuf, String)>,
}

impl Alertmanager {
    pub fn start() -> anyhow::Result<Alertmanager> {
        Alertmanager::launch(None)
    }

    /// Alertmanager behind its own `--web.config.file` (`web_config`: TLS and basic auth), read
    /// over https trusting `ca` as `auth` (`user:password`).
    pub fn start_tls(web_config: &Path, ca: &Path, auth: &str) -> anyhow::Result<Alertmanager> {
        Alertmanager::launch(Some((web_config, (ca.to_owned(), auth.to_owned()))))
    }

    fn launch(web: Option<(&Path, (PathBuf, String))>) -> anyhow::Result<Alertmanager> {
        let dir = Scratch::new("runqlat-am")?;
        let config = dir.path().join("alertmanager.yml");
        std::fs::write(&config, "route:\n  receiver: nowhere\n  group_wait: 1s\nreceivers:\n  - name: nowhere\n")
            .with_context(|| format!("writing {}", config.display()))?;
        let addr = format!("127.0.0.1:{}", web::free_port()?);
        let mut args = vec![
            format!("--config.file={}", config.display()),
            format!("--storage.path={}", dir.path().join("data").display()),
            format!("--web.listen-address={addr}"),
            "--cluster.listen-address=".to_owned(),
        ];
        let (tls, proc) = match web {
            None => (None, serve("prometheus-alertmanager", &args, &addr)?),
            Some((web_config, tls)) => {
                args.push(format!("--web.config.file={}", web_config.display()));
                let proc = {
                    let probe = Alertmanager::curl_get(&addr, Some(&tls), "/-/ready");
                    serve_until("prometheus-alertmanager", &args, || probe().is_ok_and(|(s, _)| s == 200))?
                };
                (Some(tls), proc)
            }
        };
        Ok(Alertmanager { _proc: proc, addr, _dir: dir, tls })
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// GET over plain HTTP, or over https with `curl` when it has a web config: (status, body).
    fn curl_get<'a>(
        addr: &'a str,
        tls: Option<&'a (PathBuf, String)>,
        path: &'a str,
    ) -> impl Fn() -> anyhow::Result<(u16, Vec<u8>)> + 'a {
        move || match tls {
            None => web::get(addr, path, &[]).map(|r| (r.status, r.body)),
            Some((ca, auth)) => {
                let out = std::process::Command::new("curl")
                    .args(["-sS", "--max-time", "5", "-o", "-", "-w", "\n%{http_code}", "--cacert"])
                    .arg(ca)
                    .args(["-u", auth])
                    .arg(format!("https://{addr}{path}"))
                    .output()
                    .context("curl")?;
                let mut body = out.stdout;
                let split = body.iter().rposition(|&b| b == b'\n').unwrap_or(0);
                let status = String::from_utf8_lossy(&body[split..]).trim().parse().unwrap_or(0);
                body.truncate(split);
                Ok((status, body))
            }
        }
    }

    /// Active alerts (Alertmanager drops resolved ones from this list).
    pub fn alerts(&self) -> anyhow::Result<Vec<Value>> {
        let get = Alertmanager::curl_get(
            &self.addr,
            self.tls.as_ref(),
            "/api/v2/alerts?active=true&silenced=true&inhibited=true",
        );
        let (status, body) = get()?;
        let text = String::from_utf8_lossy(&body);
        if status != 200 {
            bail!("alerts: status {status}: {text}");
        }
        let v: Value = serde_json::from_slice(&body).with_context(|| format!("alerts: {text}"))?;
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
