use latency_common::buckets::bucket_of;

use super::*;
use crate::model::timeline::ReasonSummary;

fn window(start: u64, delays: &[(Reason, u64)]) -> WindowSummary {
    let mut reasons: [ReasonSummary; Reason::COUNT] = Default::default();
    for &(r, d) in delays {
        let s = &mut reasons[r as usize];
        s.count += 1;
        s.max_ns = Some(s.max_ns.unwrap_or(0).max(d));
        s.p99_ns = s.max_ns;
        let k = bucket_of(d) as u8;
        match s.buckets.iter_mut().find(|b| b.0 == k) {
            Some(b) => b.1 += 1,
            None => s.buckets.push((k, 1)),
        }
        s.buckets.sort();
    }
    WindowSummary {
        start_unix_ns: start,
        duration_ns: 2_000_000_000,
        reasons,
        causes: Default::default(),
        top_cgroups: Vec::new(),
    }
}

#[test]
fn one_cell_per_non_empty_bucket_and_window() {
    let a = window(0, &[(Reason::Wakeup, 5_000), (Reason::Preempt, 5_001), (Reason::Preempt, 8_000_000)]);
    let b = window(2_000_000_000, &[]);
    let c = window(4_000_000_000, &[(Reason::Wakeup, 20_000)]);
    let svg = heatmap(&[&a, &b, &c]);
    assert_eq!(svg.matches("class=\"cell\"").count(), 3, "{svg}");
    assert!(svg.contains(&format!("data-k=\"{}\" data-n=\"2\"", bucket_of(5_000))));
    assert_eq!(svg.matches("class=\"column\"").count(), 3);
    assert!(!svg.contains("NaN") && !svg.contains("inf"));
    // The busiest cell is the darkest colour.
    assert!(svg.contains("fill=\"#800026\" data-k"));
}

#[test]
fn nothing_to_draw_says_so() {
    assert!(heatmap(&[]).contains("no delays"));
    assert!(heatmap(&[&window(0, &[])]).contains("no delays"));
    assert!(lines(&[&window(0, &[])], [None, None]).contains("no delays"));
}

#[test]
fn lines_per_reason_with_thresholds() {
    let a = window(0, &[(Reason::Wakeup, 5_000), (Reason::Preempt, 8_000_000)]);
    let b = window(2_000_000_000, &[(Reason::Preempt, 12_000_000)]);
    let svg = lines(&[&a, &b], [None, Some(10_000_000)]);
    assert_eq!(svg.matches("class=\"threshold\"").count(), 1);
    let both = lines(&[&a, &b], [Some(10_000_000), Some(10_000_000)]);
    assert!(both.contains("data-reasons=\"wakeup preempt\""), "one line for a shared threshold");
    assert!(svg.contains("data-reason=\"preempt\" data-what=\"p99\""));
    assert!(svg.contains("data-reason=\"wakeup\" data-what=\"max\""));
    // Wakeup has delays in the first window only: a one-point line, not a bridge to later ones.
    let c = window(4_000_000_000, &[(Reason::Wakeup, 6_000)]);
    let gap = lines(&[&a, &b, &c], [None, None]);
    assert_eq!(gap.matches("data-reason=\"wakeup\" data-what=\"p99\"").count(), 2);
    assert!(!svg.contains("NaN") && !svg.contains("inf"));
}

#[test]
fn a_figure_stacks_heatmap_and_lines_in_one_document() {
    let a = window(0, &[(Reason::Wakeup, 5_000), (Reason::Preempt, 8_000_000)]);
    let svg = figure("record <5s>", &[&a, &a], [None, None]);
    assert!(svg.starts_with("<svg xmlns") && svg.ends_with("</svg>\n"));
    assert_eq!(svg.matches("xmlns").count(), 1, "nested drawings need no namespace of their own");
    assert_eq!(svg.matches("<svg").count(), 3);
    assert!(svg.contains("record &lt;5s&gt;"));
    assert_eq!(svg.matches("class=\"cell\"").count(), 4);
    assert_eq!(size(&heatmap(&[&a])).0, LEFT + PLOT_W + RIGHT);
}

#[test]
fn colours_run_light_to_dark() {
    assert_eq!(colour(0, 1000), "#ffffcc");
    assert_eq!(colour(1000, 1000), "#800026");
    assert_eq!(clock_utc(3_661_000_000_000), "01:01:01");
}

/// The value axes' labels: `text-anchor="end"` texts (the time axis' end label is a clock).
fn axis_labels(svg: &str) -> Vec<String> {
    svg.split("text-anchor=\"end\">")
        .skip(1)
        .filter_map(|s| s.split("</text>").next())
        .filter(|l| !l.ends_with("UTC"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn value_axes_are_labelled_at_round_values() {
    let round = |label: &str| {
        let number = label.split(' ').next().unwrap_or("");
        ["1", "2", "5", "10", "20", "50", "100", "200", "500"].contains(&number)
    };
    let a = window(0, &[(Reason::Wakeup, 5_000), (Reason::Preempt, 8_000_000)]);
    let b = window(2_000_000_000, &[(Reason::Preempt, 12_000_000), (Reason::Wakeup, 953)]);
    for svg in [heatmap(&[&a, &b]), lines(&[&a, &b], [Some(5_000_000), None])] {
        let labels = axis_labels(&svg);
        assert!(labels.len() >= 3, "{labels:?}");
        assert!(labels.iter().all(|l| round(l)), "{labels:?}");
        // 1 µs … 10 ms: the data's decades.
        assert!(labels.iter().any(|l| l == "1 µs") && labels.iter().any(|l| l == "10 ms"), "{labels:?}");
    }
    // Under two decades: 1-2-5 steps.
    assert_eq!(round_values(900.0, 12_000.0), [1_000.0, 2_000.0, 5_000.0, 10_000.0]);
    assert_eq!(round_values(900.0, 2_000_000.0), [1_000.0, 10_000.0, 100_000.0, 1_000_000.0]);
}
