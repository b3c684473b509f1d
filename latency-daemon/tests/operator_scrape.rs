//! The shipped ServiceMonitor and PrometheusRule as prometheus-operator would run them, against
//! real daemons measuring real containers: in, two daemons standing for two nodes (node-a,
//! node-b), a victim pod at nice 19 sharing CPU 0 with a hog pod (podman, `io.kubernetes.*`
//! annotations), and Debian's Prometheus 2.42 at its defaults running the scrape job the
//! operator generates for deploy/kubernetes/components/prometheus-operator/servicemonitor.yaml
//! (lab services::operator: static targets carrying kubernetes_sd's meta labels) with the
//! PrometheusRule's groups as rules; out: both targets up as job latency-daemon with instance =
//! node, the victim's series keep the victim's namespace/pod/container and no `exported_*` label
//! exists, nothing is ingested twice, every recording rule is one series per node, every
//! dashboard query returns data, RunqlatDown fires when a daemon stops and RunqlatAbsent stays
//! silent while targets exist and fires once there are none.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use latency_lab::{
    daemon::Daemon,
    grafana::{self, substitute},
    guard::Scratch,
    services::{
        Podman, Prometheus,
        operator::{self, DiscoveredPod},
    },
    web,
};
use serde_json::Value;

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");
/// How long the pods run under both daemons before the checks.
const LOAD: Duration = Duration::from_secs(15);
const SPIN: &str = "while :; do :; done";
const SELECTOR: &str = "job=\"latency-daemon\"";
const NODES: [&str; 2] = ["node-a", "node-b"];

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

fn shipped(path: &str) -> String {
    let path = latency_lab::workspace_root().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The daemon pod on `node`, as the endpoints role would discover it behind the shipped Service.
fn daemon_pod(node: &str, addr: &str) -> DiscoveredPod {
    let labels = vec![("app.kubernetes.io/name".to_owned(), "latency-daemon".to_owned())];
    DiscoveredPod {
        node: node.to_owned(),
        pod: format!("latency-daemon-{node}"),
        address: addr.to_owned(),
        namespace: "latency-daemon".to_owned(),
        service: "latency-daemon".to_owned(),
        service_labels: labels.clone(),
        pod_labels: labels,
        container: "latency-daemon".to_owned(),
        port_name: "metrics".to_owned(),
    }
}

/// prometheus.yml: the operator's job for `pods`, scraped every second instead of the
/// ServiceMonitor's 15 s (the only change, for the test's time), rules evaluated every second.
fn config(pods: &[DiscoveredPod], rules: &str) -> String {
    let yaml = shipped("deploy/kubernetes/components/prometheus-operator/servicemonitor.yaml");
    let mut jobs = operator::service_monitor_jobs(&yaml, pods).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(jobs.len(), 1, "one endpoint: one scrape per node");
    assert_eq!(jobs[0]["scrape_interval"], "15s");
    jobs[0]["scrape_interval"] = "1s".into();
    jobs[0]["scrape_timeout"] = "900ms".into();
    operator::prometheus_config("1s", &[rules], &jobs).unwrap_or_else(|e| panic!("{e:#}"))
}

/// The PrometheusRule's `spec` (what the operator loads) as a rule file, every `for:` cut to 2 s
/// so that the alerts' conditions show within the test (the shipped ones wait minutes).
fn rules_file(dir: &Scratch) -> String {
    let text = shipped("deploy/kubernetes/components/prometheus-operator/prometheusrule.yaml");
    let mut doc: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    assert_eq!(doc["kind"], "PrometheusRule");
    let mut shortened = 0;
    for group in doc["spec"]["groups"].as_sequence_mut().unwrap() {
        for rule in group["rules"].as_sequence_mut().unwrap() {
            if let Some(m) = rule.as_mapping_mut()
                && m.contains_key("for")
            {
                m.insert("for".into(), "2s".into());
                shortened += 1;
            }
        }
    }
    assert!(shortened >= 4, "only {shortened} rules with for:");
    let path = dir.join("rules.yml");
    std::fs::write(&path, serde_norway::to_string(&doc["spec"]).unwrap()).unwrap();
    path.display().to_string()
}

/// Whether a result holds a number that is not NaN.
fn has_numbers(series: &[Value]) -> bool {
    let finite = |v: &Value| v[1].as_str().and_then(|s| s.parse::<f64>().ok()).is_some_and(|x| !x.is_nan());
    series.iter().any(|s| {
        s["value"].is_array() && finite(&s["value"]) || s["values"].as_array().is_some_and(|vs| vs.iter().any(finite))
    })
}

fn value(sample: &Value) -> f64 {
    sample["value"][1].as_str().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN)
}

/// Waits up to `limit` for `promql` to return a series; the series, or a panic naming `what`.
fn wait_for(prom: &Prometheus, promql: &str, limit: Duration, what: &str) -> Vec<Value> {
    let deadline = Instant::now() + limit;
    loop {
        let r = prom.query(promql).unwrap_or_else(|e| panic!("{e:#}"));
        if !r.is_empty() {
            return r;
        }
        assert!(Instant::now() < deadline, "{what}: {promql} returned nothing within {limit:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A sample line's series as `name{k="v",...}` with its labels sorted (an OpenMetrics exemplar,
/// ` # {…} value time` after the value, left out).
fn series_key_text(line: &str) -> String {
    let line = line.split_once(" # {").map_or(line, |(sample, _)| sample);
    let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
    let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
    let labels = labels.strip_suffix('}').unwrap_or(labels);
    let mut parts: Vec<String> = if labels.is_empty() {
        Vec::new()
    } else {
        labels.split("\",").map(|p| p.trim_end_matches('"').to_owned() + "\"").collect()
    };
    parts.sort();
    format!("{name}{{{}}}", parts.join(","))
}

/// A stored series' key in the same form, the target's labels left out.
fn series_key_json(series: &Value) -> String {
    let m = series["metric"].as_object().unwrap();
    let mut parts: Vec<String> = m
        .iter()
        .filter(|(k, _)| !["__name__", "job", "instance", "node", "service", "endpoint"].contains(&k.as_str()))
        .map(|(k, v)| format!("{k}=\"{}\"", v.as_str().unwrap_or_default()))
        .collect();
    parts.sort();
    format!("{}{{{}}}", m["__name__"].as_str().unwrap_or_default(), parts.join(","))
}

fn alert(name: &str) -> String {
    format!("ALERTS{{alertname=\"{name}\", alertstate=\"firing\"}}")
}

#[test]
fn the_operators_scrape_of_the_shipped_servicemonitor_keeps_labels_and_alerts() {
    let mut podman = Podman::new().unwrap_or_else(|e| panic!("{e:#}"));
    // Nice 19 behind four spinners: every 1 ms sleep ends in a wait of several ms.
    let (_hog, _victim) = podman.hog_and_victim_pods("op").unwrap_or_else(|e| panic!("{e:#}"));
    let args = ["--interval", "1s", "--window", "2s", "--alert-max-delay", "5ms"];
    let node_a = Daemon::start(DAEMON, &args).expect("latency-daemon run (node-a)");
    let node_b = Daemon::start(DAEMON, &args).expect("latency-daemon run (node-b)");
    let pods = [daemon_pod("node-a", &node_a.addr), daemon_pod("node-b", &node_b.addr)];
    let dir = Scratch::new("runqlat-operator").unwrap();
    let rules = rules_file(&dir);
    let mut prom =
        Prometheus::start_with_config(&config(&pods, &rules)).unwrap_or_else(|e| panic!("{e:#} (cargo xtask setup)"));
    let start = now();
    std::thread::sleep(LOAD);
    let end = now();

    // Both targets up, job from the Service's label, instance and node the node's name, the
    // operator's service/endpoint target labels, and not its namespace/pod/container.
    let up = wait_for(&prom, &format!("up{{{SELECTOR}}} == 1"), Duration::from_secs(5), "targets");
    let health = prom.target_health().unwrap_or_default();
    assert_eq!(up.len(), 2, "{up:?}; {health}");
    for u in &up {
        let m = &u["metric"];
        assert!(NODES.contains(&m["instance"].as_str().unwrap_or_default()), "{m}");
        assert_eq!(m["node"], m["instance"]);
        assert_eq!(m["service"], "latency-daemon");
        assert_eq!(m["endpoint"], "metrics");
        for gone in ["namespace", "pod", "container"] {
            assert!(m[gone].is_null(), "the target label {gone} survived: {m}");
        }
    }
    assert!(prom.query(&alert("RunqlatAbsent")).unwrap().is_empty(), "RunqlatAbsent fires while targets exist");
    assert!(prom.query(&alert("RunqlatDown")).unwrap().is_empty(), "RunqlatDown fires while both are up");

    // The victim's series carry the victim's names, from both nodes.
    let victim = prom.query(&format!("runqlat_cgroup_delay_seconds_count{{{SELECTOR}, pod=\"victim-pod\"}}")).unwrap();
    let seen: BTreeSet<&str> = victim.iter().filter_map(|s| s["metric"]["instance"].as_str()).collect();
    assert_eq!(seen, NODES.into_iter().collect(), "the victim's delay counts per node: {victim:?}");
    for s in &victim {
        assert_eq!(s["metric"]["namespace"], "web", "{s}");
        assert_eq!(s["metric"]["container"], "sleeper", "{s}");
        assert!(value(s) > 0.0, "{s}");
    }
    let hog = prom.query(&format!("runqlat_cgroup_held_others_seconds_total{{{SELECTOR}, pod=\"hog-pod\"}}")).unwrap();
    assert!(hog.iter().all(|s| s["metric"]["namespace"] == "batch"), "{hog:?}");
    assert!(!hog.is_empty(), "no held-others series for the hog's pod");

    // No exported_* label anywhere, and no series under the daemon's own pod.
    let everything = prom.query(&format!("{{{SELECTOR}}}")).unwrap();
    assert!(everything.len() > 100, "only {} series", everything.len());
    for s in &everything {
        let m = s["metric"].as_object().unwrap();
        assert!(!m.keys().any(|k| k.starts_with("exported_")), "{s}");
        assert!(m.get("pod").and_then(Value::as_str).is_none_or(|p| !p.starts_with("latency-daemon-")), "{s}");
    }

    // Nothing ingested twice: no duplicate or out-of-order samples, and each target stores as many
    // series as its last scrape had samples, which is what one scrape of /metrics gives.
    // (Prometheus's own counters, from its /metrics: it does not scrape itself here.)
    let own = web::get(&prom.addr, "/metrics", &[]).unwrap().text();
    for counter in [
        "prometheus_target_scrapes_sample_duplicate_timestamp_total",
        "prometheus_target_scrapes_sample_out_of_order_total",
    ] {
        assert!(own.contains(counter), "{counter} not in Prometheus's /metrics");
        assert_eq!(web::total(&own, counter), 0.0, "{counter}");
    }
    for (node, daemon) in NODES.iter().zip([&node_a, &node_b]) {
        let synthetic = "up|scrape_.*|ALERTS|ALERTS_FOR_STATE";
        let mut last = String::new();
        let matched = (0..10).any(|_| {
            let samples = prom.scalar(&format!("scrape_samples_scraped{{instance=\"{node}\"}}")).unwrap();
            let stored =
                prom.scalar(&format!("count({{{SELECTOR}, instance=\"{node}\", __name__!~\"{synthetic}\"}})")).unwrap();
            let openmetrics = [("Accept", "application/openmetrics-text; version=1.0.0")];
            let text = web::get(&daemon.addr, "/metrics", &openmetrics).unwrap().text();
            let ours: BTreeSet<String> =
                text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).map(series_key_text).collect();
            let theirs: BTreeSet<String> = prom
                .query(&format!("{{{SELECTOR}, instance=\"{node}\", __name__!~\"{synthetic}\"}}"))
                .unwrap()
                .iter()
                .map(series_key_json)
                .collect();
            let direct = ours.len() as f64;
            last = format!(
                "{node}: scraped {samples:?}, stored {stored:?}, one scrape of /metrics {direct}; only in /metrics {:?}, only stored {:?}",
                ours.difference(&theirs).collect::<Vec<_>>(),
                theirs.difference(&ours).collect::<Vec<_>>()
            );
            // The daemon's series may come and go between Prometheus's scrape and ours: retried.
            let ok = samples == Some(direct) && stored == Some(direct) && ours == theirs;
            if !ok {
                std::thread::sleep(Duration::from_millis(700));
            }
            ok
        });
        assert!(matched, "{last}");
        eprintln!("{last}");
    }

    // The fleet's recording rules: one series per node, instance = the node's name, a number.
    let records: Vec<String> = shipped("deploy/prometheus/rules.yml")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- record: "))
        .map(str::to_owned)
        .collect();
    assert!(records.len() >= 10, "{records:?}");
    for record in records.iter().filter(|r| r.starts_with("instance:")) {
        let series = prom.query(record).unwrap();
        let instances: Vec<&str> = series.iter().filter_map(|s| s["metric"]["instance"].as_str()).collect();
        assert_eq!(instances.len(), 2, "{record}: {series:?}");
        assert_eq!(instances.iter().copied().collect::<BTreeSet<_>>(), NODES.into_iter().collect(), "{record}");
        assert!(has_numbers(&series), "{record}: {series:?}");
    }
    for record in &records {
        assert!(has_numbers(&prom.query(record).unwrap()), "{record}: no number");
    }

    // Every dashboard variable has values (namespace and pod too: the pods are there) and every
    // query returns data, for all nodes and for the victim's pod on node-a.
    let dashboard = grafana::load(&grafana::dashboards_dir().join("runqlat.json")).expect("the dashboard");
    let queries = grafana::queries(&dashboard);
    assert!(queries.len() >= 25, "only {} queries", queries.len());
    let builtins = [("__rate_interval", "8s"), ("__interval", "2s"), ("__range", "10s")];
    let all = [("instance", ".+"), ("reason", ".+"), ("namespace", ".*"), ("pod", ".*")];
    let victim_vars = [("instance", "node-a"), ("reason", ".+"), ("namespace", "web"), ("pod", "victim-pod")];
    let mut failures = Vec::new();
    for v in grafana::label_variables(&dashboard).expect("the variables") {
        let values = prom.label_values(&substitute(&v.selector, &all), &v.label, start).unwrap();
        if v.name == "instance" && values != ["node-a", "node-b"] {
            failures.push(format!("variable instance: {values:?}"));
        } else if values.is_empty() {
            failures.push(format!("variable {}: no values", v.name));
        } else if v.name == "pod" && !values.iter().any(|p| p == "victim-pod") {
            failures.push(format!("variable pod: {values:?}"));
        }
    }
    for (set, values) in [("All", &all), ("victim-pod on node-a", &victim_vars)] {
        for q in &queries {
            let vars: Vec<(&str, &str)> = values.iter().chain(&builtins).copied().collect();
            let expr = substitute(&q.expr, &vars);
            // Tables are instant queries: evaluated near the end of the load, and where that
            // moment had nothing (an alert of the daemon's that had just ended), over the load.
            let result = match q.instant {
                true => prom
                    .query_at(&expr, end - 2.0)
                    .and_then(|r| if has_numbers(&r) { Ok(r) } else { prom.query_range(&expr, start, end, 2.0) }),
                false => prom.query_range(&expr, start, end, 2.0),
            };
            match result {
                Ok(series) if has_numbers(&series) => {}
                // A query of another exporter's series alone (the kubelet's cAdvisor, drawn beside
                // ours) has nothing to find here; Prometheus still parsed and ran it.
                Ok(_) if !q.expr.contains("runqlat_") => {}
                // The daemon's alert names the worst wait of its window: the victim's or one of the
                // hog's spinners (they wait behind each other too), whichever was longer, so the
                // victim's pod may have no alert of its own during the load (seen in CI). The panel
                // is checked with All, where some alert is active.
                Ok(_) if set != "All" && q.panel == "Daemon alerts firing now" => {}
                Ok(series) => failures.push(format!(
                    "{} / {} ({set}): no numbers ({} series): {expr}",
                    q.panel,
                    q.ref_id,
                    series.len()
                )),
                Err(e) => failures.push(format!("{} / {} ({set}): {e:#}", q.panel, q.ref_id)),
            }
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));

    // node-b's daemon stops: RunqlatDown fires for node-b (not node-a), RunqlatAbsent stays silent.
    node_b.stop().expect("SIGTERM node-b");
    let down = wait_for(&prom, &alert("RunqlatDown"), Duration::from_secs(15), "RunqlatDown after node-b stopped");
    assert_eq!(down.len(), 1, "{down:?}");
    assert_eq!(down[0]["metric"]["instance"], "node-b");
    assert_eq!(down[0]["metric"]["job"], "latency-daemon");
    assert!(prom.query(&alert("RunqlatAbsent")).unwrap().is_empty(), "RunqlatAbsent fires while a target exists");

    // No targets left (the DaemonSet gone): RunqlatAbsent fires.
    prom.reload(&config(&[], &rules)).unwrap_or_else(|e| panic!("{e:#}"));
    let absent = wait_for(&prom, &alert("RunqlatAbsent"), Duration::from_secs(20), "RunqlatAbsent with no targets");
    assert_eq!(absent[0]["metric"]["job"], "latency-daemon", "{absent:?}");
    eprintln!(
        "{} series, {} recording rules, {} dashboard queries × 2; RunqlatDown and RunqlatAbsent fired",
        everything.len(),
        records.len(),
        queries.len()
    );

    drop(prom);
    assert!(node_a.stop().expect("SIGTERM node-a") < Duration::from_secs(2));
}

/// The customary `kubernetes-pods` job (Prometheus's example configuration, pods found by their
/// prometheus.io/* annotations), with the additions docs/labels.md gives for latency-daemon's pods
/// when `with_additions`.
fn kubernetes_pods_job(name: &str, pod: &DiscoveredPod, with_additions: bool) -> serde_norway::Value {
    let port = pod.address.rsplit_once(':').map(|(_, p)| p).unwrap_or_default();
    let mut labels = operator::meta_labels(pod, false);
    let address = labels.remove("__address__").unwrap_or_default();
    for (k, v) in [("scrape", "true"), ("port", port), ("path", "/metrics")] {
        labels.insert(format!("__meta_kubernetes_pod_annotation_prometheus_io_{k}"), v.to_owned());
        labels.insert(format!("__meta_kubernetes_pod_annotationpresent_prometheus_io_{k}"), "true".to_owned());
    }
    let mut relabel = String::from(
        r#"
- source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
  action: keep
  regex: true
- source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
  action: replace
  target_label: __metrics_path__
  regex: (.+)
- source_labels: [__address__, __meta_kubernetes_pod_annotation_prometheus_io_port]
  action: replace
  regex: ([^:]+)(?::\d+)?;(\d+)
  replacement: $1:$2
  target_label: __address__
- action: labelmap
  regex: __meta_kubernetes_pod_label_(.+)
- source_labels: [__meta_kubernetes_namespace]
  action: replace
  target_label: namespace
- source_labels: [__meta_kubernetes_pod_name]
  action: replace
  target_label: pod
"#,
    );
    if with_additions {
        relabel.push_str(&shipped_kubernetes_pods_additions());
    }
    let job = serde_json::json!({
        "job_name": name,
        "scrape_interval": "1s",
        "scrape_timeout": "900ms",
        "static_configs": [{"targets": [address], "labels": labels}],
        "relabel_configs": serde_norway::from_str::<serde_norway::Value>(&relabel).unwrap(),
    });
    serde_norway::to_value(job).unwrap()
}

/// The relabelings docs/labels.md tells users to add to their `kubernetes-pods` job: the YAML
/// block after the line `# latency-daemon: add to the kubernetes-pods job`, re-indented.
fn shipped_kubernetes_pods_additions() -> String {
    let doc = shipped("docs/labels.md");
    let start =
        doc.find("# latency-daemon: add to the kubernetes-pods job\n").expect("the additions in docs/labels.md");
    let block = &doc[start..];
    let block = &block[..block.find("```").expect("the end of the block")];
    let indent = block.lines().nth(1).map(|l| l.len() - l.trim_start().len()).unwrap_or(0);
    block.lines().skip(1).map(|l| format!("{}\n", l.get(indent..).unwrap_or(""))).collect()
}

/// The other routes to the same labels: prometheus-operator's PodMonitor (the shipped one) and a
/// plain Prometheus's `kubernetes-pods` annotation job with the additions docs/labels.md gives.
/// Each scrapes the daemon as a node of its own; the victim's series keep its names under both,
/// and the same annotation job without the additions shows what they prevent (`exported_*`).
#[test]
fn the_podmonitor_and_the_annotation_job_keep_the_same_labels() {
    let mut podman = Podman::new().unwrap_or_else(|e| panic!("{e:#}"));
    let pin = ["--cpuset-cpus", "0"];
    let names = [
        ("io.kubernetes.pod.namespace", "web"),
        ("io.kubernetes.pod.name", "victim-pod"),
        ("io.kubernetes.container.name", "sleeper"),
    ];
    let _hog = podman
        .run("op2-hog", &[], &pin, &["sh", "-c", &format!("{SPIN} & {SPIN} & {SPIN} & {SPIN}")])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let _victim = podman
        .run("op2-victim", &names, &pin, &["sh", "-c", "renice -n 19 -p $$ && while :; do usleep 1000; done"])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let daemon = Daemon::start(DAEMON, &["--interval", "1s"]).expect("latency-daemon run");

    let podmonitor = shipped("deploy/kubernetes/components/podmonitor/podmonitor.yaml");
    let mut jobs = operator::pod_monitor_jobs(&podmonitor, &[daemon_pod("node-p", &daemon.addr)])
        .unwrap_or_else(|e| panic!("{e:#}"));
    jobs[0]["scrape_interval"] = "1s".into();
    jobs[0]["scrape_timeout"] = "900ms".into();
    jobs.push(kubernetes_pods_job("kubernetes-pods", &daemon_pod("node-k", &daemon.addr), true));
    jobs.push(kubernetes_pods_job("kubernetes-pods-as-is", &daemon_pod("node-raw", &daemon.addr), false));
    let prom = Prometheus::start_with_config(&operator::prometheus_config("1s", &[], &jobs).unwrap())
        .unwrap_or_else(|e| panic!("{e:#} (cargo xtask setup)"));

    let victim = "runqlat_cgroup_delay_seconds_count{pod=\"victim-pod\"}";
    // Both routes' targets scraped with the victim's delays (the daemon names it within seconds).
    let deadline = Instant::now() + Duration::from_secs(30);
    while prom.query(&format!("count by (instance) ({victim})")).unwrap().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "no victim series under both routes within 30 s: {}",
            prom.target_health().unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let series = prom.query(victim).unwrap();
    let instances: BTreeSet<&str> = series.iter().filter_map(|s| s["metric"]["instance"].as_str()).collect();
    assert_eq!(instances, ["node-k", "node-p"].into_iter().collect(), "{series:?}");
    for s in &series {
        let m = &s["metric"];
        assert_eq!(
            (&m["job"], &m["namespace"], &m["container"]),
            (&"latency-daemon".into(), &"web".into(), &"sleeper".into()),
            "{m}"
        );
    }
    let up = prom.query(&format!("up{{{SELECTOR}}} == 1")).unwrap();
    assert_eq!(up.len(), 2, "{up:?}");
    for s in prom.query(&format!("{{{SELECTOR}}}")).unwrap() {
        let m = s["metric"].as_object().unwrap();
        assert!(!m.keys().any(|k| k.starts_with("exported_")), "{s}");
        assert!(m.get("pod").and_then(Value::as_str).is_none_or(|p| !p.starts_with("latency-daemon-")), "{s}");
    }

    // The annotation job as it is: job kubernetes-pods-as-is, instance IP:port, and the daemon's
    // own pod as `pod` on every series while the victim's names move to exported_*.
    let raw = wait_for(
        &prom,
        "runqlat_cgroup_delay_seconds_count{job=\"kubernetes-pods-as-is\", exported_pod=\"victim-pod\"}",
        Duration::from_secs(10),
        "the annotation job without the additions",
    );
    assert_eq!(raw[0]["metric"]["pod"], "latency-daemon-node-raw", "{raw:?}");
    assert_eq!(raw[0]["metric"]["exported_namespace"], "web", "{raw:?}");
    eprintln!("PodMonitor and kubernetes-pods (with the additions): {} victim series, none exported_*", series.len());
    drop(prom);
    assert!(daemon.stop().expect("SIGTERM") < Duration::from_secs(2));
}
