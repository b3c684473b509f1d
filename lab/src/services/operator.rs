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
use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use serde_norway::{Mapping, Value};

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
const RELABEL_FIELDS: [(&str, &str); 7] = [
    ("sourceLabels", "source_labels"),
    ("separator", "separator"),
    ("targetLabel", "target_label"),
    ("regex", "regex"),
    ("modulus", "modulus"),
    ("replacement", "replacement"),
    ("action", "action"),
];

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

/// A label name as the operator and service discovery write it: every character outside
/// `[a-zA-Z0-9_]` becomes `_`.
pub fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

/// The `__meta_kubernetes_*` labels (and `__address__`) Prometheus's kubernetes_sd gives `pod`'s
/// port under the `endpoints` role (Service, Endpoints and pod meta labels) or the `pod` role.
pub fn meta_labels(pod: &DiscoveredPod, service_role: bool) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut set = |k: &str, v: &str| {
        m.insert(k.to_owned(), v.to_owned());
    };
    let ip = pod.address.rsplit_once(':').map_or(pod.address.as_str(), |(ip, _)| ip);
    let port = pod.address.rsplit_once(':').map_or("", |(_, port)| port);
    set("__address__", &pod.address);
    set("__meta_kubernetes_namespace", &pod.namespace);
    set("__meta_kubernetes_pod_name", &pod.pod);
    set("__meta_kubernetes_pod_ip", ip);
    set("__meta_kubernetes_pod_node_name", &pod.node);
    set("__meta_kubernetes_pod_host_ip", ip);
    set("__meta_kubernetes_pod_ready", "true");
    set("__meta_kubernetes_pod_phase", "Running");
    set("__meta_kubernetes_pod_uid", &format!("uid-{}", pod.pod));
    set("__meta_kubernetes_pod_controller_kind", "DaemonSet");
    set("__meta_kubernetes_pod_controller_name", &pod.service);
    set("__meta_kubernetes_pod_container_name", &pod.container);
    set("__meta_kubernetes_pod_container_init", "false");
    set("__meta_kubernetes_pod_container_port_name", &pod.port_name);
    set("__meta_kubernetes_pod_container_port_number", port);
    set("__meta_kubernetes_pod_container_port_protocol", "TCP");
    for (k, v) in &pod.pod_labels {
        set(&format!("__meta_kubernetes_pod_label_{}", sanitize(k)), v);
        set(&format!("__meta_kubernetes_pod_labelpresent_{}", sanitize(k)), "true");
    }
    if service_role {
        set("__meta_kubernetes_endpoints_name", &pod.service);
        set("__meta_kubernetes_endpoint_ready", "true");
        set("__meta_kubernetes_endpoint_node_name", &pod.node);
        set("__meta_kubernetes_endpoint_port_name", &pod.port_name);
        set("__meta_kubernetes_endpoint_port_protocol", "TCP");
        set("__meta_kubernetes_endpoint_address_target_kind", "Pod");
        set("__meta_kubernetes_endpoint_address_target_name", &pod.pod);
        set("__meta_kubernetes_service_name", &pod.service);
        for (k, v) in &pod.service_labels {
            set(&format!("__meta_kubernetes_service_label_{}", sanitize(k)), v);
            set(&format!("__meta_kubernetes_service_labelpresent_{}", sanitize(k)), "true");
            set(&format!("__meta_kubernetes_endpoints_label_{}", sanitize(k)), v);
            set(&format!("__meta_kubernetes_endpoints_labelpresent_{}", sanitize(k)), "true");
        }
    }
    m
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

fn relabel(items: &[(&str, Value)]) -> Value {
    Value::Mapping(items.iter().map(|(k, v)| (Value::from(*k), v.clone())).collect())
}

fn seq(items: &[&str]) -> Value {
    Value::Sequence(items.iter().map(|s| Value::from(*s)).collect())
}

fn running_filter() -> Value {
    relabel(&[
        ("action", "drop".into()),
        ("source_labels", seq(&["__meta_kubernetes_pod_phase"])),
        ("regex", "(Failed|Succeeded)".into()),
    ])
}

/// A user relabeling (the CRD's camelCase) as the operator writes it: snake_case fields in its
/// order, `action` lower-cased and defaulted to `replace`.
fn user_relabeling(user: &Value) -> anyhow::Result<Value> {
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

fn only(m: &Mapping, known: &[&str], what: &str) -> anyhow::Result<()> {
    for k in m.keys() {
        let k = str_at(k, what)?;
        if !known.contains(&k) {
            bail!("{what}.{k}: not reproduced here (only {known:?})");
        }
    }
    Ok(())
}

fn str_at<'a>(v: &'a Value, what: &str) -> anyhow::Result<&'a str> {
    v.as_str().with_context(|| format!("{what}: expected a string, found {v:?}"))
}

fn scalar(v: &Value) -> anyhow::Result<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => Ok(n.to_string()),
        other => bail!("expected a scalar, found {other:?}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn shipped(path: &str) -> String {
        let path = crate::workspace_root().join(path);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn pod(node: &str, pod: &str, addr: &str) -> DiscoveredPod {
        let labels = vec![("app.kubernetes.io/name".to_owned(), "latency-daemon".to_owned())];
        DiscoveredPod {
            node: node.into(),
            pod: pod.into(),
            address: addr.into(),
            namespace: "latency-daemon".into(),
            service: "latency-daemon".into(),
            service_labels: labels.clone(),
            pod_labels: labels,
            container: "latency-daemon".into(),
            port_name: "metrics".into(),
        }
    }

    /// Relabeling as Prometheus does it, for the few actions the operator writes: the target's
    /// labels after relabeling (None if dropped), `__`-prefixed labels removed.
    fn apply(relabelings: &[Value], mut labels: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
        labels.insert("job".into(), "serviceMonitor/x".into());
        for r in relabelings {
            let sources: Vec<String> = r["source_labels"]
                .as_sequence()
                .map(|s| s.iter().map(|l| labels.get(l.as_str().unwrap()).cloned().unwrap_or_default()).collect())
                .unwrap_or_default();
            let joined = sources.join(r["separator"].as_str().unwrap_or(";"));
            let re = regex_full(r["regex"].as_str().unwrap_or("(.*)"));
            let action = r["action"].as_str().unwrap_or("replace");
            match action {
                "keep" if !re_match(&re, &joined) => return None,
                "drop" if re_match(&re, &joined) => return None,
                "keep" | "drop" => {}
                "labeldrop" => labels.retain(|k, _| !re_match(&re, k)),
                "hashmod" => {
                    labels.insert(r["target_label"].as_str().unwrap().into(), "0".into());
                }
                "replace" => {
                    if let Some(groups) = captures(&re, &joined) {
                        let mut value = r["replacement"].as_str().unwrap_or("$1").to_owned();
                        for (i, g) in groups.iter().enumerate() {
                            value = value.replace(&format!("${{{i}}}"), g).replace(&format!("${i}"), g);
                        }
                        let target = r["target_label"].as_str().unwrap().to_owned();
                        if value.is_empty() {
                            labels.remove(&target);
                        } else {
                            labels.insert(target, value);
                        }
                    }
                }
                other => panic!("action {other}"),
            }
        }
        labels.retain(|k, _| !k.starts_with("__"));
        Some(labels)
    }

    // A tiny anchored matcher for the patterns the operator and our monitors use: literal text,
    // `(.*)`, `(.+)`, and alternations `a|b|c` (whole pattern or inside one group).
    fn regex_full(re: &str) -> String {
        re.to_owned()
    }
    fn re_match(re: &str, s: &str) -> bool {
        captures(re, s).is_some()
    }
    fn captures(re: &str, s: &str) -> Option<Vec<String>> {
        // Whole-pattern alternation outside groups.
        if !re.contains('(') && re.contains('|') {
            return re.split('|').any(|alt| alt == s).then(|| vec![s.to_owned()]);
        }
        if re.contains(".+;.+") {
            // The sharding keep: "0;|.+;.+".
            let (hash, disable) = s.split_once(';')?;
            return (hash == "0" && disable.is_empty() || !hash.is_empty() && !disable.is_empty())
                .then(|| vec![s.to_owned()]);
        }
        let Some(open) = re.find('(') else { return (re == s).then(|| vec![s.to_owned()]) };
        let close = re.rfind(')')?;
        let (before, group, after) = (&re[..open], &re[open + 1..close], &re[close + 1..]);
        let mid = s.strip_prefix(before)?.strip_suffix(after)?;
        let ok = match group {
            ".*" => true,
            ".+" => !mid.is_empty(),
            alts => alts.split('|').any(|a| a == mid),
        };
        ok.then(|| vec![s.to_owned(), mid.to_owned()])
    }

    fn target_labels(job: &Value, i: usize) -> Option<BTreeMap<String, String>> {
        let t = &job["static_configs"][i];
        let mut labels: BTreeMap<String, String> = t["labels"]
            .as_mapping()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.as_str().unwrap().to_owned(), v.as_str().unwrap().to_owned()))
            .collect();
        labels.insert("__address__".into(), t["targets"][0].as_str().unwrap().into());
        apply(job["relabel_configs"].as_sequence().unwrap(), labels)
    }

    #[test]
    fn the_shipped_servicemonitor_gives_job_instance_node_and_drops_pod_labels() {
        let yaml = shipped("deploy/kubernetes/components/prometheus-operator/servicemonitor.yaml");
        let pods = [
            pod("node-a", "latency-daemon-abcde", "10.0.0.1:9954"),
            pod("node-b", "latency-daemon-fghij", "10.0.0.2:9954"),
        ];
        let jobs = service_monitor_jobs(&yaml, &pods).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(jobs.len(), 1, "one endpoint, one job");
        let job = &jobs[0];
        assert_eq!(job["job_name"], "serviceMonitor/latency-daemon/latency-daemon/0");
        assert_eq!(job["honor_labels"], false);
        assert_eq!(job["scrape_interval"], "15s");
        let labels = target_labels(job, 0).expect("the target is kept");
        let want: BTreeMap<String, String> = [
            ("job", "latency-daemon"),
            ("instance", "node-a"),
            ("node", "node-a"),
            ("service", "latency-daemon"),
            ("endpoint", "metrics"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(labels, want);
        assert_eq!(target_labels(job, 1).unwrap()["instance"], "node-b");

        // The operator's own relabelings come first, in its order, then ours, then sharding.
        let r = job["relabel_configs"].as_sequence().unwrap();
        let targets: Vec<&str> = r.iter().map(|x| x["target_label"].as_str().unwrap_or("-")).collect();
        assert_eq!(
            targets,
            [
                "__tmp_prometheus_job_name",
                "-",
                "-",
                "node",
                "pod",
                "namespace",
                "service",
                "pod",
                "container",
                "-",
                "job",
                "job",
                "endpoint",
                "instance",
                "node",
                "-",
                "__tmp_hash",
                "__tmp_hash",
                "-"
            ]
        );
        assert_eq!(r[1]["source_labels"][0], "__meta_kubernetes_service_label_app_kubernetes_io_name");
        assert_eq!(r[1]["regex"], "(latency-daemon);true");
        assert_eq!(r[2]["source_labels"][0], "__meta_kubernetes_endpoint_port_name");
        assert_eq!(r[15]["action"], "labeldrop");
        assert_eq!(r[13]["action"], "replace", "the CRD's default action");
    }

    #[test]
    fn the_job_comes_from_the_service_label_named_by_job_label_else_the_service_name() {
        let yaml = shipped("deploy/kubernetes/components/prometheus-operator/servicemonitor.yaml");
        let mut p = pod("node-a", "p", "10.0.0.1:9954");
        p.service = "runqlat-svc".into();
        let job = &service_monitor_jobs(&yaml, &[p.clone()]).unwrap()[0];
        assert_eq!(target_labels(job, 0).unwrap()["job"], "latency-daemon");
        // Without the label the Service's name stays, and the selector no longer keeps it.
        let no_label = yaml.replace("jobLabel: app.kubernetes.io/name", "jobLabel: team");
        let job = &service_monitor_jobs(&no_label, &[p.clone()]).unwrap()[0];
        assert_eq!(target_labels(job, 0).unwrap()["job"], "runqlat-svc");
        p.service_labels.clear();
        assert_eq!(target_labels(&service_monitor_jobs(&yaml, &[p]).unwrap()[0], 0), None);
    }

    #[test]
    fn without_the_labeldrop_the_daemons_own_pod_would_be_every_series_pod() {
        let yaml = shipped("deploy/kubernetes/components/prometheus-operator/servicemonitor.yaml");
        let without = yaml.replace("        - action: labeldrop\n          regex: namespace|pod|container\n", "");
        assert_ne!(without, yaml, "the shipped ServiceMonitor's labeldrop");
        let job =
            &service_monitor_jobs(&without, &[pod("node-a", "latency-daemon-abcde", "10.0.0.1:9954")]).unwrap()[0];
        let labels = target_labels(job, 0).unwrap();
        assert_eq!(labels["namespace"], "latency-daemon");
        assert_eq!(labels["pod"], "latency-daemon-abcde");
        assert_eq!(labels["container"], "latency-daemon");
    }

    #[test]
    fn a_port_of_another_name_is_not_scraped() {
        let yaml = shipped("deploy/kubernetes/components/prometheus-operator/servicemonitor.yaml");
        let mut p = pod("node-a", "p", "10.0.0.1:9954");
        p.port_name = "http".into();
        assert_eq!(target_labels(&service_monitor_jobs(&yaml, &[p]).unwrap()[0], 0), None);
    }

    #[test]
    fn the_shipped_podmonitor_gives_the_same_labels_but_service() {
        let yaml = shipped("deploy/kubernetes/components/podmonitor/podmonitor.yaml");
        let jobs = pod_monitor_jobs(&yaml, &[pod("node-a", "latency-daemon-abcde", "10.0.0.1:9954")])
            .unwrap_or_else(|e| panic!("{e:#}"));
        let job = &jobs[0];
        assert_eq!(job["job_name"], "podMonitor/latency-daemon/latency-daemon/0");
        assert_eq!(job["honor_labels"], false);
        let labels = target_labels(job, 0).expect("kept");
        let keys: Vec<&str> = labels.keys().map(String::as_str).collect();
        assert_eq!(keys, ["endpoint", "instance", "job", "node"]);
        assert_eq!(labels["job"], "latency-daemon");
        assert_eq!(labels["instance"], "node-a");
        let r = job["relabel_configs"].as_sequence().unwrap();
        assert_eq!(r[1]["source_labels"][0], "__meta_kubernetes_pod_phase", "the PodMonitor filters phases first");
        assert_eq!(r[2]["source_labels"][0], "__meta_kubernetes_pod_label_app_kubernetes_io_name");
        assert_eq!(r[3]["source_labels"][0], "__meta_kubernetes_pod_container_port_name");
    }

    #[test]
    fn what_is_not_reproduced_is_refused() {
        let yaml = shipped("deploy/kubernetes/components/prometheus-operator/servicemonitor.yaml");
        let with = yaml.replace("  jobLabel:", "  targetLabels: [team]\n  jobLabel:");
        assert!(service_monitor_jobs(&with, &[]).is_err());
        let with = yaml.replace("      interval: 15s", "      interval: 15s\n      metricRelabelings: []");
        assert!(service_monitor_jobs(&with, &[]).is_err());
        assert!(pod_monitor_jobs(&yaml, &[]).is_err(), "a ServiceMonitor is not a PodMonitor");
    }

    #[test]
    fn the_config_is_yaml_prometheus_reads() {
        let yaml = shipped("deploy/kubernetes/components/prometheus-operator/servicemonitor.yaml");
        let jobs = service_monitor_jobs(&yaml, &[pod("node-a", "p", "10.0.0.1:9954")]).unwrap();
        let text = prometheus_config("1s", &["/x/rules.yml"], &jobs).unwrap();
        let back: Value = serde_norway::from_str(&text).unwrap();
        assert_eq!(
            back["scrape_configs"][0]["static_configs"][0]["labels"]["__meta_kubernetes_pod_node_name"],
            "node-a"
        );
        assert_eq!(back["global"]["evaluation_interval"], "1s");
    }
}
