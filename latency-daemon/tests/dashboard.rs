//! Every query of the Grafana dashboard (deploy/grafana/dashboards_out) against a real Prometheus
//! running the shipped scrape.yml and rules.yml, scraping the daemon under load: each panel query,
//! with Grafana's variables substituted (All, and one node and one reason), must succeed and
//! return data; each variable's `label_values` must succeed, and return values unless it is one
//! that degrades to "All" when its label does not exist yet (namespace, pod).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use latency_lab::{
    daemon::Daemon,
    grafana::{self, regex_escape, substitute},
    oracle::bpftool,
    services::Prometheus,
    workload::{Body, Crew, cpus, group},
};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");
/// How long the load runs; Prometheus scrapes every second.
const LOAD: Duration = Duration::from_secs(14);
/// Labels the daemon does not set yet (the Kubernetes work will): their variables may be empty.
const MAY_BE_EMPTY: [&str; 2] = ["namespace", "pod"];

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

#[test]
fn every_dashboard_query_returns_data_from_the_shipped_configuration() {
    let dashboard = grafana::load(&grafana::dashboards_dir().join("runqlat.json")).expect("the dashboard");
    let queries = grafana::queries(&dashboard);
    let variables = grafana::label_variables(&dashboard).expect("the variables");
    assert!(queries.len() >= 30, "only {} queries", queries.len());

    // Alerting on at 5 ms, so the daemon's alert series have data too.
    let daemon = Daemon::start(DAEMON, &["--interval", "1s", "--window", "2s", "--alert-max-delay", "5ms"])
        .expect("latency-daemon run");
    let prom = Prometheus::start_shipped(&daemon.addr).expect("prometheus with deploy/prometheus");
    let start = now();
    let (tx, _rx) = std::sync::mpsc::channel();
    let crew = Crew::spawn(group("dash", Body::Spin, 4 * cpus()), LOAD.as_secs_f64(), &tx).expect("the workload");
    std::thread::sleep(LOAD);
    let end = now();
    drop(crew);

    let instance = regex_escape(&daemon.addr);
    // Grafana's $__rate_interval at a 1 s scrape would be 4 s; 8 s keeps two scrapes per job in
    // every window even when one is late.
    let builtins = [("__rate_interval", "8s"), ("__interval", "2s"), ("__range", "10s")];
    let all = [("instance", ".+"), ("reason", ".+"), ("namespace", ".*"), ("pod", ".*")];
    let one = [("instance", instance.as_str()), ("reason", "preempt"), ("namespace", ".*"), ("pod", ".*")];

    let mut failures = Vec::new();
    for v in &variables {
        let selector = substitute(&v.selector, &all);
        match prom.label_values(&selector, &v.label, start) {
            Ok(values) if values.is_empty() && !MAY_BE_EMPTY.contains(&v.name.as_str()) => {
                failures.push(format!("variable {}: no values for {selector}", v.name));
            }
            Ok(values) => eprintln!("variable {}: {values:?}", v.name),
            Err(e) => failures.push(format!("variable {}: {e:#}", v.name)),
        }
    }
    for (set, values) in [("All", &all), ("one node, preempt", &one)] {
        for q in &queries {
            let vars: Vec<(&str, &str)> = values.iter().chain(&builtins).copied().collect();
            let expr = substitute(&q.expr, &vars);
            // Tables are instant queries: evaluated while the load ran, as a user would look.
            let result =
                if q.instant { prom.query_at(&expr, end - 2.0) } else { prom.query_range(&expr, start, end, 2.0) };
            match result {
                Ok(series) if series.is_empty() => {
                    failures.push(format!("{} / {} ({set}): no data: {expr}", q.panel, q.ref_id));
                }
                Ok(_) => {}
                Err(e) => failures.push(format!("{} / {} ({set}): {e:#}", q.panel, q.ref_id)),
            }
        }
    }
    eprintln!("{} queries × 2 variable sets, {} variables", queries.len(), variables.len());
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));

    drop(prom);
    assert!(daemon.stop().expect("SIGTERM") < Duration::from_secs(2));
    bpftool::nothing_loaded().unwrap_or_else(|e| panic!("{e:#}"));
}
