//! `Report` → the text `record` prints: runqlat-style ASCII histograms, why the tasks waited (the
//! delay time by cause), a `perf sched latency`-style task table with a column per cause, per-CPU
//! figures, the worst cases (the attributed one with its throttled and IRQ/steal parts) and what
//! was lost.
use std::fmt::Write as _;

use latency_common::{
    Lost, Reason,
    buckets::{BUCKETS, OVERFLOW_BUCKET, ZERO_BUCKET, native_index},
    maps::Cause,
};

pub use crate::model::units::fmt_ns;
use crate::model::{
    causes,
    distribution::{native_bound, upper_seconds},
    report::{HistogramReport, Report},
    units::sig,
};

const BAR_WIDTH: usize = 40;

/// A thread name made safe for a terminal table: control characters, backslashes and the
/// replacement character of invalid UTF-8 are shown escaped, never interpreted.
pub fn escape_comm(comm: &str) -> String {
    let mut out = String::with_capacity(comm.len());
    for c in comm.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// A bucket bound in seconds, short, in the unit that fits it ("954ns", "1.907µs", "62.5ms").
fn fmt_bound(seconds: f64) -> String {
    if seconds == 0.0 {
        "0".to_string()
    } else if seconds < 1e-6 {
        format!("{}ns", sig(seconds * 1e9))
    } else if seconds < 1e-3 {
        format!("{}µs", sig(seconds * 1e6))
    } else if seconds < 1.0 {
        format!("{}ms", sig(seconds * 1e3))
    } else {
        format!("{}s", sig(seconds))
    }
}

/// Rows of a histogram: one per power of two in seconds (8 of our buckets each), plus the zero
/// and overflow buckets; `(lower_s, upper_s or None for +Inf, count)`.
fn octave_rows(raw: &[u64; BUCKETS]) -> Vec<(f64, Option<f64>, u64)> {
    let mut rows: Vec<(f64, Option<f64>, u64)> = Vec::new();
    rows.push((0.0, upper_seconds(ZERO_BUCKET), raw[ZERO_BUCKET]));
    let mut k = 1;
    while k < OVERFLOW_BUCKET {
        // Native indices i in (8(g-1), 8g] share the octave (2^(g-1), 2^g] s.
        let Some(i) = native_index(k) else { break };
        let g = (i + 7).div_euclid(8);
        let mut n = 0;
        let mut last = k;
        while last < OVERFLOW_BUCKET && native_index(last).map(|j| (j + 7).div_euclid(8)) == Some(g) {
            n += raw[last];
            last += 1;
        }
        // The top octave may be cut short by the last native bucket we keep.
        let upper = upper_seconds(last - 1).unwrap_or(native_bound(8 * g));
        rows.push((native_bound(8 * (g - 1)), Some(upper), n));
        k = last;
    }
    rows.push((upper_seconds(OVERFLOW_BUCKET - 1).unwrap_or(f64::MAX), None, raw[OVERFLOW_BUCKET]));
    let first = rows.iter().position(|r| r.2 > 0);
    let last = rows.iter().rposition(|r| r.2 > 0);
    match (first, last) {
        (Some(f), Some(l)) => rows[f..=l].to_vec(),
        _ => Vec::new(),
    }
}

pub fn histogram(out: &mut String, reason: Reason, h: &HistogramReport) {
    let _ = write!(out, "{} delays: {}", reason.name(), h.count);
    if h.count == 0 {
        out.push('\n');
        return;
    }
    let q = |v: Option<u64>| v.map(fmt_ns).unwrap_or_else(|| "-".into());
    let _ = writeln!(
        out,
        ", avg {}, p50 {}, p99 {}, p99.9 {}, max {}",
        fmt_ns(h.sum_ns / h.count),
        q(h.p50_ns),
        q(h.p99_ns),
        q(h.p999_ns),
        fmt_ns(h.max_ns)
    );
    let rows = octave_rows(&h.raw);
    let peak = rows.iter().map(|r| r.2).max().unwrap_or(1).max(1);
    let _ = writeln!(out, "  {:>22} : {:<10} distribution", "delay", "count");
    for (lower, upper, n) in rows {
        let range = match upper {
            Some(u) => format!("{} -> {}", fmt_bound(lower), fmt_bound(u)),
            None => format!("{} -> +Inf", fmt_bound(lower)),
        };
        let bar = ((n as f64 / peak as f64) * BAR_WIDTH as f64).ceil() as usize;
        let _ = writeln!(
            out,
            "  {:>22} : {:<10} |{:<width$}|",
            range,
            n,
            "*".repeat(bar.min(BAR_WIDTH)),
            width = BAR_WIDTH
        );
    }
}

/// Milliseconds in a narrow column: one decimal, "-" for nothing.
fn ms(ns: u64) -> String {
    if ns == 0 { "-".to_string() } else { format!("{:.1}", ns as f64 / 1e6) }
}

pub fn tasks(out: &mut String, report: &Report, top: usize) {
    let shown = if top == 0 { report.tasks.len() } else { top.min(report.tasks.len()) };
    let mut header = format!(
        " {:<32} | {:>4} | {:>10} | {:>17} | {:>9} | {:>9} |",
        "Task (comm:tid, pid)", "prio", "runtime ms", "switches vol/inv", "avg ms", "max ms"
    );
    for cause in Cause::ALL {
        let _ = write!(header, " {:>6}", causes::short(cause));
    }
    header.push_str(" | max delay at");
    let _ = writeln!(out, "{header}");
    let _ = writeln!(out, " {}", "-".repeat(header.len() + 1));
    for t in &report.tasks[..shown] {
        let name = format!("{}:{} ({})", escape_comm(&t.comm), t.tid, t.pid);
        let at = if t.delay_max_at_ns == 0 {
            "-".to_string()
        } else {
            format!("+{:.6} s", t.delay_max_at_ns.saturating_sub(report.start_ns) as f64 / 1e9)
        };
        let _ = write!(
            out,
            " {:<32} | {:>4} | {:>10.3} | {:>17} | {:>9.3} | {:>9.3} |",
            name,
            t.prio,
            t.runtime_ns as f64 / 1e6,
            format!("{} ({}/{})", t.switches, t.voluntary, t.involuntary),
            t.delay_avg_ns as f64 / 1e6,
            t.delay_max_ns as f64 / 1e6,
        );
        for cause in Cause::ALL {
            let _ = write!(out, " {:>6}", ms(t.waited_by_cause_ns.get(cause)));
        }
        let _ = writeln!(out, " | {at}");
    }
    if shown < report.tasks.len() {
        let _ = writeln!(out, " ({} more tasks; --top 0 shows all, --json has all)", report.tasks.len() - shown);
    }
}

/// Why they waited, all CPUs: each cause's time, its share and a bar, then what was not split.
pub fn causes(out: &mut String, report: &Report) {
    let c = &report.waited_by_cause_ns;
    let total = c.total();
    let _ = writeln!(out, " {} waited in all, by cause:", fmt_ns(total));
    for cause in Cause::ALL {
        let ns = c.get(cause);
        let share = if total == 0 { 0.0 } else { ns as f64 / total as f64 };
        let bar = (share * 20.0).ceil() as usize;
        let _ = writeln!(
            out,
            "  {:<5} {:>10} {:>6.1} % |{:<20}| {}",
            causes::short(cause),
            fmt_ns(ns),
            100.0 * share,
            "*".repeat(bar.min(20)),
            causes::describe(cause)
        );
    }
    if report.unsplit > 0 {
        let _ = writeln!(
            out,
            " {} delays not split (the task migrated while it waited): each counted whole under who held the CPU",
            report.unsplit
        );
    }
}

pub fn cpus(out: &mut String, report: &Report) {
    let _ = writeln!(
        out,
        " {:>4} | {:>10} | {:>10} | {:>11} | {:>6}",
        "cpu", "switches", "voluntary", "involuntary", "idle %"
    );
    for c in &report.cpus {
        let idle = if report.duration_ns > 0 { 100.0 * c.idle_ns as f64 / report.duration_ns as f64 } else { 0.0 };
        let _ = writeln!(
            out,
            " {:>4} | {:>10} | {:>10} | {:>11} | {:>6.1}",
            c.cpu,
            c.switches,
            c.voluntary,
            c.involuntary,
            idle.min(100.0)
        );
    }
}

pub fn worst(out: &mut String, report: &Report) {
    for m in &report.window_max {
        let _ = writeln!(
            out,
            " cpu {:<3} {:<7} {:>10}  {}:{} ({}) waited; +{:.6} s; ran before it: {}:{} ({})",
            m.cpu,
            m.reason.name(),
            fmt_ns(m.delay_ns),
            escape_comm(&m.victim.comm),
            m.victim.tid,
            m.victim.pid,
            m.end_ns.saturating_sub(report.start_ns) as f64 / 1e9,
            escape_comm(&m.prev.comm),
            m.prev.tid,
            m.prev.pid,
        );
    }
}

/// The worst attributed delay: who waited, how deep the queue was, who ran meanwhile.
pub fn attributed(out: &mut String, report: &Report) {
    let Some(a) = report.attributed.first() else { return };
    let depth = a.queue_depth.map_or("an unknown number of".to_string(), |d| d.to_string());
    let _ = writeln!(
        out,
        " {} {} on cpu {}, ended +{:.6} s: {}:{} ({}) waited; {} other tasks runnable when it was queued; cgroup {}",
        a.reason.name(),
        fmt_ns(a.delay_ns),
        a.cpu,
        a.end_ns.saturating_sub(report.start_ns) as f64 / 1e9,
        escape_comm(&a.victim_comm),
        a.victim_tid,
        a.victim_pid,
        depth,
        escape_comm(&a.cgroup),
    );
    if a.throttled_ns > 0 || a.irq_steal_ns > 0 {
        let _ = writeln!(
            out,
            "   of it: {} throttled by the CPU limit of its cgroup (or a parent), {} in IRQ or steal, {} behind who ran",
            fmt_ns(a.throttled_ns),
            fmt_ns(a.irq_steal_ns),
            fmt_ns(a.held_ns())
        );
    }
    let ran: Vec<String> =
        a.culprits.iter().map(|c| format!("{}:{} {}", escape_comm(&c.comm), c.tid, fmt_ns(c.ran_ns))).collect();
    let _ = writeln!(
        out,
        "   ran meanwhile, most recent first: {}{}",
        if ran.is_empty() { "nothing recorded".to_string() } else { ran.join(", ") },
        if a.culprits_truncated { ", … (more, not kept)" } else { "" }
    );
}

pub fn losses(out: &mut String, report: &Report) {
    let untraced = report.lost.get(Lost::Switches.map()).copied().unwrap_or(0);
    let lost: Vec<String> = report
        .lost
        .iter()
        .filter(|(k, n)| **n > 0 && **k != Lost::Switches.map())
        .map(|(k, n)| format!("{k}: {n}"))
        .collect();
    let discarded: Vec<String> =
        report.discarded.iter().filter(|(_, n)| **n > 0).map(|(k, n)| format!("{k}: {n}")).collect();
    if lost.is_empty() && discarded.is_empty() && untraced == 0 {
        let _ = writeln!(out, " nothing lost, nothing discarded");
        return;
    }
    if untraced > 0 {
        let _ = writeln!(
            out,
            " switches the kernel raised no sched_switch for: {untraced} (no tracer sees them; the delays and run \
             time around them are missing, tasks' `untraced` column says whose)"
        );
    }
    if !lost.is_empty() {
        let _ = writeln!(out, " lost (a map was full): {}", lost.join(", "));
    }
    if !discarded.is_empty() {
        let _ = writeln!(out, " discarded (not believable): {}", discarded.join(", "));
    }
}

/// The whole text report.
pub fn report(report: &Report, top: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Run-queue delay over {:.3} s on {} ({} CPUs){}",
        report.duration_ns as f64 / 1e9,
        report.kernel,
        report.cpus.len(),
        if report.filter.is_empty() { String::new() } else { format!(", tasks of pid/tid {:?} only", report.filter) }
    );
    for reason in Reason::ALL {
        out.push('\n');
        histogram(&mut out, reason, report.histograms.get(reason));
    }
    out.push_str("\nWhy they waited (the delays above, all CPUs)\n");
    causes(&mut out, report);
    out.push_str(
        "\nTasks, by max delay; time waited by cause, ms (thr: throttled by a CPU limit, irq: IRQ or steal,\n \
         same/other: behind a task of its own/another cgroup, kern: behind a kernel thread, idle: behind nothing)\n",
    );
    tasks(&mut out, report, top);
    out.push_str("\nCPUs (switches and idle are per CPU, not filtered)\n");
    cpus(&mut out, report);
    if !report.window_max.is_empty() {
        out.push_str("\nWorst delay per CPU and reason\n");
        worst(&mut out, report);
    }
    if !report.attributed.is_empty() {
        out.push_str("\nWorst delay, attributed\n");
        attributed(&mut out, report);
    }
    out.push_str("\nLosses\n");
    losses(&mut out, report);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use latency_common::buckets::bucket_of;

    #[test]
    fn bounds_are_short_and_exact_for_powers_of_two() {
        assert_eq!(fmt_bound(2f64.powi(-20)), "953.7ns");
        assert_eq!(fmt_bound(2f64.powi(-19)), "1.907µs");
        assert_eq!(fmt_bound(2f64.powi(-4)), "62.5ms");
        assert_eq!(fmt_bound(2.0), "2s");
        assert_eq!(fmt_bound(0.0), "0");
    }

    #[test]
    fn hostile_names_cannot_break_a_line() {
        assert_eq!(escape_comm("a\nb\"c\\"), "a\\x0ab\"c\\\\");
        assert_eq!(escape_comm("tab\there"), "tab\\x09here");
        assert!(!escape_comm("\u{1b}[31mred").contains('\u{1b}'));
    }

    fn sample() -> Report {
        use latency_common::{TaskStats, knobs::Clock};

        use crate::model::{
            report::Meta,
            snapshot::{CpuMax, Snapshot},
            wall::WallClock,
        };
        let start = Snapshot::empty(0, 2);
        let mut end = Snapshot::empty(1_000_000_000, 2);
        for d in [3_000_000u64, 7_000_000] {
            end.histograms[Reason::Preempt as usize].buckets[bucket_of(d)] += 1;
            end.histograms[Reason::Preempt as usize].sum_ns += d;
        }
        end.cpus[0].waited_ns = [4_000_000, 500_000, 0, 2_500_000, 0, 0];
        end.cpus[1].waited_ns = [0, 0, 3_000_000, 0, 0, 0];
        end.cpus[1].unsplit = 1;
        let mut t = TaskStats::ZERO;
        t.tgid = 1;
        t.comm[..6].copy_from_slice(b"victim");
        t.delays = [0, 2];
        t.delay_sum_ns = 10_000_000;
        t.waited_ns = [4_000_000, 500_000, 3_000_000, 2_500_000, 0, 0];
        end.tasks.push((1, t));
        let meta = Meta { kernel: "t".into(), wall: WallClock::new(0, 0), filter: Vec::new(), clock: Clock::Monotonic };
        let mut max = latency_common::WindowMax::ZERO;
        max.delay_ns = 7_000_000;
        Report::between(&start, &end, &[(Reason::Preempt, CpuMax { cpu: 0, max })], &meta)
    }

    #[test]
    fn the_task_table_has_a_column_per_cause_that_adds_up() {
        let text = report(&sample(), 20);
        let header = text.lines().find(|l| l.contains("Task (comm:tid, pid)")).unwrap();
        let row = text.lines().find(|l| l.contains("victim:1 (1)")).unwrap();
        assert_eq!(header.chars().count(), row.chars().count() + "max delay at".len() - "-".len(), "{header}\n{row}");
        assert!(header.chars().count() <= 160, "{} columns: too wide", header.chars().count());
        let columns: Vec<&str> = header.split('|').nth(6).unwrap().split_whitespace().collect();
        assert_eq!(columns, ["thr", "irq", "same", "other", "kern", "idle"]);
        let cells: Vec<&str> = row.split('|').nth(6).unwrap().split_whitespace().collect();
        assert_eq!(cells, ["4.0", "0.5", "3.0", "2.5", "-", "-"]);
        let sum: f64 = cells.iter().filter_map(|c| c.parse::<f64>().ok()).sum();
        let avg: f64 = row.split('|').nth(4).unwrap().trim().parse().unwrap();
        assert!((sum - 2.0 * avg).abs() < 1e-9, "causes {sum} ms, delays 2 × {avg} ms");
    }

    #[test]
    fn the_machine_wide_causes_add_up_to_the_delays() {
        let text = report(&sample(), 20);
        let section = text.split("Why they waited").nth(1).unwrap().split("\n\n").next().unwrap();
        assert!(section.contains(" 10 ms waited in all, by cause:"), "{section}");
        for (cause, line) in [("thr", "4 ms   40.0 %"), ("irq", "500 µs    5.0 %"), ("same", "3 ms   30.0 %")] {
            let l = section.lines().find(|l| l.trim_start().starts_with(cause)).unwrap();
            assert!(l.contains(line), "{l}");
        }
        assert_eq!(section.lines().filter(|l| l.contains(" % |")).count(), 6, "{section}");
        assert!(section.contains("1 delays not split"), "{section}");
    }

    #[test]
    fn octaves_cover_each_count_once() {
        let mut raw = [0u64; BUCKETS];
        for (d, n) in [(500u64, 3u64), (1_500, 5), (3_000, 7), (1_000_000, 11), (u64::MAX, 13)] {
            raw[bucket_of(d)] += n;
        }
        let rows = octave_rows(&raw);
        assert_eq!(rows.iter().map(|r| r.2).sum::<u64>(), 3 + 5 + 7 + 11 + 13);
        assert_eq!(rows.first().map(|r| r.0), Some(0.0));
        assert_eq!(rows.last().map(|r| r.1), Some(None));
        // Octave bounds are powers of two and contiguous.
        for w in rows.windows(2) {
            if let Some(u) = w[0].1 {
                assert_eq!(u, w[1].0);
            }
        }
        // 1.5 µs falls in (2^-20, 2^-19] s = (0.954, 1.907] µs.
        let row = rows.iter().find(|r| r.0 <= 1.5e-6 && r.1.is_some_and(|u| u >= 1.5e-6)).unwrap();
        assert_eq!(row.2, 5);
    }
}
