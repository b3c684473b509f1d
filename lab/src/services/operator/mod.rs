//! What prometheus-operator makes of a ServiceMonitor or PodMonitor, without a cluster: in, the
//! monitor's YAML and the pods Kubernetes would discover (node, pod, IP:port, namespace, Service,
//! labels, container, port); out, the scrape jobs the operator writes into Prometheus's
//! configuration, with `static_configs` in place of `kubernetes_sd_configs` whose labels are the
//! `__meta_kubernetes_*` labels service discovery would give each target.
//!
//! Reproduced from prometheus-operator v0.93.0 (commit f8fafd475f3d132e239432ae6172de60a6cb6516),
//! pkg/prometheus/promcfg.go, `generateServiceMonitorConfig` and `generatePodMonitorConfig`, for a
//! Prometheus resource at its defaults: no scrape class, no `enforcedNamespaceLabel`, no
//! `overrideHonorLabels`, one shard, the `endpoints` role (the operator's default; `endpointslice`
//! only when the Prometheus resource asks for it). Relabelings, in the operator's order:
//! - `job` → `__tmp_prometheus_job_name`;
//! - ServiceMonitor: `keep` per `matchLabels` entry on the Service's label and labelpresent meta
//!   labels (PodMonitor: drop pods in phase Failed/Succeeded first, then the same on the pod's);
//! - `keep` on the endpoint's port name (PodMonitor: the container port's name);
//! - ServiceMonitor: the endpoint address's target kind/name → `node` (Node) or `pod` (Pod);
//! - target labels `namespace`, `service`, `pod`, `container` (PodMonitor: `namespace`,
//!   `container`, `pod`); ServiceMonitor: then drop pods in phase Failed/Succeeded;
//! - `job` = the Service's name (PodMonitor: `<namespace>/<name>`), then the `jobLabel`'s value
//!   where the Service (pod) has it;
//! - `endpoint` = the port's name;
//! - the endpoint's own `relabelings` (`action` defaulted to `replace` by the CRD, as the API
//!   server does);
//! - sharding: `__address__` hashed modulo the shard count, kept where it is this shard's
//!   (`$(SHARD)` is expanded by the operator's config reloader: shard 0 here).
//!
//! `honor_labels` is written as the endpoint says (false unless `honorLabels: true`). Only the
//! fields our monitors use are read (`jobLabel`, `selector.matchLabels`, one or more endpoints with
//! `port`, `interval`, `scrapeTimeout`, `path`, `scheme`, `honorLabels`, `relabelings`); anything
//! else in a spec or endpoint (matchExpressions, targetLabels, metricRelabelings, TLS, auth, …) is
//! an error, so the reproduction cannot silently differ from the operator's output.
mod discovery;
mod yaml;

use anyhow::{Context as _, bail};
use serde_norway::{Mapping, Value};

pub use self::discovery::{meta_labels, sanitize};
use self::yaml::{only, relabel, running_filter, scalar, seq, str_at, user_relabeling};

/// One pod Kubernetes would discover behind the monitor: what service discovery knows of it.
#[derive(Debug, Clone)]
pub struct DiscoveredPod {
    pub node: String,
    pub pod: String,
    /// The pod's IP and the container port, `IP:PORT`: the target's `__address__`.
    pub address: String,
    pub namespace: String,
    /// The Service selecting the pod (ServiceMonitor) and its labels.
    pub service: String,
    pub service_labels: Vec<(String, String)>,
    pub pod_labels: Vec<(String, String)>,
    pub container: String,
    /// The container port's name (and the Service port's, which our Service names the same).
    pub port_name: String,
}

/// The fields of a spec and of an endpoint this reproduction understands.
const SPEC_FIELDS: [&str; 4] = ["jobLabel", "selector", "endpoints", "podMetricsEndpoints"];
const ENDPOINT_FIELDS: [&str; 7] =
    ["port", "interval", "scrapeTimeout", "path", "scheme", "honorLabels", "relabelings"];
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Service,
    Pod,
}

/// The scrape jobs (one per endpoint, in order) prometheus-operator generates for the
/// ServiceMonitor in `yaml`, with `pods` as the targets its `endpoints` role would discover.
pub fn service_monitor_jobs(yaml: &str, pods: &[DiscoveredPod]) -> anyhow::Result<Vec<Value>> {
    jobs(yaml, pods, Kind::Service)
}

/// The same for a PodMonitor (the `pod` role).
pub fn pod_monitor_jobs(yaml: &str, pods: &[DiscoveredPod]) -> anyhow::Result<Vec<Value>> {
    jobs(yaml, pods, Kind::Pod)
}

fn jobs(yaml: &str, pods: &[DiscoveredPod], kind: Kind) -> anyhow::Result<Vec<Value>> {
    let doc: Value = serde_norway::from_str(yaml).context("the monitor's YAML")?;
    let want = match kind {
        Kind::Service => "ServiceMonitor",
        Kind::Pod => "PodMonitor",
    };
    if doc["kind"].as_str() != Some(want) {
        bail!("expected kind {want}, found {:?}", doc["kind"]);
    }
    let name = str_at(&doc["metadata"]["name"], "metadata.name")?;
    let namespace = str_at(&doc["metadata"]["namespace"], "metadata.namespace")?;
    let spec = doc["spec"].as_mapping().context("no spec")?;
    only(spec, &SPEC_FIELDS, "spec")?;
    let selector = doc["spec"]["selector"].as_mapping().context("no spec.selector")?;
    only(selector, &["matchLabels"], "spec.selector")?;
    let mut match_labels: Vec<(String, String)> = match selector.get("matchLabels").and_then(Value::as_mapping) {
        Some(m) => m
            .iter()
            .map(|(k, v)| Ok((str_at(k, "matchLabels key")?.to_owned(), scalar(v)?)))
            .collect::<anyhow::Result<_>>()?,
        None => Vec::new(),
    };
    // The operator walks matchLabels in sorted key order.
    match_labels.sort();
    let job_label = doc["spec"]["jobLabel"].as_str();
    let (endpoints_key, prefix) = match kind {
        Kind::Service => ("endpoints", "serviceMonitor"),
        Kind::Pod => ("podMetricsEndpoints", "podMonitor"),
    };
    let endpoints = doc["spec"][endpoints_key].as_sequence().with_context(|| format!("no spec.{endpoints_key}"))?;
    let meta_of = match kind {
        Kind::Service => "service",
        Kind::Pod => "pod",
    };

    let mut out = Vec::new();
    for (i, ep) in endpoints.iter().enumerate() {
        let ep = ep.as_mapping().with_context(|| format!("spec.{endpoints_key}[{i}]"))?;
        only(ep, &ENDPOINT_FIELDS, &format!("spec.{endpoints_key}[{i}]"))?;
        let field = |k: &str| ep.get(k).and_then(Value::as_str);
        let port = field("port");

        let mut job = Mapping::new();
        job.insert("job_name".into(), format!("{prefix}/{namespace}/{name}/{i}").into());
        job.insert("honor_labels".into(), ep.get("honorLabels").and_then(Value::as_bool).unwrap_or(false).into());
        let targets: Vec<Value> = pods
            .iter()
            .map(|p| {
                let mut labels = meta_labels(p, kind == Kind::Service);
                let address = labels.remove("__address__").unwrap_or_default();
                let labels: Mapping = labels.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
                let mut t = Mapping::new();
                t.insert("targets".into(), Value::Sequence(vec![address.into()]));
                t.insert("labels".into(), Value::Mapping(labels));
                Value::Mapping(t)
            })
            .collect();
        job.insert("static_configs".into(), Value::Sequence(targets));
        for (k, to) in [("interval", "scrape_interval"), ("scrapeTimeout", "scrape_timeout"), ("path", "metrics_path")]
        {
            if let Some(v) = field(k) {
                job.insert(to.into(), v.into());
            }
        }
        if let Some(v) = field("scheme") {
            job.insert("scheme".into(), v.to_lowercase().into());
        }

        let mut r: Vec<Value> =
            vec![relabel(&[("source_labels", seq(&["job"])), ("target_label", "__tmp_prometheus_job_name".into())])];
        if kind == Kind::Pod {
            r.push(running_filter());
        }
        for (k, v) in &match_labels {
            let k = sanitize(k);
            r.push(relabel(&[
                ("action", "keep".into()),
                (
                    "source_labels",
                    seq(&[
                        &format!("__meta_kubernetes_{meta_of}_label_{k}"),
                        &format!("__meta_kubernetes_{meta_of}_labelpresent_{k}"),
                    ]),
                ),
                ("regex", format!("({v});true").into()),
            ]));
        }
        if let Some(port) = port {
            let source = match kind {
                Kind::Service => "__meta_kubernetes_endpoint_port_name",
                Kind::Pod => "__meta_kubernetes_pod_container_port_name",
            };
            r.push(relabel(&[("action", "keep".into()), ("source_labels", seq(&[source])), ("regex", port.into())]));
        }
        let copy = |from: &str, to: &str| relabel(&[("source_labels", seq(&[from])), ("target_label", to.into())]);
        match kind {
            Kind::Service => {
                let address = [
                    "__meta_kubernetes_endpoint_address_target_kind",
                    "__meta_kubernetes_endpoint_address_target_name",
                ];
                for (target_kind, label) in [("Node", "node"), ("Pod", "pod")] {
                    r.push(relabel(&[
                        ("source_labels", seq(&address)),
                        ("separator", ";".into()),
                        ("regex", format!("{target_kind};(.*)").into()),
                        ("replacement", "${1}".into()),
                        ("target_label", label.into()),
                    ]));
                }
                r.push(copy("__meta_kubernetes_namespace", "namespace"));
                r.push(copy("__meta_kubernetes_service_name", "service"));
                r.push(copy("__meta_kubernetes_pod_name", "pod"));
                r.push(copy("__meta_kubernetes_pod_container_name", "container"));
                r.push(running_filter());
                r.push(relabel(&[
                    ("source_labels", seq(&["__meta_kubernetes_service_name"])),
                    ("target_label", "job".into()),
                    ("replacement", "${1}".into()),
                ]));
            }
            Kind::Pod => {
                r.push(copy("__meta_kubernetes_namespace", "namespace"));
                r.push(copy("__meta_kubernetes_pod_container_name", "container"));
                r.push(copy("__meta_kubernetes_pod_name", "pod"));
                r.push(relabel(&[
                    ("target_label", "job".into()),
                    ("replacement", format!("{namespace}/{name}").into()),
                ]));
            }
        }
        if let Some(label) = job_label {
            r.push(relabel(&[
                ("source_labels", seq(&[&format!("__meta_kubernetes_{meta_of}_label_{}", sanitize(label))])),
                ("target_label", "job".into()),
                ("regex", "(.+)".into()),
                ("replacement", "${1}".into()),
            ]));
        }
        if let Some(port) = port {
            r.push(relabel(&[("target_label", "endpoint".into()), ("replacement", port.into())]));
        }
        for (j, user) in ep.get("relabelings").and_then(Value::as_sequence).into_iter().flatten().enumerate() {
            r.push(user_relabeling(user).with_context(|| format!("spec.{endpoints_key}[{i}].relabelings[{j}]"))?);
        }
        // One shard (shard 0): the reloader expands $(SHARD) to 0.
        r.push(relabel(&[
            ("source_labels", seq(&["__address__", "__tmp_hash"])),
            ("target_label", "__tmp_hash".into()),
            ("regex", "(.+);".into()),
            ("replacement", "$1".into()),
            ("action", "replace".into()),
        ]));
        r.push(relabel(&[
            ("source_labels", seq(&["__tmp_hash"])),
            ("target_label", "__tmp_hash".into()),
            ("modulus", 1.into()),
            ("action", "hashmod".into()),
        ]));
        r.push(relabel(&[
            ("source_labels", seq(&["__tmp_hash", "__tmp_disable_sharding"])),
            ("regex", "0;|.+;.+".into()),
            ("action", "keep".into()),
        ]));
        job.insert("relabel_configs".into(), Value::Sequence(r));
        out.push(Value::Mapping(job));
    }
    Ok(out)
}

/// A full prometheus.yml: `global` (scrape and evaluation interval), `rule_files` and the jobs.
pub fn prometheus_config(interval: &str, rule_files: &[&str], jobs: &[Value]) -> anyhow::Result<String> {
    let mut global = Mapping::new();
    global.insert("scrape_interval".into(), interval.into());
    global.insert("evaluation_interval".into(), interval.into());
    let mut top = Mapping::new();
    top.insert("global".into(), Value::Mapping(global));
    top.insert("rule_files".into(), seq(rule_files));
    top.insert("scrape_configs".into(), Value::Sequence(jobs.to_vec()));
    serde_norway::to_string(&Value::Mapping(top)).context("rendering prometheus.yml")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
