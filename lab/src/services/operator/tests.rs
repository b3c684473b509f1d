//! The reproduction's jobs relabeled by hand (the relabel rules applied here as Prometheus would): the
//! shipped monitors' labels, the job, the port filter, and what is refused.
use std::collections::BTreeMap;

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
    let job = &service_monitor_jobs(&without, &[pod("node-a", "latency-daemon-abcde", "10.0.0.1:9954")]).unwrap()[0];
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
    assert_eq!(back["scrape_configs"][0]["static_configs"][0]["labels"]["__meta_kubernetes_pod_node_name"], "node-a");
    assert_eq!(back["global"]["evaluation_interval"], "1s");
}
