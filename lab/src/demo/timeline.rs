//! The stall alert's figure, hand-written SVG: in, a `StallAlert`; out, its timeline — seconds
//! since the hog began across, the task's wait so far up — with the spin as a band, each long
//! wait of the task growing at one second a second, the daemon's readings of it in progress as
//! dots, the threshold, and the moments the alert fired and the task ran.
use std::fmt::Write as _;

use super::{figure::open, stall_alert::StallAlert};

const W: f64 = 860.0;
const H: f64 = 380.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 70.0;
const BOTTOM: f64 = 50.0;

pub fn svg(a: &StallAlert) -> String {
    let w = &a.watched;
    let spin_s = a.spin_ns as f64 / 1e9;
    let x_max = (a.at_s(w.ran_ns.max(w.ends_ns)) + 0.3).max(spin_s + 0.3).ceil();
    let longest = w.long_waits.iter().map(|(asked, ran)| ran - asked).max().unwrap_or(0) as f64 / 1e9;
    let y_max = (longest.max(a.threshold_ns as f64 / 1e9) * 1.15 * 2.0).ceil() / 2.0;
    let x = |s: f64| LEFT + s.clamp(-0.2, x_max) / x_max * (W - LEFT - RIGHT);
    let y = |s: f64| H - BOTTOM - s.clamp(0.0, y_max) / y_max * (H - TOP - BOTTOM);

    let mut out = open(
        W,
        H,
        LEFT,
        &format!(
            "SCHED_FIFO hog on CPU {} for {spin_s:.0} s, a 1 ms sleeper beside it: its wait as it grew, and as the \
             daemon saw it",
            a.cpu
        ),
    );
    // The spin.
    let _ = writeln!(
        out,
        "<rect x=\"{:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#eeeeee\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#777\">hog spinning</text>",
        x(0.0),
        x(spin_s) - x(0.0),
        H - TOP - BOTTOM,
        x(0.0) + 4.0,
        TOP + 14.0
    );
    // Axes and ticks.
    let _ = writeln!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\" stroke=\"black\"/>\
         <line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{0:.1}\" stroke=\"black\"/>",
        H - BOTTOM,
        W - RIGHT
    );
    for s in 0..=(x_max as u32) {
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{s} s</text>",
            x(f64::from(s)),
            H - BOTTOM + 16.0
        );
    }
    let mut t = 0.0;
    while t <= y_max + 1e-9 {
        let _ =
            writeln!(out, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{t:.1} s</text>", LEFT - 6.0, y(t) + 4.0);
        t += 0.5;
    }
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">seconds since the hog began</text>\
         <text x=\"14\" y=\"{:.1}\" transform=\"rotate(-90 14 {:.1})\" text-anchor=\"middle\">the task's wait so far</text>",
        (LEFT + W - RIGHT) / 2.0,
        H - 12.0,
        (TOP + H - BOTTOM) / 2.0,
        (TOP + H - BOTTOM) / 2.0
    );
    // The threshold.
    let th = a.threshold_ns as f64 / 1e9;
    let _ = writeln!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\" stroke=\"#d62728\" stroke-dasharray=\"4 3\"/>\
         <text x=\"{2:.1}\" y=\"{3:.1}\" fill=\"#d62728\" text-anchor=\"end\">alert threshold {th:.1} s</text>",
        y(th),
        W - RIGHT,
        W - RIGHT - 4.0,
        y(th) - 4.0
    );
    // Each long wait, growing one second a second from the task's timer to its run.
    for (asked, ran) in &w.long_waits {
        let (x0, x1) = (x(a.at_s(*asked)), x(a.at_s(*ran)));
        let _ = writeln!(
            out,
            "<line x1=\"{x0:.1}\" y1=\"{:.1}\" x2=\"{x1:.1}\" y2=\"{:.1}\" stroke=\"#1f77b4\" stroke-width=\"2\"/>\
             <line x1=\"{x1:.1}\" y1=\"{:.1}\" x2=\"{x1:.1}\" y2=\"{:.1}\" stroke=\"#1f77b4\" stroke-width=\"2\"/>",
            y(0.0),
            y((ran - asked) as f64 / 1e9),
            y((ran - asked) as f64 / 1e9),
            y(0.0)
        );
    }
    // The daemon's readings (each scan once).
    let mut seen: Vec<(u64, u64)> = w
        .looks
        .iter()
        .filter_map(|l| Some((l.seen_ns?, l.waited_ns?)))
        .filter(|(_, waited)| *waited > 10_000_000)
        .collect();
    seen.sort_unstable();
    seen.dedup();
    for (at, waited) in &seen {
        let _ = writeln!(
            out,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"white\" stroke=\"#ff7f0e\" stroke-width=\"2\"/>",
            x(a.at_s(*at)),
            y(*waited as f64 / 1e9)
        );
    }
    // The moments.
    let mut mark = |at: u64, color: &str, text: String, row: f64| {
        let xm = x(a.at_s(at));
        let _ = writeln!(
            out,
            "<line x1=\"{xm:.1}\" y1=\"{TOP}\" x2=\"{xm:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-dasharray=\"2 2\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"{color}\">{text}</text>",
            H - BOTTOM,
            xm + 4.0,
            TOP + 30.0 + 14.0 * row
        );
    };
    if let Some(f) = &a.fired {
        mark(f.seen_ns, "#d62728", format!("alert fired ({:.2} s)", a.at_s(f.seen_ns)), 0.0);
    }
    if let Some((_, ran)) = a.first_wait() {
        mark(ran, "#2ca02c", format!("task ran ({:.2} s)", a.at_s(ran)), 1.0);
    }
    // Legend.
    let lx = LEFT + 10.0;
    let _ = writeln!(
        out,
        "<line x1=\"{lx}\" y1=\"40\" x2=\"{0}\" y2=\"40\" stroke=\"#1f77b4\" stroke-width=\"2\"/>\
         <text x=\"{1}\" y=\"44\">the task's wait (its own clock: timer → first instruction after it)</text>\
         <circle cx=\"{2}\" cy=\"56\" r=\"3.5\" fill=\"white\" stroke=\"#ff7f0e\" stroke-width=\"2\"/>\
         <text x=\"{1}\" y=\"60\">the daemon's wait scan: the wait in progress, at the drain that saw it</text>",
        lx + 24.0,
        lx + 30.0,
        lx + 12.0
    );
    out.push_str("</svg>\n");
    out
}
