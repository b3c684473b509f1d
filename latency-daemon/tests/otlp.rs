//! The OTLP push against receivers no one here wrote, and against one that misbehaves on purpose.
//! What a receiver stores for a drain equals, bucket for bucket, what a protobuf scrape of the
//! daemon showed for the same drain (matched by the drain's time, which stamps both):
//! VictoriaMetrics 1.112 as the receiver, and Prometheus 2.53 fed through vmagent (Debian's
//! Prometheus has no OTLP receiver of its own). The scripted receiver of the lab checks what the
//! push does when the receiver is down, slow, says 429 with Retry-After (also one asking for a
//! retry at once, which gets the backoff), refuses with 400 (logged once, counted each time), or
//! speaks TLS with a certificate we do not trust or asks for ours; and what a request carries
//! (headers, gzip, a body OpenTelemetry's own classes read). Root: real daemons.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use latency_lab::{
    daemon::Daemon,
    oracle::otlp,
    services::{
        Prometheus, Setup,
        otlp_receiver::{Answer, OtlpReceiver, Tls},
        victoria::{Victoria, VmAgent},
    },
    tls::Certs,
    web,
    workload::{Body, Crew, cpus, group},
};
use prometheus_client::encoding::prometheus_protobuf::prometheus_data_model::MetricFamily;
use prost::Message as _;

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");
const PROTOBUF: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited";

/// One reason's histogram as a protobuf scrape showed it, at the drain of `drain_ms`.
#[derive(Debug, Clone, PartialEq)]
struct Scraped {
    drain_ms: i64,
    count: u64,
    sum: f64,
    zero: u64,
    /// Native index → count (non-zero buckets only).
    buckets: BTreeMap<i32, u64>,
}

/// `runqlat_delay_seconds{reason}` and the drain's time from one protobuf scrape.
fn scrape(daemon: &Daemon, reason: &str) -> Scraped {
    let r = web::get(&daemon.addr, "/metrics", &[("Accept", PROTOBUF)]).expect("a protobuf scrape");
    let mut rest = r.body.as_slice();
    let mut families = Vec::new();
    while !rest.is_empty() {
        families.push(MetricFamily::decode_length_delimited(&mut rest).expect("a MetricFamily"));
    }
    let family = |name: &str| families.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no {name}"));
    let drain = family("runqlat_last_drain_timestamp_seconds").metric[0].gauge.as_ref().expect("a gauge").value;
    let metric = family("runqlat_delay_seconds")
        .metric
        .iter()
        .find(|m| m.label.iter().any(|l| l.name == "reason" && l.value == reason))
        .expect("the reason's histogram");
    let h = metric.histogram.as_ref().expect("a histogram");
    let mut buckets = BTreeMap::new();
    let (mut index, mut count, mut deltas) = (0i32, 0i64, h.positive_delta.iter());
    for (n, span) in h.positive_span.iter().enumerate() {
        index = if n == 0 { span.offset } else { index + span.offset };
        for _ in 0..span.length {
            count += deltas.next().copied().unwrap_or(0);
            if count > 0 {
                buckets.insert(index, count as u64);
            }
            index += 1;
        }
    }
    Scraped {
        drain_ms: (drain * 1000.0).round() as i64,
        count: h.sample_count,
        sum: h.sample_sum,
        zero: h.zero_count,
        buckets,
    }
}

/// Every drain's histogram for `span`, under load (scraped several times a drain, so that each
/// drain is seen): what a receiver must hold for the drains it was sent.
fn scrapes(daemon: &Daemon, reason: &str, span: Duration) -> Vec<Scraped> {
    let mut out: Vec<Scraped> = Vec::new();
    let end = Instant::now() + span;
    while Instant::now() < end {
        let s = scrape(daemon, reason);
        if out.last().is_none_or(|l| l.drain_ms != s.drain_ms) && s.count > 0 {
            out.push(s);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    out
}

/// The same drain: a receiver keeps milliseconds, which the float seconds may round either way.
fn same_drain(ms: i64, s: &Scraped) -> bool {
    (ms - s.drain_ms).abs() <= 1
}

/// `lower...upper` of a vmrange → the native index whose upper bound it is (2^(i/8)).
fn vmrange_index(range: &str) -> Option<i32> {
    let upper: f64 = range.split_once("...")?.1.parse().ok()?;
    Some((8.0 * upper.log2()).round() as i32)
}

/// The vmrange buckets of one reason at `ms`: the zero bucket's count (its range starts at 0,
/// written `0.000e+00`) and
/// the others by native index.
fn by_vmrange(series: &[(String, Vec<(i64, f64)>)], ms: i64) -> (u64, BTreeMap<i32, u64>) {
    let mut zero = 0;
    let mut buckets = BTreeMap::new();
    for (range, samples) in series {
        let Some(&(_, v)) = samples.iter().find(|(t, _)| *t == ms) else { continue };
        if v == 0.0 {
            continue;
        }
        let lower: Option<f64> = range.split_once("...").and_then(|(l, _)| l.parse().ok());
        if lower == Some(0.0) {
            zero += v as u64;
        } else {
            let i = vmrange_index(range).unwrap_or_else(|| panic!("vmrange {range}"));
            *buckets.entry(i).or_default() += v as u64;
        }
    }
    (zero, buckets)
}

/// Each stored drain (count samples, sum samples and vmrange buckets, by time in ms) that a
/// scrape saw has the scrape's count, sum, zero bucket and buckets; at least three are compared.
fn same_as_scraped(
    stored: &[(i64, f64)],
    sums: &[(i64, f64)],
    buckets: &[(String, Vec<(i64, f64)>)],
    scraped: &[Scraped],
) {
    let mut compared = 0;
    for &(ms, c) in stored {
        let Some(s) = scraped.iter().find(|s| same_drain(ms, s)) else { continue };
        assert_eq!(c as u64, s.count, "count at {ms}");
        let x = sums.iter().find(|(t, _)| *t == ms).expect("the sum of the same push").1;
        assert!((x - s.sum).abs() <= s.sum * 1e-12, "sum at {ms}: {x} vs {}", s.sum);
        let (zero, got) = by_vmrange(buckets, ms);
        assert_eq!(zero, s.zero, "zero bucket at {ms}");
        assert_eq!(got, s.buckets, "buckets at {ms} (native index → count)");
        compared += 1;
    }
    assert!(
        compared >= 3,
        "{compared} pushes matched a scraped drain: stored {stored:?}, scraped {:?}",
        scraped.iter().map(|s| s.drain_ms).collect::<Vec<_>>()
    );
}

fn load() -> Crew {
    let (tx, _rx) = std::sync::mpsc::channel();
    Crew::spawn(group("otlp", Body::Spin, 2 * cpus()), 0.5, &tx).expect("the workload")
}

#[test]
fn victoriametrics_holds_the_scraped_histogram_bucket_for_bucket() {
    let vm = Victoria::start().expect("VictoriaMetrics (cargo xtask setup)");
    let url = vm.otlp_url();
    let daemon = Daemon::start(DAEMON, &["--interval=1s", "--otlp.endpoint", &url, "--otlp.interval=1s"]).unwrap();
    let _crew = load();
    let scraped = scrapes(&daemon, "wakeup", Duration::from_secs(8));
    // What VictoriaMetrics stored of those drains, once it has them.
    std::thread::sleep(Duration::from_secs(3));
    let count = vm.export("runqlat_delay_seconds_count{reason=\"wakeup\"}").unwrap();
    let sum = vm.export("runqlat_delay_seconds_sum{reason=\"wakeup\"}").unwrap();
    let buckets: Vec<(String, Vec<(i64, f64)>)> = vm
        .export("runqlat_delay_seconds_bucket{reason=\"wakeup\"}")
        .unwrap()
        .into_iter()
        .map(|b| (b.labels["vmrange"].as_str().unwrap_or_default().to_owned(), b.samples))
        .collect();
    let stored = &count.first().expect("runqlat_delay_seconds_count arrived").samples;
    same_as_scraped(stored, &sum[0].samples, &buckets, &scraped);
    // The resource's attributes on every series, as VictoriaMetrics keeps them.
    let drains = vm.export("runqlat_drains_total").unwrap();
    let labels = &drains.first().expect("runqlat_drains_total arrived").labels;
    assert_eq!(labels["service_name"], "latency-daemon", "{labels}");
    assert_eq!(labels["os_type"], "linux", "{labels}");
}

#[test]
fn prometheus_holds_the_scraped_histogram_through_vmagent() {
    let setup = Setup::trixie_both().with_features(&["remote-write-receiver"]);
    let prometheus = Prometheus::start_setup(&setup, "global:\n  scrape_interval: 1m\n").expect("Prometheus 2.53");
    let agent = VmAgent::start(&format!("http://{}/api/v1/write", prometheus.addr)).expect("vmagent");
    let url = agent.otlp_url();
    let daemon = Daemon::start(DAEMON, &["--interval=1s", "--otlp.endpoint", &url, "--otlp.interval=1s"]).unwrap();
    let _crew = load();
    let started = Instant::now();
    let scraped = scrapes(&daemon, "wakeup", Duration::from_secs(8));
    // vmagent flushes every second; Prometheus keeps the raw samples a range selector returns.
    std::thread::sleep(Duration::from_secs(4));
    let window = format!("[{}s]", started.elapsed().as_secs() + 5);
    let raw = |q: &str| prometheus.query(&format!("{q}{window}")).unwrap();
    let samples = |series: &serde_json::Value| -> Vec<(i64, f64)> {
        series["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| Some(((v[0].as_f64()? * 1000.0).round() as i64, v[1].as_str()?.parse().ok()?)))
            .collect()
    };
    let count = raw("runqlat_delay_seconds_count{reason=\"wakeup\"}");
    let sum = raw("runqlat_delay_seconds_sum{reason=\"wakeup\"}");
    let buckets: Vec<(String, Vec<(i64, f64)>)> = raw("runqlat_delay_seconds_bucket{reason=\"wakeup\"}")
        .iter()
        .map(|series| (series["metric"]["vmrange"].as_str().unwrap_or_default().to_owned(), samples(series)))
        .collect();
    let stored = samples(count.first().expect("runqlat_delay_seconds_count arrived in Prometheus"));
    let sums = samples(sum.first().expect("runqlat_delay_seconds_sum arrived in Prometheus"));
    same_as_scraped(&stored, &sums, &buckets, &scraped);
    // `service.instance.id` is the host name on every series.
    let labels = &prometheus.query("runqlat_drains_total").unwrap()[0]["metric"];
    assert_eq!(labels["service_name"], "latency-daemon", "{labels}");
    assert!(labels["service_instance_id"].as_str().is_some_and(|h| !h.is_empty()), "{labels}");
}

/// A counter of the daemon's /metrics (text), 0 if absent.
fn counter(daemon: &Daemon, series: &str) -> f64 {
    web::sample(&daemon.metrics().unwrap(), series).unwrap_or(0.0)
}

fn wait_until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// While the receiver fails, the daemon measures and serves as ever: drains go on and a scrape
/// answers at once.
fn still_serving(daemon: &Daemon) {
    let drains = counter(daemon, "runqlat_drains_total");
    let started = Instant::now();
    let r = daemon.get("/metrics").unwrap();
    assert_eq!(r.status, 200);
    assert!(started.elapsed() < Duration::from_secs(1), "a scrape took {:?}", started.elapsed());
    wait_until("another drain", Duration::from_secs(5), || counter(daemon, "runqlat_drains_total") > drains);
}

#[test]
fn down_slow_throttling_or_refusing_receivers_cost_batches_not_measurements() {
    // Down: nothing listens on the port yet.
    let port = web::free_port().unwrap();
    let url = format!("http://127.0.0.1:{port}/v1/metrics");
    let daemon = Daemon::start(
        DAEMON,
        &["--interval=500ms", "--otlp.endpoint", &url, "--otlp.interval=500ms", "--otlp.queue=2", "--otlp.timeout=1s"],
    )
    .unwrap();
    wait_until("a connect failure and a dropped batch", Duration::from_secs(15), || {
        counter(&daemon, "runqlat_otlp_failed_attempts_total{why=\"connect\"}") > 0.0
            && counter(&daemon, "runqlat_otlp_exports_total{result=\"dropped\"}") > 0.0
    });
    assert!(counter(&daemon, "runqlat_otlp_queued_batches") <= 2.0);
    still_serving(&daemon);
    assert_eq!(counter(&daemon, "runqlat_otlp_exports_total{result=\"sent\"}"), 0.0);

    // Up: the backoff (at most 30 s) ends and the queue drains.
    let receiver = OtlpReceiver::start_on(port, None).unwrap();
    wait_until("pushes taken after the receiver came up", Duration::from_secs(40), || {
        counter(&daemon, "runqlat_otlp_exports_total{result=\"sent\"}") >= 3.0
    });
    let dropped = counter(&daemon, "runqlat_otlp_exports_total{result=\"dropped\"}");

    // Slow: a stall beyond --otlp.timeout is a timeout, retried; serving goes on meanwhile.
    let before = receiver.received().len();
    receiver.answer(&[Answer::Stall(Duration::from_secs(3))]);
    wait_until("a timeout", Duration::from_secs(10), || {
        counter(&daemon, "runqlat_otlp_failed_attempts_total{why=\"timeout\"}") > 0.0
    });
    still_serving(&daemon);
    wait_until("pushes after the stall", Duration::from_secs(20), || receiver.received().len() >= before + 3);

    // 429 with Retry-After: 2: the same batch again, no sooner than 2 s later.
    let n = receiver.received().len();
    receiver.answer(&[Answer::RetryAfter(429, 2)]);
    let got = receiver.wait_for(n + 2, Duration::from_secs(15)).unwrap();
    let (throttled, next) = (&got[n], &got[n + 1]);
    let gap = next.at.duration_since(throttled.at);
    assert!(gap >= Duration::from_secs(2), "retried after {gap:?}, Retry-After said 2 s");
    assert!(gap < Duration::from_secs(4), "retried only after {gap:?}");
    assert_eq!(next.body, throttled.body, "the throttled batch is sent again");
    assert!(counter(&daemon, "runqlat_otlp_failed_attempts_total{why=\"status\"}") >= 1.0);

    // 400, five batches in a row: each refused for good, counted, not sent again; logged once.
    let n = receiver.received().len();
    receiver.answer(&[Answer::Status(400); 5]);
    let got = receiver.wait_for(n + 6, Duration::from_secs(15)).unwrap();
    for pair in got[n..n + 6].windows(2) {
        assert_ne!(pair[1].body, pair[0].body, "a refused batch is not retried");
    }
    wait_until("the refusals counted", Duration::from_secs(5), || {
        counter(&daemon, "runqlat_otlp_exports_total{result=\"rejected\"}") == 5.0
    });
    // Every batch is accounted for: what the receiver answered 2xx is what the daemon counts as
    // sent, and the batches it went without while stalled or throttled are counted as dropped.
    wait_until("the sent counter equal to the receiver's 2xx answers", Duration::from_secs(5), || {
        counter(&daemon, "runqlat_otlp_exports_total{result=\"sent\"}") as usize == receiver.accepted()
    });
    assert!(counter(&daemon, "runqlat_otlp_exports_total{result=\"dropped\"}") >= dropped);
    still_serving(&daemon);
    let (_, log) = daemon.stop_with_log().unwrap();
    assert!(log.iter().any(|l| l.contains("takes pushes again")), "recovery logged: {log:?}");
    let refusals: Vec<&String> =
        log.iter().filter(|l| l.contains("refused a batch") || l.contains("refused batches")).collect();
    assert_eq!(refusals.len(), 1, "five refusals in a row, logged once (the counter has them all): {refusals:?}");
    assert!(refusals[0].contains("status 400"), "{refusals:?}");
}

/// A receiver that answers 429 or 503 asking for a retry at once (`Retry-After: 0`, a date long
/// past, or words no client can read) gets the backoff, not a retry per answer: the attempts
/// are at least 1 s, 2 s, 4 s … apart, at most 10 in 30 s (checked over 12 s: 4).
#[test]
fn retry_now_answers_get_the_backoff_not_a_storm() {
    const SPAN: Duration = Duration::from_secs(12);
    let receiver = OtlpReceiver::start(None).unwrap();
    let past = "Sun, 06 Nov 1994 08:49:37 GMT";
    // Words first, then 0 and past dates, 429 and 503 taking turns: the backoff covers each.
    let now = [
        Answer::RetryAfter(503, 0),
        Answer::RetryAfterText(429, past),
        Answer::RetryAfter(429, 0),
        Answer::RetryAfterText(503, past),
    ];
    let storm: Vec<Answer> =
        std::iter::once(Answer::RetryAfterText(429, "soon")).chain(now.into_iter().cycle().take(600)).collect();
    receiver.answer(&storm);
    let url = receiver.url();
    let daemon =
        Daemon::start(DAEMON, &["--interval=500ms", "--otlp.endpoint", &url, "--otlp.interval=500ms"]).unwrap();
    let first = receiver.wait_for(1, Duration::from_secs(15)).unwrap()[0].at;
    std::thread::sleep((first + SPAN).saturating_duration_since(Instant::now()));
    let got: Vec<_> = receiver.received().into_iter().filter(|r| r.at < first + SPAN).collect();
    let gaps: Vec<Duration> = got.windows(2).map(|w| w[1].at.duration_since(w[0].at)).collect();
    let rate = got.len() as f64 / SPAN.as_secs_f64();
    eprintln!("{} attempts in {SPAN:?} ({rate:.2}/s), first gaps {:?}", got.len(), &gaps[..gaps.len().min(8)]);
    assert!(got.len() <= 4, "{} attempts in {SPAN:?}: the backoff was skipped", got.len());
    let mut backoff = Duration::from_secs(1);
    for (k, gap) in gaps.iter().enumerate() {
        assert!(*gap >= backoff, "attempt {} came {gap:?} after the one before, the backoff was {backoff:?}", k + 2);
        backoff *= 2;
    }
    assert!(got.iter().all(|r| r.body == got[0].body), "the same batch, retried");
    assert!(got.len() >= 3, "retried at all: {} attempts", got.len());
    still_serving(&daemon);
}

#[test]
fn tls_headers_and_the_body_as_opentelemetry_reads_it() {
    let ours = Certs::new().unwrap();
    let theirs = Certs::new().unwrap();
    // A receiver whose certificate our CA file does not vouch for: TLS failures, nothing taken.
    let stranger = OtlpReceiver::start(Some(Tls { certs: theirs.dir(), client_ca: None })).unwrap();
    let ca = ours.path("ca.pem").display().to_string();
    let url = stranger.url();
    let daemon = Daemon::start(
        DAEMON,
        &["--interval=500ms", "--otlp.endpoint", &url, "--otlp.interval=500ms", "--otlp.ca-file", &ca],
    )
    .unwrap();
    wait_until("a TLS failure", Duration::from_secs(10), || {
        counter(&daemon, "runqlat_otlp_failed_attempts_total{why=\"tls\"}") > 0.0
    });
    still_serving(&daemon);
    assert!(stranger.received().is_empty());
    drop(daemon);

    // Our CA, a receiver that requires a client certificate, a header from the environment.
    let receiver = OtlpReceiver::start(Some(Tls { certs: ours.dir(), client_ca: Some(&ours.path("ca.pem")) })).unwrap();
    let url = receiver.url();
    let (cert, key) = (ours.path("client.pem").display().to_string(), ours.path("client.key").display().to_string());
    let args = ["--interval=500ms", "--otlp.endpoint", &url, "--otlp.interval=500ms", "--otlp.ca-file", &ca];
    let without = Daemon::start(DAEMON, &args).unwrap();
    wait_until("the handshake refused without a client certificate", Duration::from_secs(10), || {
        counter(&without, "runqlat_otlp_failed_attempts_total{why=\"tls\"}") > 0.0
    });
    drop(without);
    let mut with_cert = args.to_vec();
    with_cert.extend(["--otlp.cert-file", &cert, "--otlp.key-file", &key]);
    let daemon = Daemon::start_under(
        DAEMON,
        &["env", "OTEL_EXPORTER_OTLP_HEADERS=x-api-key=S3CRET%2C1", "OTEL_SERVICE_NAME=runqlat-test"],
        &with_cert,
    )
    .unwrap();
    let got = receiver.wait_for(2, Duration::from_secs(15)).unwrap();
    let request = &got[1];
    assert_eq!(request.path, "/v1/metrics");
    assert_eq!(request.header("x-api-key"), Some("S3CRET,1"), "{:?}", request.headers);
    assert_eq!(request.header("content-type"), Some("application/x-protobuf"));
    assert_eq!(request.header("content-encoding"), Some("gzip"));
    assert!(request.body.starts_with(&[0x1f, 0x8b]), "a gzip body");
    wait_until("the push counted as sent", Duration::from_secs(5), || {
        counter(&daemon, "runqlat_otlp_exports_total{result=\"sent\"}") >= 2.0
    });
    let sent = counter(&daemon, "runqlat_otlp_sent_bytes_total") as usize;
    assert!(sent >= request.body.len(), "{sent} bytes counted as sent, one body is {}", request.body.len());

    // OpenTelemetry's own classes read the body: resource, and the delay histogram at scale 3.
    let decoded = otlp::decode(&request.body).unwrap_or_else(|e| panic!("{e:#}"));
    let resource = otlp::resource(&decoded);
    assert!(resource.contains(&("service.name".into(), "runqlat-test".into())), "{resource:?}");
    let metrics = otlp::metrics(&decoded);
    let delay = metrics.iter().find(|m| m["name"] == "runqlat.delay").expect("runqlat.delay");
    let points = delay["exponentialHistogram"]["dataPoints"].as_array().expect("data points");
    assert!(points.iter().all(|p| p["scale"] == 3), "{points:?}");
    assert!(metrics.iter().any(|m| m["name"] == "runqlat.drains" && m["sum"]["isMonotonic"] == true));

    let (_, log) = daemon.stop_with_log().unwrap();
    for line in &log {
        assert!(!line.contains("S3CRET"), "a log line shows the header: {line}");
    }
}
