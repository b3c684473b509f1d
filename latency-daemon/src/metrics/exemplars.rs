//! The window's worst wait per reason (`Exposition::exemplars`) in; the encoded families with an
//! exemplar on the bucket that holds it out. Added after the registry's encode because
//! prometheus-client 0.26 cannot build an exemplar outside its own instruments.
use latency_common::Reason;
use prometheus_client::encoding::prometheus_protobuf::prometheus_data_model::{Exemplar, LabelPair, MetricFamily};

use super::families::DELAY;
use crate::model::exposition::{DelayExemplar, Exposition};

/// OpenMetrics caps an exemplar's label names and values at 128 UTF-8 characters together, and
/// Prometheus drops an exemplar beyond it (counting characters of the unescaped strings).
pub const MAX_LABEL_CHARS: usize = 128;

/// OpenMetrics text with each exemplar appended to its bucket's line.
pub fn openmetrics(mut text: String, e: &Exposition) -> String {
    let prefix = format!("{DELAY}_bucket{{");
    // (end of the bucket line, what goes there), found in one pass over the family's lines.
    let mut at: Vec<(usize, String)> = Vec::new();
    let mut pending = e.exemplars.each_ref().map(Option::as_ref);
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if pending.iter().all(Option::is_none) {
            break;
        }
        let end = offset + line.trim_end_matches('\n').len();
        offset += line.len();
        let Some((reason, le)) = line.strip_prefix(prefix.as_str()).and_then(bucket) else { continue };
        let slot = &mut pending[reason as usize];
        if let Some(x) = slot.take_if(|x| seconds(x) <= le) {
            at.push((end, suffix(x)));
        }
    }
    // From the back, so that each insertion leaves the earlier offsets valid.
    for (end, s) in at.into_iter().rev() {
        text.insert_str(end, &s);
    }
    text
}

/// Each exemplar on its classic bucket and in the native histogram's exemplars.
pub fn protobuf(families: &mut [MetricFamily], e: &Exposition) {
    let Some(family) = families.iter_mut().find(|f| f.name == DELAY) else { return };
    for metric in &mut family.metric {
        let Some(reason) = metric.label.iter().find(|l| l.name == "reason").and_then(|l| reason_named(&l.value)) else {
            continue;
        };
        let (Some(x), Some(h)) = (&e.exemplars[reason as usize], metric.histogram.as_mut()) else { continue };
        let exemplar = exemplar(x);
        // Classic buckets end with +Inf; should one not, the last holds what is above the others.
        let value = seconds(x);
        let bucket = match h.bucket.iter().position(|b| value <= b.upper_bound) {
            Some(i) => h.bucket.get_mut(i),
            None => h.bucket.last_mut(),
        };
        if let Some(b) = bucket {
            b.exemplar = Some(exemplar.clone());
        }
        h.exemplars.push(exemplar);
    }
}

/// The exemplar's labels: tid, comm, pod, each only when not empty and when it still fits in
/// [`MAX_LABEL_CHARS`] (a long pod name is left out whole rather than cut into another name); the
/// values [`plain`].
pub fn labels(x: &DelayExemplar) -> Vec<(&'static str, String)> {
    let mut out = Vec::with_capacity(3);
    let mut used = 0;
    for (name, value) in [("tid", x.tid.to_string()), ("comm", plain(&x.comm)), ("pod", plain(&x.pod))] {
        let chars = name.len() + value.chars().count();
        if value.is_empty() || used + chars > MAX_LABEL_CHARS {
            continue;
        }
        used += chars;
        out.push((name, value));
    }
    out
}

/// `value` with `"`, `\` and control characters each replaced by `_` (as many characters as
/// before). Any task can name itself, and the worst waiter's name goes into every scrape: escaped
/// correctly, a `"` still makes prometheus_client's OpenMetrics parser (0.26) refuse the whole
/// scrape, since it pairs quotes without regard to escapes. The exact name stays in the JSON
/// APIs (`/api/v1/snapshot`, `record --json`).
fn plain(value: &str) -> String {
    value.chars().map(|c| if c == '"' || c == '\\' || c.is_control() { '_' } else { c }).collect()
}

/// The wait in seconds: the exemplar's value, and what picks its bucket.
fn seconds(x: &DelayExemplar) -> f64 {
    x.delay_ns as f64 / 1e9
}

/// ` # {labels} value timestamp`: the timestamp exact to the nanosecond (Unix seconds).
fn suffix(x: &DelayExemplar) -> String {
    let labels: Vec<String> = labels(x).iter().map(|(name, value)| format!("{name}=\"{}\"", escape(value))).collect();
    let (s, ns) = (x.unix_ns / 1_000_000_000, x.unix_ns % 1_000_000_000);
    format!(" # {{{}}} {} {s}.{ns:09}", labels.join(","), seconds(x))
}

/// An OpenMetrics label value: backslash, double quote and line feed escaped (none is left in a
/// [`plain`] value; escaped all the same, so that the text is valid whatever `labels` gives).
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A bucket line's labels (after `{`): its reason and `le`; None for another line's.
fn bucket(line: &str) -> Option<(Reason, f64)> {
    let (labels, _) = line.split_once('}')?;
    let (mut reason, mut le) = (None, None);
    // Only `le` and `reason`, whose values hold no comma or quote.
    for pair in labels.split(',') {
        let (name, value) = pair.split_once('=')?;
        let value = value.trim_matches('"');
        match name {
            "le" if value == "+Inf" => le = Some(f64::INFINITY),
            "le" => le = value.parse().ok(),
            "reason" => reason = reason_named(value),
            _ => {}
        }
    }
    Some((reason?, le?))
}

fn reason_named(name: &str) -> Option<Reason> {
    Reason::ALL.into_iter().find(|r| r.name() == name)
}

fn exemplar(x: &DelayExemplar) -> Exemplar {
    let label = labels(x).into_iter().map(|(name, value)| LabelPair { name: name.to_owned(), value }).collect();
    let mut exemplar = Exemplar { label, value: seconds(x), timestamp: None };
    // The Timestamp type is prost-types', which this crate does not name: filled in place.
    let t = exemplar.timestamp.get_or_insert_with(Default::default);
    t.seconds = i64::try_from(x.unix_ns / 1_000_000_000).unwrap_or(i64::MAX);
    // Below 10^9: always fits.
    t.nanos = (x.unix_ns % 1_000_000_000) as i32;
    exemplar
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::prometheus_protobuf::prometheus_data_model::{Bucket, Histogram, Metric};

    use super::*;

    const S: u64 = 1_000_000_000;

    /// The family's lines as prometheus-client writes them, bounds 2^-10 s and 1 s.
    const TEXT: &str = "# TYPE runqlat_delay_seconds histogram\n\
        runqlat_delay_seconds_sum{reason=\"wakeup\"} 3.5\n\
        runqlat_delay_seconds_count{reason=\"wakeup\"} 3\n\
        runqlat_delay_seconds_bucket{le=\"0.0009765625\",reason=\"wakeup\"} 1\n\
        runqlat_delay_seconds_bucket{le=\"1.0\",reason=\"wakeup\"} 2\n\
        runqlat_delay_seconds_bucket{le=\"+Inf\",reason=\"wakeup\"} 3\n\
        runqlat_delay_seconds_sum{reason=\"preempt\"} 0.0\n\
        runqlat_delay_seconds_count{reason=\"preempt\"} 0\n\
        runqlat_delay_seconds_bucket{le=\"0.0009765625\",reason=\"preempt\"} 0\n\
        runqlat_delay_seconds_bucket{le=\"1.0\",reason=\"preempt\"} 0\n\
        runqlat_delay_seconds_bucket{le=\"+Inf\",reason=\"preempt\"} 0\n\
        # TYPE runqlat_cgroup_delay_seconds histogram\n\
        runqlat_cgroup_delay_seconds_bucket{le=\"+Inf\",cgroup=\"/a\"} 0\n\
        # EOF\n";

    fn worst(delay_ns: u64, comm: &str, pod: &str) -> DelayExemplar {
        DelayExemplar { delay_ns, unix_ns: 1_700_000_000 * S + 5_000_000, tid: 43, comm: comm.into(), pod: pod.into() }
    }

    fn with(wakeup: Option<DelayExemplar>, preempt: Option<DelayExemplar>) -> Exposition {
        Exposition { exemplars: [wakeup, preempt], ..Exposition::default() }
    }

    /// The bucket lines that carry an exemplar: (line without the count, the exemplar).
    fn marked(text: &str) -> Vec<(String, String)> {
        text.lines()
            .filter_map(|l| l.split_once(" # "))
            .map(|(sample, x)| (sample.rsplit_once(' ').map_or(sample, |s| s.0).to_owned(), x.to_owned()))
            .collect()
    }

    #[test]
    fn the_exemplar_goes_on_the_first_bound_at_or_above_its_value() {
        for (delay_ns, le) in [
            (976_562, "0.0009765625"),
            (976_563, "1.0"),
            // Exactly at the 1 s bound: that bucket (`le` is inclusive).
            (S, "1.0"),
            (S + 1, "+Inf"),
            (4_000 * S, "+Inf"),
        ] {
            let out = openmetrics(TEXT.into(), &with(Some(worst(delay_ns, "victim", "")), None));
            let want = format!("runqlat_delay_seconds_bucket{{le=\"{le}\",reason=\"wakeup\"}}");
            let got = marked(&out);
            assert_eq!(got.len(), 1, "{delay_ns} ns: {out}");
            assert_eq!(got[0].0, want, "{delay_ns} ns");
            assert_eq!(
                got[0].1,
                format!("{{tid=\"43\",comm=\"victim\"}} {} 1700000000.005000000", delay_ns as f64 / 1e9)
            );
        }
    }

    #[test]
    fn each_reason_gets_its_own_and_nothing_else_changes() {
        let e = with(Some(worst(2 * S, "w", "web-0")), Some(worst(1_000, "p", "")));
        let out = openmetrics(TEXT.into(), &e);
        assert_eq!(
            marked(&out),
            [
                (
                    "runqlat_delay_seconds_bucket{le=\"+Inf\",reason=\"wakeup\"}".to_owned(),
                    "{tid=\"43\",comm=\"w\",pod=\"web-0\"} 2 1700000000.005000000".to_owned()
                ),
                (
                    "runqlat_delay_seconds_bucket{le=\"0.0009765625\",reason=\"preempt\"}".to_owned(),
                    "{tid=\"43\",comm=\"p\"} 0.000001 1700000000.005000000".to_owned()
                ),
            ]
        );
        let stripped: String = out.lines().map(|l| l.split_once(" # ").map_or(l, |s| s.0).to_owned() + "\n").collect();
        assert_eq!(stripped, TEXT);
    }

    #[test]
    fn without_exemplars_the_text_is_untouched() {
        assert_eq!(openmetrics(TEXT.into(), &with(None, None)), TEXT);
    }

    #[test]
    fn label_values_hold_no_quote_backslash_or_control_character() {
        let out = openmetrics(TEXT.into(), &with(Some(worst(S, "a\"b\\c\nd\u{7f}\t\u{fffd}é", "p\"od")), None));
        assert!(out.contains(" # {tid=\"43\",comm=\"a_b_c_d__\u{fffd}é\",pod=\"p_od\"} 1 "), "{out}");
        assert_eq!(out.lines().count(), TEXT.lines().count());
        // Character for character: the 128-character budget counts the same.
        assert_eq!(plain("a\"b\\c").chars().count(), 5);
        assert_eq!(plain("kworker/1:0-events"), "kworker/1:0-events");
    }

    #[test]
    fn the_label_set_stays_within_128_characters() {
        // tid + 43, comm + victim: 15 characters; pod + 110 characters makes 128.
        let count = |x: &DelayExemplar| labels(x).iter().map(|(n, v)| n.len() + v.chars().count()).sum::<usize>();
        let fits = worst(S, "victim", &"é".repeat(110));
        assert_eq!(labels(&fits).len(), 3);
        assert_eq!(count(&fits), MAX_LABEL_CHARS);
        // One more and the pod is left out, whole: never cut into a name that is not its own.
        let long = worst(S, "victim", &"p".repeat(111));
        assert_eq!(labels(&long), [("tid", "43".to_owned()), ("comm", "victim".to_owned())]);
        let out = openmetrics(TEXT.into(), &with(Some(long), None));
        assert!(!out.contains("pod="), "{out}");
    }

    fn family(reason: &str) -> Metric {
        let bucket = |upper_bound: f64, n: u64| Bucket { upper_bound, cumulative_count: n, ..Bucket::default() };
        Metric {
            label: vec![LabelPair { name: "reason".into(), value: reason.into() }],
            histogram: Some(Histogram {
                bucket: vec![bucket(2f64.powi(-10), 1), bucket(1.0, 2), bucket(f64::INFINITY, 3)],
                ..Histogram::default()
            }),
            ..Metric::default()
        }
    }

    fn families() -> Vec<MetricFamily> {
        vec![
            MetricFamily { name: "runqlat_other".into(), metric: vec![family("wakeup")], ..MetricFamily::default() },
            MetricFamily {
                name: DELAY.into(),
                metric: vec![family("wakeup"), family("preempt")],
                ..MetricFamily::default()
            },
        ]
    }

    /// Per metric of the family: the index of the bucket with an exemplar, and the native ones.
    fn placed(f: &MetricFamily) -> Vec<(Option<usize>, Vec<Exemplar>)> {
        f.metric
            .iter()
            .map(|m| {
                let h = m.histogram.as_ref().expect("a histogram");
                (h.bucket.iter().position(|b| b.exemplar.is_some()), h.exemplars.clone())
            })
            .collect()
    }

    #[test]
    fn protobuf_exemplars_go_on_the_classic_bucket_and_the_native_histogram() {
        for (delay_ns, want) in [(976_562, 0), (S, 1), (S + 1, 2)] {
            let mut f = families();
            protobuf(&mut f, &with(None, Some(worst(delay_ns, "a\"b\\c", "web-0"))));
            let got = placed(&f[1]);
            assert_eq!(got[0], (None, vec![]), "no wakeup exemplar");
            let (bucket, native) = &got[1];
            assert_eq!(*bucket, Some(want), "{delay_ns} ns");
            let x = &native[..];
            assert_eq!(x.len(), 1);
            assert_eq!(f[1].metric[1].histogram.as_ref().unwrap().bucket[want].exemplar.as_ref(), Some(&x[0]));
            assert_eq!(x[0].value, delay_ns as f64 / 1e9);
            let labels: Vec<(&str, &str)> = x[0].label.iter().map(|l| (l.name.as_str(), l.value.as_str())).collect();
            assert_eq!(labels, [("tid", "43"), ("comm", "a_b_c"), ("pod", "web-0")]);
            let t = x[0].timestamp.as_ref().expect("native exemplars need a timestamp");
            assert_eq!((t.seconds, t.nanos), (1_700_000_000, 5_000_000));
            assert_eq!(placed(&f[0]), [(None, vec![])], "another family is left alone");
        }
        let mut f = families();
        protobuf(&mut f, &with(None, None));
        assert_eq!(f, families());
    }
}
