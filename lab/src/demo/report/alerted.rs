//! The stall alert in the report: in, a `StallAlert`; out, its section (the moments on one clock,
//! the lead the alert gave, each long wait of the task, the figure) and the console's line.
use std::fmt::Write as _;

use super::{Report, ns};
use crate::demo::stall_alert::StallAlert;

/// `stall alert: fired 0.62 s before the task ran (…)`, for the console.
pub fn stall_alert_line(report: &Report) -> Option<String> {
    let a = report.stall_alert.as_ref()?;
    let (woken, ran) = a.first_wait()?;
    Some(match (a.lead_ns(), &a.fired) {
        (Some(lead), Some(f)) => format!(
            "stall alert: the task woken at {:.3} s into the hog's spin ran at {:.3} s ({} late); the alert fired at \
             {:.3} s, {} before it ran",
            a.at_s(woken),
            a.at_s(ran),
            ns((ran - woken) as f64),
            a.at_s(f.seen_ns),
            ns(lead as f64)
        ),
        _ => format!("stall alert: the task waited {} and no alert fired while it waited", ns((ran - woken) as f64)),
    })
}

pub(super) fn section(out: &mut String, a: &StallAlert) {
    let w = &a.watched;
    let _ = writeln!(
        out,
        "The 2005 report's freeze, made exact and watched live: a SCHED_FIFO {} thread spins on CPU {} for {} with RT \
         throttling off (`kernel.sched_rt_runtime_us=-1`, restored after), beside a normal thread on the same CPU \
         that sleeps 1 ms at a time and records, on CLOCK_MONOTONIC, when each timer was due and when it really ran \
         (lat3's loop, asked the exact question). `latency-daemon run --interval {} --alert-max-delay {} --alert-for \
         1` watches it from CPU 0; its wait scan lists tasks still waiting at every drain, so the alert can fire \
         before the task runs (the alert is per reason and cgroup: it names the longest wait there, the task or \
         another one stuck on that CPU). Every moment below is on CLOCK_MONOTONIC, in seconds since the hog began.\n",
        w.priority,
        a.cpu,
        ns(a.spin_ns as f64),
        a.interval,
        a.threshold
    );
    let Some((woken, ran)) = a.first_wait() else {
        out.push_str("The task never waited over 10 ms: nothing to alert on.\n");
        return;
    };
    out.push_str("| moment | at | |\n|---|---|---|\n");
    let mut row = |what: &str, at: u64, note: String| {
        let _ = writeln!(out, "| {what} | {:.3} s | {note} |", a.at_s(at));
    };
    row("the hog began spinning", w.began_ns, format!("SCHED_FIFO {}, CPU {}", w.priority, a.cpu));
    row("the task's timer fired (the stall began for it)", woken, format!("tid {}", w.victim_tid));
    if let Some(f) = &a.fired {
        row(
            "the alert fired: the scan saw a task on that CPU still waiting",
            f.seen_ns,
            format!(
                "{} had waited {} so far; the log said: {}",
                f.task,
                ns(f.waited_ns as f64),
                f.summary.replace('|', "\\|")
            ),
        );
    }
    row("the task finally ran", ran, format!("final delay {}", ns((ran - woken) as f64)));
    row("the hog stopped", w.ends_ns, String::new());
    let told = a
        .fired
        .as_ref()
        .and_then(|f| f.final_ns)
        .map_or_else(String::new, |t| format!(", as the alert's update once it ran said too ({})", ns(t as f64)));
    let _ = writeln!(
        out,
        "\n**{}** The task's final delay was {} by its own clock{told}; the histogram counted it (wakeup delays over \
         {} s: {} before, {} after; the window's max after it ran {}), and the longest wait the scans had shown in \
         progress before it ran was {}.\n",
        match a.lead_ns() {
            Some(lead) if lead > 0 => format!("The alert fired {} before the task ran.", ns(lead as f64)),
            Some(lead) => format!("The alert fired {} after the task ran.", ns(lead.unsigned_abs() as f64)),
            None => "No alert fired while the task waited.".to_owned(),
        },
        ns((ran - woken) as f64),
        w.floor_s,
        w.above_before,
        w.above_after,
        ns(w.window_max_ns as f64),
        ns(w.longest_before_run().map_or(0, |(_, n)| n) as f64)
    );
    let waits: Vec<String> = w
        .long_waits
        .iter()
        .map(|(asked, ran)| format!("{:.3} → {:.3} s ({})", a.at_s(*asked), a.at_s(*ran), ns((ran - asked) as f64)))
        .collect();
    let _ = writeln!(
        out,
        "Every wait of the task over 10 ms: {}. With the kernel's fair server (6.12 and later) normal tasks get \
         50 ms of every second even beside an unthrottled RT hog, so the task waits about 0.95 s, runs, and waits \
         again; before 6.12 (and in 2005) it waits the whole spin — the 2.1–3.1 s gaps `lat3` showed.\n\n\
         ![the stall's timeline](stall-alert.svg)",
        waits.join(", ")
    );
    if a.capture.is_some() {
        let _ = writeln!(
            out,
            "\nWhat CPU 1 did meanwhile, as the capture the alert took shows it (the daemon's own picture; the \
             trace beside it opens in ui.perfetto.dev):\n\n![the stall's capture](stall-capture.svg)"
        );
    }
}
