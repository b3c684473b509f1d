//! A stall watched while it lasts: in, a running daemon's loopback address (its wait scan on) and
//! a stall (`workload::stall`: a bounded SCHED_FIFO spinner on one CPU, a normal victim woken on
//! it during the spin); out, what the daemon said while the victim waited — its wait in
//! /api/v1/waits and `runqlat_wait_in_progress_seconds`, each scrape stamped on CLOCK_MONOTONIC
//! beside whether the victim had run yet — when it ran, and whether its delay reached the
//! histogram. Runs inside a vmtest guest (`vmtest::stall`, its JSON judged by vmtest's checks)
//! and in the demo.
//!
//! The watcher and the daemon must not share the stalled CPU: both are pinned to CPU 0 first.
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use crate::web::{get, sample};
use crate::workload::stall::{Plan, Stall, monotonic_ns, pin};

/// How often the watcher scrapes (the daemon drains every 250–500 ms).
const POLL: Duration = Duration::from_millis(100);

/// One look at the daemon during the stall.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Look {
    /// When the replies came (CLOCK_MONOTONIC ns).
    pub at_ns: u64,
    /// Whether the victim had run by then (read after the replies: a `false` is proof).
    pub ran: bool,
    /// The victim's entry in /api/v1/waits' `longest`: how long it had waited, when the scan saw
    /// it (the program's clock: CLOCK_MONOTONIC).
    pub waited_ns: Option<u64>,
    pub seen_ns: Option<u64>,
    /// `runqlat_wait_in_progress_seconds{reason="wakeup"}`, ns.
    pub gauge_ns: Option<u64>,
    /// `runqlat_delay_window_max_seconds{reason="wakeup"}`, ns: the last closed window's longest.
    pub window_max_ns: Option<u64>,
    /// The idle tasks of the stalled CPU (stopped, blocked) listed as waiting: must stay 0.
    pub idle_listed: u32,
}

/// The whole stall as the watcher saw it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Watched {
    pub cpu: usize,
    pub priority: i32,
    /// The spinner's start and planned end, the victim's timer and its first run (CLOCK_MONOTONIC ns).
    pub began_ns: u64,
    pub ends_ns: u64,
    pub victim_tid: u32,
    pub wake_ns: u64,
    pub ran_ns: u64,
    pub looks: Vec<Look>,
    /// Wakeup delays counted above `floor_s` (the histogram's bucket bound just under the
    /// longest wait seen in progress) before the stall and once the victim had run.
    pub floor_s: f64,
    pub above_before: u64,
    pub above_after: u64,
    /// The largest `runqlat_delay_window_max_seconds{reason="wakeup"}` after the victim ran, ns.
    pub window_max_ns: u64,
    /// Each of the victim's wakeups that waited over 10 ms: (timer, first run), CLOCK_MONOTONIC ns.
    pub long_waits: Vec<(u64, u64)>,
    /// What went wrong after the stall began (the stall is still reported).
    pub error: Option<String>,
}

impl Watched {
    /// How long the victim waited: from its timer to its first run.
    pub fn late_ns(&self) -> u64 {
        self.ran_ns.saturating_sub(self.wake_ns)
    }

    /// The longest wait the daemon showed before the victim ran (its scan saw it before the
    /// victim's first run, both on CLOCK_MONOTONIC): the look, with its figure.
    pub fn longest_before_run(&self) -> Option<(&Look, u64)> {
        self.looks
            .iter()
            .filter(|l| l.seen_ns.is_some_and(|s| self.ran_ns == 0 || s < self.ran_ns))
            .filter_map(|l| l.waited_ns.map(|w| (l, w)))
            .max_by_key(|(_, w)| *w)
    }

    /// The largest wakeup gauge before the victim ran, ns.
    pub fn gauge_before_run(&self) -> u64 {
        self.looks.iter().filter(|l| !l.ran).filter_map(|l| l.gauge_ns).max().unwrap_or(0)
    }

    /// The first look that showed the victim waiting at least `over_ns`.
    pub fn first_over(&self, over_ns: u64) -> Option<&Look> {
        self.looks.iter().find(|l| l.waited_ns.is_some_and(|w| w >= over_ns))
    }
}

/// Pins every thread of `pid` to CPU 0 (threads it makes later inherit it).
pub fn pin_away(pid: u32) -> anyhow::Result<()> {
    let tasks =
        std::fs::read_dir(format!("/proc/{pid}/task")).with_context(|| format!("listing pid {pid}'s threads"))?;
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse::<i32>().ok()) else { continue };
        // SAFETY: a zeroed cpu_set_t with CPU 0 set, for one thread by its tid.
        let ok = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        };
        if !ok {
            bail!("pinning tid {tid} of pid {pid} to CPU 0: {}", std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Runs `plan` beside the daemon at `addr` and watches it; as root, with RT throttling free to be
/// turned off. Fails only if the stall could not start; later failures are in `error`.
pub fn watch(addr: &str, plan: Plan) -> anyhow::Result<Watched> {
    if !pin(0) {
        bail!("the watcher could not pin itself to CPU 0");
    }
    let before = buckets(&get(addr, "/metrics", &[])?.text());
    let mut stall = Stall::start(plan)?;
    let idle = [stall.stopped.pid(), stall.blocked.pid()];
    let mut w = Watched {
        cpu: plan.cpu,
        priority: plan.priority,
        began_ns: stall.spinner.began_ns,
        ends_ns: stall.spinner.ends_ns,
        victim_tid: stall.victim.tid,
        wake_ns: stall.victim.wake_ns,
        ..Watched::default()
    };
    let deadline = w.ends_ns + 5_000_000_000;
    let mut result = Ok(());
    loop {
        match look(addr, w.victim_tid, &idle) {
            Ok(mut l) => {
                l.ran = stall.victim.first_ran_ns().is_some();
                w.looks.push(l);
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        let now = monotonic_ns();
        if let Some(ran) = stall.victim.first_ran_ns() {
            w.ran_ns = ran;
            // Two drains after it ran (and after the spin: a periodic victim waits to its end),
            // its delays are in the histogram.
            if now > ran.max(w.ends_ns) + 1_200_000_000 {
                break;
            }
        }
        if now > deadline {
            result = Err(anyhow::anyhow!("the victim had not run 5 s after the spin's end"));
            break;
        }
        std::thread::sleep(POLL);
    }
    let finished = stall.spinner.finish();
    // Undone in Stall's order, the spinner first and RT throttling last; then the victim's account.
    let Stall { spinner, victim, stopped, blocked, rt } = stall;
    drop((spinner, stopped, blocked, rt));
    match victim.join() {
        Ok(runs) => {
            w.long_waits = runs.iter().filter(|r| r.late_ns() > 10_000_000).map(|r| (r.asked_ns, r.ran_ns)).collect()
        }
        Err(e) => w.error = Some(format!("{e:#}")),
    }
    let longest = w.longest_before_run().map_or(0, |(_, n)| n);
    let after = get(addr, "/metrics", &[]).map(|r| r.text());
    match (&result, &after) {
        (Ok(()), Ok(text)) => {
            let now = buckets(text);
            w.floor_s = now.iter().map(|(le, _)| *le).filter(|le| *le * 1e9 <= longest as f64).fold(0.0, f64::max);
            w.above_before = above(&before, w.floor_s);
            w.above_after = above(&now, w.floor_s);
            w.window_max_ns = w.looks.iter().filter(|l| l.ran).filter_map(|l| l.window_max_ns).max().unwrap_or(0);
        }
        (Err(e), _) => w.error = Some(format!("{e:#}")),
        (_, Err(e)) => w.error = Some(format!("{e:#}")),
    }
    if let (None, Err(e)) = (&w.error, finished) {
        w.error = Some(format!("{e:#}"));
    }
    Ok(w)
}

/// One scrape of /api/v1/waits and /metrics.
fn look(addr: &str, victim: u32, idle: &[u32]) -> anyhow::Result<Look> {
    let waits = get(addr, "/api/v1/waits", &[])?;
    let metrics = get(addr, "/metrics", &[])?;
    let at_ns = monotonic_ns();
    if waits.status != 200 {
        bail!("/api/v1/waits: HTTP {}: {}", waits.status, waits.text().trim());
    }
    let json: serde_json::Value = serde_json::from_slice(&waits.body).context("/api/v1/waits is not JSON")?;
    let longest = json["longest"].as_array().cloned().unwrap_or_default();
    let tid = |v: &serde_json::Value| v["tid"].as_u64().unwrap_or(0) as u32;
    let mine = longest.iter().find(|v| tid(v) == victim);
    let gauge = sample(&metrics.text(), "runqlat_wait_in_progress_seconds{reason=\"wakeup\"}");
    Ok(Look {
        at_ns,
        ran: false,
        waited_ns: mine.and_then(|v| v["waited_ns"].as_u64()),
        seen_ns: mine.and_then(|v| v["seen_ns"].as_u64()),
        gauge_ns: gauge.map(|s| (s * 1e9) as u64),
        window_max_ns: sample(&metrics.text(), "runqlat_delay_window_max_seconds{reason=\"wakeup\"}")
            .map(|s| (s * 1e9) as u64),
        idle_listed: longest.iter().filter(|v| idle.contains(&(v["pid"].as_u64().unwrap_or(0) as u32))).count() as u32,
    })
}

/// `runqlat_delay_seconds_bucket{reason="wakeup",le=…}` as (le, count), whatever the label order.
pub fn buckets(prom: &str) -> Vec<(f64, u64)> {
    prom.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("runqlat_delay_seconds_bucket{")?;
            let (labels, value) = rest.split_once("} ")?;
            if !labels.split(',').any(|kv| kv == "reason=\"wakeup\"") {
                return None;
            }
            let le = labels.split(',').find_map(|kv| kv.strip_prefix("le=\""))?.trim_end_matches('"');
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, value.trim().parse::<f64>().ok()? as u64))
        })
        .collect()
}

/// Delays counted above `floor_s`: all (+Inf) minus those at or under it.
fn above(buckets: &[(f64, u64)], floor_s: f64) -> u64 {
    let all = buckets.iter().find(|(le, _)| le.is_infinite()).map_or(0, |(_, n)| *n);
    let under = buckets.iter().filter(|(le, _)| *le <= floor_s).map(|(_, n)| *n).max().unwrap_or(0);
    all.saturating_sub(under)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_above_a_bucket_whatever_the_label_order() {
        let prom = "runqlat_delay_seconds_bucket{le=\"0.5\",reason=\"wakeup\"} 10\n\
                    runqlat_delay_seconds_bucket{reason=\"wakeup\",le=\"1\"} 11\n\
                    runqlat_delay_seconds_bucket{reason=\"preempt\",le=\"+Inf\"} 99\n\
                    runqlat_delay_seconds_bucket{reason=\"wakeup\",le=\"+Inf\"} 13\n";
        let b = buckets(prom);
        assert_eq!(b.len(), 3);
        assert_eq!((above(&b, 0.5), above(&b, 1.0), above(&b, 0.0)), (3, 2, 13));
    }

    #[test]
    fn the_longest_wait_before_the_run() {
        let look = |at_ns, ran, waited: u64, seen_ns| Look {
            at_ns,
            ran,
            waited_ns: Some(waited),
            seen_ns: Some(seen_ns),
            ..Look::default()
        };
        let w = Watched {
            ran_ns: 3_000,
            looks: vec![
                look(1_000, false, 500, 900),
                look(2_000, false, 1_500, 1_900),
                look(3_500, true, 2_600, 2_990),
            ],
            ..Watched::default()
        };
        // The third look came after the run, but the scan saw the wait before it: it counts.
        assert_eq!(w.longest_before_run().map(|(_, n)| n), Some(2_600));
        let later = Watched { ran_ns: 2_500, ..w.clone() };
        assert_eq!(later.longest_before_run().map(|(_, n)| n), Some(1_500));
        assert_eq!(w.first_over(1_000).map(|l| l.at_ns), Some(2_000));
    }
}
