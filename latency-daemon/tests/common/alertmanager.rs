//! A real Alertmanager (Debian's `prometheus-alertmanager`) on loopback, clustering off, routing
//! everything to a receiver that sends nothing; its v2 API to read alerts. Stopped when dropped.
use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{Guarded, web};

pub struct Alertmanager {
    _proc: Guarded,
    pub addr: String,
    dir: PathBuf,
}

impl Alertmanager {
    pub fn start() -> Alertmanager {
        let dir = std::env::temp_dir().join(format!("runqlat-am-{}-{}", std::process::id(), web::free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("alertmanager.yml");
        std::fs::write(&config, "route:\n  receiver: nowhere\n  group_wait: 1s\nreceivers:\n  - name: nowhere\n")
            .unwrap();
        let addr = format!("127.0.0.1:{}", web::free_port());
        let child = Command::new("prometheus-alertmanager")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--cluster.listen-address=")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus-alertmanager (cargo xtask setup installs it)");
        let am = Alertmanager { _proc: Guarded { child, what: "alertmanager" }, addr, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while web::get(&am.addr, "/-/ready", &[]).map(|r| r.status).ok() != Some(200) {
            assert!(Instant::now() < deadline, "alertmanager did not become ready");
            std::thread::sleep(Duration::from_millis(200));
        }
        am
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Active alerts (Alertmanager drops resolved ones from this list).
    pub fn alerts(&self) -> Vec<Value> {
        let r = web::get(&self.addr, "/api/v2/alerts?active=true&silenced=true&inhibited=true", &[]).unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        serde_json::from_slice::<Value>(&r.body).unwrap().as_array().cloned().unwrap_or_default()
    }

    /// Our alerts whose `label` equals `value`.
    pub fn ours(&self, label: &str, value: &str) -> Vec<Value> {
        self.alerts()
            .into_iter()
            .filter(|a| a["labels"]["alertname"] == "RunQueueDelayHigh" && a["labels"][label] == value)
            .collect()
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
