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

#[cfg(test)]
mod tests {
    use super::*;

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
