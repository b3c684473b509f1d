//! What a real daemon serves, read by parsers no one here wrote: the Prometheus project's own
//! Python client (`prometheus_client.parser` for text 0.0.4, `prometheus_client.openmetrics.parser`
//! for OpenMetrics 1.0, which is strict: a histogram without `le="+Inf"`, a missing `# EOF`, a bad
//! escape or a misplaced `_created` fails the whole scrape). Protobuf has no Python parser; the
//! Prometheus servers of dashboard.rs, run_prometheus.rs and operator_scrape.rs ingest it.
//! Each format is asked for as Prometheus asks (its Accept header), not with `?format=`.
//! A task named with a quote and a backslash as the worst waiter breaks none of them, nor
//! Prometheus's own OpenMetrics parser, nor OpenTelemetry's classes reading the OTLP push.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use latency_lab::{
    daemon::Daemon,
    guard::Proc,
    oracle::otlp,
    services::{Prometheus, Setup, otlp_receiver::OtlpReceiver},
    web,
    workload::{Body, Crew, cpus, group},
};
use serde_json::Value;

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");

/// The venv `cargo xtask setup` fills (xtask/src/setup/python.rs).
const PYTHON: &str = "/var/cache/runqlat-tools/venv/bin/python3";

/// What Prometheus 2.42 sends by default (scrape/scrape.go), and with native histograms on.
const ACCEPT_DEFAULT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
const ACCEPT_TEXT: &str = "text/plain;version=0.0.4;q=1,*/*;q=0.1";

/// Parses one body with the official parser for its format and prints, as JSON, each family's
/// type and samples; every histogram's buckets are checked as Prometheus relies on them.
const PARSE: &str = r#"
import json, math, sys
from prometheus_client.parser import text_string_to_metric_families as parse_text
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om

fmt, path = sys.argv[1], sys.argv[2]
body = open(path, encoding="utf-8").read()
families = list((parse_om if fmt == "openmetrics" else parse_text)(body))
out = {}
for f in families:
    samples = []
    for s in f.samples:
        sample = {"name": s.name, "labels": s.labels, "value": s.value}
        if getattr(s, "exemplar", None) is not None:
            x = s.exemplar
            sample["exemplar"] = {"labels": x.labels, "value": x.value, "timestamp": float(x.timestamp)}
        samples.append(sample)
    out[f.name] = {"type": f.type, "samples": samples}
    if f.type != "histogram":
        continue
    # Per series (labels without le): cumulative buckets, ending at +Inf == _count.
    series = {}
    for s in f.samples:
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
        entry = series.setdefault(key, {"buckets": [], "count": None})
        if s.name.endswith("_bucket"):
            entry["buckets"].append((float(s.labels["le"]), s.value))
        elif s.name.endswith("_count"):
            entry["count"] = s.value
    for key, entry in series.items():
        b = entry["buckets"]
        if not b or not math.isinf(b[-1][0]):
            sys.exit(f"{fmt}: {f.name}{dict(key)}: no le=\"+Inf\" bucket last")
        if b[-1][1] != entry["count"]:
            sys.exit(f"{fmt}: {f.name}{dict(key)}: +Inf bucket {b[-1][1]} != _count {entry['count']}")
        for (le1, c1), (le2, c2) in zip(b, b[1:]):
            if not (le1 < le2 and c1 <= c2):
                sys.exit(f"{fmt}: {f.name}{dict(key)}: buckets not cumulative at le={le1}..{le2}")
print(json.dumps(out))
"#;

fn parse(format: &str, body: &str) -> Value {
    let dir = latency_lab::guard::Scratch::new("runqlat-parsers").expect("a scratch dir");
    let path = dir.path().join(format!("metrics.{format}"));
    std::fs::write(&path, body).expect("writing the scrape");
    let out = Command::new(PYTHON)
        .args(["-c", PARSE, format])
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("{PYTHON}: {e} (run `cargo xtask setup`)"));
    assert!(
        out.status.success(),
        "the official {format} parser rejected the daemon's scrape: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    serde_json::from_slice(&out.stdout).expect("the parse script's JSON")
}

/// `name{labels}` of every sample, labels sorted: what two formats must agree on. `le` is
/// compared as a number: text writes Go's shortest form (`1`, `1.52587890625e-05`), OpenMetrics
/// (and Prometheus's protobuf parser) a float form (`1.0`, `0.0000152587890625`).
fn series(parsed: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for family in parsed.as_object().expect("families").values() {
        for s in family["samples"].as_array().expect("samples") {
            let labels: BTreeSet<String> = s["labels"]
                .as_object()
                .expect("labels")
                .iter()
                .map(|(k, v)| match (k.as_str(), v.as_str().map(str::parse::<f64>)) {
                    ("le", Some(Ok(le))) => format!("le={le:e}"),
                    _ => format!("{k}={v}"),
                })
                .collect();
            out.insert(format!("{}{labels:?}", s["name"].as_str().expect("name")));
        }
    }
    out
}

fn histograms(parsed: &Value) -> BTreeSet<String> {
    parsed
        .as_object()
        .expect("families")
        .iter()
        .filter(|(_, f)| f["type"] == "histogram")
        .map(|(name, _)| name.clone())
        .collect()
}

#[test]
fn the_official_parsers_accept_every_text_format_the_daemon_serves() {
    // Per-cgroup histograms need a cgroup with delays: spinners oversubscribing every CPU.
    let daemon = Daemon::start(DAEMON, &["--interval", "1s", "--window", "2s"]).expect("latency-daemon run");
    let (tx, _rx) = std::sync::mpsc::channel();
    let crew = Crew::spawn(group("parsers", Body::Spin, 2 * cpus()), 3.0, &tx).expect("the workload");
    std::thread::sleep(Duration::from_secs(3));
    drop(crew);
    // One more drain, so both scrapes below read the same published exposition as far as it goes.
    std::thread::sleep(Duration::from_millis(1500));

    let default = web::get(&daemon.addr, "/metrics", &[("Accept", ACCEPT_DEFAULT)]).expect("a default scrape");
    assert_eq!(default.status, 200);
    let content_type = default.header("content-type").unwrap_or_default().to_owned();
    assert!(content_type.starts_with("application/openmetrics-text"), "Prometheus' default Accept got {content_type}");
    let text = web::get(&daemon.addr, "/metrics", &[("Accept", ACCEPT_TEXT)]).expect("a text scrape");
    assert_eq!(text.status, 200);
    assert!(text.header("content-type").unwrap_or_default().starts_with("text/plain"));

    let om = parse("openmetrics", &default.text());
    let plain = parse("text", &text.text());

    // Both carry every histogram we define, the delay histograms among them, with data.
    let want = ["runqlat_delay_seconds", "runqlat_cgroup_delay_seconds", "runqlat_drain_duration_seconds"];
    for parsed in [&om, &plain] {
        let have = histograms(parsed);
        for name in want {
            assert!(have.contains(name), "no histogram {name} in {have:?}");
        }
        let delays = &parsed["runqlat_delay_seconds"]["samples"];
        let count: f64 = delays
            .as_array()
            .expect("samples")
            .iter()
            .filter(|s| s["name"] == "runqlat_delay_seconds_count")
            .filter_map(|s| s["value"].as_f64())
            .sum();
        assert!(count > 0.0, "no delays counted under load");
    }
    assert_eq!(histograms(&om), histograms(&plain), "the two formats disagree on which families are histograms");

    // The same series in both formats (values move between the two scrapes; names and labels
    // must not), apart from what each format spells its own way.
    let only_om: Vec<_> = series(&om).difference(&series(&plain)).cloned().collect();
    let only_text: Vec<_> = series(&plain).difference(&series(&om)).cloned().collect();
    let formatting = |s: &&String| !s.contains("_created");
    let only_om: Vec<_> = only_om.iter().filter(formatting).collect();
    assert!(
        only_om.is_empty() && only_text.is_empty(),
        "series only in OpenMetrics: {only_om:?}; only in text: {only_text:?}"
    );
    check_exemplars(&om);
    daemon.stop().expect("a clean stop");
}

/// The OpenMetrics parser read each reason's exemplar on `runqlat_delay_seconds`: on the first
/// bucket whose `le` holds its value, labelled with the task (tid, comm, maybe pod), within
/// OpenMetrics's 128 characters, stamped within the last minute.
fn check_exemplars(om: &Value) {
    let samples = om["runqlat_delay_seconds"]["samples"].as_array().expect("samples");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs_f64();
    let mut seen = Vec::new();
    let mut previous_le: Option<(String, f64)> = None;
    for s in samples.iter().filter(|s| s["name"] == "runqlat_delay_seconds_bucket") {
        let reason = s["labels"]["reason"].as_str().expect("a reason").to_owned();
        let le: f64 = s["labels"]["le"].as_str().and_then(|v| v.parse().ok()).expect("le");
        let below = previous_le.take().filter(|(r, _)| *r == reason).map_or(0.0, |p| p.1);
        previous_le = Some((reason.clone(), le));
        let x = &s["exemplar"];
        if x.is_null() {
            continue;
        }
        let value = x["value"].as_f64().expect("a value");
        assert!(below < value && value <= le, "{reason}: exemplar {value} on le={le} (the bound below: {below})");
        let labels = x["labels"].as_object().expect("labels");
        let names: Vec<&str> = labels.keys().map(String::as_str).collect();
        assert!(names.iter().all(|n| ["tid", "comm", "pod"].contains(n)), "{reason}: labels {names:?}");
        assert!(labels["tid"].as_str().is_some_and(|t| t.parse::<u32>().is_ok()), "{reason}: tid in {labels:?}");
        let chars: usize =
            labels.iter().map(|(k, v)| k.chars().count() + v.as_str().unwrap_or("").chars().count()).sum();
        assert!(chars <= 128, "{reason}: {chars} characters of labels");
        let at = x["timestamp"].as_f64().expect("a timestamp");
        assert!(at <= now && now - at < 60.0, "{reason}: exemplar stamped {at}, now {now}");
        seen.push(reason);
    }
    let distinct: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), seen.len(), "more than one exemplar for a reason: {seen:?}");
    assert!(!seen.is_empty(), "no exemplar on runqlat_delay_seconds after a loaded window");
}

/// What any unprivileged task may call itself (`prctl(PR_SET_NAME)`), and what the exemplar says.
const HOSTILE: &str = r#"a"b\c"#;
const HOSTILE_PLAIN: &str = "a_b_c";

fn spawn(argv: &[&str], what: &str) -> Proc {
    let mut command = Command::new(argv[0]);
    command.args(&argv[1..]).stdout(Stdio::null()).stderr(Stdio::null());
    Proc::spawn(&mut command, what).unwrap_or_else(|e| panic!("{e:#}"))
}

/// The comm of the last closed window's worst wakeup, as `/api/v1/snapshot` has it.
fn worst_wakeup_comm(daemon: &Daemon) -> Option<String> {
    let r = daemon.get("/api/v1/snapshot").ok().filter(|r| r.status == 200)?;
    let v: Value = serde_json::from_slice(&r.body).expect("snapshot JSON");
    let worst = v["window_max"]
        .as_array()?
        .iter()
        .filter(|m| m["reason"] == "wakeup")
        .max_by_key(|m| m["delay_ns"].as_u64().unwrap_or(0))?;
    Some(worst["victim"]["comm"].as_str()?.to_owned())
}

/// The wakeup exemplar's comm in a parsed OpenMetrics scrape.
fn exemplar_comm(om: &Value) -> Option<String> {
    om["runqlat_delay_seconds"]["samples"].as_array()?.iter().find_map(|s| {
        (s["labels"]["reason"] == "wakeup").then(|| s["exemplar"]["labels"]["comm"].as_str().map(str::to_owned))?
    })
}

/// The comms on `runqlat.delay`'s exemplars in one OTLP request, as OpenTelemetry's classes read it.
fn otlp_exemplar_comms(body: &[u8]) -> Vec<String> {
    let request = otlp::decode(body).unwrap_or_else(|e| panic!("{e:#}"));
    let mut out = Vec::new();
    for m in otlp::metrics(&request).into_iter().filter(|m| m["name"] == "runqlat.delay") {
        for kind in ["exponentialHistogram", "histogram"] {
            for point in m[kind]["dataPoints"].as_array().into_iter().flatten() {
                for x in point["exemplars"].as_array().into_iter().flatten() {
                    for a in x["filteredAttributes"].as_array().into_iter().flatten() {
                        if a["key"] == "comm" {
                            out.extend(a["value"]["stringValue"].as_str().map(str::to_owned));
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn a_worst_waiter_named_with_a_quote_and_a_backslash_breaks_no_parser() {
    let receiver = OtlpReceiver::start(None).unwrap();
    let url = receiver.url();
    let daemon = Daemon::start(
        DAEMON,
        &["--interval", "1s", "--window", "2s", "--otlp.endpoint", &url, "--otlp.interval", "1s"],
    )
    .expect("latency-daemon run");
    // Debian's 2.42 scrapes OpenMetrics: Prometheus's own (Go) parser, exemplars stored.
    let prometheus = Prometheus::start_shipped(&Setup::debian().with_features(&["exemplar-storage"]), &daemon.addr)
        .expect("Debian's prometheus 2.42");
    let start = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs_f64();

    // The victim wakes every millisecond behind a nice −10 hog on one CPU: the longest wakeup
    // waits, most windows' worst.
    let cpu = (cpus() - 1).to_string();
    let hog = spawn(&["taskset", "-c", &cpu, "nice", "-n", "-10", "sh", "-c", "while :; do :; done"], "the hog");
    let script = format!("$0 = '{}'; select(undef, undef, undef, 0.001) while 1", HOSTILE.replace('\\', "\\\\"));
    let victim = spawn(&["taskset", "-c", &cpu, "nice", "-n", "19", "perl", "-e", &script], "the victim");

    // Until the JSON API names it exactly and the OpenMetrics exemplar names it plainly; every
    // scrape meanwhile parses with both of prometheus_client's parsers.
    let (mut exact, mut plain) = (false, false);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(exact && plain) {
        assert!(Instant::now() < deadline, "{HOSTILE} never the worst waiter: JSON {exact}, exemplar {plain}");
        exact |= worst_wakeup_comm(&daemon).as_deref() == Some(HOSTILE);
        let scrape = web::get(&daemon.addr, "/metrics", &[("Accept", ACCEPT_DEFAULT)]).expect("a default scrape");
        let om = parse("openmetrics", &scrape.text());
        let comm = exemplar_comm(&om);
        assert_ne!(comm.as_deref(), Some(HOSTILE), "the exemplar carries the name as it is");
        plain |= comm.as_deref() == Some(HOSTILE_PLAIN);
        let text = web::get(&daemon.addr, "/metrics", &[("Accept", ACCEPT_TEXT)]).expect("a text scrape");
        parse("text", &text.text());
        std::thread::sleep(Duration::from_millis(300));
    }

    // Prometheus stored it, and never failed a scrape.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let health = prometheus.target_health().expect("prometheus targets");
        assert!(!health.contains("\"down\""), "Prometheus failed a scrape: {health}");
        let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs_f64();
        let series = prometheus
            .query_exemplars("runqlat_delay_seconds_bucket{reason=\"wakeup\"}", start, now + 1.0)
            .unwrap_or_else(|e| panic!("{e:#}"));
        let stored = series
            .iter()
            .flat_map(|s| s["exemplars"].as_array().cloned().unwrap_or_default())
            .any(|x| x["labels"]["comm"] == HOSTILE_PLAIN);
        if stored {
            break;
        }
        assert!(Instant::now() < deadline, "Prometheus stored no exemplar named {HOSTILE_PLAIN}: {series:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    // OpenTelemetry's classes read the pushes, the exemplar named as in the scrape (each push
    // carries the latest closed window's, so one of the next few has it).
    let mut named = Vec::new();
    let mut read = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !named.iter().any(|c| c == HOSTILE_PLAIN) {
        assert!(Instant::now() < deadline, "no pushed exemplar named {HOSTILE_PLAIN} in {read} pushes: {named:?}");
        let pushed = receiver.received();
        for push in &pushed[read..] {
            named.extend(otlp_exemplar_comms(&push.body));
        }
        read = pushed.len();
        assert!(!named.iter().any(|c| c == HOSTILE), "a pushed exemplar carries the name as it is: {named:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(victim);
    drop(hog);
    drop(prometheus);
    daemon.stop().expect("a clean stop");
}
