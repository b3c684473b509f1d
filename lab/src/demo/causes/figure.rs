//! The causes figure, hand-written SVG in the demo's frame: in, `Causes`; out, one horizontal
//! stacked bar per scenario — 100 % is the waiting cgroup's time waited — a segment per cause
//! (its share and seconds inside when it fits, every non-zero cause in seconds under the bar),
//! a legend, and cpu.stat's throttled time for the limited cgroup in the subtitle.
use std::fmt::Write as _;

use super::{CAUSES, Causes, Scenario};
use crate::demo::figure::{escape, open};

const W: f64 = 860.0;
const H: f64 = 300.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 24.0;
/// Each scenario's block: its heading, the bar, the seconds under it.
const FIRST: f64 = 92.0;
const BLOCK: f64 = 90.0;
const BAR: f64 = 34.0;

/// Each cause's colour, in `CAUSES`' order: the limit red, the neighbour blue, the rest muted.
const COLORS: [&str; 6] = ["#d62728", "#9467bd", "#ff7f0e", "#1f77b4", "#8c564b", "#bbbbbb"];

fn seconds(s: f64) -> String {
    if s >= 0.1 { format!("{s:.2} s") } else { format!("{:.1} ms", s * 1e3) }
}

pub fn svg(c: &Causes) -> String {
    let x = |share: f64| LEFT + share.clamp(0.0, 1.0) * (W - LEFT - RIGHT);
    let mut out =
        open(W, H, LEFT, &format!("Why it waited: a cgroup's run-queue wait on CPU {}, split by cause", c.cpu));
    let a = match c.own_limit.cpu_stat_throttled_s {
        Some(t) => {
            format!("A: limited to {}; its cpu.stat: throttled {} of {:.1} s", c.limit, seconds(t), c.own_limit.secs)
        }
        None => format!("A: limited to {}", c.limit),
    };
    let split = if c.throttle_split_on() {
        String::new()
    } else {
        format!(" (throttle split {} on this kernel: not told apart)", c.throttle_split)
    };
    let _ = writeln!(
        out,
        "<text x=\"{LEFT}\" y=\"38\" fill=\"#555\">{}{}. B: no limits.</text>",
        escape(&a),
        escape(&split)
    );
    // Legend, one row across.
    for (n, (cause, color)) in CAUSES.iter().zip(COLORS).enumerate() {
        let lx = LEFT + 100.0 * n as f64;
        let _ = writeln!(
            out,
            "<rect x=\"{lx}\" y=\"50\" width=\"12\" height=\"12\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"60\">{cause}</text>",
            lx + 16.0
        );
    }
    // Grid at every quarter, through both blocks, its labels under the last.
    let (top, bottom) = (FIRST + 8.0, FIRST + BLOCK + 8.0 + BAR + 22.0);
    for q in 0..=4 {
        let share = f64::from(q) / 4.0;
        let _ = writeln!(
            out,
            "<line x1=\"{0:.1}\" y1=\"{top}\" x2=\"{0:.1}\" y2=\"{bottom}\" stroke=\"#ddd\"/>\
             <text x=\"{0:.1}\" y=\"{1}\" text-anchor=\"middle\">{2:.0} %</text>",
            x(share),
            bottom + 14.0,
            share * 100.0
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">share of the cgroup's time waited</text>",
        (LEFT + W - RIGHT) / 2.0,
        H - 12.0
    );
    for (n, s) in [&c.own_limit, &c.neighbour].into_iter().enumerate() {
        bar(&mut out, s, FIRST + BLOCK * n as f64, x);
    }
    out.push_str("</svg>\n");
    out
}

/// One scenario at `y0`: heading, stacked bar, the seconds of each non-zero cause.
fn bar(out: &mut String, s: &Scenario, y0: f64, x: impl Fn(f64) -> f64) {
    let total = s.total_s();
    let _ = writeln!(
        out,
        "<text x=\"{LEFT}\" y=\"{y0}\"><tspan font-weight=\"bold\">{}</tspan> — {}: waited {} in {} waits over \
         {:.1} s{}</text>",
        escape(s.title),
        escape(&s.cgroup),
        seconds(total),
        s.waits,
        s.secs,
        if s.others_busy >= 0.05 {
            format!("; the CPU busy with other tasks {:.0} %", 100.0 * s.others_busy)
        } else {
            String::new()
        }
    );
    let y = y0 + 8.0;
    if total <= 0.0 {
        let _ = writeln!(
            out,
            "<rect x=\"{LEFT}\" y=\"{y}\" width=\"{:.1}\" height=\"{BAR}\" fill=\"none\" stroke=\"#999\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#777\">no wait seen</text>",
            x(1.0) - LEFT,
            LEFT + 8.0,
            y + BAR / 2.0 + 4.0
        );
        return;
    }
    let mut at = 0.0;
    let mut parts = Vec::new();
    for (i, cause) in CAUSES.iter().enumerate() {
        let v = s.waited_s[i];
        if v <= 0.0 {
            continue;
        }
        let share = v / total;
        let (x0, x1) = (x(at), x(at + share));
        let _ = writeln!(
            out,
            "<rect x=\"{x0:.1}\" y=\"{y}\" width=\"{:.1}\" height=\"{BAR}\" fill=\"{}\"><title>{cause}: {} ({:.1} %)\
             </title></rect>",
            (x1 - x0).max(0.5),
            COLORS[i],
            seconds(v),
            share * 100.0
        );
        let label = format!("{cause} {:.1} % · {}", share * 100.0, seconds(v));
        if x1 - x0 > 7.0 * label.len() as f64 + 8.0 {
            let fill = if i == CAUSES.len() - 1 { "black" } else { "white" };
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{fill}\">{label}</text>",
                x0 + 6.0,
                y + BAR / 2.0 + 4.0
            );
        }
        parts.push(format!("{cause} {} ({:.1} %)", seconds(v), share * 100.0));
        at += share;
    }
    let _ = writeln!(out, "<text x=\"{LEFT}\" y=\"{:.1}\" fill=\"#555\">{}</text>", y + BAR + 15.0, parts.join(", "));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(waited_s: [f64; 6]) -> Scenario {
        Scenario {
            title: "A. Its own limit",
            cgroup: "/runqlat-causes-1/limited".into(),
            secs: 5.0,
            waited_s,
            waits: 50,
            cpu_stat_throttled_s: Some(4.4),
            others_busy: 0.01,
        }
    }

    #[test]
    fn a_segment_per_cause_that_waited() {
        let c = Causes {
            cpu: 1,
            how: String::new(),
            limit: "10 %".into(),
            throttle_split: "on".into(),
            irq_steal_split: "on".into(),
            own_limit: scenario([4.4, 0.01, 0.0, 0.02, 0.0, 0.0]),
            neighbour: scenario([0.0; 6]),
            took_s: 11.0,
        };
        let svg = svg(&c);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<title>").count(), 3);
        assert!(svg.contains("throttled 99.3 % · 4.40 s") && svg.contains("no wait seen"), "{svg}");
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }
}
