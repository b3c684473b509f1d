//! Window summaries in; hand-written SVG out: the heatmap (one column per window, one row per
//! exact kernel bucket, colour by count) and the lines (p99 and max per reason on a log axis,
//! with the alert thresholds). No script: each cell and point carries a `<title>` tooltip and
//! `data-*` attributes with its raw numbers.
use std::fmt::Write as _;

use latency_common::{
    Reason,
    buckets::{UPPER_NS, ZERO_BUCKET, bucket_of},
};

use super::escape;
use crate::model::{distribution::lower_ns, timeline::WindowSummary, units::fmt_ns};

const LEFT: f64 = 78.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 30.0;
const PLOT_W: f64 = 720.0;
/// Rows are 2–8 px tall, so a wide range of buckets stays readable.
const ROW_MIN: f64 = 2.0;
const ROW_MAX: f64 = 8.0;
const PLOT_H_MAX: f64 = 360.0;
/// At least this many buckets are shown (two octaves), centred on the data.
const MIN_ROWS: usize = 16;

/// YlOrRd, light to dark: few delays to many.
const STOPS: [(f64, [u8; 3]); 5] = [
    (0.0, [255, 255, 204]),
    (0.25, [254, 217, 118]),
    (0.5, [253, 141, 60]),
    (0.75, [227, 26, 28]),
    (1.0, [128, 0, 38]),
];

pub const REASON_COLOURS: [&str; Reason::COUNT] = ["#1f77b4", "#d62728"];

/// Colour of a cell with `count` delays when the busiest cell holds `max` (log scale).
fn colour(count: u64, max: u64) -> String {
    let t = if max <= 1 { 1.0 } else { (count as f64).ln_1p() / (max as f64).ln_1p() };
    let t = t.clamp(0.0, 1.0);
    let i = STOPS.iter().position(|(at, _)| *at >= t).unwrap_or(STOPS.len() - 1).max(1);
    let ((a, ca), (b, cb)) = (STOPS[i - 1], STOPS[i]);
    let f = if b > a { (t - a) / (b - a) } else { 0.0 };
    let mix = |x: u8, y: u8| (f64::from(x) + (f64::from(y) - f64::from(x)) * f).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(ca[0], cb[0]), mix(ca[1], cb[1]), mix(ca[2], cb[2]))
}

/// `HH:MM:SS` UTC of a Unix time in ns.
pub fn clock_utc(unix_ns: u64) -> String {
    let s = unix_ns / 1_000_000_000 % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// A bucket's range as text: "(1.907 µs, 2.08 µs]"; the zero bucket is "≤ 953 ns".
fn bucket_range(k: usize) -> String {
    if k == ZERO_BUCKET {
        format!("≤ {}", fmt_ns(UPPER_NS[k]))
    } else if k >= UPPER_NS.len() - 1 {
        format!("> {}", fmt_ns(lower_ns(k)))
    } else {
        format!("({}, {}]", fmt_ns(lower_ns(k)), fmt_ns(UPPER_NS[k]))
    }
}

/// The round values (ns) an axis from `lo` to `hi` ns is labelled at: each power of ten, and 2 and 5
/// times it where the axis spans less than two decades (a label every few rows either way).
fn round_values(lo: f64, hi: f64) -> Vec<f64> {
    let steps: &[f64] = if hi / lo < 100.0 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    let mut decade = 10f64.powf(lo.max(1.0).log10().floor());
    let mut out = Vec::new();
    while decade <= hi {
        out.extend(steps.iter().map(|m| decade * m).filter(|v| (lo..=hi).contains(v)));
        decade *= 10.0;
    }
    out
}

fn column_width(n: usize) -> f64 {
    (PLOT_W / n.max(1) as f64).clamp(4.0, 48.0)
}

/// The heatmap of `windows` (oldest first): every delay of both reasons, in exact kernel buckets.
pub fn heatmap(windows: &[&WindowSummary]) -> String {
    let columns: Vec<Vec<(u8, u64)>> = windows.iter().map(|w| w.all_buckets()).collect();
    let used = columns.iter().flatten().map(|(k, _)| usize::from(*k));
    let (lo, hi) = match (used.clone().min(), used.max()) {
        (Some(lo), Some(hi)) => (lo, hi),
        _ => return empty_svg("no delays in the windows shown"),
    };
    // Widen to MIN_ROWS around the data, inside the table.
    let pad = MIN_ROWS.saturating_sub(hi - lo + 1);
    let lo = lo.saturating_sub(pad / 2);
    let hi = (hi + pad - pad / 2).min(UPPER_NS.len() - 1);
    let rows = hi - lo + 1;
    let rh = (PLOT_H_MAX / rows as f64).clamp(ROW_MIN, ROW_MAX);
    let cw = column_width(windows.len());
    let (pw, ph) = (cw * windows.len() as f64, rh * rows as f64);
    let (w, h) = (LEFT + pw.max(PLOT_W) + RIGHT, TOP + ph + BOTTOM);
    let max = columns.iter().flatten().map(|(_, c)| *c).max().unwrap_or(1);
    // Row of bucket k: the highest bucket at the top.
    let y = |k: usize| TOP + (hi - k) as f64 * rh;

    let mut out = String::with_capacity(64 * 1024);
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"heatmap\" width=\"{w:.0}\" height=\"{h:.0}\" \
         viewBox=\"0 0 {w:.0} {h:.0}\" font-family=\"sans-serif\" font-size=\"11\" data-rows=\"{rows}\" \
         data-columns=\"{}\">",
        windows.len()
    );
    let _ = writeln!(
        out,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{pw:.1}\" height=\"{ph:.1}\" fill=\"#f4f4f4\" stroke=\"#ccc\"/>"
    );
    // A tick and label at each round value (1, 10, 100 × a unit) the rows span, where it falls in
    // its bucket (the rows are log-uniform: a bucket's share of an octave); at 1-2-5 steps where
    // the rows span less than two decades.
    let (floor_ns, top_ns) = (UPPER_NS[lo.saturating_sub(1)].max(1), UPPER_NS[hi]);
    for v in round_values(floor_ns as f64, top_ns as f64) {
        let k = bucket_of(v as u64).min(UPPER_NS.len() - 1);
        if k < lo || k > hi || k == ZERO_BUCKET {
            continue;
        }
        let below = UPPER_NS[k - 1].max(1) as f64;
        let frac = (v / below).ln() / (UPPER_NS[k] as f64 / below).ln();
        let ty = y(k) + rh * (1.0 - frac.clamp(0.0, 1.0));
        let _ = writeln!(
            out,
            "<line class=\"tick\" x1=\"{:.0}\" y1=\"{ty:.1}\" x2=\"{LEFT}\" y2=\"{ty:.1}\" stroke=\"#999\"/>\
             <text x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT - 4.0,
            LEFT - 6.0,
            ty + 4.0,
            escape(&fmt_ns(v as u64))
        );
    }
    for (n, (win, cells)) in windows.iter().zip(&columns).enumerate() {
        let x = LEFT + n as f64 * cw;
        let when = clock_utc(win.start_unix_ns + win.duration_ns);
        let _ = writeln!(out, "<g class=\"column\" data-start-unix-ns=\"{}\">", win.start_unix_ns);
        for &(k, count) in cells {
            let k = usize::from(k);
            let _ = writeln!(
                out,
                "<rect class=\"cell\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{cw:.1}\" height=\"{rh:.1}\" fill=\"{}\" \
                 data-k=\"{k}\" data-n=\"{count}\"><title>{when} {}: {count}</title></rect>",
                y(k),
                colour(count, max),
                escape(&bucket_range(k))
            );
        }
        out.push_str("</g>\n");
    }
    time_axis(&mut out, windows, cw, TOP + ph);
    let _ = writeln!(
        out,
        "<text x=\"{LEFT}\" y=\"{:.0}\" fill=\"#555\">delay bucket (exact kernel bounds, 8 per octave); colour: \
         delays per column, log scale, darkest = {max}</text>",
        h - 4.0
    );
    out.push_str("</svg>\n");
    out
}

/// p99 (solid) and exact max (dotted) per reason over `windows`, with each reason's alert
/// threshold (dashed) where one is set.
pub fn lines(windows: &[&WindowSummary], thresholds: [Option<u64>; Reason::COUNT]) -> String {
    let values = windows
        .iter()
        .flat_map(|w| w.reasons.iter().flat_map(|r| [r.p99_ns, r.max_ns]))
        .flatten()
        .chain(thresholds.iter().flatten().copied())
        .filter(|&v| v > 0);
    let (lo, hi) = match (values.clone().min(), values.max()) {
        (Some(lo), Some(hi)) => (lo, hi),
        _ => return empty_svg("no delays in the windows shown"),
    };
    // Whole octaves around the data.
    let (lo, hi) = ((lo as f64).log2().floor() - 1.0, (hi as f64).log2().ceil() + 1.0);
    let ph = 220.0;
    let cw = column_width(windows.len());
    let (w, h) = (LEFT + (cw * windows.len() as f64).max(PLOT_W) + RIGHT, TOP + ph + BOTTOM + 16.0);
    let y = |ns: u64| TOP + ph - ((ns.max(1) as f64).log2() - lo) / (hi - lo) * ph;
    let x = |n: usize| LEFT + (n as f64 + 0.5) * cw;

    let mut out = String::with_capacity(16 * 1024);
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"lines\" width=\"{w:.0}\" height=\"{h:.0}\" \
         viewBox=\"0 0 {w:.0} {h:.0}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(
        out,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{ph}\" fill=\"none\" stroke=\"#ccc\"/>",
        w - LEFT - RIGHT
    );
    // A labelled grid line at each round value (see `round_values`).
    for v in round_values(2f64.powf(lo), 2f64.powf(hi)) {
        let (ns, py) = (v as u64, y(v as u64));
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{py:.1}\" x2=\"{:.0}\" y2=\"{py:.1}\" stroke=\"#eee\"/>\
             <text x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            w - RIGHT,
            LEFT - 6.0,
            py + 4.0,
            escape(&fmt_ns(ns))
        );
    }
    // One dashed line per distinct threshold, named by the reasons it applies to.
    let mut distinct: Vec<u64> = thresholds.iter().flatten().copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    for t in distinct {
        let reasons: Vec<Reason> = Reason::ALL.into_iter().filter(|r| thresholds[*r as usize] == Some(t)).collect();
        let names: Vec<&str> = reasons.iter().map(|r| r.name()).collect();
        let colour = match reasons.as_slice() {
            [one] => REASON_COLOURS[*one as usize],
            _ => "#555",
        };
        let py = y(t);
        let _ = writeln!(
            out,
            "<line class=\"threshold\" data-reasons=\"{}\" data-ns=\"{t}\" x1=\"{LEFT}\" y1=\"{py:.1}\" \
             x2=\"{:.0}\" y2=\"{py:.1}\" stroke=\"{colour}\" stroke-dasharray=\"8 4\"/><text x=\"{:.0}\" \
             y=\"{:.1}\" text-anchor=\"end\" fill=\"{colour}\">alert threshold ({}): {}</text>",
            names.join(" "),
            w - RIGHT,
            w - RIGHT - 4.0,
            py - 4.0,
            names.join(", "),
            escape(&fmt_ns(t))
        );
    }
    for reason in Reason::ALL {
        let colour = REASON_COLOURS[reason as usize];
        for (what, pick, dash) in [("p99", 0usize, ""), ("max", 1, " stroke-dasharray=\"2 3\"")] {
            let points: Vec<(usize, u64)> = windows
                .iter()
                .enumerate()
                .filter_map(|(n, win)| {
                    let r = &win.reasons[reason as usize];
                    let v = if pick == 0 { r.p99_ns } else { r.max_ns };
                    v.filter(|&v| v > 0 && r.count > 0).map(|v| (n, v))
                })
                .collect();
            if points.is_empty() {
                continue;
            }
            // A window without delays of this reason breaks the line rather than bridging it.
            for run in points.chunk_by(|a, b| b.0 == a.0 + 1) {
                let path: Vec<String> = run.iter().map(|&(n, v)| format!("{:.1},{:.1}", x(n), y(v))).collect();
                let _ = writeln!(
                    out,
                    "<polyline class=\"line\" data-reason=\"{}\" data-what=\"{what}\" points=\"{}\" fill=\"none\" \
                     stroke=\"{colour}\" stroke-width=\"{}\"{dash}/>",
                    reason.name(),
                    path.join(" "),
                    if pick == 0 { 2 } else { 1 }
                );
            }
            for &(n, v) in &points {
                let _ = writeln!(
                    out,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2\" fill=\"{colour}\"><title>{} {} {what}: {}</title></circle>",
                    x(n),
                    y(v),
                    clock_utc(windows[n].start_unix_ns + windows[n].duration_ns),
                    reason.name(),
                    escape(&fmt_ns(v))
                );
            }
        }
    }
    time_axis(&mut out, windows, cw, TOP + ph);
    let _ = writeln!(
        out,
        "<text x=\"{LEFT}\" y=\"{:.0}\"><tspan fill=\"{}\">■ wakeup</tspan> <tspan fill=\"{}\">■ preempt</tspan> \
         — solid: p99, dotted: exact max, dashed: alert threshold</text>",
        h - 4.0,
        REASON_COLOURS[0],
        REASON_COLOURS[1]
    );
    out.push_str("</svg>\n");
    out
}

/// End times of the first, middle and last windows under the plot.
fn time_axis(out: &mut String, windows: &[&WindowSummary], cw: f64, y: f64) {
    let n = windows.len();
    // The middle label only where there is room for three.
    let mut shown = if n >= 6 { vec![0, n / 2, n - 1] } else { vec![0, n.saturating_sub(1)] };
    shown.dedup();
    for i in shown.into_iter().filter(|&i| i < n) {
        let w = windows[i];
        let anchor = if i == 0 && n > 1 {
            "start"
        } else if i + 1 == n && n > 1 {
            "end"
        } else {
            "middle"
        };
        let x = match anchor {
            "start" => LEFT + i as f64 * cw,
            "end" => LEFT + (i + 1) as f64 * cw,
            _ => LEFT + (i as f64 + 0.5) * cw,
        };
        let _ = writeln!(
            out,
            "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{} UTC</text>",
            y + 14.0,
            clock_utc(w.start_unix_ns + w.duration_ns)
        );
    }
}

/// One standalone SVG document: a title, the heatmap and the lines below it (`record --svg`).
pub fn figure(title: &str, windows: &[&WindowSummary], thresholds: [Option<u64>; Reason::COUNT]) -> String {
    let parts = [heatmap(windows), lines(windows, thresholds)];
    let mut y = 28.0;
    let mut width: f64 = PLOT_W;
    let mut body = String::new();
    for part in &parts {
        let (w, h) = size(part);
        // Nested at its offset: the same drawing as on the live page.
        body.push_str(&part.replacen(
            "<svg xmlns=\"http://www.w3.org/2000/svg\"",
            &format!("<svg x=\"0\" y=\"{y:.0}\""),
            1,
        ));
        y += h + 12.0;
        width = width.max(w);
    }
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{y:.0}\" viewBox=\"0 0 {width:.0} {y:.0}\" \
         font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{LEFT}\" y=\"18\" \
         font-size=\"14\">{}</text>\n{body}</svg>\n",
        escape(title)
    )
}

/// The `width` and `height` of an SVG this module wrote.
fn size(svg: &str) -> (f64, f64) {
    let attr = |name: &str| {
        let start = svg.find(&format!(" {name}=\"")).map(|i| i + name.len() + 3)?;
        svg[start..].split('"').next()?.parse::<f64>().ok()
    };
    (attr("width").unwrap_or(PLOT_W), attr("height").unwrap_or(0.0))
}

fn empty_svg(why: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{PLOT_W}\" height=\"40\" font-family=\"sans-serif\" \
         font-size=\"12\"><text x=\"8\" y=\"24\">{}</text></svg>\n",
        escape(why)
    )
}

#[cfg(test)]
mod tests;
