//! VictoriaMetrics 1.112 from Debian trixie (unpacked by `cargo xtask setup`), on loopback: the
//! single-node server as an OTLP receiver of its own ([`Victoria`]), and vmagent as an OTLP
//! gateway that remote-writes what it receives to a Prometheus ([`VmAgent`]; Debian builds
//! Prometheus without its OTLP receiver). Both take OTLP/HTTP at `/opentelemetry/v1/metrics` and,
//! with `-opentelemetry.usePrometheusNaming`, name metrics as Prometheus's receiver does. Stopped,
//! and their data removed, when dropped.
use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::Value;

use super::serve_until;
use crate::guard::{Proc, Scratch};
use crate::web;

const DIR: &str = "/var/cache/runqlat-tools/victoria-metrics/usr/bin";
const OTLP_PATH: &str = "/opentelemetry/v1/metrics";

/// The `victoria-metrics` binary (xtask's setup checks it unpacks exactly there).
pub fn binary() -> PathBuf {
    PathBuf::from(DIR).join("victoria-metrics")
}

fn vmagent_binary() -> PathBuf {
    PathBuf::from(DIR).join("vmagent")
}

fn healthy(addr: &str) -> bool {
    web::get(addr, "/health", &[]).is_ok_and(|r| r.status == 200)
}

/// `program` on a free loopback port with a scratch directory named after `scratch`, once its
/// /health answers: its own `flags` (given the address and the directory), then the ones both
/// programs take (Prometheus naming, only errors logged). The process, its address, the directory.
fn launch(
    program: PathBuf,
    scratch: &str,
    flags: impl FnOnce(&str, &Scratch) -> Vec<String>,
) -> anyhow::Result<(Proc, String, Scratch)> {
    let dir = Scratch::new(scratch)?;
    let addr = format!("127.0.0.1:{}", web::free_port()?);
    let mut args = flags(&addr, &dir);
    args.extend(["-opentelemetry.usePrometheusNaming".to_owned(), "-loggerLevel=ERROR".to_owned()]);
    let program = program.to_string_lossy().into_owned();
    let proc = serve_until(&program, &args, || healthy(&addr))?;
    Ok((proc, addr, dir))
}

/// One series of `/api/v1/export`: its labels and its samples (ms, value).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: Value,
    pub samples: Vec<(i64, f64)>,
}

#[derive(Debug)]
pub struct Victoria {
    _proc: Proc,
    pub addr: String,
    _dir: Scratch,
}

impl Victoria {
    /// A fresh single-node server.
    pub fn start() -> anyhow::Result<Victoria> {
        let (proc, addr, dir) = launch(binary(), "runqlat-vm", |addr, dir| {
            vec![format!("-storageDataPath={}", dir.join("data").display()), format!("-httpListenAddr={addr}")]
        })?;
        Ok(Victoria { _proc: proc, addr, _dir: dir })
    }

    /// Where the daemon pushes.
    pub fn otlp_url(&self) -> String {
        format!("http://{}{OTLP_PATH}", self.addr)
    }

    /// Every stored sample of the series `selector` matches (its raw samples, not a query's
    /// evaluation), newest data included.
    pub fn export(&self, selector: &str) -> anyhow::Result<Vec<Series>> {
        let path = format!("/api/v1/export?match[]={}", web::urlencode(selector));
        let r = web::get(&self.addr, &path, &[])?;
        anyhow::ensure!(r.status == 200, "{selector}: {} {}", r.status, r.text());
        let mut out = Vec::new();
        for line in r.text().lines().filter(|l| !l.trim().is_empty()) {
            let v: Value = serde_json::from_str(line).with_context(|| format!("export line {line}"))?;
            let times = v["timestamps"].as_array().cloned().unwrap_or_default();
            let values = v["values"].as_array().cloned().unwrap_or_default();
            let samples = times.iter().zip(&values).filter_map(|(t, x)| Some((t.as_i64()?, x.as_f64()?))).collect();
            out.push(Series { labels: v["metric"].clone(), samples });
        }
        Ok(out)
    }
}

/// vmagent taking OTLP and remote-writing it to `remote_write` (e.g. a Prometheus started with
/// `--web.enable-remote-write-receiver`), flushing every second.
#[derive(Debug)]
pub struct VmAgent {
    _proc: Proc,
    pub addr: String,
    _dir: Scratch,
}

impl VmAgent {
    pub fn start(remote_write: &str) -> anyhow::Result<VmAgent> {
        let (proc, addr, dir) = launch(vmagent_binary(), "runqlat-vmagent", |addr, dir| {
            vec![
                format!("-httpListenAddr={addr}"),
                format!("-remoteWrite.url={remote_write}"),
                format!("-remoteWrite.tmpDataPath={}", dir.join("queue").display()),
                "-remoteWrite.flushInterval=1s".to_owned(),
            ]
        })?;
        Ok(VmAgent { _proc: proc, addr, _dir: dir })
    }

    /// Where the daemon pushes.
    pub fn otlp_url(&self) -> String {
        format!("http://{}{OTLP_PATH}", self.addr)
    }
}
