//! The 2005 stall, alerted on while it lasts: in, the daemon binary; out, `StallAlert` — a
//! bounded SCHED_FIFO hog on CPU 1 beside a periodic normal task there (lat3's 1 ms sleep loop),
//! watched by `run` with a max-delay alert: when the stall began, when the alert fired (the
//! daemon's scan saw the task still waiting), when the task finally ran and how long it had
//! waited. The stall itself is `workload::stall`, watched as vmtest's guests watch it.
use std::path::Path;
use std::time::Duration;

use anyhow::bail;
use serde::Serialize;

use super::analysis::Check;
use crate::daemon::Daemon;
use crate::watch::{Watched, pin_away, watch};
use crate::workload::stall::Plan;

/// lat3 beside `while :; do :; done`, bounded: 3 s of spin, the loop asleep 1 ms at a time.
pub const PLAN: Plan = Plan {
    cpu: 1,
    priority: 5,
    spin: Duration::from_secs(3),
    wake_after: Duration::from_millis(200),
    again: Some(Duration::from_millis(1)),
};
/// The alert: a wait over 300 ms, judged every 250 ms drain, firing at the first (`--alert-for 1`).
const THRESHOLD: &str = "300ms";
const THRESHOLD_NS: u64 = 300_000_000;
const INTERVAL: &str = "250ms";

/// The alert as the daemon's log said it, on the program's clock (CLOCK_MONOTONIC).
#[derive(Debug, Clone, Serialize)]
pub struct Fired {
    /// When the scan saw the wait that fired it, and how long that task had waited then.
    pub seen_ns: u64,
    pub waited_ns: u64,
    /// The task the alert named: the victim, or another task stuck on that CPU.
    pub task: String,
    /// The `updated` event once the task ran: its final delay as the alert tells it.
    pub final_ns: Option<u64>,
    pub summary: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct StallAlert {
    pub cpu: usize,
    pub spin_ns: u64,
    pub threshold_ns: u64,
    /// The flags as given.
    pub threshold: &'static str,
    pub interval: &'static str,
    pub watched: Watched,
    /// The first alert on a wait in progress on that CPU that fired while the victim waited.
    pub fired: Option<Fired>,
    /// The capture the first alert on that CPU took, and its picture (the daemon's own SVG).
    #[serde(skip)]
    pub capture: Option<Capture>,
}

/// An alert's capture as the daemon wrote it.
#[derive(Debug, Clone)]
pub struct Capture {
    /// Its address, as the alert carried it.
    pub url: String,
    pub trace: Vec<u8>,
    pub picture: String,
}

impl StallAlert {
    /// The victim's first long wait: (woken, ran), CLOCK_MONOTONIC ns.
    pub fn first_wait(&self) -> Option<(u64, u64)> {
        self.watched.long_waits.first().copied()
    }

    /// How long before the task ran the alert fired (negative: after), ns.
    pub fn lead_ns(&self) -> Option<i64> {
        let (_, ran) = self.first_wait()?;
        Some(ran as i64 - self.fired.as_ref()?.seen_ns as i64)
    }

    /// Seconds since the spin began.
    pub fn at_s(&self, ns: u64) -> f64 {
        (ns as i64 - self.watched.began_ns as i64) as f64 / 1e9
    }

    pub fn checks(&self) -> Vec<Check> {
        let check = |subject: &str, ok: bool, detail: String| Check {
            item: "stall alert",
            subject: subject.to_owned(),
            detail,
            ok,
        };
        let Some((woken, ran)) = self.first_wait() else {
            return vec![check("the task waited", false, "the task never waited over 10 ms".to_owned())];
        };
        let late = ran - woken;
        let fired = match (&self.fired, self.lead_ns()) {
            (Some(f), Some(lead)) => check(
                "fired before the task ran",
                lead > 0 && f.waited_ns >= self.threshold_ns,
                format!(
                    "fired at {:.3} s ({} had waited {:.3} s), the task ran at {:.3} s: {:.3} s later",
                    self.at_s(f.seen_ns),
                    f.task,
                    f.waited_ns as f64 / 1e9,
                    self.at_s(ran),
                    lead as f64 / 1e9
                ),
            ),
            _ => {
                check("fired before the task ran", false, "no alert on that CPU fired while the task waited".to_owned())
            }
        };
        let shown = self.watched.longest_before_run().map_or(0, |(_, n)| n);
        let told = self.fired.as_ref().and_then(|f| f.final_ns);
        let captured = match &self.capture {
            Some(c) => check(
                "its capture",
                !c.trace.is_empty() && c.picture.contains("<svg"),
                format!("{}: {} KiB of trace, {} KiB of picture", c.url, c.trace.len() / 1024, c.picture.len() / 1024),
            ),
            None => {
                check("its capture", false, "no alert on that CPU carries a capture kept with its picture".to_owned())
            }
        };
        vec![
            fired,
            captured,
            check(
                "final delay",
                shown > 0
                    && self.watched.above_after > self.watched.above_before
                    && self.watched.window_max_ns >= shown
                    && told.is_none_or(|t| t >= shown),
                format!(
                    "the task's own wait {:.3} s; the alert's final delay {}; the window's max after it ran {:.3} s; \
                     longest shown in progress {:.3} s; wakeup delays over {} s in the histogram {} → {}",
                    late as f64 / 1e9,
                    told.map_or_else(|| "not named".to_owned(), |t| format!("{:.3} s", t as f64 / 1e9)),
                    self.watched.window_max_ns as f64 / 1e9,
                    shown as f64 / 1e9,
                    self.watched.floor_s,
                    self.watched.above_before,
                    self.watched.above_after
                ),
            ),
        ]
    }
}

/// Runs `PLAN` beside `daemon run` with the alert on; needs 2 CPUs and root.
pub fn measure(daemon: &Path) -> anyhow::Result<StallAlert> {
    if crate::workload::cpus() < 2 {
        bail!("needs 2 CPUs: the daemon and the watcher run on CPU 0, the stall on CPU 1");
    }
    let captures = crate::guard::Scratch::new("runqlat-demo-captures")?;
    let dir = captures.path().to_str().unwrap_or_default();
    let args = [
        "--interval",
        INTERVAL,
        "--window",
        "1s",
        "--alert-max-delay",
        THRESHOLD,
        "--alert-for",
        "1",
        "--capture-dir",
        dir,
        // The alert's event read as JSON (`fired`, `capture`).
        "--log.format=json",
    ];
    let d = Daemon::start(daemon, &args)?;
    let watched = pin_away(d.pid()).and_then(|()| watch(&d.addr, PLAN));
    let (_, log) = d.stop_with_log()?;
    let watched = watched?;
    if let Some(e) = &watched.error {
        bail!("{e}");
    }
    let fired = fired(&log, &watched, PLAN.cpu as u32);
    let capture = capture(&log, PLAN.cpu as u32, captures.path());
    Ok(StallAlert {
        cpu: PLAN.cpu,
        spin_ns: watched.ends_ns - watched.began_ns,
        threshold_ns: THRESHOLD_NS,
        threshold: THRESHOLD,
        interval: INTERVAL,
        watched,
        fired,
        capture,
    })
}

/// The capture of the first alert fired on `cpu` that took one, and the picture beside it.
fn capture(log: &[String], cpu: u32, dir: &Path) -> Option<Capture> {
    let url = log.iter().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).find_map(|v| {
        let ours = v["event"] == "fired" && v["worst"]["cpu"].as_u64() == Some(u64::from(cpu));
        ours.then(|| v["capture"].as_str().map(str::to_owned)).flatten()
    })?;
    let name = url.rsplit('/').next()?.strip_suffix(".pftrace")?;
    let trace = std::fs::read(dir.join(format!("{name}.pftrace"))).ok()?;
    let picture = std::fs::read_to_string(dir.join(format!("{name}.svg"))).ok()?;
    Some(Capture { url, trace, picture })
}

/// The first `fired` event on a wait in progress on the stalled CPU while the victim waited (the
/// alert's key is the reason and cgroup, so its worst may be another task stuck there, a kworker),
/// and the victim's final delay from the `updated` event that names it, if one does.
fn fired(log: &[String], w: &Watched, cpu: u32) -> Option<Fired> {
    let events: Vec<serde_json::Value> = log
        .iter()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .collect();
    let (woken, ran) = w.long_waits.first().copied()?;
    let first = events.iter().position(|v| {
        let worst = &v["worst"];
        let seen = worst["end_ns"].as_u64().unwrap_or(0);
        v["event"] == "fired"
            && worst["waiting"] == true
            && worst["cpu"].as_u64() == Some(u64::from(cpu))
            && (woken..ran).contains(&seen)
    })?;
    let v = &events[first]["worst"];
    let updated = events[first..].iter().find(|v| {
        v["event"] == "updated"
            && v["ran_after_waiting"] == true
            && v["worst"]["victim_tid"].as_u64() == Some(u64::from(w.victim_tid))
    });
    Some(Fired {
        seen_ns: v["end_ns"].as_u64()?,
        waited_ns: v["delay_ns"].as_u64()?,
        task: format!("{} (tid {})", v["victim_comm"].as_str().unwrap_or("?"), v["victim_tid"].as_u64().unwrap_or(0)),
        final_ns: updated.and_then(|u| u["worst"]["delay_ns"].as_u64()),
        summary: events[first]["summary"].as_str().unwrap_or("").to_owned(),
    })
}

/// A failed measurement as the report's check.
pub fn failed(e: &anyhow::Error) -> Check {
    Check { item: "stall alert", subject: "measured".to_owned(), detail: format!("{e:#}"), ok: false }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_alert_fired_on_that_cpu_while_the_task_waited() {
        let log: Vec<String> = [
            "starting",
            r#"{"event":"fired","worst":{"victim_tid":9,"cpu":1,"delay_ns":400,"end_ns":1000},"summary":"done"}"#,
            r#"{"event":"fired","worst":{"victim_tid":8,"cpu":0,"delay_ns":400,"end_ns":1200,"waiting":true}}"#,
            r#"{"event":"fired","worst":{"victim_tid":5,"victim_comm":"kworker/1:1","cpu":1,"delay_ns":350,
               "end_ns":1500,"waiting":true},"summary":"w"}"#,
            r#"{"event":"updated","worst":{"victim_tid":7,"delay_ns":900,"end_ns":2000},"ran_after_waiting":true}"#,
        ]
        .map(|l| l.replace('\n', "").replace("  ", ""))
        .to_vec();
        let w = Watched { victim_tid: 7, long_waits: vec![(1100, 2000)], ..Watched::default() };
        let f = fired(&log, &w, 1).unwrap_or_else(|| panic!("no alert found"));
        assert_eq!((f.seen_ns, f.waited_ns, f.final_ns, f.summary.as_str()), (1500, 350, Some(900), "w"));
        assert_eq!(f.task, "kworker/1:1 (tid 5)");
        let later = Watched { long_waits: vec![(1600, 2000)], ..w.clone() };
        assert!(fired(&log, &later, 1).is_none(), "an alert before the task was woken");
    }

    #[test]
    fn the_capture_is_the_first_on_that_cpu_and_counts_only_with_its_picture() {
        let dir = crate::guard::Scratch::new("runqlat-demo-capture-test").unwrap_or_else(|e| panic!("{e:#}"));
        let name = "capture-1796550909195-cpu1-tid5";
        let log: Vec<String> = [
            r#"{"event":"fired","worst":{"cpu":0},"capture":"/api/v1/captures/capture-1-cpu0-tid8.pftrace"}"#,
            r#"{"event":"fired","worst":{"cpu":1}}"#,
            r#"{"event":"fired","worst":{"cpu":1},"capture":"/api/v1/captures/capture-1796550909195-cpu1-tid5.pftrace"}"#,
        ]
        .map(str::to_owned)
        .to_vec();
        let write = |ext: &str, text: &str| {
            std::fs::write(dir.path().join(format!("{name}.{ext}")), text).unwrap_or_else(|e| panic!("{e}"))
        };
        write("pftrace", "trace");
        assert!(capture(&log, 1, dir.path()).is_none(), "no picture beside it");
        write("svg", "<svg/>");
        let c = capture(&log, 1, dir.path()).unwrap_or_else(|| panic!("no capture found"));
        assert_eq!((c.url.as_str(), c.trace.as_slice()), (&*format!("/api/v1/captures/{name}.pftrace"), &b"trace"[..]));
        assert!(capture(&log[..2], 1, dir.path()).is_none(), "no alert on CPU 1 carried one");
    }
}
