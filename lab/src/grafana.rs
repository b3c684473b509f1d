//! A Grafana dashboard's JSON in; out, what a test needs to prove it: every query of every panel
//! (rows' nested panels included) and of every template variable, the expressions with Grafana's
//! variables substituted, and the problems a reviewer would flag (no unit, no description, a
//! panel not on the `datasource` variable, a `rate` over a fixed range, an unknown variable).
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::Value;

/// The mixin's generated dashboards, committed (`cargo xtask mixin` writes them).
pub fn dashboards_dir() -> PathBuf {
    crate::workspace_root().join("deploy/grafana/dashboards_out")
}

pub fn load(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

/// One panel query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub panel: String,
    pub ref_id: String,
    pub expr: String,
    /// Grafana runs it as an instant query (tables), else over the time range.
    pub instant: bool,
}

/// Every panel, rows' nested ones included, in order.
pub fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for p in list.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

pub fn queries(dashboard: &Value) -> Vec<Query> {
    panels(dashboard)
        .into_iter()
        .flat_map(|p| {
            let panel = p["title"].as_str().unwrap_or("?").to_owned();
            p["targets"].as_array().cloned().unwrap_or_default().into_iter().filter_map(move |t| {
                Some(Query {
                    panel: panel.clone(),
                    ref_id: t["refId"].as_str().unwrap_or("?").to_owned(),
                    expr: t["expr"].as_str()?.to_owned(),
                    instant: t["instant"].as_bool().unwrap_or(false),
                })
            })
        })
        .collect()
}

/// A query variable: its name and `label_values(selector, label)` split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelValues {
    pub name: String,
    pub selector: String,
    pub label: String,
}

/// The template variables of type `query`, as `label_values` calls; an error for any other form.
pub fn label_variables(dashboard: &Value) -> anyhow::Result<Vec<LabelValues>> {
    let mut out = Vec::new();
    for v in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] != "query" {
            continue;
        }
        let name = v["name"].as_str().unwrap_or("?").to_owned();
        let query = v["query"].as_str().with_context(|| format!("variable {name}: query is not a string"))?;
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .with_context(|| format!("variable {name}: not label_values(…): {query}"))?;
        let (selector, label) =
            inner.rsplit_once(',').with_context(|| format!("variable {name}: label_values without a label"))?;
        out.push(LabelValues { name, selector: selector.trim().to_owned(), label: label.trim().to_owned() });
    }
    Ok(out)
}

/// Grafana's built-in variables a panel may use.
const BUILTINS: [&str; 4] = ["__rate_interval", "__interval", "__range", "__all"];

/// `expr` with `$name` and `${name}` replaced by `values` (longest names first, so `$__range`
/// is not taken for a `$__r…` prefix).
pub fn substitute(expr: &str, values: &[(&str, &str)]) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    let mut out = expr.to_owned();
    for (name, value) in sorted {
        out = out.replace(&format!("${{{name}}}"), value).replace(&format!("${name}"), value);
    }
    out
}

/// A regex that matches exactly `value`, the way Grafana formats a single value for `=~`
/// (special characters escaped, backslashes doubled for the PromQL string).
pub fn regex_escape(value: &str) -> String {
    let mut out = String::new();
    for c in value.chars() {
        if "\\^$.|?*+()[]{}".contains(c) {
            out.push_str("\\\\");
        }
        out.push(c);
    }
    out
}

/// Variable names (`$name`, `${name}`) an expression refers to.
fn referenced(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        rest = &rest[at + 1..];
        let braced = rest.starts_with('{');
        let body = if braced { &rest[1..] } else { rest };
        let name: String = body.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

/// What a reviewer would flag, one line each; empty when the dashboard is clean.
pub fn lint(dashboard: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let variables: Vec<&str> =
        dashboard["templating"]["list"].as_array().into_iter().flatten().filter_map(|v| v["name"].as_str()).collect();
    if !variables.contains(&"datasource") {
        problems.push("no `datasource` variable".to_owned());
    }
    let mut ids = Vec::new();
    for p in panels(dashboard) {
        let title = p["title"].as_str().unwrap_or("?");
        if let Some(id) = p["id"].as_u64() {
            if ids.contains(&id) {
                problems.push(format!("{title}: panel id {id} used twice"));
            }
            ids.push(id);
        } else {
            problems.push(format!("{title}: no panel id"));
        }
        if p["type"] == "row" {
            continue;
        }
        if p["description"].as_str().is_none_or(str::is_empty) {
            problems.push(format!("{title}: no description"));
        }
        let unit = p["fieldConfig"]["defaults"]["unit"].as_str().or(p["options"]["yAxis"]["unit"].as_str());
        if unit.is_none_or(str::is_empty) {
            problems.push(format!("{title}: no unit"));
        }
        if p["datasource"]["uid"] != "${datasource}" {
            problems.push(format!("{title}: not on the datasource variable"));
        }
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("{title}: no query"));
        }
        for t in &targets {
            let expr = t["expr"].as_str().unwrap_or("");
            if t["datasource"]["uid"] != "${datasource}" {
                problems.push(format!("{title}: a target not on the datasource variable"));
            }
            for name in referenced(expr) {
                if !variables.contains(&name.as_str()) && !BUILTINS.contains(&name.as_str()) {
                    problems.push(format!("{title}: unknown variable ${name}"));
                }
            }
            // A range vector with a fixed duration ignores the scrape interval and the zoom.
            for window in expr.split('[').skip(1).filter_map(|s| s.split(']').next()) {
                if !window.starts_with('$') {
                    problems.push(format!("{title}: fixed range [{window}] (use $__rate_interval or $__range)"));
                }
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dashboard() -> Value {
        serde_json::json!({
            "templating": {"list": [
                {"name": "datasource", "type": "datasource"},
                {"name": "instance", "type": "query", "query": "label_values(up{job=\"a\"}, instance)"},
            ]},
            "panels": [
                {"id": 1, "type": "row", "title": "r", "panels": [
                    {"id": 2, "type": "timeseries", "title": "nested", "description": "d",
                     "datasource": {"uid": "${datasource}"}, "fieldConfig": {"defaults": {"unit": "s"}},
                     "targets": [{"refId": "A", "datasource": {"uid": "${datasource}"},
                                  "expr": "rate(x{instance=~\"$instance\"}[$__rate_interval])"}]},
                ]},
                {"id": 2, "type": "table", "title": "bad",
                 "targets": [{"refId": "A", "instant": true, "expr": "rate(y{a=\"$nope\"}[5m])"}]},
            ],
        })
    }

    #[test]
    fn queries_include_nested_panels() {
        let q = queries(&dashboard());
        assert_eq!(q.len(), 2);
        assert_eq!((q[0].panel.as_str(), q[0].instant), ("nested", false));
        assert!(q[1].instant);
    }

    #[test]
    fn variables_are_label_values_calls() {
        let v = label_variables(&dashboard()).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(
            v,
            [LabelValues { name: "instance".into(), selector: "up{job=\"a\"}".into(), label: "instance".into() }]
        );
    }

    #[test]
    fn substitution_takes_the_longest_name_first() {
        let e = "rate(x{i=~\"$instance\", r=~\"${reason}\"}[$__rate_interval]) / $__range";
        let s =
            substitute(e, &[("__range", "30s"), ("__rate_interval", "8s"), ("instance", ".+"), ("reason", "wakeup")]);
        assert_eq!(s, "rate(x{i=~\".+\", r=~\"wakeup\"}[8s]) / 30s");
        assert_eq!(regex_escape("127.0.0.1:80"), "127\\\\.0\\\\.0\\\\.1:80");
    }

    #[test]
    fn lint_flags_what_a_reviewer_would() {
        let problems = lint(&dashboard());
        let expect = [
            "bad: panel id 2 used twice",
            "bad: no description",
            "bad: no unit",
            "bad: not on the datasource variable",
            "bad: a target not on the datasource variable",
            "bad: unknown variable $nope",
            "bad: fixed range [5m] (use $__rate_interval or $__range)",
        ];
        assert_eq!(problems, expect);
    }
}
