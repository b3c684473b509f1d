//! The stall in a guest: in, what the guest's watcher saw (`watch::Watched`) and its exit; out,
//! checks: the wait seen growing while it lasted, the gauge, the final delay counted, and no idle
//! task listed as waiting.
use super::Check;
use crate::watch::Watched;

/// The stall as the guest's watcher saw it (`watch::Watched`): the victim's wait shown growing
/// past 1 s by the scan before it ran, the wakeup gauge too, its final delay (≥ the last wait
/// shown in progress) counted in the histogram and the window's max, and neither the stopped
/// nor the blocked task of that CPU ever listed as waiting.
pub fn stall(watched: Option<&Watched>, rc: Option<i32>, err: &str) -> Vec<Check> {
    const SECOND: u64 = 1_000_000_000;
    let Some(w) = watched.filter(|w| w.error.is_none() && rc == Some(0)) else {
        let why = watched.and_then(|w| w.error.clone()).unwrap_or_else(|| format!("exit {rc:?}; {}", last(err)));
        return vec![Check::new("stall", false, why)];
    };
    let s = |ns: u64| ns as f64 / 1e9;
    let since = |ns: u64| s(ns.saturating_sub(w.began_ns));
    let longest = w.longest_before_run();
    let shown = longest.map_or(0, |(_, n)| n);
    let seen = longest.map_or_else(
        || "never listed".to_owned(),
        |(l, n)| {
            format!(
                "waited {:.2} s when the scan saw it at {:.2} s (scraped at {:.2} s, run yet: {})",
                s(n),
                since(l.seen_ns.unwrap_or(0)),
                since(l.at_ns),
                l.ran
            )
        },
    );
    let idle = w.looks.iter().map(|l| l.idle_listed).max().unwrap_or(0);
    // Each scan once, before the run: the wait must grow from one to the next.
    let mut scans: Vec<(u64, u64)> =
        w.looks.iter().filter_map(|l| Some((l.seen_ns?, l.waited_ns?))).filter(|(seen, _)| *seen < w.ran_ns).collect();
    scans.dedup();
    let growing = scans.len() >= 2 && scans.windows(2).all(|p| p[1].1 > p[0].1);
    let grew: Vec<String> = scans.iter().map(|(_, n)| format!("{:.2}", s(*n))).collect();
    vec![
        Check::new(
            "stall: seen in progress",
            shown >= SECOND && w.ran_ns > 0 && growing,
            format!(
                "CPU {}: SCHED_FIFO {} spin {:.2} s; victim tid {} woken at {:.2} s, ran at {:.2} s ({:.2} s late); \
                 {seen}; scans before it ran: {} s; {} looks",
                w.cpu,
                w.priority,
                s(w.ends_ns - w.began_ns),
                w.victim_tid,
                since(w.wake_ns),
                since(w.ran_ns),
                s(w.late_ns()),
                grew.join(" → "),
                w.looks.len()
            ),
        ),
        Check::new(
            "stall: gauge",
            w.gauge_before_run() >= SECOND,
            format!(
                "runqlat_wait_in_progress_seconds{{reason=\"wakeup\"}} up to {:.2} s before it ran",
                s(w.gauge_before_run())
            ),
        ),
        Check::new(
            "stall: final delay",
            w.above_after > w.above_before && w.window_max_ns >= shown && shown > 0,
            format!(
                "wakeup delays over {} s: {} → {}; window max {:.3} s ≥ {:.3} s shown in progress (the victim's own {:.3} s)",
                w.floor_s,
                w.above_before,
                w.above_after,
                s(w.window_max_ns),
                s(shown),
                s(w.late_ns())
            ),
        ),
        Check::new("stall: idle not waiting", idle == 0, format!("stopped/blocked tasks listed: {idle}")),
    ]
}

fn last(text: &str) -> &str {
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim()
}

/// A capture of the stall the alerting service wrote (`what`: the alert's, or the one asked for
/// with `latency-daemon capture`), read with Perfetto's own classes: on the stalled CPU the
/// SCHED_FIFO spinner (`SPINNER`) held it for half a second or more and the victim was switched in
/// after it; every switch there hands the CPU from the task the one before handed it to.
pub fn stall_capture(
    what: &str,
    capture: Result<&crate::oracle::perfetto::Capture, &String>,
    w: Option<&Watched>,
) -> Check {
    let name = format!("stall: {what}");
    let (c, w) = match (capture, w) {
        (Ok(c), Some(w)) => (c, w),
        (Err(e), _) => return Check::new(&name, false, e.clone()),
        (_, None) => return Check::new(&name, false, "the stall was not watched".to_owned()),
    };
    let (ok, detail) = spinner_then_victim(c, w);
    Check::new(&name, ok, detail)
}

fn spinner_then_victim(c: &crate::oracle::perfetto::Capture, w: &Watched) -> (bool, String) {
    let cpu = w.cpu as u32;
    let on_cpu: Vec<_> = c.switches.iter().filter(|s| s.cpu == cpu).collect();
    let chained = on_cpu.windows(2).filter(|p| p[0].next == p[1].prev).count();
    // The longest stretch an RT task held the CPU, and whether the victim ran after it.
    let mut longest_rt = (0u64, 0u64);
    for p in on_cpu.windows(2) {
        let rt = p[0].next_comm == crate::workload::stall::SPINNER && p[1].prev == p[0].next;
        if rt && p[1].ts_ns - p[0].ts_ns > longest_rt.1 - longest_rt.0 {
            longest_rt = (p[0].ts_ns, p[1].ts_ns);
        }
    }
    let victim_after = on_cpu.iter().any(|s| s.next as u32 == w.victim_tid && s.ts_ns >= longest_rt.1);
    let held = longest_rt.1 - longest_rt.0;
    let ok = held >= 500_000_000 && victim_after && chained + 1 == on_cpu.len();
    let detail = format!(
        "{} switches on CPU {cpu} ({chained} handing on from the one before); the SCHED_FIFO spinner held it \
         {:.2} s, the victim {} switched in after: {victim_after}",
        on_cpu.len(),
        held as f64 / 1e9,
        w.victim_tid,
    );
    (ok, detail)
}

/// How far the wait marked in the alert's capture may be from the victim's own clock reads (its
/// timer, its first run): emulated CPUs take their time to fire a timer and to switch.
const MARK_SLACK_NS: u64 = 100_000_000;

/// The capture the stall's own alert took: the wakeup alert that fired for the stall's cgroup
/// (`cgroup`; its other tasks may fire a preempt alert of their own) names it in the alerting
/// service's log (`log`, logfmt: `event=fired key.reason=wakeup key.cgroup=… capture=/api/v1/
/// captures/…-cpu<N>-tid<victim>.pftrace`); it holds what
/// [`stall_capture`] asks for, marks the victim's wait as a slice on its thread's track from its
/// wakeup (within `MARK_SLACK_NS` after its timer) to its run (within `MARK_SLACK_NS` before its own
/// first clock read), and reaches back before the wakeup on the stalled CPU.
pub fn alert_capture(
    capture: Result<&crate::oracle::perfetto::Capture, &String>,
    w: Option<&Watched>,
    log: &str,
    cgroup: &str,
) -> Check {
    const NAME: &str = "stall: the alert's capture";
    let (c, w) = match (capture, w) {
        (Ok(c), Some(w)) => (c, w),
        (Err(e), _) => return Check::new(NAME, false, e.clone()),
        (_, None) => return Check::new(NAME, false, "the stall was not watched".to_owned()),
    };
    let fired = log.lines().find(|l| {
        let words: Vec<&str> = l.split_whitespace().collect();
        words.contains(&"event=fired")
            && words.contains(&"key.reason=wakeup")
            && words.iter().any(|w| w.trim_matches('"') == format!("key.cgroup={cgroup}"))
    });
    let link =
        fired.and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("capture="))).map(|u| u.trim_matches('"'));
    let named = link.is_some_and(|u| {
        u.starts_with("/api/v1/captures/capture-") && u.ends_with(&format!("-cpu{}-tid{}.pftrace", w.cpu, w.victim_tid))
    });
    let (shows, detail) = spinner_then_victim(c, w);
    let victim = i64::from(w.victim_tid);
    let begin = c.slices.iter().find(|s| s.tid == victim && s.kind == 1).map(|s| s.ts_ns);
    let end = c.slices.iter().find(|s| s.tid == victim && s.kind == 2).map(|s| s.ts_ns);
    let marked = match (begin, end) {
        (Some(b), Some(e)) => {
            b >= w.wake_ns && b <= w.wake_ns + MARK_SLACK_NS && e <= w.ran_ns && e + MARK_SLACK_NS >= w.ran_ns
        }
        _ => false,
    };
    let first = c.switches.iter().filter(|s| s.cpu == w.cpu as u32).map(|s| s.ts_ns).min();
    let reach = match (first, begin) {
        (Some(f), Some(b)) if f < b => Some(b - f),
        _ => None,
    };
    let s = |ns: u64| ns as f64 / 1e9;
    let rel = |ns: Option<u64>| ns.map_or_else(|| "none".to_owned(), |ns| format!("{:+.3} s", s(ns) - s(w.wake_ns)));
    Check::new(
        NAME,
        named && shows && marked && reach.is_some(),
        format!(
            "fired for {cgroup} with capture {}; {detail}; the wait marked from {} to {} (timer at +0, first run \
             at {}); reaches back {} before it",
            link.unwrap_or("none"),
            rel(begin),
            rel(end),
            rel(Some(w.ran_ns)),
            reach.map_or_else(|| "not".to_owned(), |r| format!("{:.3} s", s(r))),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_capture_shows_the_spinner_then_the_victim_and_the_wait() {
        use crate::oracle::perfetto::{Capture, SliceEvent, Switch};
        const MS: u64 = 1_000_000;
        let switch = |ts_ns: u64, prev: (i32, &str), next: (i32, &str)| Switch {
            cpu: 1,
            ts_ns,
            prev: prev.0,
            next: next.0,
            prev_state: 0,
            prev_comm: prev.1.to_owned(),
            next_comm: next.1.to_owned(),
        };
        let spinner = (50, crate::workload::stall::SPINNER);
        let victim = (7, crate::workload::stall::VICTIM);
        let slice = SliceEvent {
            tid: 7,
            ts_ns: 5 * MS,
            kind: 1,
            name: "run-queue wait 895 ms".into(),
            notes: [("cpu".to_owned(), 1.into()), ("delay_ns".to_owned(), (895 * MS).into())].into_iter().collect(),
            track: "victim".into(),
        };
        let capture = Capture {
            switches: vec![switch(0, (0, "swapper/1"), spinner), switch(900 * MS, spinner, victim)],
            wakings: vec![],
            migrations: vec![],
            idles: vec![],
            irqs: vec![],
            softirqs: vec![],
            threads: Default::default(),
            release: String::new(),
            slices: vec![slice],
            lost: vec![],
        };
        let w = Watched { cpu: 1, victim_tid: 7, ..Watched::default() };
        let check = stall_capture("capture", Ok(&capture), Some(&w));
        assert!(check.ok, "{}", check.detail);
        let mut broken = capture.clone();
        broken.switches[1].prev = 51;
        assert!(
            !stall_capture("capture", Ok(&broken), Some(&w)).ok,
            "a switch that does not hand on from the one before"
        );
        let mut short = capture.clone();
        short.switches[1].ts_ns = 100 * MS;
        assert!(!stall_capture("capture", Ok(&short), Some(&w)).ok, "a spin too short to be the stall");
        assert!(!stall_capture("capture", Err(&"none".to_owned()), Some(&w)).ok);

        // The alert's: named by the fired line, the wait marked from wakeup to run.
        let mut end = slice_end(&capture.slices[0], 900 * MS);
        let mut alerted = capture.clone();
        alerted.slices.push(end.clone());
        let w = Watched { wake_ns: 4 * MS, ran_ns: 901 * MS, ..w };
        let log = "time=x level=warn msg=\"alert fired\" event=fired key.reason=preempt key.cgroup=/vmt-stall \
                   capture=/api/v1/captures/capture-0000000000001-cpu0-tid6.pftrace summary=x\n\
                   time=x level=warn msg=\"alert fired\" event=fired key.reason=wakeup key.cgroup=/vmt-stall \
                   capture=/api/v1/captures/capture-0000000000001-cpu1-tid7.pftrace summary=x";
        let check = alert_capture(Ok(&alerted), Some(&w), log, "/vmt-stall");
        assert!(check.ok, "{}", check.detail);
        assert!(!alert_capture(Ok(&alerted), Some(&w), log, "/other").ok, "no alert fired for that cgroup");
        let other = log.replace("tid7", "tid8");
        assert!(!alert_capture(Ok(&alerted), Some(&w), &other, "/vmt-stall").ok, "another task's capture");
        end.ts_ns = 500 * MS;
        alerted.slices[1] = end;
        assert!(!alert_capture(Ok(&alerted), Some(&w), log, "/vmt-stall").ok, "the wait marked ending too early");
        assert!(!alert_capture(Ok(&capture), Some(&w), log, "/vmt-stall").ok, "no end marked");
    }

    fn slice_end(begin: &crate::oracle::perfetto::SliceEvent, ts_ns: u64) -> crate::oracle::perfetto::SliceEvent {
        crate::oracle::perfetto::SliceEvent { ts_ns, kind: 2, notes: Default::default(), ..begin.clone() }
    }

    #[test]
    fn a_stall_is_seen_growing_before_the_victim_ran() {
        use crate::watch::Look;
        const S: u64 = 1_000_000_000;
        let look = |seen_ns: u64, waited_ns: u64| Look {
            at_ns: seen_ns + 1,
            ran: false,
            waited_ns: Some(waited_ns),
            seen_ns: Some(seen_ns),
            gauge_ns: Some(waited_ns),
            window_max_ns: None,
            idle_listed: 0,
        };
        let w = Watched {
            began_ns: 10 * S,
            ends_ns: 13 * S,
            wake_ns: 10 * S + S / 5,
            ran_ns: 13 * S,
            looks: vec![look(11 * S, S * 4 / 5), look(12 * S, S * 9 / 5), look(12 * S, S * 9 / 5)],
            floor_s: 1.5,
            above_before: 0,
            above_after: 1,
            window_max_ns: 2_800_000_000,
            ..Watched::default()
        };
        let all = |w: &Watched| stall(Some(w), Some(0), "");
        assert!(all(&w).iter().all(|c| c.ok), "{:?}", all(&w));
        let short = Watched { looks: vec![look(11 * S, S / 2), look(12 * S, S * 9 / 10)], ..w.clone() };
        assert!(all(&short).iter().any(|c| c.what == "stall: seen in progress" && !c.ok), "0.9 s passed");
        let after = Watched { ran_ns: 11 * S + 1, ..w.clone() };
        assert!(all(&after).iter().any(|c| c.what == "stall: seen in progress" && !c.ok), "seen after the run");
        let uncounted = Watched { above_after: 0, ..w.clone() };
        assert!(all(&uncounted).iter().any(|c| c.what == "stall: final delay" && !c.ok));
        assert!(!stall(Some(&w), Some(1), "boom").iter().all(|c| c.ok));
        assert!(stall(None, Some(0), "").iter().all(|c| !c.ok));
    }
}
