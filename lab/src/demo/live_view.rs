//! The picture of the live view the README shows, from a scenario a user would recognise: in,
//! the daemon to run and where the PNG goes; out, the screenshot, once the page shows what the
//! scenario must (an alert firing on the web service, the three services among the top cgroups).
//!
//! `shop.slice` holds three services on the machine's last CPU (the first stays for the daemon and
//! the browser): `web` (two 1 ms sleepers, the latency-sensitive one, alerting at 1 ms), `batch`
//! (four spinners at nice -10, the noisy neighbour) and `reports` (a spinner limited to 20 % of a
//! CPU: its waits are throttling). The daemon watches with 1 s drains and 2 s windows; headless
//! Chromium takes the page.
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};

use super::causes::{
    cgroups::{Groups, Limit},
    tasks::{Body, Task},
};
use crate::{browser, daemon::Daemon};

/// The page's size: the README's picture.
const SIZE: browser::Size = (1200, 1800);
/// How long the services run before the picture: enough windows for the heatmap's columns.
const RUN: Duration = Duration::from_secs(16);
const SLICE: &str = "shop.slice";

/// Runs the scenario under `daemon` and writes the live view's screenshot to `png`.
pub fn screenshot(daemon: &Path, png: &Path) -> anyhow::Result<()> {
    let groups = Groups::named(SLICE).with_context(|| format!("making /{SLICE} (is one left from a killed run?)"))?;
    groups.make("web", None)?;
    groups.make("batch", None)?;
    groups.make("reports", Some(Limit { quota_us: 20_000, period_us: 100_000 }))?;
    let dir = std::env::temp_dir().join(format!("runqlat-live-view-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let config = dir.join("latency-daemon.toml");
    let written = std::fs::write(&config, format!("[alert_cgroup_max_delay]\n\"{}\" = \"1ms\"\n", groups.label("web")));
    let shot = written.context("writing the daemon's configuration").and_then(|()| {
        let daemon =
            Daemon::start(daemon, &["--config", &config.to_string_lossy(), "--interval", "1s", "--window", "2s"])?;
        // Dropped (killed) before the cgroups are removed.
        let mut tasks = Vec::new();
        // Every service on the last CPU; the first stays for the daemon and the browser.
        let cpu = crate::workload::cpus().saturating_sub(1);
        for _ in 0..2 {
            for (name, comm, body) in [
                ("web", "web-api", Body::Sleep(Duration::from_millis(1))),
                ("batch", "batch-etl", Body::Spin),
                ("batch", "batch-etl", Body::Spin),
            ] {
                let task = Task::start(comm, cpu, body)?;
                groups.enter(name, task.pid())?;
                if name == "batch" {
                    // A batch job someone started at a higher priority: the web service's
                    // wakeups wait behind it (at equal weight they would preempt it at once).
                    // SAFETY: setpriority(2) on our own child.
                    unsafe { libc::setpriority(libc::PRIO_PROCESS, task.pid(), -10) };
                }
                tasks.push(task);
            }
        }
        let report = Task::start("report-gen", cpu, Body::Spin)?;
        groups.enter("reports", report.pid())?;
        tasks.push(report);
        println!("demo: [live view] web, batch and reports in /{SLICE} for {RUN:?}, then Chromium's screenshot…");
        std::thread::sleep(RUN);
        let url = format!("http://{}/", daemon.addr);
        let dom = browser::dump_dom(&url, SIZE)?;
        shows_the_scenario(&dom, &groups).with_context(|| {
            let snapshot = daemon.get("/api/v1/snapshot").map(|r| r.body).unwrap_or_default();
            let snapshot: serde_json::Value = serde_json::from_slice(&snapshot).unwrap_or_default();
            let web: Vec<&serde_json::Value> = snapshot["cgroups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c.to_string().contains("/web"))
                .collect();
            format!("the web service in the last window: {web:?}")
        })?;
        browser::screenshot(&url, png, SIZE)?;
        drop(tasks);
        daemon.stop()?;
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&dir);
    shot?;
    println!("demo: the live view: {}", png.display());
    Ok(())
}

/// The page holds what the picture is for: the web service's alert firing in the status line,
/// and each service among the top cgroups.
fn shows_the_scenario(dom: &str, groups: &Groups) -> anyhow::Result<()> {
    let status = dom.split("<p id=\"status\"").nth(1).and_then(|s| s.split("</p>").next()).unwrap_or_default();
    if !status.contains("class=\"firing\"") || !status.contains(&groups.label("web")) {
        bail!("the live view's status line does not show the web service's alert firing: {status:?}");
    }
    let top = dom.split("id=\"top-cgroups\"").nth(1).and_then(|s| s.split("</table>").next()).unwrap_or_default();
    for service in ["web", "batch", "reports"] {
        if !top.contains(&groups.label(service)) {
            bail!("{} is not among the live view's top cgroups", groups.label(service));
        }
    }
    Ok(())
}
