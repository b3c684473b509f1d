//! Prometheus families (as `metrics::Metrics::families` encodes them for a scrape) in; the
//! OTLP metrics of one export out. Names and units follow from the Prometheus name, so each
//! family is still named once (in `metrics::families`): `runqlat_delay_seconds` is `runqlat.delay`
//! in seconds, and Prometheus's OTLP receiver turns it back into the same name. Native histograms
//! become exponential histograms of the same scale, bucket for bucket; classic ones explicit-bound
//! histograms; counters monotonic sums; gauges gauges. For delta temporality, [`Deltas`] keeps
//! each series' previous cumulative value.
use std::collections::HashMap;

use prometheus_client::encoding::prometheus_protobuf::prometheus_data_model as prom;

use super::proto::{
    Buckets, Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram, HistogramDataPoint,
    KeyValue, Metric, NumberDataPoint, Sum, Temporality, exemplar, metric::Data, number_data_point,
};

/// Label names with an OpenTelemetry semantic convention of their own (k8s and container
/// attributes); every other label keeps its name.
pub const ATTRIBUTES: [(&str, &str); 4] = [
    ("namespace", "k8s.namespace.name"),
    ("pod", "k8s.pod.name"),
    ("container", "k8s.container.name"),
    ("container_id", "container.id"),
];

/// Unit suffixes of Prometheus names and their UCUM units.
const UNITS: [(&str, &str); 2] = [("_seconds", "s"), ("_bytes", "By")];

/// The time stamps of one export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Times {
    /// When the counters started: the daemon's start (cumulative).
    pub start_ns: u64,
    /// The drain this export shows.
    pub time_ns: u64,
}

/// The OTel name and unit of a Prometheus family: the `_total` of a counter and a unit suffix
/// dropped, the namespace (`runqlat_`, `process_`) joined with a dot. Counters without a unit get
/// "1", gauges none (Prometheus would add `_ratio` for "1").
pub fn name_and_unit(prometheus: &str, counter: bool) -> (String, &'static str) {
    let mut name = if counter { prometheus.strip_suffix("_total").unwrap_or(prometheus) } else { prometheus };
    let mut unit = if counter { "1" } else { "" };
    for (suffix, ucum) in UNITS {
        if let Some(stem) = name.strip_suffix(suffix) {
            name = stem;
            unit = ucum;
            break;
        }
    }
    let otel = match name.split_once('_') {
        Some((namespace, rest)) if !rest.is_empty() => format!("{namespace}.{rest}"),
        _ => name.to_owned(),
    };
    (otel, unit)
}

/// The attribute name of a label.
pub fn attribute(label: &str) -> &str {
    ATTRIBUTES.iter().find(|(l, _)| *l == label).map_or(label, |(_, a)| a)
}

fn attributes(labels: &[prom::LabelPair]) -> Vec<KeyValue> {
    labels.iter().map(|l| KeyValue::string(attribute(&l.name), l.value.clone())).collect()
}

/// Each series' previous cumulative values, for delta temporality: counters by value, histograms
/// by count, sum and buckets (native by index, classic by position).
#[derive(Debug, Default)]
pub struct Deltas {
    previous: HashMap<(String, Vec<(String, String)>), Previous>,
    /// When the previous export was taken (the next delta's start).
    last_ns: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Previous {
    value: f64,
    count: u64,
    sum: f64,
    zero: u64,
    buckets: HashMap<i32, u64>,
}

impl Deltas {
    fn key(family: &str, labels: &[prom::LabelPair]) -> (String, Vec<(String, String)>) {
        (family.to_owned(), labels.iter().map(|l| (l.name.clone(), l.value.clone())).collect())
    }
}

/// Every family as OTLP metrics. `deltas`: Some for delta temporality (updated to this export).
pub fn metrics(families: &[prom::MetricFamily], times: Times, mut deltas: Option<&mut Deltas>) -> Vec<Metric> {
    let temporality = if deltas.is_some() { Temporality::Delta } else { Temporality::Cumulative } as i32;
    let start_ns = match &deltas {
        Some(d) => d.last_ns.unwrap_or(times.start_ns),
        None => times.start_ns,
    };
    let mut out = Vec::with_capacity(families.len());
    for family in families {
        let Some(first) = family.metric.first() else { continue };
        let counter = first.counter.is_some();
        let (name, unit) = name_and_unit(&family.name, counter);
        let data = if counter {
            let data_points = family
                .metric
                .iter()
                .filter_map(|m| {
                    let mut value = m.counter.as_ref()?.value;
                    if let Some(d) = deltas.as_deref_mut() {
                        let previous = d.previous.entry(Deltas::key(&family.name, &m.label)).or_default();
                        // A counter that went back was reset: all of it is new.
                        let delta = if value >= previous.value { value - previous.value } else { value };
                        previous.value = value;
                        value = delta;
                    }
                    Some(number(m, value, start_ns, times.time_ns))
                })
                .collect();
            Data::Sum(Sum { data_points, aggregation_temporality: temporality, is_monotonic: true })
        } else if first.gauge.is_some() {
            let data_points = family
                .metric
                .iter()
                .filter_map(|m| Some(number(m, m.gauge.as_ref()?.value, 0, times.time_ns)))
                .collect();
            Data::Gauge(Gauge { data_points })
        } else if let Some(h) = &first.histogram {
            let span = Times { start_ns, time_ns: times.time_ns };
            if is_native(h) {
                let data_points = histogram_points(family, &mut deltas, span, exponential);
                Data::ExponentialHistogram(ExponentialHistogram { data_points, aggregation_temporality: temporality })
            } else {
                let data_points = histogram_points(family, &mut deltas, span, explicit);
                Data::Histogram(Histogram { data_points, aggregation_temporality: temporality })
            }
        } else {
            // Summaries and untyped: we export none.
            continue;
        };
        out.push(Metric { name, description: family.help.clone(), unit: unit.to_owned(), data: Some(data) });
    }
    if let Some(d) = deltas {
        d.last_ns = Some(times.time_ns);
    }
    out
}

/// Each series of a histogram family as one data point of `point` over `span`, given the
/// series' previous values when deltas are kept.
fn histogram_points<P>(
    family: &prom::MetricFamily,
    deltas: &mut Option<&mut Deltas>,
    span: Times,
    point: fn(&prom::Metric, &prom::Histogram, Option<&mut Previous>, Times) -> P,
) -> Vec<P> {
    family
        .metric
        .iter()
        .filter_map(|m| {
            let previous =
                deltas.as_deref_mut().map(|d| d.previous.entry(Deltas::key(&family.name, &m.label)).or_default());
            Some(point(m, m.histogram.as_ref()?, previous, span))
        })
        .collect()
}

fn number(m: &prom::Metric, value: f64, start_ns: u64, time_ns: u64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attributes(&m.label),
        start_time_unix_nano: start_ns,
        time_unix_nano: time_ns,
        value: Some(number_data_point::Value::AsDouble(value)),
        exemplars: Vec::new(),
        flags: 0,
    }
}

/// A native histogram: schema, zero bucket or spans set (a classic one has none of them).
fn is_native(h: &prom::Histogram) -> bool {
    h.schema != 0 || h.zero_threshold > 0.0 || !h.positive_span.is_empty()
}

fn exemplars<'a>(list: impl Iterator<Item = &'a prom::Exemplar>) -> Vec<Exemplar> {
    list.map(|e| Exemplar {
        filtered_attributes: attributes(&e.label),
        time_unix_nano: e
            .timestamp
            .as_ref()
            .map_or(0, |t| u64::try_from(t.seconds).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.nanos).unwrap_or(0)),
        value: Some(exemplar::Value::AsDouble(e.value)),
    })
    .collect()
}

/// Native buckets by index, expanded from spans (offsets) and deltas.
pub fn native_counts(h: &prom::Histogram) -> Vec<(i32, u64)> {
    let mut out = Vec::new();
    let (mut index, mut count, mut deltas) = (0i32, 0i64, h.positive_delta.iter());
    for (n, span) in h.positive_span.iter().enumerate() {
        index = if n == 0 { span.offset } else { index + span.offset };
        for _ in 0..span.length {
            count += deltas.next().copied().unwrap_or(0);
            out.push((index, u64::try_from(count).unwrap_or(0)));
            index += 1;
        }
    }
    out
}

/// A native histogram as an exponential one of the same scale. Prometheus's bucket i covers
/// (base^(i-1), base^i], OpenTelemetry's (base^i, base^(i+1)]: the same bucket is index i-1 here.
fn exponential(
    m: &prom::Metric,
    h: &prom::Histogram,
    previous: Option<&mut Previous>,
    span: Times,
) -> ExponentialHistogramDataPoint {
    let mut counts = native_counts(h);
    let (mut count, mut sum, mut zero) = (h.sample_count, h.sample_sum, h.zero_count);
    if let Some(p) = previous {
        let now = Previous { value: 0.0, count, sum, zero, buckets: counts.iter().copied().collect() };
        // A histogram whose count went back was reset: all of it is new.
        if count >= p.count {
            count -= p.count;
            sum -= p.sum;
            zero = zero.saturating_sub(p.zero);
            for (i, c) in &mut counts {
                *c = c.saturating_sub(p.buckets.get(i).copied().unwrap_or(0));
            }
        }
        *p = now;
    }
    let positive = counts.first().map(|&(first, _)| {
        let last = counts.last().map_or(first, |&(i, _)| i);
        let mut bucket_counts = vec![0u64; usize::try_from(last - first + 1).unwrap_or(0)];
        for (i, c) in &counts {
            if let Some(slot) = usize::try_from(i - first).ok().and_then(|k| bucket_counts.get_mut(k)) {
                *slot = *c;
            }
        }
        Buckets { offset: first - 1, bucket_counts }
    });
    ExponentialHistogramDataPoint {
        attributes: attributes(&m.label),
        start_time_unix_nano: span.start_ns,
        time_unix_nano: span.time_ns,
        count,
        sum: Some(sum),
        scale: h.schema,
        zero_count: zero,
        positive,
        negative: None,
        flags: 0,
        exemplars: exemplars(h.exemplars.iter()),
        zero_threshold: h.zero_threshold,
    }
}

/// A classic histogram as explicit bounds: the same bounds (but `+Inf`), per-bucket counts.
fn explicit(m: &prom::Metric, h: &prom::Histogram, previous: Option<&mut Previous>, span: Times) -> HistogramDataPoint {
    let mut explicit_bounds = Vec::with_capacity(h.bucket.len());
    let mut bucket_counts = Vec::with_capacity(h.bucket.len() + 1);
    let mut below = 0u64;
    for b in &h.bucket {
        bucket_counts.push(b.cumulative_count.saturating_sub(below));
        below = b.cumulative_count;
        if b.upper_bound.is_finite() {
            explicit_bounds.push(b.upper_bound);
        }
    }
    // Without an explicit +Inf bucket, the rest of the count is above the last bound.
    if h.bucket.last().is_none_or(|b| b.upper_bound.is_finite()) {
        bucket_counts.push(h.sample_count.saturating_sub(below));
    }
    let (mut count, mut sum) = (h.sample_count, h.sample_sum);
    if let Some(p) = previous {
        let now = Previous {
            value: 0.0,
            count,
            sum,
            zero: 0,
            buckets: bucket_counts.iter().enumerate().map(|(i, &c)| (i as i32, c)).collect(),
        };
        if count >= p.count {
            count -= p.count;
            sum -= p.sum;
            for (i, c) in bucket_counts.iter_mut().enumerate() {
                *c = c.saturating_sub(p.buckets.get(&(i as i32)).copied().unwrap_or(0));
            }
        }
        *p = now;
    }
    HistogramDataPoint {
        attributes: attributes(&m.label),
        start_time_unix_nano: span.start_ns,
        time_unix_nano: span.time_ns,
        count,
        sum: Some(sum),
        bucket_counts,
        explicit_bounds,
        exemplars: exemplars(h.bucket.iter().filter_map(|b| b.exemplar.as_ref())),
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use latency_common::buckets::{BUCKETS, ZERO_BUCKET, bucket_of, native_index};

    use super::*;
    use crate::model::exposition::native_buckets;

    /// A native histogram family as `metrics::families` encodes `runqlat_delay_seconds`, of `delays` ns.
    fn family(delays: &[u64]) -> (prom::MetricFamily, [u64; BUCKETS]) {
        let mut raw = [0u64; BUCKETS];
        for &d in delays {
            raw[bucket_of(d)] += 1;
        }
        let (spans, deltas) = native_buckets(&raw);
        let histogram = prom::Histogram {
            sample_count: delays.len() as u64,
            sample_sum: delays.iter().sum::<u64>() as f64 / 1e9,
            schema: 3,
            zero_threshold: 2f64.powi(-20),
            zero_count: raw[ZERO_BUCKET],
            positive_span: spans.iter().map(|&(offset, length)| prom::BucketSpan { offset, length }).collect(),
            positive_delta: deltas,
            ..prom::Histogram::default()
        };
        let metric = prom::Metric {
            label: vec![prom::LabelPair { name: "reason".into(), value: "wakeup".into() }],
            histogram: Some(histogram),
            ..prom::Metric::default()
        };
        (prom::MetricFamily { name: "runqlat_delay_seconds".into(), metric: vec![metric], ..Default::default() }, raw)
    }

    fn point(m: &[Metric]) -> &ExponentialHistogramDataPoint {
        match &m[0].data {
            Some(Data::ExponentialHistogram(h)) => &h.data_points[0],
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn native_histograms_are_exponential_ones_bucket_for_bucket() {
        // The zero bucket, adjacent buckets, a gap, a repeated count.
        let delays = [300, 2_000, 2_100, 2_300, 4_000, 1_000_000, 1_000_000, 90_000_000_000];
        let (f, raw) = family(&delays);
        let times = Times { start_ns: 1, time_ns: 2 };
        let m = metrics(&[f], times, None);
        assert_eq!((m[0].name.as_str(), m[0].unit.as_str()), ("runqlat.delay", "s"));
        let p = point(&m);
        assert_eq!((p.scale, p.count, p.zero_count, p.zero_threshold), (3, 8, 1, 2f64.powi(-20)));
        assert_eq!((p.start_time_unix_nano, p.time_unix_nano), (1, 2));
        let positive = p.positive.as_ref().unwrap();
        // OTel index i covers (2^(i/8), 2^((i+1)/8)]: the kernel bucket whose native index is i + 1.
        for (k, &want) in raw.iter().enumerate().take(BUCKETS - 1).skip(1) {
            let i = native_index(k).unwrap() - 1;
            let got = usize::try_from(i - positive.offset).ok().and_then(|n| positive.bucket_counts.get(n)).copied();
            assert_eq!(got.unwrap_or(0), want, "kernel bucket {k}");
        }
        assert_eq!(positive.bucket_counts.iter().sum::<u64>() + p.zero_count, p.count);
        assert_eq!(p.attributes, [KeyValue::string("reason", "wakeup")]);
    }

    #[test]
    fn delta_temporality_sends_what_changed_and_survives_a_reset() {
        let mut deltas = Deltas::default();
        let (first, _) = family(&[2_000, 4_000]);
        let m = metrics(&[first], Times { start_ns: 1, time_ns: 10 }, Some(&mut deltas));
        assert_eq!(point(&m).count, 2);
        let (second, _) = family(&[2_000, 4_000, 4_000, 300]);
        let m = metrics(&[second], Times { start_ns: 1, time_ns: 20 }, Some(&mut deltas));
        let p = point(&m);
        assert_eq!((p.count, p.zero_count, p.start_time_unix_nano), (2, 1, 10));
        assert_eq!(p.positive.as_ref().unwrap().bucket_counts.iter().sum::<u64>(), 1);
        // A restart: fewer than before, so all of it is new.
        let (third, _) = family(&[2_000]);
        let m = metrics(&[third], Times { start_ns: 1, time_ns: 30 }, Some(&mut deltas));
        assert_eq!(point(&m).count, 1);
    }

    #[test]
    fn classic_histograms_keep_their_bounds_and_counters_become_sums() {
        let bucket = |le: f64, c: u64| prom::Bucket { cumulative_count: c, upper_bound: le, ..Default::default() };
        let classic = prom::MetricFamily {
            name: "runqlat_cgroup_delay_seconds".into(),
            metric: vec![prom::Metric {
                label: vec![prom::LabelPair { name: "pod".into(), value: "web-1".into() }],
                histogram: Some(prom::Histogram {
                    sample_count: 5,
                    sample_sum: 1.5,
                    bucket: vec![bucket(0.001, 1), bucket(1.0, 4), bucket(f64::INFINITY, 5)],
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let counter = prom::MetricFamily {
            name: "runqlat_drains_total".into(),
            metric: vec![prom::Metric {
                counter: Some(prom::Counter { value: 7.0, ..Default::default() }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let m = metrics(&[classic, counter], Times { start_ns: 1, time_ns: 2 }, None);
        let Some(Data::Histogram(h)) = &m[0].data else { panic!("{m:?}") };
        let p = &h.data_points[0];
        assert_eq!((p.explicit_bounds.as_slice(), p.bucket_counts.as_slice()), (&[0.001, 1.0][..], &[1, 3, 1][..]));
        assert_eq!(p.attributes, [KeyValue::string("k8s.pod.name", "web-1")]);
        let Some(Data::Sum(s)) = &m[1].data else { panic!("{m:?}") };
        assert!(s.is_monotonic && s.aggregation_temporality == Temporality::Cumulative as i32);
        assert_eq!((m[1].name.as_str(), m[1].unit.as_str()), ("runqlat.drains", "1"));
    }

    #[test]
    fn names_and_units_round_trip_through_prometheus_naming() {
        assert_eq!(name_and_unit("runqlat_delay_seconds", false), ("runqlat.delay".into(), "s"));
        assert_eq!(name_and_unit("runqlat_wait_cause_seconds_total", true), ("runqlat.wait_cause".into(), "s"));
        assert_eq!(name_and_unit("runqlat_context_switches_total", true), ("runqlat.context_switches".into(), "1"));
        assert_eq!(name_and_unit("process_resident_memory_bytes", false), ("process.resident_memory".into(), "By"));
        assert_eq!(name_and_unit("runqlat_build_info", false), ("runqlat.build_info".into(), ""));
        assert_eq!(attribute("pod"), "k8s.pod.name");
        assert_eq!(attribute("reason"), "reason");
    }
}
