//! The YAML pieces of a scrape job as prometheus-operator writes them, and the reading of a
//! monitor's fields: in, values and mappings; out, relabelings (the operator's and the user's, in
//! the operator's spelling), or an error naming a field this reproduction does not read.
use anyhow::{Context as _, bail};
use serde_norway::{Mapping, Value};

const RELABEL_FIELDS: [(&str, &str); 7] = [
    ("sourceLabels", "source_labels"),
    ("separator", "separator"),
    ("targetLabel", "target_label"),
    ("regex", "regex"),
    ("modulus", "modulus"),
    ("replacement", "replacement"),
    ("action", "action"),
];

pub fn relabel(items: &[(&str, Value)]) -> Value {
    Value::Mapping(items.iter().map(|(k, v)| (Value::from(*k), v.clone())).collect())
}

pub fn seq(items: &[&str]) -> Value {
    Value::Sequence(items.iter().map(|s| Value::from(*s)).collect())
}

pub fn running_filter() -> Value {
    relabel(&[
        ("action", "drop".into()),
        ("source_labels", seq(&["__meta_kubernetes_pod_phase"])),
        ("regex", "(Failed|Succeeded)".into()),
    ])
}

/// A user relabeling (the CRD's camelCase) as the operator writes it: snake_case fields in its
/// order, `action` lower-cased and defaulted to `replace`.
pub fn user_relabeling(user: &Value) -> anyhow::Result<Value> {
    let m = user.as_mapping().context("not a mapping")?;
    let known: Vec<&str> = RELABEL_FIELDS.iter().map(|(k, _)| *k).collect();
    only(m, &known, "relabeling")?;
    let mut out = Mapping::new();
    for (camel, snake) in RELABEL_FIELDS {
        let value = match (camel, m.get(camel)) {
            ("action", None) => Some(Value::from("replace")),
            ("action", Some(v)) => Some(Value::from(str_at(v, "action")?.to_lowercase())),
            (_, v) => v.cloned(),
        };
        if let Some(v) = value {
            out.insert(snake.into(), v);
        }
    }
    Ok(Value::Mapping(out))
}

pub fn only(m: &Mapping, known: &[&str], what: &str) -> anyhow::Result<()> {
    for k in m.keys() {
        let k = str_at(k, what)?;
        if !known.contains(&k) {
            bail!("{what}.{k}: not reproduced here (only {known:?})");
        }
    }
    Ok(())
}

pub fn str_at<'a>(v: &'a Value, what: &str) -> anyhow::Result<&'a str> {
    v.as_str().with_context(|| format!("{what}: expected a string, found {v:?}"))
}

pub fn scalar(v: &Value) -> anyhow::Result<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => Ok(n.to_string()),
        other => bail!("expected a scalar, found {other:?}"),
    }
}
