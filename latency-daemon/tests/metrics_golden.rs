//! The metrics schema, pinned: a fixed exposition (every family populated, hostile label values
//! included) encodes to the committed fixtures in `tests/golden/`, byte for byte, as Prometheus text,
//! as OpenMetrics, and as protobuf (decoded to text: the native histograms' spans and deltas).
//! Root-free. A difference means a metric name, label, help text, bucket or
//! value changed: if that is intended, regenerate with
//! `UPDATE_GOLDEN=1 cargo test -p latency-daemon --test metrics_golden` and review the diff.
//! `cargo xtask test` also runs `promtool check metrics` on the text fixture. The reference table
//! in docs/metrics.md is rendered from the same text encoding (`reference`) and regenerated the same way.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "metrics_golden/otlp_reference.rs"]
mod otlp_reference;
#[path = "metrics_golden/reference.rs"]
mod reference;

use std::{path::PathBuf, sync::Arc};

use latency_common::{
    CpuStats, Discard, Lost, Reason, WindowMax,
    buckets::bucket_of,
    knobs::Clock,
    maps::{Cause, CgroupHist, cgroup_bucket},
};
use latency_daemon::{
    config::Config,
    metrics::{Format, Instruments, Metrics},
    model::{
        container::ContainerLabels,
        exposition::{DelayExemplar, Exposition, ProcessSample},
        report::Meta,
        snapshot::{CpuMax, Snapshot},
        waits::WaitsNow,
        wall::WallClock,
        window::Window,
    },
};
use tokio::sync::watch;

const S: u64 = 1_000_000_000;

const CONTAINER_ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const POD_PATH: &str = "/kubepods/besteffort/podaaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Delays (ns) of each reason: the zero bucket, µs to s, and one beyond the top native bucket.
const WAKEUP: &[u64] = &[500, 953, 954, 1_000, 2_000, 4_500, 10_000, 250_000, 1_000_000];
const PREEMPT: &[u64] = &[3_000, 16_000_000, 16_500_000, 148_114_000, 2_100_000_000, 4_000 * S];

fn comm(s: &str) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[..s.len()].copy_from_slice(s.as_bytes());
    c
}

/// Each delay's cause in turn: throttled, irq_steal, same, other, kernel, idle, throttled, …
fn cgroup_hist(delays: &[u64]) -> CgroupHist {
    let mut h = CgroupHist::ZERO;
    for (i, &d) in delays.iter().enumerate() {
        h.buckets[cgroup_bucket(bucket_of(d))] += 1;
        h.sum_ns += d;
        h.waited_ns[i % Cause::COUNT] += d;
    }
    h
}

/// A cgroup whose tasks held others back for `held_ns`.
fn holding(h: CgroupHist, held_ns: u64) -> CgroupHist {
    CgroupHist { held_others_ns: held_ns, ..h }
}

/// Two CPUs, both reasons, losses and discards of every kind, a closed window with its maxima,
/// four cgroup series (one with a hostile name, one a Kubernetes container), two active alerts.
fn exposition() -> Exposition {
    let config = Config::default();
    let start = Snapshot::empty(10 * S, 2);
    let mut end = Snapshot::empty(25 * S, 2);
    for (reason, delays) in [(Reason::Wakeup, WAKEUP), (Reason::Preempt, PREEMPT)] {
        let h = &mut end.histograms[reason as usize];
        for &d in delays {
            h.buckets[bucket_of(d)] += 1;
            h.sum_ns += d;
        }
    }
    end.cpus[0] = CpuStats {
        switches: 1_000,
        voluntary: 600,
        involuntary: 300,
        idle_ns: 4 * S,
        idle_since_ns: 24 * S,
        last_next: 0,
        running_since_ns: 24 * S,
        running_cgroup: 7,
        unsplit: 3,
        waited_ns: [S / 2, S / 100, S / 10, S / 5, S / 50, S / 20],
        discarded: [1; Discard::COUNT],
        lost: [2; Lost::COUNT],
    };
    end.cpus[1] = CpuStats { switches: 10, voluntary: 7, involuntary: 2, idle_ns: 14 * S, ..CpuStats::default() };
    end.irq_ns = Some(vec![S / 4, 3 * S]);
    end.steal_ns = Some(vec![(0, 3 * S / 2), (1, 0)]);
    end.cgroups = vec![(1, cgroup_hist(WAKEUP)), (7, cgroup_hist(PREEMPT))];
    let mut max = WindowMax::ZERO;
    max.epoch = 0;
    max.delay_ns = 148_114_000;
    max.end_ns = 20 * S;
    max.victim_tid = 43;
    max.victim_tgid = 42;
    max.victim_comm = comm("victim");
    max.prev_tid = 7;
    max.prev_comm = comm("hog");
    max.reason = Reason::Preempt as u32;
    let wakeup_max = WindowMax { delay_ns: 1_000_000, reason: Reason::Wakeup as u32, ..max };
    let maxima = [(Reason::Preempt, CpuMax { cpu: 1, max }), (Reason::Wakeup, CpuMax { cpu: 0, max: wakeup_max })];
    let meta = Meta {
        kernel: "6.18.0-golden".into(),
        wall: WallClock::new(10 * S, 1_700_000_000 * S),
        filter: Vec::new(),
        clock: Clock::Monotonic,
    };
    let window = Window::close(&start, &end, &maxima, &meta);
    Exposition {
        version: "0.0.0-golden",
        revision: "0123456789ab",
        bpf: "fedcba987654",
        kernel: "6.18.0-golden".into(),
        clock: Clock::Monotonic,
        features: vec![
            ("run_queue_clock", "off"),
            ("per_cgroup", "on"),
            ("attribution", "unavailable"),
            ("queue_depth", "unavailable"),
            ("wait_scan", "on"),
        ],
        window_seconds: config.window.as_secs_f64(),
        classic: config.classic_buckets.clone(),
        cgroup_classic: config.cgroup_buckets.clone(),
        snapshot: Some(end),
        window: Some(Arc::new(window)),
        // The window's worst waits (its maxima, 10 s after the wall clock's base): the wakeup of a
        // pod's task with a hostile comm, the preemption of a task in no pod.
        exemplars: [
            Some(DelayExemplar {
                delay_ns: 1_000_000,
                unix_ns: 1_700_000_010 * S,
                tid: 44,
                comm: "a\"b\\c\nd".into(),
                pod: "web-0".into(),
            }),
            Some(DelayExemplar {
                delay_ns: 148_114_000,
                unix_ns: 1_700_000_010 * S + 250_000_000,
                tid: 43,
                comm: "victim".into(),
                pod: String::new(),
            }),
        ],
        cgroups: vec![
            ("/system.slice/web.service".into(), cgroup_hist(PREEMPT)),
            ("/we\"ird\\name with space\nand a line".into(), cgroup_hist(&WAKEUP[..3])),
            (POD_PATH.into(), holding(cgroup_hist(&WAKEUP[3..5]), 16_250_000)),
            ("other".into(), cgroup_hist(&WAKEUP[5..])),
        ],
        containers: [(
            POD_PATH.to_string(),
            ContainerLabels {
                namespace: "shop".into(),
                pod: "web-0".into(),
                container: "nginx".into(),
                container_id: CONTAINER_ID.into(),
            },
        )]
        .into(),
        containers_unresolved: 6,
        late_window_writes: 1,
        cgroups_pruned: 4,
        alerts_active: vec![(Reason::Preempt, "/system.slice/web.service".into()), (Reason::Wakeup, POD_PATH.into())],
        alerts_total: [2, 5],
        alerts_suppressed: 3,
        drains: 15,
        drain_errors: 1,
        drain_cpu_seconds: 0.0015,
        last_drain_unix: 1_700_000_015.0,
        // A stall in progress: a task of the pod has waited 1.25 s, two others less.
        waits: Some(Arc::new(WaitsNow {
            oldest_ns: [1_250_000_000, 3_000_000],
            over: vec![(0, 3), (10_000_000, 1)],
            cgroups: vec![
                ("/system.slice/web.service".into(), 3_000_000),
                ("/we\"ird\\name with space\nand a line".into(), 0),
                (POD_PATH.into(), 1_250_000_000),
                ("other".into(), 40_000),
            ],
            per_cpu: vec![(1, 1_250_000_000, 43)],
            longest: Vec::new(),
            scans: 15,
            scan_errors: 1,
            scan_seconds: 0.0042,
        })),
        ..Exposition::default()
    }
}

fn process() -> Option<ProcessSample> {
    Some(ProcessSample { cpu_seconds: 1.5, resident_bytes: 25 << 20, start_time_unix: Some(1_699_999_000.25) })
}

/// A fresh registry per format: the encode-duration histogram counts earlier encodes.
fn encode_bytes(format: Format) -> Vec<u8> {
    let (_published, latest) = watch::channel(Arc::new(exposition()));
    let instruments = Instruments::default();
    // An OTLP exporter that sent one batch, dropped one and is retrying after a 503.
    instruments.push.enable();
    instruments.push.sent(12_345, 1_700_000_015_250);
    instruments.push.dropped();
    instruments.push.failed(3);
    instruments.push.set_queued(2);
    // A capture recorder that wrote two captures, suppressed one and rotated one out.
    instruments.capture.enable();
    instruments.capture.written();
    instruments.capture.written();
    instruments.capture.suppressed();
    instruments.capture.removed(1);
    let metrics = Metrics::new(latest, &instruments, process);
    metrics.encode(format).expect("encoding cannot fail on a fixed exposition").1
}

fn encode(format: Format) -> String {
    String::from_utf8(encode_bytes(format)).expect("text formats are UTF-8")
}

/// The length-delimited `MetricFamily` messages, one debug-printed family after another.
fn decoded_protobuf() -> String {
    use prometheus_client::encoding::prometheus_protobuf::prometheus_data_model::MetricFamily;
    use prost::Message as _;
    let bytes = encode_bytes(Format::Protobuf);
    let mut rest = bytes.as_slice();
    let mut out = String::new();
    while !rest.is_empty() {
        let family = MetricFamily::decode_length_delimited(&mut rest).expect("a length-delimited MetricFamily");
        out.push_str(&format!("{family:#?}\n"));
    }
    out
}

fn check(file: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(file);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if let Some((line, fixture, encoded)) = first_difference(&expected, actual) {
        panic!(
            "{} differs from the encoding at line {line}:\n  fixture: {fixture:?}\n  encoded: {encoded:?}\n\
             (if the change is intended: UPDATE_GOLDEN=1 cargo test -p latency-daemon --test metrics_golden)",
            path.display(),
        );
    }
}

/// The first line (1-based) where two texts differ, and that line of each (`<end>` past the end).
fn first_difference<'a>(a: &'a str, b: &'a str) -> Option<(usize, &'a str, &'a str)> {
    if a == b {
        return None;
    }
    let at = a.lines().zip(b.lines()).position(|(x, y)| x != y);
    let at = at.unwrap_or_else(|| a.lines().count().min(b.lines().count()));
    Some((at + 1, a.lines().nth(at).unwrap_or("<end>"), b.lines().nth(at).unwrap_or("<end>")))
}

#[test]
fn prometheus_text_matches_the_fixture() {
    check("metrics.prom", &encode(Format::Text));
}

#[test]
fn openmetrics_matches_the_fixture() {
    check("metrics.openmetrics", &encode(Format::OpenMetrics));
}

#[test]
fn protobuf_matches_the_fixture() {
    check("metrics.protobuf.txt", &decoded_protobuf());
}

/// The fixture is not vacuous: every family the daemon documents is in it.
#[test]
fn every_family_is_present() {
    let text = encode(Format::Text);
    for family in [
        "runqlat_build_info",
        "runqlat_delay_seconds",
        "runqlat_context_switches_total",
        "runqlat_cpu_idle_seconds_total",
        "runqlat_lost_total",
        "runqlat_untraced_switches_total",
        "runqlat_discarded_total",
        "runqlat_delay_window_max_seconds",
        "runqlat_delay_window_seconds",
        "runqlat_cgroup_delay_seconds",
        "runqlat_alert_active",
        "runqlat_alerts_total",
        "runqlat_alerts_suppressed_total",
        "runqlat_drains_total",
        "runqlat_drain_errors_total",
        "runqlat_drain_cpu_seconds_total",
        "runqlat_cgroups_pruned_total",
        "runqlat_last_drain_timestamp_seconds",
        "runqlat_drain_duration_seconds",
        "runqlat_scrape_encode_duration_seconds",
        "runqlat_http_requests_total",
        "runqlat_http_connections",
        "runqlat_alert_notifications_sent_total",
        "runqlat_alert_notifications_failed_total",
        "runqlat_alert_notifications_dropped_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
    ] {
        assert!(text.lines().any(|l| l.starts_with(&format!("# TYPE {family} "))), "{family} missing:\n{text}");
    }
}

/// A file of the workspace, which holds this crate.
fn workspace_file(path: &str) -> PathBuf {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().expect("the crate sits in the workspace").join(path)
}

/// docs/metrics.md's generated block is the table the daemon's own text encoding renders to.
#[test]
fn docs_reference_matches_the_encoding() {
    let path = workspace_file("docs/metrics.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let table = reference::table(&encode(Format::Text));
    let expected = reference::with_table(&doc, &table)
        .unwrap_or_else(|| panic!("{} has no `{}` … `{}` block", path.display(), reference::BEGIN, reference::END));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &expected).unwrap();
        return;
    }
    if let Some((line, in_doc, encoded)) = first_difference(&doc, &expected) {
        panic!(
            "{}'s metrics reference is stale at line {line}:\n  doc:     {in_doc:?}\n  encoded: {encoded:?}\n\
             (regenerate: UPDATE_GOLDEN=1 cargo test -p latency-daemon --test metrics_golden)",
            path.display(),
        );
    }
}

/// The reference is complete: every family named in src/metrics/families/ is in the fixture's
/// encoding (a family the fixture leaves empty would be missing from the table, or lose its labels).
#[test]
fn every_family_defined_is_in_the_reference() {
    let path = workspace_file("latency-daemon/src/metrics/families");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .map(|entry| entry.unwrap_or_else(|e| panic!("{}: {e}", path.display())).path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    let source: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display())))
        .collect::<Vec<_>>()
        .join("\n");
    let families = reference::families(&encode(Format::Text));
    let defined = reference::defined_names(&source);
    assert!(defined.len() >= 30, "found only {defined:?} in {}", path.display());
    for name in defined {
        let total = format!("{name}_total");
        let Some(f) = families.iter().find(|f| f.name == name || (f.kind == "counter" && f.name == total)) else {
            panic!("{name} is defined in {} but the golden fixture does not encode it", path.display())
        };
        assert!(f.samples > 0, "{} has no sample in the golden fixture, so its labels are unknown", f.name);
    }
}

/// The hand-written notes in docs/metrics.md name only metrics that exist.
#[test]
fn docs_name_only_encoded_metrics() {
    let path = workspace_file("docs/metrics.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let unknown = reference::unknown_names(&doc, &reference::families(&encode(Format::Text)));
    assert!(unknown.is_empty(), "{} names metrics the daemon does not serve: {unknown:?}", path.display());
}

/// docs/otlp.md's mapping table is what the exporter sends for the fixture: every family, its
/// OTLP name, unit, type and attributes (a family the translation dropped would be a short table).
#[test]
fn docs_otlp_mapping_matches_the_translation() {
    use latency_daemon::export::otlp::translate::{Times, metrics};
    let (_published, latest) = watch::channel(Arc::new(exposition()));
    let e = latest.borrow().clone();
    let instruments = Instruments::default();
    instruments.push.enable();
    instruments.capture.enable();
    let m = Metrics::new(latest, &instruments, process);
    let families = m.families(&e).expect("encoding cannot fail on a fixed exposition");
    let prometheus: Vec<(String, Vec<String>)> = families
        .iter()
        .map(|f| {
            let mut labels: Vec<String> = Vec::new();
            for l in f.metric.iter().flat_map(|m| &m.label) {
                if !labels.contains(&l.name) {
                    labels.push(l.name.clone());
                }
            }
            (f.name.clone(), labels)
        })
        .collect();
    let otlp = metrics(&families, Times { start_ns: 1, time_ns: 2 }, None);
    assert_eq!(otlp.len(), families.len(), "every family is pushed");
    let table = otlp_reference::table(&prometheus, &otlp);
    let path = workspace_file("docs/otlp.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let expected = otlp_reference::with_table(&doc, &table).unwrap_or_else(|| {
        panic!("{} has no `{}` … `{}` block", path.display(), otlp_reference::BEGIN, otlp_reference::END)
    });
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &expected).unwrap();
        return;
    }
    assert!(
        doc == expected,
        "{}'s OTLP mapping is stale (regenerate: UPDATE_GOLDEN=1 cargo test -p latency-daemon --test metrics_golden)",
        path.display()
    );
}

/// What the exporter sends for the fixture, read by OpenTelemetry's own generated classes
/// (opentelemetry-proto, in the lab's venv): they parse it with no unknown field; each reason's
/// `runqlat.delay` is an exponential histogram at scale 3 holding every kernel bucket's count at
/// its index, the zero bucket as `zeroCount`; and the resource names the daemon.
#[test]
fn the_otlp_body_reads_back_with_opentelemetrys_own_classes() {
    use latency_common::buckets::{BUCKETS, ZERO_BUCKET, native_index};
    use latency_daemon::export::otlp::proto::KeyValue;
    use latency_daemon::export::otlp::{body, resource};
    let e = Arc::new(exposition());
    let (_published, latest) = watch::channel(Arc::clone(&e));
    let m = Metrics::new(latest, &Instruments::default(), process);
    let attributes: Vec<KeyValue> = resource(&[("k8s.node.name".into(), "node-1".into())], "host-1")
        .into_iter()
        .map(|(k, v)| KeyValue::string(k, v))
        .collect();
    let gzipped = body(&m, &e, attributes, 1_699_999_000_000_000_000, None, true).expect("a body");
    let request = latency_lab::oracle::otlp::decode(&gzipped).unwrap_or_else(|e| panic!("{e:#}"));
    let resource = latency_lab::oracle::otlp::resource(&request);
    for want in [
        ("service.name", "latency-daemon"),
        ("host.name", "host-1"),
        ("service.instance.id", "host-1"),
        ("k8s.node.name", "node-1"),
        ("os.type", "linux"),
    ] {
        assert!(resource.contains(&(want.0.to_owned(), want.1.to_owned())), "{want:?} in {resource:?}");
    }
    let metrics = latency_lab::oracle::otlp::metrics(&request);
    let delay = metrics.iter().find(|m| m["name"] == "runqlat.delay").expect("runqlat.delay");
    assert_eq!(delay["unit"], "s");
    let points = delay["exponentialHistogram"]["dataPoints"].as_array().expect("data points");
    let snapshot = e.snapshot.as_ref().expect("the fixture has a snapshot");
    assert_eq!(points.len(), Reason::ALL.len());
    for reason in Reason::ALL {
        let raw = &snapshot.histograms[reason as usize].buckets;
        let p = points
            .iter()
            .find(|p| p["attributes"][0]["value"]["stringValue"] == reason.name())
            .unwrap_or_else(|| panic!("no point for {}", reason.name()));
        let int = |v: &serde_json::Value| v.as_str().and_then(|s| s.parse::<i64>().ok()).or(v.as_i64()).unwrap_or(0);
        assert_eq!(p["scale"], 3);
        assert_eq!(int(&p["count"]) as u64, raw.iter().sum::<u64>());
        assert_eq!(int(&p["zeroCount"]) as u64, raw[ZERO_BUCKET]);
        assert_eq!(p["zeroThreshold"].as_f64(), Some(2f64.powi(-20)));
        assert_eq!(p["sum"].as_f64(), Some(snapshot.histograms[reason as usize].sum_ns as f64 / 1e9));
        assert_eq!(int(&p["timeUnixNano"]) as u64, (e.last_drain_unix * 1e9) as u64);
        let offset = p["positive"]["offset"].as_i64().unwrap_or(0);
        let counts: Vec<u64> =
            p["positive"]["bucketCounts"].as_array().into_iter().flatten().map(|c| int(c) as u64).collect();
        for (k, &want) in raw.iter().enumerate().take(BUCKETS - 1).skip(1) {
            let i = i64::from(native_index(k).expect("a native bucket")) - 1;
            let got = usize::try_from(i - offset).ok().and_then(|n| counts.get(n)).copied().unwrap_or(0);
            assert_eq!(got, want, "{}: kernel bucket {k} (exponential index {i})", reason.name());
        }
        // The window's worst wait as the data point's exemplar, as the scrape shows it.
        let want = e.exemplars[reason as usize].as_ref().expect("the fixture has an exemplar per reason");
        let exemplars = p["exemplars"].as_array().expect("exemplars on the data point");
        assert_eq!(exemplars.len(), 1, "{exemplars:?}");
        let x = &exemplars[0];
        assert_eq!(x["asDouble"].as_f64(), Some(want.delay_ns as f64 / 1e9));
        assert_eq!(int(&x["timeUnixNano"]) as u64, want.unix_ns);
        let attributes: Vec<(String, String)> = x["filteredAttributes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                (
                    a["key"].as_str().unwrap_or_default().to_owned(),
                    a["value"]["stringValue"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        assert!(attributes.contains(&("tid".into(), want.tid.to_string())), "{attributes:?}");
        // As the scrape's exemplar has it: `"`, `\` and control characters made `_` (docs/metrics.md).
        let comm: String =
            want.comm.chars().map(|c| if c == '"' || c == '\\' || c.is_control() { '_' } else { c }).collect();
        assert!(attributes.contains(&("comm".into(), comm)), "{attributes:?}");
        if !want.pod.is_empty() {
            assert!(attributes.contains(&("k8s.pod.name".into(), want.pod.clone())), "{attributes:?}");
        }
    }
    // Every family is there, under its OTel name.
    assert_eq!(metrics.len(), m.families(&e).expect("families").len());
}
