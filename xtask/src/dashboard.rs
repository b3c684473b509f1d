//! `cargo xtask dashboard`: the Grafana mixin (deploy/grafana, jsonnet) in; its dashboards as
//! JSON in deploy/grafana/dashboards_out out, the jsonnet formatted by jsonnetfmt. The tests below
//! keep the committed JSON equal to what the mixin generates, the jsonnet jsonnetfmt-clean, the
//! dashboard clean by the lab's lint, every metric it names one the daemon serves (the golden
//! schema), and its alert names and threshold equal to deploy/prometheus/rules.yml's.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;

use crate::{cmd, setup, workspace_root};

const MIXIN: &str = "deploy/grafana";
const OUT: &str = "deploy/grafana/dashboards_out";

/// The mixin's jsonnet sources (the generated JSON excluded).
fn sources() -> anyhow::Result<Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                walk(&path, out)?;
            } else if path.extension().is_some_and(|e| e == "jsonnet" || e == "libsonnet") {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(&workspace_root().join(MIXIN), &mut out)?;
    out.sort();
    Ok(out)
}

/// `jsonnet -m OUT`: one file per dashboard.
fn generate(out: &Path) -> anyhow::Result<()> {
    let mixin = workspace_root().join(MIXIN);
    let mut jsonnet = Command::new("jsonnet");
    jsonnet.arg("-J").arg(&mixin).arg("-m").arg(out).arg(mixin.join("dashboards.jsonnet"));
    cmd::stdout(&mut jsonnet).map(drop).context("cargo xtask setup installs jsonnet")
}

pub fn run() -> anyhow::Result<()> {
    setup::ensure(setup::Report::ChangesOnly)?;
    let mut fmt = Command::new("jsonnetfmt");
    fmt.arg("-i").args(sources()?);
    cmd::run(&mut fmt)?;
    let out = workspace_root().join(OUT);
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    generate(&out)?;
    println!("dashboard: wrote {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use latency_lab::{grafana, guard::Scratch};

    use super::*;

    fn files(dir: &Path) -> BTreeMap<String, String> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(Result::ok)
            .map(|e| {
                let text = std::fs::read_to_string(e.path()).unwrap_or_else(|err| panic!("{err}"));
                (e.file_name().to_string_lossy().into_owned(), text)
            })
            .collect()
    }

    /// A value of the mixin's `_config`, as jsonnet evaluates it.
    fn config(field: &str) -> serde_json::Value {
        let mut jsonnet = Command::new("jsonnet");
        jsonnet
            .arg("-J")
            .arg(workspace_root().join(MIXIN))
            .args(["-e", &format!("(import 'config.libsonnet')._config.{field}")]);
        let out = cmd::stdout(&mut jsonnet).unwrap_or_else(|e| panic!("{e:#}"));
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{field}: {e}: {out}"))
    }

    fn dashboard() -> serde_json::Value {
        grafana::load(&grafana::dashboards_dir().join("runqlat.json")).unwrap_or_else(|e| panic!("{e:#}"))
    }

    #[test]
    fn the_committed_json_is_what_the_mixin_generates() {
        let scratch = Scratch::new("runqlat-mixin").unwrap_or_else(|e| panic!("{e:#}"));
        generate(scratch.path()).unwrap_or_else(|e| panic!("{e:#}"));
        let (fresh, committed) = (files(scratch.path()), files(&workspace_root().join(OUT)));
        assert_eq!(
            fresh.keys().collect::<Vec<_>>(),
            committed.keys().collect::<Vec<_>>(),
            "dashboards differ; run `cargo xtask dashboard`"
        );
        for (name, text) in &fresh {
            assert!(committed[name] == *text, "{OUT}/{name} drifted from the mixin; run `cargo xtask dashboard`");
        }
    }

    #[test]
    fn the_jsonnet_is_formatted() {
        let mut fmt = Command::new("jsonnetfmt");
        fmt.arg("--test").args(sources().unwrap_or_else(|e| panic!("{e:#}")));
        cmd::stdout(&mut fmt).unwrap_or_else(|e| panic!("{e:#}; run `cargo xtask dashboard`"));
    }

    #[test]
    fn the_dashboard_passes_the_lint() {
        let problems = grafana::lint(&dashboard());
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    /// Every `runqlat_*` and `process_*` name in a query is served by the daemon, as the golden
    /// schema (latency-daemon/tests/golden/metrics.prom) shows.
    #[test]
    fn every_metric_named_is_one_the_daemon_serves() {
        let golden = std::fs::read_to_string(workspace_root().join("latency-daemon/tests/golden/metrics.prom"))
            .unwrap_or_else(|e| panic!("{e}"));
        let served: Vec<&str> =
            golden.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split(['{', ' ']).next()).collect();
        let d = dashboard();
        let variables = grafana::label_variables(&d).unwrap_or_else(|e| panic!("{e:#}"));
        let exprs = grafana::queries(&d).into_iter().map(|q| q.expr).chain(variables.into_iter().map(|v| v.selector));
        let mut unknown = Vec::new();
        let mut named = 0;
        for expr in exprs {
            // Label values (a job named runqlat_classic) are not metric names.
            let outside_quotes: String = expr.split('"').step_by(2).collect::<Vec<_>>().join(" ");
            let words = outside_quotes.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'));
            for word in words.filter(|w| w.starts_with("runqlat_") || w.starts_with("process_")) {
                named += 1;
                // A native histogram is queried by its bare name; its _count is served.
                if !served.contains(&word) && !served.contains(&format!("{word}_count").as_str()) {
                    unknown.push(word.to_owned());
                }
            }
        }
        assert!(named > 30, "only {named} metric names found");
        assert!(unknown.is_empty(), "not served by the daemon: {unknown:?}");
    }

    /// The alert panel lists exactly rules.yml's alerts, and the window-max threshold line is
    /// RunQueueDelayHigh's.
    #[test]
    fn the_dashboard_agrees_with_the_rules() {
        let rules = std::fs::read_to_string(workspace_root().join("deploy/prometheus/rules.yml"))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut alerts: Vec<String> =
            rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")).map(str::to_owned).collect();
        let mut listed: Vec<String> =
            serde_json::from_value(config("alertNames")).unwrap_or_else(|e| panic!("alertNames: {e}"));
        alerts.sort();
        listed.sort();
        assert_eq!(listed, alerts, "config.libsonnet's alertNames vs rules.yml");

        let rule = rules
            .lines()
            .find_map(|l| l.trim().strip_prefix("expr: instance:runqlat_delay_window_max_seconds:max > "))
            .unwrap_or_else(|| panic!("RunQueueDelayHigh's expression changed shape"));
        let threshold: f64 = rule.trim().parse().unwrap_or_else(|e| panic!("{rule}: {e}"));
        assert_eq!(config("windowMaxAlertSeconds").as_f64(), Some(threshold));
        let json = std::fs::read_to_string(grafana::dashboards_dir().join("runqlat.json")).unwrap_or_default();
        assert!(json.contains(&format!("\"value\": {threshold}")), "no threshold step at {threshold} s");
    }
}
