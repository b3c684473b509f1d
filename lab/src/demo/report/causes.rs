//! The causes experiment in the report: in, `Causes`; out, its section (what ran, the measured
//! shares in words and as a table, the figure) and the console's line.
use std::fmt::Write as _;

use super::Report;
use crate::demo::causes::{CAUSES, Causes, MIN_OTHER, MIN_THROTTLED, Scenario};

fn pct(v: f64) -> String {
    format!("{:.1} %", 100.0 * v)
}

/// `causes: A 99.2 % throttled (4.43 s), B 93.1 % other (0.41 s)`, for the console.
pub fn causes_line(report: &Report) -> Option<String> {
    let c = report.causes.as_ref()?;
    let (a, b) = (&c.own_limit, &c.neighbour);
    Some(format!(
        "causes: A (its own limit) {} throttled of {:.3} s waited{}; B (a neighbour) {} other of {:.3} s waited",
        pct(a.share("throttled")),
        a.total_s(),
        if c.throttle_split_on() { String::new() } else { format!(" (throttle split {})", c.throttle_split) },
        pct(b.share("other")),
        b.total_s()
    ))
}

fn row(out: &mut String, s: &Scenario) {
    let _ = write!(out, "| {} | `{}` | {} | {:.3} s |", s.title, s.cgroup, s.waits, s.total_s());
    for cause in CAUSES {
        let _ = write!(out, " {:.3} s ({}) |", s.seconds(cause), pct(s.share(cause)));
    }
    let _ = writeln!(
        out,
        " {} | {} |",
        s.cpu_stat_throttled_s.map_or_else(|| "—".to_owned(), |t| format!("{t:.3} s")),
        pct(s.others_busy)
    );
}

pub(super) fn section(out: &mut String, c: &Causes) {
    let (a, b) = (&c.own_limit, &c.neighbour);
    let _ = writeln!(
        out,
        "The daemon splits each run-queue wait by cause (`runqlat_cgroup_wait_cause_seconds_total`): throttled (the \
         task's cgroup or an ancestor was throttled by its CPU limit on that CPU), irq_steal, and otherwise by who \
         held the CPU when the wait ended — same or other cgroup, a kernel thread, or nobody (idle). Two scenarios, \
         each about {:.0} s on CPU {} with `latency-daemon run` on CPU 0; the figures are each counter's change over \
         the scenario. **A. Its own limit**: one busy task in a cgroup limited to {} — {} — and nothing else of ours on CPU {}. \
         **B. A neighbour**: no limits; a busy task in cgroup `noisy` beside a task in `victim` that sleeps 1 ms and \
         wakes, in a loop.\n",
        a.secs, c.cpu, c.limit, c.how, c.cpu
    );
    let rest = |s: &Scenario, skip: &str| {
        let parts: Vec<String> = CAUSES
            .iter()
            .filter(|c| **c != skip && s.seconds(c) > 0.0)
            .map(|c| format!("{c} {}", pct(s.share(c))))
            .collect();
        if parts.is_empty() { "nothing else".to_owned() } else { parts.join(", ") }
    };
    let load = |s: &Scenario| {
        if s.others_busy >= 0.05 {
            format!(
                "; the host's other tasks kept CPU {} busy {} of the span, and one still on the CPU when the task \
                 could run turns that part of the wait into other or kernel",
                c.cpu,
                pct(s.others_busy)
            )
        } else {
            String::new()
        }
    };
    let throttled = if c.throttle_split_on() {
        format!(
            "**A's cgroup waited {:.3} s, {} of it throttled** ({:.3} s; its cpu.stat counted {} throttled over the same \
             span): the wait its own limit caused, which before the split was told as idle, since nobody held the CPU \
             (the rest: {}{}).",
            a.total_s(),
            pct(a.share("throttled")),
            a.seconds("throttled"),
            a.cpu_stat_throttled_s.map_or_else(|| "?".to_owned(), |t| format!("{t:.3} s")),
            rest(a, "throttled"),
            load(a)
        )
    } else {
        format!(
            "This kernel does not give the throttle split (`runqlat_feature_info{{feature=\"throttle_split\"}}` is \
             {}: the split reads the group's throttle clock, 6.8 and later), so A's throttled time is told by who held \
             the CPU — {} idle of {:.3} s waited, while its cpu.stat counted {} throttled — and A is not checked.",
            c.throttle_split,
            pct(a.share("idle")),
            a.total_s(),
            a.cpu_stat_throttled_s.map_or_else(|| "?".to_owned(), |t| format!("{t:.3} s"))
        )
    };
    let _ = writeln!(
        out,
        "{throttled} **The victim waited {:.3} s in {} waits, {} of it behind another cgroup's task** ({:.3} s; the \
         rest: {}{}). The demo fails if, while the kernel gives the split, A's throttled part is more than 10 % off \
         cpu.stat's or under {:.0} % of its wait (on a busy CPU 1, under half), or if B's other share is under {:.0} %.\n",
        b.total_s(),
        b.waits,
        pct(b.share("other")),
        b.seconds("other"),
        rest(b, "other"),
        load(b),
        100.0 * MIN_THROTTLED,
        100.0 * MIN_OTHER
    );
    out.push_str("| scenario | cgroup | waits | waited |");
    for cause in CAUSES {
        let _ = write!(out, " {cause} |");
    }
    let _ = writeln!(
        out,
        " cpu.stat throttled | CPU {} busy with other tasks |\n|---|---|---:|---:|{}---:|---:|",
        c.cpu,
        "---:|".repeat(CAUSES.len())
    );
    row(out, a);
    row(out, b);
    let _ = writeln!(
        out,
        "\nThe last column is /proc/stat's busy time of CPU {} less the scenario's own tasks' (schedstat): the \
         host's other load, which turns part of A's wait into \"other\" (the limit lifted, another task still held \
         the CPU). IRQ and steal split: {}. The experiment took {:.1} s.\n\n![why it waited](causes.svg)",
        c.cpu, c.irq_steal_split, c.took_s
    );
}
