//! A capture's records and the wait it was taken for in; an SVG timeline out: one row per CPU
//! (the victim's first), who ran when (the victim dark, idle blank, others a colour per task),
//! the wait as a red band on its CPU, a CPU's events missing (its ring wrapped between readings)
//! as a grey dashed box, the victim's wakeups and moves as marks, a time axis at
//! round values from the wait's start, and what ran on the victim's CPU while it waited, longest
//! first. No script: each slice carries a `<title>` tooltip. Slices under a third of a pixel are
//! left out (and counted in the footer) so a capture of thousands of switches stays a picture.
use std::collections::BTreeMap;
use std::fmt::Write as _;

use latency_common::maps::{CAPTURE_MIGRATE, CAPTURE_SWITCH, CAPTURE_WAKING, CaptureRecord};

use super::escape;
use crate::model::{
    capture::{Gap, Wait, gaps},
    comm_string,
    units::fmt_ns,
};

const LEFT: f64 = 96.0;
const PLOT_W: f64 = 880.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 44.0;
const ROW_H: f64 = 22.0;
const ROW_GAP: f64 = 4.0;
/// At most this many CPU rows: the victim's, then the busiest.
const MAX_ROWS: usize = 32;
/// Lines listing what ran on the victim's CPU during the wait.
const MAX_HOLDERS: usize = 8;
const VICTIM: &str = "#08306b";
const WAIT: &str = "#e31a1c";

/// Who ran on one CPU from `start_ns` to `end_ns`.
#[derive(Clone, Debug, PartialEq)]
struct Slice {
    start_ns: u64,
    end_ns: u64,
    tid: u32,
    comm: String,
}

/// Each CPU's slices between `from` and `to` from its switches: the task switched in runs until
/// the next switch; before the first, the first switch's prev ran. Across a gap in a CPU's
/// records (`gaps`) nothing is known: the slice before it ends where the gap begins, and after it
/// the next switch's prev ran from where the gap ends.
fn slices(records: &[CaptureRecord], gaps: &[Gap], from: u64, to: u64) -> BTreeMap<u32, Vec<Slice>> {
    let mut by_cpu: BTreeMap<u32, Vec<Slice>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.kind == CAPTURE_SWITCH) {
        let row = by_cpu.entry(r.cpu).or_default();
        let last = row.last_mut();
        // The gap between the slice running now and this switch, if one.
        let gap = last
            .as_ref()
            .and_then(|l| gaps.iter().find(|g| g.cpu == r.cpu && g.from_ns >= l.start_ns && g.to_ns <= r.ts_ns));
        match (last, gap) {
            (Some(last), None) => last.end_ns = r.ts_ns,
            (last, gap) => {
                if let (Some(last), Some(g)) = (last, gap) {
                    last.end_ns = g.from_ns;
                }
                let start_ns = gap.map_or(from.min(r.ts_ns), |g| g.to_ns);
                row.push(Slice { start_ns, end_ns: r.ts_ns, tid: r.pid, comm: comm_string(&r.comm) });
            }
        }
        row.push(Slice {
            start_ns: r.ts_ns,
            end_ns: to.max(r.ts_ns),
            tid: r.other_pid,
            comm: comm_string(&r.other_comm),
        });
    }
    for (cpu, row) in &mut by_cpu {
        // The last slice before a gap that no switch follows ends where the gap begins too.
        for s in row.iter_mut() {
            if let Some(g) = gaps.iter().find(|g| g.cpu == *cpu && g.from_ns >= s.start_ns && g.from_ns < s.end_ns) {
                s.end_ns = g.from_ns;
            }
        }
        row.retain(|s| s.end_ns > from && s.start_ns < to);
        for s in row.iter_mut() {
            s.start_ns = s.start_ns.max(from);
            s.end_ns = s.end_ns.min(to);
        }
    }
    by_cpu
}

/// A colour per task, steady across captures: a hue from its tid.
fn colour(tid: u32) -> String {
    let hue = (tid.wrapping_mul(2_654_435_761) >> 8) % 360;
    format!("hsl({hue},55%,62%)")
}

/// The step (ns) of round ticks over `span_ns`: 1, 2 or 5 times a power of ten, 4 to 10 ticks.
fn tick_step(span_ns: u64) -> u64 {
    let mut step = 1u64;
    loop {
        for m in [1, 2, 5] {
            if span_ns / (step * m) <= 10 {
                return step * m;
            }
        }
        step = step.saturating_mul(10);
    }
}

/// "+10 ms", "−2 ms", "0" relative to the wait's start.
fn offset(ns: i128) -> String {
    match ns {
        0 => "0".into(),
        n if n < 0 => format!("−{}", fmt_ns(n.unsigned_abs() as u64)),
        n => format!("+{}", fmt_ns(n as u64)),
    }
}

/// The picture of `records` (by time) around `wait` (or, for a capture on demand, over all of them).
pub fn picture(records: &[CaptureRecord], wait: Option<&Wait>) -> String {
    let (first, last) = (records.first().map_or(0, |r| r.ts_ns), records.last().map_or(0, |r| r.ts_ns));
    let (from, to) = match wait {
        Some(w) => {
            let pad = (w.delay_ns() / 4).max(2_000_000);
            (
                w.start_ns.saturating_sub(pad).max(first.min(w.start_ns)),
                w.end_ns.saturating_add(pad).min(last.max(w.end_ns)),
            )
        }
        None => (first, last),
    };
    let to = to.max(from + 1);
    let span = to - from;
    let x = |ns: u64| LEFT + (ns.clamp(from, to) - from) as f64 / span as f64 * PLOT_W;
    let gaps = gaps(records);
    let by_cpu = slices(records, &gaps, from, to);
    let victim_cpu = wait.map(|w| w.cpu);
    // Rows: the victim's CPU, then the others by time not idle.
    let busy = |row: &[Slice]| row.iter().filter(|s| s.tid != 0).map(|s| s.end_ns - s.start_ns).sum::<u64>();
    let mut cpus: Vec<u32> = by_cpu.keys().copied().filter(|c| Some(*c) != victim_cpu).collect();
    cpus.sort_by_key(|c| std::cmp::Reverse(busy(&by_cpu[c])));
    if let Some(c) = victim_cpu {
        cpus.insert(0, c);
    }
    let hidden_rows = cpus.len().saturating_sub(MAX_ROWS);
    cpus.truncate(MAX_ROWS);
    let row_y = |i: usize| TOP + i as f64 * (ROW_H + ROW_GAP);
    let plot_bottom = row_y(cpus.len().max(1));
    let holders = wait.map(|w| holders(by_cpu.get(&w.cpu).map_or(&[][..], Vec::as_slice), w)).unwrap_or_default();
    let height = plot_bottom + 40.0 + 16.0 * (holders.len().min(MAX_HOLDERS) as f64 + 2.0);
    let width = LEFT + PLOT_W + RIGHT;

    let mut out = String::new();
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"capture\" width=\"{width}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width} {height:.0}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
    );
    let title = match wait {
        Some(w) => format!(
            "{} (tid {}) waited {} on CPU {} ({}){}{}",
            w.comm,
            w.tid,
            fmt_ns(w.delay_ns()),
            w.cpu,
            w.reason,
            if w.waiting { ", still waiting when captured" } else { "" },
            if w.pod.is_empty() { format!(" · {}", w.cgroup) } else { format!(" · pod {}", w.pod) },
        ),
        None => format!("Every CPU's scheduling over {} (taken on demand)", fmt_ns(span)),
    };
    let _ =
        writeln!(out, "<text x=\"{LEFT}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{}</text>", escape(&title));
    if let Some(w) = wait {
        let said = |part: &str| {
            match part {
                "held" => "behind who ran",
                "irq+steal" => "in IRQ or steal",
                "unknown" => "cause unknown on this kernel",
                other => other,
            }
            .to_owned()
        };
        let split: Vec<String> = w.parts.iter().map(|(p, ns)| format!("{} {}", fmt_ns(*ns), said(p))).collect();
        let _ = writeln!(out, "<text x=\"{LEFT}\" y=\"32\">why: {}</text>", escape(&split.join(" · ")));
    }

    let mut dropped = 0usize;
    for (i, cpu) in cpus.iter().enumerate() {
        let y = row_y(i);
        let label = if Some(*cpu) == victim_cpu { format!("CPU {cpu} ◀") } else { format!("CPU {cpu}") };
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\"{}>{label}</text>\n\
             <rect x=\"{LEFT}\" y=\"{y:.1}\" width=\"{PLOT_W}\" height=\"{ROW_H}\" fill=\"#f4f4f4\"/>",
            LEFT - 6.0,
            y + ROW_H * 0.7,
            if Some(*cpu) == victim_cpu { " font-weight=\"bold\"" } else { "" },
        );
        if let Some(w) = wait.filter(|w| w.cpu == *cpu) {
            let (a, b) = (x(w.start_ns), x(w.end_ns));
            let _ = writeln!(
                out,
                "<rect class=\"wait\" x=\"{a:.2}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{:.1}\" fill=\"{WAIT}\" \
                 fill-opacity=\"0.25\"><title>the wait: {}</title></rect>",
                y - 2.0,
                (b - a).max(1.0),
                ROW_H + 4.0,
                escape(&fmt_ns(w.delay_ns())),
            );
        }
        for g in gaps.iter().filter(|g| g.cpu == *cpu && g.to_ns > from && g.from_ns < to) {
            let (a, b) = (x(g.from_ns), x(g.to_ns));
            let _ = writeln!(
                out,
                "<rect class=\"gap\" x=\"{a:.2}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{:.1}\" fill=\"#bdbdbd\" \
                 stroke=\"#636363\" stroke-dasharray=\"2 2\"><title>{} event{} missing (the ring wrapped between \
                 readings)</title></rect>",
                y + 3.0,
                (b - a).max(1.0),
                ROW_H - 6.0,
                g.missing,
                if g.missing == 1 { "" } else { "s" },
            );
        }
        for s in &by_cpu[cpu] {
            if s.tid == 0 {
                continue;
            }
            let is_victim = wait.is_some_and(|w| w.tid == s.tid);
            let (a, mut b) = (x(s.start_ns), x(s.end_ns));
            if is_victim {
                // The victim's runs however short: where its wait ended is the point of the picture.
                b = b.max(a + 2.0);
            } else if b - a < 0.33 {
                dropped += 1;
                continue;
            }
            let fill = if is_victim { VICTIM.to_owned() } else { colour(s.tid) };
            let _ = write!(
                out,
                "<rect class=\"run\" data-tid=\"{}\" x=\"{a:.2}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{:.1}\" \
                 fill=\"{fill}\"><title>{} (tid {}) ran {}</title></rect>",
                s.tid,
                y + 3.0,
                b - a,
                ROW_H - 6.0,
                escape(&s.comm),
                s.tid,
                escape(&fmt_ns(s.end_ns - s.start_ns)),
            );
            if b - a > 7.0 * (s.comm.chars().count() as f64 + 2.0) {
                let _ = write!(
                    out,
                    "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{}\" pointer-events=\"none\">{}</text>",
                    a + 3.0,
                    y + ROW_H * 0.68,
                    if is_victim { "#fff" } else { "#000" },
                    escape(&s.comm),
                );
            }
            out.push('\n');
        }
    }

    // The victim's wakeups (a line from the waker's CPU to where it was queued) and moves.
    if let Some(w) = wait {
        let row_of = |cpu: u32| cpus.iter().position(|c| *c == cpu);
        for r in records.iter().filter(|r| r.pid == w.tid && (from..=to).contains(&r.ts_ns)) {
            let at = x(r.ts_ns);
            let (what, source, target) = match r.kind {
                CAPTURE_WAKING => (
                    format!("woken by {} (tid {}) on CPU {}", comm_string(&r.other_comm), r.other_pid, r.cpu),
                    r.cpu,
                    r.arg,
                ),
                CAPTURE_MIGRATE => (format!("moved from CPU {} to CPU {}", r.arg, r.other_arg), r.arg, r.other_arg),
                _ => continue,
            };
            let (Some(s), Some(t)) = (row_of(source), row_of(target)) else { continue };
            let (y1, y2) = (row_y(s) + ROW_H / 2.0, row_y(t) + ROW_H / 2.0);
            let _ = writeln!(
                out,
                "<g class=\"{}\"><line x1=\"{at:.2}\" y1=\"{y1:.1}\" x2=\"{at:.2}\" y2=\"{y2:.1}\" stroke=\"#000\" \
                 stroke-width=\"1.5\"/><circle cx=\"{at:.2}\" cy=\"{y2:.1}\" r=\"3.5\" fill=\"{}\"/><title>{} at {}</title></g>",
                if r.kind == CAPTURE_WAKING { "wakeup" } else { "migrate" },
                if r.kind == CAPTURE_WAKING { "#fff" } else { "#000" },
                escape(&what),
                escape(&offset(i128::from(r.ts_ns) - i128::from(w.start_ns))),
            );
        }
    }

    // The axis: round steps from the wait's start (or the first record).
    let zero = wait.map_or(from, |w| w.start_ns);
    let step = tick_step(span);
    let mut t = i128::from(from) - i128::from(zero);
    t = t.div_euclid(i128::from(step)) * i128::from(step);
    while t <= i128::from(to) - i128::from(zero) {
        let at_ns = i128::from(zero) + t;
        if at_ns >= i128::from(from) {
            let at = x(at_ns as u64);
            let _ = writeln!(
                out,
                "<line x1=\"{at:.2}\" y1=\"{:.1}\" x2=\"{at:.2}\" y2=\"{:.1}\" stroke=\"#999\"/>\
                 <text class=\"tick\" x=\"{at:.2}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                TOP - 4.0,
                plot_bottom,
                plot_bottom + 14.0,
                escape(&offset(t)),
            );
        }
        t += i128::from(step);
    }
    let mut y = plot_bottom + 34.0;
    if let Some(w) = wait {
        let _ = writeln!(
            out,
            "<text x=\"{LEFT}\" y=\"{y:.1}\" font-weight=\"bold\">Ran on CPU {} while it waited:</text>",
            w.cpu
        );
        for (comm, tid, ns) in holders.iter().take(MAX_HOLDERS) {
            y += 16.0;
            let fill = if *tid == 0 { "#f4f4f4".to_owned() } else { colour(*tid) };
            let _ = writeln!(
                out,
                "<rect x=\"{LEFT}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{fill}\" stroke=\"#999\"/>\
                 <text class=\"holder\" x=\"{:.1}\" y=\"{y:.1}\">{} (tid {tid}) {}</text>",
                y - 9.0,
                LEFT + 16.0,
                escape(comm),
                escape(&fmt_ns(*ns)),
            );
        }
    }
    y += 20.0;
    let mut notes = vec![format!(
        "{} events, {} to {}",
        records.len(),
        offset(i128::from(from) - i128::from(zero)),
        offset(i128::from(to) - i128::from(zero))
    )];
    if dropped > 0 {
        notes.push(format!("{dropped} slices narrower than a third of a pixel not drawn"));
    }
    if hidden_rows > 0 {
        notes.push(format!("{hidden_rows} quieter CPUs not drawn"));
    }
    // A ring that wrapped before it was read no longer holds the start of the wait: said, not hidden.
    if let Some(w) = wait
        && let Some(first_there) = records.iter().find(|r| r.cpu == w.cpu).map(|r| r.ts_ns)
        && first_there > w.start_ns
    {
        notes.push(format!(
            "CPU {}'s ring no longer held the wait's first {} (raise capture_events)",
            w.cpu,
            fmt_ns(first_there.min(w.end_ns) - w.start_ns)
        ));
    }
    notes.push("open the .pftrace in ui.perfetto.dev for every event".into());
    let _ =
        writeln!(out, "<text x=\"{LEFT}\" y=\"{y:.1}\" fill=\"#555\">{}</text>\n</svg>", escape(&notes.join(" · ")));
    out
}

/// Who ran on the victim's CPU during the wait (idle as `idle`, tid 0), longest first.
fn holders(row: &[Slice], w: &Wait) -> Vec<(String, u32, u64)> {
    let mut by_tid: BTreeMap<u32, (String, u64)> = BTreeMap::new();
    for s in row {
        let (a, b) = (s.start_ns.max(w.start_ns), s.end_ns.min(w.end_ns));
        if b > a && s.tid != w.tid {
            let e = by_tid.entry(s.tid).or_insert_with(|| (if s.tid == 0 { "idle".into() } else { s.comm.clone() }, 0));
            e.1 += b - a;
        }
    }
    let mut out: Vec<(String, u32, u64)> = by_tid.into_iter().map(|(tid, (comm, ns))| (comm, tid, ns)).collect();
    out.sort_by_key(|(_, _, ns)| std::cmp::Reverse(*ns));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..s.len()].copy_from_slice(s.as_bytes());
        c
    }

    fn switch(ts_ns: u64, cpu: u32, prev: (u32, &str), next: (u32, &str)) -> CaptureRecord {
        CaptureRecord {
            kind: CAPTURE_SWITCH,
            ts_ns,
            cpu,
            pid: prev.0,
            comm: name(prev.1),
            other_pid: next.0,
            other_comm: name(next.1),
            ..CaptureRecord::default()
        }
    }

    #[test]
    fn a_gap_is_drawn_where_it_was_and_no_task_runs_across_it() {
        let ms = 1_000_000;
        let at = |seq, r: CaptureRecord| CaptureRecord { seq, seq_end: seq, ..r };
        // CPU 1: a runs, b from 10 ms, c from 20 ms; 6 events missing; a wakeup at 40 ms; d
        // switched out at 150 ms.
        let waking =
            CaptureRecord { kind: CAPTURE_WAKING, ts_ns: 40 * ms, cpu: 1, pid: 9, arg: 0, ..Default::default() };
        let records = [
            at(1, switch(0, 1, (0, "swapper/1"), (1, "a"))),
            at(2, switch(10 * ms, 1, (1, "a"), (2, "b"))),
            at(3, switch(20 * ms, 1, (2, "b"), (3, "c"))),
            at(10, waking),
            at(11, switch(150 * ms, 1, (4, "d"), (5, "e"))),
            at(12, switch(200 * ms, 1, (5, "e"), (0, "swapper/1"))),
        ];
        let svg = picture(&records, None);
        assert!(svg.contains("<title>6 events missing (the ring wrapped between readings)</title>"), "{svg}");
        let runs: Vec<(&str, &str)> = svg
            .split("<rect class=\"run\" data-tid=\"")
            .skip(1)
            .map(|r| (r.split('"').next().unwrap(), r.split("ran ").nth(1).unwrap().split('<').next().unwrap()))
            .collect();
        // c ran from 20 ms to where the gap began (nothing), d from where it ended to 150 ms.
        assert_eq!(runs, [("1", "10 ms"), ("2", "10 ms"), ("4", "110 ms"), ("5", "50 ms")], "{svg}");
    }

    #[test]
    fn the_wait_its_holders_and_round_ticks_are_drawn() {
        // CPU 1: hog runs 0–100 ms; the victim (7), woken from CPU 0 at 10 ms, runs at 100 ms.
        let ms = 1_000_000;
        let records = [
            switch(0, 1, (0, "swapper/1"), (9, "hog")),
            CaptureRecord {
                kind: CAPTURE_WAKING,
                ts_ns: 10 * ms,
                cpu: 0,
                pid: 7,
                comm: name("victim"),
                other_pid: 5,
                other_comm: name("waker"),
                arg: 1,
                ..CaptureRecord::default()
            },
            switch(10 * ms + 5, 0, (5, "waker"), (0, "swapper/0")),
            switch(100 * ms, 1, (9, "hog"), (7, "victim")),
            switch(104 * ms, 1, (7, "victim"), (9, "hog")),
            switch(130 * ms, 1, (9, "hog"), (0, "swapper/1")),
        ];
        let wait = Wait {
            tid: 7,
            comm: "victim".into(),
            cpu: 1,
            start_ns: 10 * ms,
            end_ns: 100 * ms,
            reason: "wakeup".into(),
            parts: vec![("held", 90 * ms)],
            cgroup: "/x".into(),
            ..Wait::default()
        };
        let svg = picture(&records, Some(&wait));
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(!svg.contains("no longer held"), "the ring reaches back: {svg}");
        let late = Wait { start_ns: 0, ..wait.clone() };
        let cpu1_from_10ms: Vec<CaptureRecord> = records.iter().filter(|r| r.ts_ns > 0).copied().collect();
        let beyond = picture(&cpu1_from_10ms, Some(&late));
        assert!(beyond.contains("ring no longer held the wait") && beyond.contains("first 100 ms"), "{beyond}");
        assert!(svg.contains("victim (tid 7) waited 90 ms on CPU 1 (wakeup)"), "{svg}");
        assert!(svg.contains("hog (tid 9) 90 ms"), "the holder and its time during the wait: {svg}");
        assert!(svg.contains("class=\"wait\""));
        assert!(svg.contains("woken by waker (tid 5) on CPU 0 at 0"), "{svg}");
        let ticks: Vec<&str> =
            svg.split("class=\"tick\"").skip(1).filter_map(|t| t.split('>').nth(1)?.split('<').next()).collect();
        assert!(ticks.contains(&"0") && ticks.contains(&"+60 ms"), "every 20 ms over 135 ms: {ticks:?}");
        assert!(ticks.iter().all(|t| !t.contains('.')), "round ticks: {ticks:?}");
        // CPU 1's row is first: its label comes before CPU 0's.
        assert!(svg.find("CPU 1 ◀").unwrap() < svg.find(">CPU 0<").unwrap());
    }

    #[test]
    fn hostile_names_are_escaped_and_ticks_are_round() {
        let records = [
            switch(0, 0, (1, "<script>"), (2, "a&b")),
            switch(5_000_000, 0, (2, "a&b"), (1, "<script>")),
            switch(9_000_000, 0, (1, "<script>"), (0, "swapper/0")),
        ];
        let svg = picture(&records, None);
        assert!(!svg.contains("<script>") && svg.contains("&lt;script&gt;"));
        assert_eq!([tick_step(5_000_000), tick_step(90_000_000), tick_step(1_000)], [500_000, 10_000_000, 100]);
    }
}
