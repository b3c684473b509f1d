//! The report's figure, hand-written SVG: in, each mode's buckets; out, their delay
//! distributions on a log axis — the share of delays per half octave, as steps — with each
//! mode's exact maximum as a dashed line; and the frame every demo figure shares (`open`).
use std::fmt::Write as _;

use super::histogram::native_index;
use crate::recording::Bucket;

pub struct Series<'a> {
    /// The legend's text.
    pub label: String,
    pub color: &'a str,
    pub buckets: &'a [Bucket],
    pub max_ns: u64,
}

const W: f64 = 860.0;
const H: f64 = 450.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 90.0;
const BOTTOM: f64 = 56.0;

/// Half-octave bin j holds (2^((j−1)/2), 2^(j/2)] s: our native buckets 4j−3 … 4j.
fn bin_of(le_seconds: f64) -> i32 {
    (native_index(le_seconds) + 3).div_euclid(4)
}

/// Shares (0…1) per bin, from `first` on.
fn shares(buckets: &[Bucket], first: i32, last: i32) -> Vec<f64> {
    let mut counts = vec![0u64; (last - first + 1) as usize];
    for b in buckets {
        if let Some(le) = b.le_seconds {
            let j = bin_of(le).clamp(first, last);
            counts[(j - first) as usize] += b.count;
        }
    }
    let total = counts.iter().sum::<u64>().max(1) as f64;
    counts.iter().map(|&c| c as f64 / total).collect()
}

/// The frame the demo's figures share: `w` × `h` on white, sans-serif 12, the title (14) at the
/// top left from `left`. The caller appends its marks and `</svg>`.
pub fn open(w: f64, h: f64, left: f64, title: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"20\" font-size=\"14\">{}</text>\n",
        escape(title)
    )
}

/// `text` safe inside an SVG element or attribute.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

pub fn svg(series: &[Series]) -> String {
    let bins: Vec<i32> =
        series.iter().flat_map(|s| s.buckets.iter().filter_map(|b| b.le_seconds).map(bin_of)).collect();
    // log2 seconds: from 1 µs (or the smallest delay) to 1 s (or the largest).
    let first = bins.iter().copied().min().unwrap_or(-40).min(-39);
    let last = bins.iter().copied().max().unwrap_or(0).max(0);
    let (x0, x1) = (f64::from(first - 1) / 2.0, f64::from(last) / 2.0);
    let x = |log2_s: f64| LEFT + (log2_s - x0) / (x1 - x0) * (W - LEFT - RIGHT);
    let all: Vec<Vec<f64>> = series.iter().map(|s| shares(s.buckets, first, last)).collect();
    let top = all.iter().flatten().copied().fold(0.0, f64::max);
    let y_max = ((top * 10.0).ceil() / 10.0).clamp(0.1, 1.0);
    let y = |share: f64| H - BOTTOM - share / y_max * (H - TOP - BOTTOM);

    let mut out =
        open(W, H, LEFT, "Run-queue delay in each workload process, share per half octave (dashed: the exact maximum)");
    // Axes, decade ticks and grid.
    let _ = writeln!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/><line x1=\"{LEFT}\" y1=\"{TOP}\" \
         x2=\"{LEFT}\" y2=\"{b}\" stroke=\"black\"/>",
        b = H - BOTTOM,
        r = W - RIGHT
    );
    for (label, seconds) in [
        ("1 µs", 1e-6),
        ("10 µs", 1e-5),
        ("100 µs", 1e-4),
        ("1 ms", 1e-3),
        ("10 ms", 1e-2),
        ("100 ms", 0.1),
        ("1 s", 1.0),
    ] {
        let log2_s = f64::log2(seconds);
        if !(x0..=x1).contains(&log2_s) {
            continue;
        }
        let px = x(log2_s);
        let _ = writeln!(
            out,
            "<line x1=\"{px:.1}\" y1=\"{TOP}\" x2=\"{px:.1}\" y2=\"{b}\" stroke=\"#ddd\"/><text x=\"{px:.1}\" \
             y=\"{ty}\" text-anchor=\"middle\">{label}</text>",
            b = H - BOTTOM,
            ty = H - BOTTOM + 16.0
        );
    }
    for step in 0..=4 {
        let share = y_max * f64::from(step) / 4.0;
        let _ = writeln!(
            out,
            "<text x=\"{tx}\" y=\"{ty:.1}\" text-anchor=\"end\">{:.0} %</text>",
            share * 100.0,
            tx = LEFT - 6.0,
            ty = y(share) + 4.0
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{cx}\" y=\"{ty}\" text-anchor=\"middle\">delay (log scale)</text>",
        cx = (LEFT + W - RIGHT) / 2.0,
        ty = H - 14.0
    );
    for (n, (s, shares)) in series.iter().zip(&all).enumerate() {
        let mut path = format!("M {:.1} {:.1}", x(x0), y(0.0));
        for (k, share) in shares.iter().enumerate() {
            let j = first + k as i32;
            let (left, right) = (x(f64::from(j - 1) / 2.0), x(f64::from(j) / 2.0));
            let _ = write!(path, " L {left:.1} {:.1} L {right:.1} {:.1}", y(*share), y(*share));
        }
        let _ = write!(path, " L {:.1} {:.1}", x(x1), y(0.0));
        let _ = writeln!(out, "<path d=\"{path}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>", s.color);
        if s.max_ns > 0 {
            let px = x((s.max_ns as f64 / 1e9).log2()).clamp(LEFT, W - RIGHT);
            let _ = writeln!(
                out,
                "<line x1=\"{px:.1}\" y1=\"{TOP}\" x2=\"{px:.1}\" y2=\"{b}\" stroke=\"{}\" stroke-dasharray=\"4 3\"/>",
                s.color,
                b = H - BOTTOM
            );
        }
        // The legend sits above the plot, a line per series, so no curve hides it.
        let ly = 40.0 + 16.0 * n as f64;
        let _ = writeln!(
            out,
            "<rect x=\"{LEFT}\" y=\"{ry}\" width=\"14\" height=\"4\" fill=\"{c}\"/><text x=\"{tx}\" \
             y=\"{ly}\">{}</text>",
            s.label,
            c = s.color,
            ry = ly - 6.0,
            tx = LEFT + 20.0
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_octave_bins() {
        let le = |i: i32| 2f64.powf(f64::from(i) / 8.0);
        assert_eq!((bin_of(le(1)), bin_of(le(4)), bin_of(le(5))), (1, 1, 2));
        assert_eq!((bin_of(le(0)), bin_of(le(-3)), bin_of(le(-4))), (0, 0, -1));
    }

    #[test]
    fn draws_one_path_per_series() {
        let buckets = [Bucket { le_seconds: Some(2f64.powi(-17)), count: 3 }, Bucket { le_seconds: None, count: 1 }];
        let series = [
            Series { label: "io".into(), color: "#1f77b4", buckets: &buckets, max_ns: 7_000 },
            Series { label: "compete".into(), color: "#d62728", buckets: &[], max_ns: 0 },
        ];
        let svg = svg(&series);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<path").count(), 2);
        assert_eq!(svg.matches("stroke-dasharray").count(), 1);
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }
}
