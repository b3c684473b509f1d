//! A stall seen while it lasts: a SCHED_FIFO spinner holds CPU 1 (RT throttling off) and a
//! normal thread is woken there by a timer; it waits ~0.9 s (the fair server's turn). While it
//! waits, /metrics shows the wait in progress growing past the threshold, /api/v1/waits names
//! it, and a real Alertmanager holds the alert naming it — provably before it ran, by its own
//! record of when it did. Once it runs, its delay matches `perf sched`'s trace, and the alert
//! carries it (unless a longer wait of another task ended on that CPU in the same slot and took
//! the CPU's one incident: then reported, not failed). A stopped (T) and an uninterruptible (D)
//! process on the same CPU are never listed as waiting nor alerted on. Prints the figures.
//!
//! The test process, the daemon, Alertmanager and perf are pinned to CPU 0, so only the stall's
//! own tasks (and the kernel's) queue behind the spinner; the test moves itself into a cgroup of
//! its own so that its alert is not the kworkers' (cgroup "/").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use latency_lab::{
    daemon::Daemon,
    guard::children_alive,
    oracle::{bpftool, perf::Perf},
    services::{Alertmanager, TestCgroup},
    web::sample,
    workload::stall::{Plan, Stall, monotonic_ns, pin, stat},
};
use serde_json::Value;

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");
const CPU: usize = 1;
const INTERVAL_NS: u64 = 100_000_000;
const THRESHOLD_S: f64 = 0.3;

/// One look at the daemon: when (CLOCK_MONOTONIC, after the answer came), the wait-in-progress
/// gauge, and the waits it listed as (tid, waited s).
#[derive(Debug, Clone)]
struct Look {
    at_ns: u64,
    oldest_wakeup_s: Option<f64>,
    ours_s: Option<f64>,
    listed: Vec<(u64, f64)>,
    /// The largest finished wakeup delay of the window.
    window_max_s: Option<f64>,
}

/// The waits listed by name: `/api/v1/waits` (`longest`), or a `waits` list in the snapshot.
fn listed_waits(daemon: &Daemon) -> Option<Vec<Value>> {
    let from = |v: &Value| -> Option<Vec<Value>> { v.get("longest").or(Some(v)).and_then(Value::as_array).cloned() };
    if let Ok(r) = daemon.get("/api/v1/waits")
        && r.status == 200
    {
        return serde_json::from_slice::<Value>(&r.body).ok().as_ref().and_then(from);
    }
    let r = daemon.get("/api/v1/snapshot").ok().filter(|r| r.status == 200)?;
    serde_json::from_slice::<Value>(&r.body).ok()?.get("waits").and_then(from)
}

fn look(daemon: &Daemon, cgroup: &str) -> Option<Look> {
    let text = daemon.metrics().ok()?;
    let listed = listed_waits(daemon)
        .unwrap_or_default()
        .iter()
        .filter_map(|w| {
            let waited = w["waited_ns"].as_f64().map(|ns| ns / 1e9).or_else(|| w["waited_seconds"].as_f64());
            Some((w["tid"].as_u64()?, waited.unwrap_or(f64::NAN)))
        })
        .collect();
    Some(Look {
        at_ns: monotonic_ns(),
        oldest_wakeup_s: sample(&text, "runqlat_wait_in_progress_seconds{reason=\"wakeup\"}"),
        ours_s: sample(&text, &format!("runqlat_cgroup_wait_in_progress_seconds{{cgroup=\"{cgroup}\"}}")),
        listed,
        window_max_s: sample(&text, "runqlat_delay_window_max_seconds{reason=\"wakeup\"}"),
    })
}

/// What Alertmanager held of ours, each time it was asked (CLOCK_MONOTONIC after the answer).
type Seen = Arc<Mutex<Vec<(u64, Vec<Value>)>>>;

/// Whether an alert names task `tid` (in its victim, or anywhere in labels and annotations).
fn names(alert: &Value, tid: u32) -> bool {
    let needle = format!("tid {tid}");
    alert["annotations"]["victim"].as_str().is_some_and(|v| v.contains(&needle))
        || alert["labels"]["tid"].as_str() == Some(tid.to_string().as_str())
}

/// The daemon's alert text for a duration ("931.4 ms", "1.20 s", "443.7 µs") in ns.
fn parse_duration_ns(text: &str) -> Option<u64> {
    let (value, unit) = text.trim().split_once(' ')?;
    let scale = match unit {
        "s" => 1e9,
        "ms" => 1e6,
        "µs" | "us" => 1e3,
        "ns" => 1.0,
        _ => return None,
    };
    Some((value.parse::<f64>().ok()? * scale) as u64)
}

/// The victim's final delay as the daemon's last window holds it: its attribution (an alert's
/// worst) or its per-task maximum.
fn final_delay_ns(daemon: &Daemon, tid: u32) -> Option<u64> {
    let r = daemon.get("/api/v1/snapshot").ok().filter(|r| r.status == 200)?;
    let snap: Value = serde_json::from_slice(&r.body).ok()?;
    // The largest `value` of the entries of `list` whose `tid_key` is tid.
    let largest = |list: &str, tid_key: &str, value: &str| {
        snap[list]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e[tid_key].as_u64() == Some(u64::from(tid)))
            .filter_map(|e| e[value].as_u64())
            .max()
    };
    largest("attributed", "victim_tid", "delay_ns").max(largest("tasks", "tid", "delay_max_ns"))
}

/// A wakeup wait in a `perf sched record` trace: who, on which CPU it got to run (the victim is
/// pinned: only its waits on that CPU count), from its
/// `sched_waking` to the `sched_switch` that put it on the CPU (ns on perf's clock).
#[derive(Debug, Clone, Copy)]
struct Traced {
    tid: u32,
    cpu: u32,
    woke_ns: u64,
    ran_ns: u64,
}

impl Traced {
    fn wait_ns(&self) -> u64 {
        self.ran_ns.saturating_sub(self.woke_ns)
    }
}

/// Every wakeup wait in the trace. perf 6.1 records `sched_waking` instead of `sched_wakeup`,
/// and `perf sched latency` then skips wakeups (it counts only preemptions): the trace itself is
/// the oracle here.
fn traced_waits(file: &std::path::Path) -> Vec<Traced> {
    let out = std::process::Command::new("perf")
        .args(["script", "-F", "cpu,time,event,trace", "-i"])
        .arg(file)
        .output()
        .expect("perf script");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |rest: &str, key: &str| -> Option<u32> {
        rest.split_whitespace().find_map(|w| w.strip_prefix(key)).and_then(|v| v.parse().ok())
    };
    let mut woke: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
    let mut waits = Vec::new();
    for line in text.lines() {
        // `[001] 48603.435100: sched:sched_waking: comm=… pid=21507 prio=120 target_cpu=001`
        let Some((cpu, rest)) = line.trim_start().strip_prefix('[').and_then(|l| l.split_once(']')) else { continue };
        let Some((time, rest)) = rest.trim_start().split_once(':') else { continue };
        let (Ok(cpu), Some(ns)) = (cpu.parse::<u32>(), parse_seconds_ns(time)) else { continue };
        if rest.contains("sched_waking:") {
            if let Some(tid) = field(rest, "pid=") {
                woke.entry(tid).or_insert(ns);
            }
        } else if rest.contains("sched_switch:") {
            // A waking before it went off the CPU woke nothing that waited.
            if let Some(prev) = field(rest, "prev_pid=") {
                woke.remove(&prev);
            }
            if let Some(next) = field(rest, "next_pid=")
                && let Some(woke_ns) = woke.remove(&next)
            {
                waits.push(Traced { tid: next, cpu, woke_ns, ran_ns: ns });
            }
        }
    }
    waits
}

/// `48603.435100` (perf's seconds, µs) in ns.
fn parse_seconds_ns(text: &str) -> Option<u64> {
    let (s, frac) = text.trim().split_once('.')?;
    let frac = format!("{frac:0<9}");
    Some(s.parse::<u64>().ok()? * 1_000_000_000 + frac.get(..9)?.parse::<u64>().ok()?)
}

#[test]
fn a_stall_is_seen_and_alerted_while_it_lasts() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("stall: skipped: needs root (BPF, SCHED_FIFO, kernel.sched_rt_runtime_us)");
        return;
    }
    if latency_lab::workload::cpus() < 2 {
        eprintln!("stall: skipped: needs 2 CPUs (one to stall, one for the daemon)");
        return;
    }
    // Everything started from here on inherits CPU 0; the stall's tasks pin themselves to CPU 1.
    assert!(pin(0), "pinning the test to CPU 0");
    let am = Alertmanager::start().expect("alertmanager (cargo xtask setup installs it)");
    let cg = TestCgroup::new("stall").expect("a test cgroup");
    let daemon = Daemon::start(
        DAEMON,
        &[
            "--interval",
            "100ms",
            "--window",
            "1s",
            "--alert-max-delay",
            "300ms",
            "--alert-for",
            "1",
            "--alert-resend",
            "100ms",
            "--per-task",
            "--alertmanager-url",
            &am.url(),
            // The alerts' events read as JSON at the end.
            "--log.format=json",
        ],
    )
    .expect("latency-daemon run");
    let inside = cg.enter_self().unwrap_or_else(|e| panic!("{e:#}"));
    let trace = latency_lab::guard::Scratch::new("runqlat-stall").expect("a scratch directory");
    let mut perf = Perf::start(&trace.join("perf.data")).expect("perf sched record");
    perf.wait_ready().expect("perf ready");

    let plan = Plan {
        cpu: CPU,
        priority: 5,
        spin: Duration::from_secs(3),
        wake_after: Duration::from_millis(20),
        again: None,
    };
    let mut stall = Stall::start(plan).unwrap_or_else(|e| panic!("{e:#}"));
    let tid = stall.victim.tid;
    let bystanders = [stall.stopped.pid(), stall.blocked.pid(), stall.blocked.child()];

    // Two pollers on CPU 0 until a second after the victim ran (or the spin ended).
    let stop = Arc::new(AtomicBool::new(false));
    let alerts: Seen = Arc::default();
    let am_poller = {
        let (stop, alerts, am_addr) = (stop.clone(), alerts.clone(), am.addr.clone());
        std::thread::spawn(move || {
            let am = latency_lab::web::get;
            while !stop.load(Ordering::SeqCst) {
                if let Ok(r) = am(&am_addr, "/api/v2/alerts?active=true&silenced=true&inhibited=true", &[])
                    && let Ok(Value::Array(list)) = serde_json::from_slice::<Value>(&r.body)
                {
                    let ours = list.into_iter().filter(|a| a["labels"]["alertname"] == "RunQueueDelayHigh").collect();
                    alerts.lock().unwrap().push((monotonic_ns(), ours));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let mut looks = Vec::new();
    let mut ours_final = None;
    let mut states = Vec::new();
    let spin_end = stall.spinner.ends_ns;
    loop {
        let now = monotonic_ns();
        let ran = stall.victim.first_ran_ns();
        // After the run: a second of the daemon's view, and until Alertmanager has the final
        // delay (the daemon sends it when the window holding the run closes) or 3 s have passed.
        let final_seen = || {
            alerts.lock().unwrap().last().is_some_and(|(_, list)| {
                list.iter().any(|a| names(a, tid) && a["annotations"]["still_waiting"] == "false")
            })
        };
        if ran.is_some_and(|r| now > r + 3_000_000_000 || (now > r + 1_000_000_000 && final_seen()))
            || now > spin_end + 3_000_000_000
        {
            break;
        }
        if let Some(l) = look(&daemon, &cg.path) {
            looks.push(l);
        }
        if now < spin_end {
            states.push((stall.stopped.state(), stall.blocked.state()));
        }
        if ran.is_some() {
            ours_final = ours_final.max(final_delay_ns(&daemon, tid));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::SeqCst);
    am_poller.join().unwrap();
    let ran_ns = stall.victim.first_ran_ns().expect("the victim never ran");
    let wake_ns = stall.victim.wake_ns;
    stall.spinner.finish().unwrap_or_else(|e| panic!("{e:#}"));

    // c: the final delay in perf's trace.
    let window_max = looks
        .iter()
        .filter(|l| l.at_ns > ran_ns)
        .filter_map(|l| l.window_max_s)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    let perf = perf.stop(false).unwrap_or_else(|e| panic!("{e:#}"));
    let traced_all = traced_waits(&trace.join("perf.data"));
    let traced: Vec<u64> =
        traced_all.iter().filter(|t| t.tid == tid && t.cpu == CPU as u32).map(Traced::wait_ns).collect();
    let pids: Vec<u32> = std::iter::once(stall.spinner.pid()).chain(bystanders).collect();
    drop(stall);
    drop(inside);

    // The figures.
    let since = |t: u64| (t as f64 - wake_ns as f64) / 1e9;
    eprintln!(
        "stall: victim tid {tid} woken at 0 s, ran at {:.3} s (waited {:.3} s by its own clock)",
        since(ran_ns),
        since(ran_ns)
    );
    eprintln!(
        "stall: the daemon's view (s since the wakeup: oldest wakeup wait, our cgroup's, the victim's listed wait):"
    );
    for l in &looks {
        let victim = l.listed.iter().find(|(t, _)| *t == u64::from(tid)).map(|(_, w)| *w);
        eprintln!(
            "  {:>7.3}  {:>7}  {:>7}  {:>7}  ({} listed)",
            since(l.at_ns),
            l.oldest_wakeup_s.map_or("-".into(), |v| format!("{v:.3}")),
            l.ours_s.map_or("-".into(), |v| format!("{v:.3}")),
            victim.map_or("-".into(), |v| format!("{v:.3}")),
            l.listed.len()
        );
    }
    let alerts = alerts.lock().unwrap().clone();
    let first_alert =
        alerts.iter().find_map(|(at, list)| list.iter().find(|a| names(a, tid)).map(|a| (*at, a.clone())));
    let last_alert =
        alerts.iter().rev().find_map(|(at, list)| list.iter().find(|a| names(a, tid)).map(|a| (*at, a.clone())));
    match &first_alert {
        Some((at, a)) => eprintln!(
            "stall: Alertmanager had the alert for tid {tid} at {:.3} s, {:.3} s before the victim ran: {}",
            since(*at),
            (ran_ns as f64 - *at as f64) / 1e9,
            a["annotations"]
        ),
        None => eprintln!(
            "stall: Alertmanager never named tid {tid}; what it held: {:?}",
            alerts.iter().rev().find(|(_, l)| !l.is_empty()).map(|(_, l)| l)
        ),
    }
    // How the alert for the victim changed in Alertmanager: each new (delay, still_waiting).
    let mut changes: Vec<(u64, String, String)> = Vec::new();
    for (at, list) in &alerts {
        if let Some(a) = list.iter().find(|a| names(a, tid)) {
            let now = (a["annotations"]["delay"].to_string(), a["annotations"]["still_waiting"].to_string());
            if changes.last().is_none_or(|(_, d, w)| (d, w) != (&now.0, &now.1)) {
                changes.push((*at, now.0, now.1));
            }
        }
    }
    for (at, delay, waiting) in &changes {
        eprintln!("stall: at {:.3} s Alertmanager held: delay {delay}, still_waiting {waiting}", since(*at));
    }
    // The daemon's own account of the alert's transitions.
    for v in
        daemon.log().iter().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v["event"].is_string())
    {
        let w = &v["worst"];
        eprintln!(
            "stall: daemon logged {} {} for cgroup {}: worst tid {} delay {} ns, waiting {}, ran_after_waiting {}",
            v["time"],
            v["event"],
            v["key"]["cgroup"],
            w["victim_tid"],
            w["delay_ns"],
            w["waiting"],
            v["ran_after_waiting"]
        );
    }
    if let Some((at, a)) = &last_alert {
        eprintln!("stall: the last alert seen for it, at {:.3} s: {}", since(*at), a["annotations"]);
    }
    let perf_max_ns = traced.iter().copied().max();
    eprintln!(
        "stall: final delay: ours {ours_final:?} ns; perf sched's trace {perf_max_ns:?} ns (its waits of tid {tid}: \
         {traced:?}; `perf sched latency` says {:?}, lost: {:?}); window max (wakeup) after the run {window_max:?} s",
        perf.latency.get(&tid),
        perf.lost
    );

    // Every check is made, and all that failed are reported together.
    let mut failed: Vec<String> = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            failed.push(what);
        }
    };

    // Nothing left: the stall's processes reaped, throttling back.
    let rt = std::fs::read_to_string("/proc/sys/kernel/sched_rt_runtime_us").unwrap_or_default();
    check(rt.trim() != "-1", "RT throttling left off".into());
    for pid in pids {
        check(stat(pid).is_none_or(|s| s.state == 'Z'), format!("pid {pid} of the stall outlived it: {:?}", stat(pid)));
    }

    // a: the wait in progress grew past the threshold within this one wait, before the victim ran.
    let growth: Vec<f64> = looks
        .iter()
        .filter(|l| l.at_ns < ran_ns && l.at_ns > wake_ns)
        .filter_map(|l| l.oldest_wakeup_s)
        .filter(|v| *v > 0.1)
        .collect();
    check(
        growth.len() >= 2 && growth.windows(2).any(|w| w[1] > w[0]) && growth.iter().any(|v| *v > THRESHOLD_S),
        format!(
            "a: runqlat_wait_in_progress_seconds did not grow past {THRESHOLD_S} s before the victim ran: {growth:?}"
        ),
    );
    let listed: Vec<f64> = looks
        .iter()
        .filter(|l| l.at_ns < ran_ns)
        .filter_map(|l| l.listed.iter().find(|(t, _)| *t == u64::from(tid)).map(|(_, w)| *w))
        .collect();
    check(
        listed.iter().any(|w| *w > THRESHOLD_S),
        format!("a: the victim was never listed waiting over {THRESHOLD_S} s before it ran: {listed:?}"),
    );

    // b: Alertmanager held the alert for the victim before it ran, on its CPU.
    match &first_alert {
        None => check(false, format!("b: Alertmanager never held an alert naming tid {tid}")),
        Some((at, alert)) => {
            check(
                *at < ran_ns,
                format!(
                    "b: Alertmanager first held the alert {:.3} s after the victim ran",
                    (*at as f64 - ran_ns as f64) / 1e9
                ),
            );
            check(
                alert["annotations"]["cpu"].as_str() == Some(CPU.to_string().as_str()),
                format!("b: the alert's cpu is not {CPU}: {alert}"),
            );
            check(
                alert["annotations"]["still_waiting"] == "true",
                format!("b: the alert seen before the victim ran is not marked still waiting: {alert}"),
            );
        }
    }
    // While the victim waits, Alertmanager's copy grows with it (the re-sends carry the wait so far).
    let growing = changes.iter().filter(|(at, _, waiting)| *at < ran_ns && waiting == "\"true\"").count();
    check(growing >= 2, format!("b: Alertmanager's alert did not grow while the victim waited: {changes:?}"));
    // … and once it ran, the alert there carries the final delay — also when other tasks' longer
    // waits ended on that CPU at the same time (the fair server runs every queued task at once)
    // and took the window's one incident per CPU: the kernel's ring of final delays has it.
    let updated = match (&last_alert, ours_final) {
        (Some((at, alert)), Some(ours)) if *at > ran_ns => {
            let delay = alert["annotations"]["delay"].as_str().and_then(parse_duration_ns);
            alert["annotations"]["still_waiting"] == "false" && delay.is_some_and(|d| d.abs_diff(ours) <= INTERVAL_NS)
        }
        _ => false,
    };
    check(
        updated,
        format!("b: the alert after the run does not carry the final delay {ours_final:?} ns: {last_alert:?}"),
    );

    // c: our final delay is perf's, and the victim's own, within one interval.
    match (ours_final, perf_max_ns) {
        (Some(ours), Some(theirs)) => {
            check(ours.abs_diff(theirs) <= INTERVAL_NS, format!("c: ours {ours} ns, perf's trace {theirs} ns"));
            let own = ran_ns - wake_ns;
            check(ours.abs_diff(own) <= INTERVAL_NS, format!("c: ours {ours} ns, the victim's own clock {own} ns"));
        }
        other => check(false, format!("c: no final delay to compare (ours, perf's): {other:?}")),
    }

    // d: the stopped and the blocked process stayed so, and were never listed nor alerted on.
    check(
        states.iter().all(|s| *s == (Some('T'), Some('D'))),
        format!("d: bystanders' states during the spin: {states:?}"),
    );
    for l in &looks {
        for (t, w) in &l.listed {
            check(!bystanders.contains(&(*t as u32)), format!("d: tid {t} (stopped or blocked) listed waiting {w} s"));
        }
    }
    for (_, list) in &alerts {
        for a in list {
            for b in bystanders {
                check(!names(a, b), format!("d: an alert names the stopped or blocked task {b}: {a}"));
            }
        }
    }

    let stopped = daemon.stop();
    drop((cg, am, trace));
    let (_, alive) = children_alive();
    check(alive.is_empty(), format!("children still running: {alive:?}"));
    check(stopped.is_ok(), format!("the daemon's stop: {stopped:?}"));
    if let Err(e) = bpftool::nothing_loaded() {
        check(false, format!("{e:#}"));
    }
    assert!(failed.is_empty(), "{} checks failed:\n  {}", failed.len(), failed.join("\n  "));
}
