//! Why it waited: in, the daemon binary; out, `Causes` — the daemon's split of one cgroup's
//! run-queue wait by cause (runqlat_cgroup_wait_cause_seconds_total) in two scenarios on CPU 1:
//! a busy task held back by its own CPU limit (and that cgroup's throttled time from cpu.stat),
//! and a 1 ms sleeper held back by a busy neighbour in another cgroup. Before the split, the
//! throttled wait was told as "idle" (nobody held the CPU).
pub(super) mod cgroups;
pub mod figure;
pub(super) mod tasks;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::Serialize;

use super::analysis::Check;
use crate::daemon::Daemon;
use crate::watch::pin_away;
use crate::web;
use cgroups::{Groups, Limit};
use tasks::{Body, Task};

/// Where both scenarios run; the daemon and the demo stay on CPU 0.
pub const CPU: usize = 1;
/// How long each scenario runs.
pub const SPAN: Duration = Duration::from_secs(5);
/// 10 % of a CPU.
const LIMIT: Limit = Limit { quota_us: 10_000, period_us: 100_000 };
/// The victim's sleep between wakeups.
const NAP: Duration = Duration::from_millis(1);
/// Short windows, so the last waits are exported soon after the tasks go.
const INTERVAL: &str = "250ms";
const WINDOW: &str = "500ms";
const SETTLE: Duration = Duration::from_millis(1250);

/// The daemon's causes, in its order.
pub const CAUSES: [&str; 6] = ["throttled", "irq_steal", "same", "other", "kernel", "idle"];
/// The checks: A's throttled share (while the kernel gives the split), B's other share.
pub const MIN_THROTTLED: f64 = 0.90;
pub const MIN_OTHER: f64 = 0.70;
/// CPU 1 counts as quiet while other tasks ran there less than this share of the scenario.
const QUIET: f64 = 0.10;
/// How close the throttled part must be to cpu.stat's throttled time.
const AGREE: f64 = 0.10;

/// One scenario: the waiting cgroup's time waited, by cause, over the scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub title: &'static str,
    /// The waiting cgroup as the daemon labels it.
    pub cgroup: String,
    pub secs: f64,
    /// Seconds per cause, in `CAUSES`' order.
    pub waited_s: [f64; 6],
    /// How many waits.
    pub waits: u64,
    /// cpu.stat's throttled time of the cgroup over the span (the limited scenario).
    pub cpu_stat_throttled_s: Option<f64>,
    /// The share of the span the CPU ran tasks other than the scenario's (/proc/stat's busy time
    /// less theirs, from /proc/<pid>/schedstat): the host's own load, which the scenario assumes 0.
    pub others_busy: f64,
}

impl Scenario {
    pub fn total_s(&self) -> f64 {
        self.waited_s.iter().sum()
    }

    pub fn seconds(&self, cause: &str) -> f64 {
        CAUSES.iter().position(|c| *c == cause).map_or(0.0, |i| self.waited_s[i])
    }

    /// The cause's part of the time waited, 0 … 1 (0 if it never waited).
    pub fn share(&self, cause: &str) -> f64 {
        let total = self.total_s();
        if total > 0.0 { self.seconds(cause) / total } else { 0.0 }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Causes {
    pub cpu: usize,
    /// Which files held the limit.
    pub how: String,
    pub limit: String,
    /// runqlat_feature_info's state of the two splits: on, off or unavailable.
    pub throttle_split: String,
    pub irq_steal_split: String,
    pub own_limit: Scenario,
    pub neighbour: Scenario,
    pub took_s: f64,
}

impl Causes {
    pub fn throttle_split_on(&self) -> bool {
        self.throttle_split == "on"
    }

    pub fn checks(&self) -> Vec<Check> {
        let check =
            |subject: &str, ok: bool, detail: String| Check { item: "causes", subject: subject.to_owned(), detail, ok };
        let (a, b) = (&self.own_limit, &self.neighbour);
        let mut checks = Vec::new();
        // Without the split the throttled part is told by who held the CPU: nothing to hold A to.
        if self.throttle_split_on() {
            // The scenario's share assumes CPU 1 is otherwise idle: after each refill, whatever else
            // runs there holds the task back, rightly counted as `other`. On a busy host the check is
            // that the throttled part is what cpu.stat says (and still most of the wait).
            let quiet = a.others_busy < QUIET;
            let agrees = a.cpu_stat_throttled_s.is_some_and(|c| (a.seconds("throttled") - c).abs() <= AGREE * c);
            let ok = if quiet { a.share("throttled") >= MIN_THROTTLED } else { agrees && a.share("throttled") >= 0.5 };
            checks.push(check(
                "its own limit: throttled",
                ok && (agrees || a.cpu_stat_throttled_s.is_none()),
                format!(
                    "{}: {:.1} % of {:.3} s waited was throttled ({:.3} s; cpu.stat throttled {}, within 10 % of it), \
                     at least {:.0} % on a quiet CPU, else at least half; CPU {} ran other tasks {:.1} % of the span",
                    a.cgroup,
                    100.0 * a.share("throttled"),
                    a.total_s(),
                    a.seconds("throttled"),
                    a.cpu_stat_throttled_s.map_or_else(|| "?".to_owned(), |s| format!("{s:.3} s")),
                    100.0 * MIN_THROTTLED,
                    self.cpu,
                    100.0 * a.others_busy
                ),
            ));
        }
        checks.push(check(
            "a neighbour: other",
            b.share("other") >= MIN_OTHER,
            format!(
                "{}: {:.1} % of {:.3} s waited ({} waits) was behind another cgroup's task ({:.3} s), at least {:.0} %",
                b.cgroup,
                100.0 * b.share("other"),
                b.total_s(),
                b.waits,
                b.seconds("other"),
                100.0 * MIN_OTHER
            ),
        ));
        checks
    }
}

/// A failed measurement as the report's check.
pub fn failed(e: &anyhow::Error) -> Check {
    Check { item: "causes", subject: "measured".to_owned(), detail: format!("{e:#}"), ok: false }
}

/// Both scenarios beside `daemon run`; needs 2 CPUs and root. The calling thread runs on CPU 0
/// meanwhile (its affinity is restored after).
pub fn measure(daemon: &Path) -> anyhow::Result<Causes> {
    // Online CPUs, not this thread's affinity: the stall alert before leaves the demo on CPU 0.
    // SAFETY: sysconf has no preconditions.
    if unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) } <= CPU as libc::c_long {
        bail!("needs 2 CPUs: the daemon and the demo run on CPU 0, the scenarios on CPU {CPU}");
    }
    let began = Instant::now();
    let _pinned = Pinned::to(0)?;
    // The cgroups exist before the daemon starts, so its first walk names them.
    let groups = Groups::new()?;
    groups.make("limited", Some(LIMIT))?;
    groups.make("noisy", None)?;
    groups.make("victim", None)?;
    let d = Daemon::start(daemon, &["--interval", INTERVAL, "--window", WINDOW, "--top-cgroups", "100"])?;
    let result = pin_away(d.pid()).and_then(|()| scenarios(&d, &groups));
    let stopped = d.stop();
    let how = groups.how.clone();
    drop(groups);
    let (features, own_limit, neighbour) = result?;
    stopped?;
    let state = |feature: &str| {
        ["on", "off", "unavailable"]
            .into_iter()
            .find(|s| {
                web::sample(&features, &format!("runqlat_feature_info{{feature=\"{feature}\",state=\"{s}\"}}"))
                    == Some(1.0)
            })
            .unwrap_or("not reported")
            .to_owned()
    };
    Ok(Causes {
        cpu: CPU,
        how,
        limit: format!("cfs quota {} µs per {} µs period (10 % of a CPU)", LIMIT.quota_us, LIMIT.period_us),
        throttle_split: state("throttle_split"),
        irq_steal_split: state("irq_steal_split"),
        own_limit,
        neighbour,
        took_s: began.elapsed().as_secs_f64(),
    })
}

/// A then B, then the daemon's counters once the last waits are exported: (/metrics, A, B).
fn scenarios(d: &Daemon, groups: &Groups) -> anyhow::Result<(String, Scenario, Scenario)> {
    let before = d.metrics()?;

    // A: one busy task under its own 10 % limit, alone on the CPU.
    let t = Instant::now();
    let busy = Task::start("causes-limited", CPU, Body::Spin)?;
    groups.enter("limited", busy.pid())?;
    let throttled_before = groups.throttled_ns("limited")?;
    let load = Load::start(&[&busy])?;
    sleep(SPAN)?;
    let a_others = load.others_busy(&[&busy])?;
    let throttled = groups.throttled_ns("limited")?.saturating_sub(throttled_before);
    drop(busy);
    let a_secs = t.elapsed().as_secs_f64();

    // B: no limits; a busy neighbour and a task that sleeps 1 ms and wakes, in two cgroups.
    let t = Instant::now();
    let noisy = Task::start("causes-noisy", CPU, Body::Spin)?;
    groups.enter("noisy", noisy.pid())?;
    let victim = Task::start("causes-victim", CPU, Body::Sleep(NAP))?;
    groups.enter("victim", victim.pid())?;
    let load = Load::start(&[&noisy, &victim])?;
    sleep(SPAN)?;
    let b_others = load.others_busy(&[&noisy, &victim])?;
    drop(victim);
    drop(noisy);
    let b_secs = t.elapsed().as_secs_f64();

    sleep(SETTLE)?;
    let after = d.metrics()?;
    let scenario = |title, name: &str, secs, cpu_stat: Option<u64>, others_busy| {
        let label = groups.label(name);
        let delta = |series: String| {
            (web::sample(&after, &series).unwrap_or(0.0) - web::sample(&before, &series).unwrap_or(0.0)).max(0.0)
        };
        let waited_s = CAUSES
            .map(|c| delta(format!("runqlat_cgroup_wait_cause_seconds_total{{cgroup=\"{label}\",cause=\"{c}\"}}")));
        let waits = delta(format!("runqlat_cgroup_delay_seconds_count{{cgroup=\"{label}\"}}")) as u64;
        Scenario {
            title,
            cgroup: label,
            secs,
            waited_s,
            waits,
            cpu_stat_throttled_s: cpu_stat.map(|ns| ns as f64 / 1e9),
            others_busy,
        }
    };
    let a = scenario("A. Its own limit", "limited", a_secs, Some(throttled), a_others);
    let b = scenario("B. A neighbour", "victim", b_secs, None, b_others);
    if a.total_s() == 0.0 && b.total_s() == 0.0 {
        bail!("no cause counters for {} in /metrics (is per-cgroup on?)", groups.path);
    }
    Ok((after, a, b))
}

/// CPU `CPU`'s time from /proc/stat (idle and all, in USER_HZ ticks) and our tasks' time on a
/// CPU from /proc/<pid>/schedstat (ns), at the start of a span.
struct Load {
    at: Instant,
    idle: u64,
    all: u64,
    ours_ns: u64,
}

fn cpu_ticks() -> anyhow::Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let prefix = format!("cpu{CPU} ");
    let line = stat.lines().find(|l| l.starts_with(&prefix)).with_context(|| format!("no cpu{CPU} in /proc/stat"))?;
    let ticks: Vec<u64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user already).
    let all = ticks.iter().take(8).sum();
    Ok((ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0), all))
}

fn on_cpu_ns(tasks: &[&Task]) -> u64 {
    tasks
        .iter()
        .filter_map(|t| std::fs::read_to_string(format!("/proc/{}/schedstat", t.pid())).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

impl Load {
    fn start(tasks: &[&Task]) -> anyhow::Result<Load> {
        let (idle, all) = cpu_ticks()?;
        Ok(Load { at: Instant::now(), idle, all, ours_ns: on_cpu_ns(tasks) })
    }

    /// The share of the span the CPU was busy with anything but `tasks`, 0 … 1.
    fn others_busy(&self, tasks: &[&Task]) -> anyhow::Result<f64> {
        let (idle, all) = cpu_ticks()?;
        let (idle, all) = (idle.saturating_sub(self.idle), all.saturating_sub(self.all));
        let busy = 1.0 - idle as f64 / all.max(1) as f64;
        let ours = on_cpu_ns(tasks).saturating_sub(self.ours_ns) as f64 / 1e9 / self.at.elapsed().as_secs_f64();
        Ok((busy - ours).clamp(0.0, 1.0))
    }
}

/// Sleeps `span`, waking early to give up if the demo was interrupted.
fn sleep(span: Duration) -> anyhow::Result<()> {
    let end = Instant::now() + span;
    while let Some(left) = end.checked_duration_since(Instant::now()).filter(|l| !l.is_zero()) {
        std::thread::sleep(left.min(Duration::from_millis(100)));
        crate::guard::check_interrupted()?;
    }
    Ok(())
}

/// The calling thread pinned to one CPU until dropped, then back on the CPUs it had.
struct Pinned(libc::cpu_set_t);

impl Pinned {
    fn to(cpu: usize) -> anyhow::Result<Pinned> {
        // SAFETY: zeroed cpu_set_t values, read and set for the calling thread only.
        unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut old) != 0 {
                return Err(std::io::Error::last_os_error()).context("sched_getaffinity");
            }
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error()).with_context(|| format!("pinning the demo to CPU {cpu}"));
            }
            Ok(Pinned(old))
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: the set sched_getaffinity gave, back on the calling thread.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.0) };
    }
}
