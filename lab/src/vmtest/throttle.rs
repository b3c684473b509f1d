//! A CPU limit seen in the wait causes: in, what the init of a paired guest
//! (`vmt.throttle=1`) wrote around a busy loop pinned to CPU 1 in each of `SCENES` — a cgroup
//! limited by `cpu.max` (`CPU_MAX`) itself, a child of a limited one (a pod's limit), and a
//! limited one beside an unlimited busy neighbour: the limited cgroup's `cpu.stat` before and
//! after, the loop cgroup's `cpu.stat.local` (6.8+), the loop's own account, each of its threads'
//! run_delay as it moved into the cgroup and out of it, and `run`'s /metrics two drains after it
//! ended; out, one `Throttled` per scene: the cgroup's wait by cause beside the kernel's count of
//! its throttled time, judged by `checks::throttle`.
//!
//! The guest's side is init.sh's `scene` (busybox: `cgroup.subtree_control`, `taskset`, `xtask
//! workload cpu --wait-for-go`, moved into the cgroup once ready and out of it once every thread
//! is asleep after its report, before it is released): nothing runs beside the loop but the parked
//! crews, the daemons and, in `beside`, the neighbour.
use serde::{Deserialize, Serialize};

use super::sections::Sections;
use crate::web::sample;
use crate::workload::Event;

/// One throttle scene as init.sh runs it: `scene NAME LIMITED CGROUP SECS [beside]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scene {
    /// Its sections' prefix (`throttle.prom`, …).
    pub name: &'static str,
    /// The cgroup `cpu.max` limits, whose `cpu.stat` counts the throttles.
    pub limited: &'static str,
    /// The loop's cgroup, as the daemon labels it: `limited` or a child of it.
    pub cgroup: &'static str,
    pub secs: &'static str,
    /// An unlimited busy loop on the same CPU meanwhile: the CPU is never idle.
    pub beside: bool,
}

/// The scenes, in init.sh's order.
pub const SCENES: [Scene; 3] = [
    Scene { name: "throttle", limited: "/vmt-throttled", cgroup: "/vmt-throttled", secs: "2", beside: false },
    Scene { name: "pod", limited: "/vmt-pod", cgroup: "/vmt-pod/task", secs: "1", beside: false },
    Scene { name: "beside", limited: "/vmt-beside", cgroup: "/vmt-beside", secs: "1", beside: true },
];

impl Scene {
    /// What the report calls it.
    pub fn title(&self) -> &'static str {
        match self.name {
            "pod" => "throttle of a pod (the limit on the loop's parent)",
            "beside" => "throttle beside a busy neighbour",
            _ => "throttle",
        }
    }
}

/// What init.sh writes to its `cpu.max`: 10 ms of CPU per 100 ms, so the loop is throttled ~90 %
/// of each period, ~25 times in its 2.5 s.
pub const CPU_MAX: &str = "10000 100000";

/// The causes as the daemon labels them, in its order; `unknown` in `throttled`'s place where the
/// kernel gives no throttle clock (`throttle_unknown` on).
pub const CAUSES: [&str; 7] = ["throttled", "irq_steal", "same", "other", "kernel", "idle", "unknown"];

/// A throttle scene as the guest wrote it down.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Throttled {
    /// `Scene::name`.
    #[serde(default)]
    pub scene: String,
    /// `cpu.max` read back, and its period (µs).
    pub cpu_max: String,
    pub period_us: u64,
    /// `cpu.stat`'s `nr_throttled` and `throttled_usec`, after minus before.
    pub nr_throttled: u64,
    pub throttled_us: u64,
    /// The loop cgroup's `cpu.stat.local` `throttled_usec` (6.8+: the group's own throttle clock,
    /// which the daemon reads, an ancestor's throttles included), after.
    pub local_throttled_us: Option<u64>,
    /// The loop thread's CPU time and run_delay (its own account at its end).
    pub spun_ns: u64,
    pub run_delay_ns: u64,
    /// Each thread of the loop's process and its run_delay while in the cgroup (ns; schedstat's
    /// before it moved in, all its threads asleep, and once every one was asleep again, when it
    /// moved out): the thread that spins and the main thread that starts it, wakes for its two
    /// reports and waits for the release, so up to two tasks wait in the cgroup at once.
    #[serde(default)]
    pub tasks: Vec<(u32, u64)>,
    /// `runqlat_feature_info{feature="throttle_split"}`'s state in the scrape.
    pub split: Option<String>,
    /// `runqlat_feature_info{feature="throttle_hooks"}`'s: the throttled part where the kernel
    /// keeps no group throttle clock (before 6.8).
    #[serde(default)]
    pub hooks: Option<String>,
    /// `runqlat_feature_info{feature="throttle_unknown"}`'s: where neither gives the throttled
    /// part, the throttled waits counted as `unknown`.
    #[serde(default)]
    pub unknown: Option<String>,
    /// The cgroup's `runqlat_cgroup_wait_cause_seconds_total` by cause (`CAUSES` order) and its
    /// `runqlat_cgroup_delay_seconds_sum`, seconds (the cgroup is new: no before).
    pub causes_s: Vec<(String, f64)>,
    pub waited_s: f64,
    /// `run`'s programs during the scene, with the kernel's BPF run-time accounting on: name, ns
    /// in them and runs (the throttle hooks' cost beside the scheduler tracepoints'); init.sh
    /// counts them in the first scene only.
    #[serde(default)]
    pub programs: Vec<(String, u64, u64)>,
    /// The same cgroup in `run --throttle-hooks=false` (the guest's `run-alerting`): where the
    /// kernel keeps no throttle clock (before 6.8) no source of the throttled part is left, and
    /// `throttle_unknown` must count the throttled waits as `unknown`.
    #[serde(default)]
    pub blind: Blind,
    /// The loop's exit code, and what went wrong on the way.
    pub rc: Option<i32>,
    pub error: Option<String>,
}

impl Throttled {
    /// From the guest's sections of `scene` (`throttle.bpf` goes with the first).
    pub fn parse(data: &Sections, scene: &Scene) -> Throttled {
        let part = |p: &str| format!("{}.{p}", scene.name);
        let stat = |p: &str, key: &str| field(data.text(&part(p)), key);
        let prom = data.text(&part("prom"));
        let cgroup = scene.cgroup;
        let done = data.text(&part("json")).lines().filter_map(|l| serde_json::from_str::<Event>(l).ok()).find_map(
            |e| match e {
                Event::Done(d) => Some(d),
                _ => None,
            },
        );
        let cpu_max = data.text(&part("max")).trim().to_owned();
        let errors: Vec<&str> = data.text(&part("err")).lines().filter(|l| !l.trim().is_empty()).collect();
        Throttled {
            scene: scene.name.to_owned(),
            period_us: cpu_max.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0),
            cpu_max,
            nr_throttled: delta(stat("stat1", "nr_throttled"), stat("stat0", "nr_throttled")),
            throttled_us: delta(stat("stat1", "throttled_usec"), stat("stat0", "throttled_usec")),
            local_throttled_us: stat("local", "throttled_usec"),
            spun_ns: done.as_ref().map_or(0, |d| d.cpu_ns),
            run_delay_ns: done.as_ref().map_or(0, |d| d.run_delay_ns),
            tasks: waited_in(data.text(&part("tasks0")), data.text(&part("tasks1"))),
            split: feature_state(prom, "throttle_split"),
            hooks: feature_state(prom, "throttle_hooks"),
            unknown: feature_state(prom, "throttle_unknown"),
            causes_s: causes_of(prom, cgroup),
            blind: Blind::parse(data.text(&part("blind")), cgroup),
            waited_s: sample(prom, &format!("runqlat_cgroup_delay_seconds_sum{{cgroup=\"{cgroup}\"}}")).unwrap_or(0.0),
            programs: data
                .text(&part("bpf"))
                .lines()
                .filter_map(|l| {
                    let mut words = l.split_whitespace();
                    let name = words.next()?.to_owned();
                    Some((name, words.next()?.parse().ok()?, words.next()?.parse().ok()?))
                })
                .collect(),
            rc: data.rc(&part("json")),
            error: (!errors.is_empty()).then(|| errors.join("; ")),
        }
    }

    /// Which feature gave the throttled part (`throttle_split`, `throttle_hooks`), or `None`.
    pub fn source(&self) -> Option<&'static str> {
        if self.split.as_deref() == Some("on") {
            Some("throttle_split")
        } else if self.hooks.as_deref() == Some("on") {
            Some("throttle_hooks")
        } else {
            None
        }
    }

    /// The cgroup's wait of one cause, seconds.
    pub fn cause_s(&self, cause: &str) -> f64 {
        self.causes_s.iter().find(|(c, _)| c == cause).map_or(0.0, |(_, s)| *s)
    }

    /// The threads that waited in the cgroup.
    pub fn waiters(&self) -> usize {
        self.tasks.iter().filter(|(_, ns)| *ns > 0).count()
    }

    /// The most any source can rightly call throttled, seconds: each thread's waits overlapped
    /// the group's throttles for at most the group's throttled time (`throttled_us`, or on 6.8+
    /// `cpu.stat.local`'s, the loop cgroup's own clock) and at most its own wait.
    pub fn throttled_bound_s(&self) -> f64 {
        let stat = self.local_throttled_us.unwrap_or(self.throttled_us) * 1_000;
        self.tasks.iter().map(|(_, ns)| (*ns).min(stat)).sum::<u64>() as f64 / 1e9
    }

    /// The programs that ran, for a report line: `sched_switch 41,230 runs × 310 ns`.
    pub fn program_runs(&self) -> String {
        let parts: Vec<String> = self
            .programs
            .iter()
            .filter(|(_, _, runs)| *runs > 0)
            .map(|(name, ns, runs)| format!("{name} {runs} runs × {} ns", ns / runs))
            .collect();
        if parts.is_empty() { "not counted".to_owned() } else { parts.join(", ") }
    }

    /// The causes that are not 0, for a report line.
    pub fn by_cause(&self) -> String {
        by_cause(&self.causes_s)
    }
}

/// The causes that are not 0, for a report line: `idle 2.10 s, same 0.01 s`.
pub fn by_cause(causes_s: &[(String, f64)]) -> String {
    let parts: Vec<String> = causes_s.iter().filter(|(_, s)| *s > 0.0).map(|(c, s)| format!("{c} {s:.3} s")).collect();
    if parts.is_empty() { "none".to_owned() } else { parts.join(", ") }
}

/// `key value` in a cgroup stat file.
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

fn delta(after: Option<u64>, before: Option<u64>) -> u64 {
    after.unwrap_or(0).saturating_sub(before.unwrap_or(0))
}

/// Each thread's run_delay between two `TID NS` listings (a thread absent before had 0), in the
/// order of the second.
fn waited_in(before: &str, after: &str) -> Vec<(u32, u64)> {
    let parse = |text: &str| -> Vec<(u32, u64)> {
        text.lines()
            .filter_map(|l| {
                let (tid, ns) = l.split_once(' ')?;
                Some((tid.trim().parse().ok()?, ns.trim().parse().ok()?))
            })
            .collect()
    };
    let before = parse(before);
    parse(after)
        .into_iter()
        .map(|(tid, ns)| (tid, ns.saturating_sub(before.iter().find(|(t, _)| *t == tid).map_or(0, |(_, b)| *b))))
        .collect()
}

/// A scene as `run --throttle-hooks=false` saw it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Blind {
    /// `runqlat_feature_info{feature="throttle_unknown"}`'s state.
    pub unknown: Option<String>,
    /// The cgroup's wait by cause (`CAUSES` order) and in all, seconds.
    pub causes_s: Vec<(String, f64)>,
    pub waited_s: f64,
}

impl Blind {
    fn parse(prom: &str, cgroup: &str) -> Blind {
        Blind {
            unknown: feature_state(prom, "throttle_unknown"),
            causes_s: causes_of(prom, cgroup),
            waited_s: sample(prom, &format!("runqlat_cgroup_delay_seconds_sum{{cgroup=\"{cgroup}\"}}")).unwrap_or(0.0),
        }
    }

    /// The cgroup's wait of one cause, seconds.
    pub fn cause_s(&self, cause: &str) -> f64 {
        self.causes_s.iter().find(|(c, _)| c == cause).map_or(0.0, |(_, s)| *s)
    }
}

/// A cgroup's `runqlat_cgroup_wait_cause_seconds_total` by cause, `CAUSES` order (0 where absent).
fn causes_of(prom: &str, cgroup: &str) -> Vec<(String, f64)> {
    let cause = |c: &str| {
        let series = format!("runqlat_cgroup_wait_cause_seconds_total{{cgroup=\"{cgroup}\",cause=\"{c}\"}}");
        sample(prom, &series).unwrap_or(0.0)
    };
    CAUSES.iter().map(|c| ((*c).to_owned(), cause(c))).collect()
}

/// The state `runqlat_feature_info` says `feature` is in (the series whose value is 1).
pub fn feature_state(prom: &str, feature: &str) -> Option<String> {
    let label = format!("feature=\"{feature}\"");
    prom.lines()
        .filter(|l| l.starts_with("runqlat_feature_info{") && l.contains(&label))
        .find(|l| l.trim_end().ends_with(" 1"))
        .and_then(|l| l.split("state=\"").nth(1)?.split('"').next())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// init.sh runs these scenes, in this order, with this limit, and writes their sections.
    #[test]
    fn init_runs_these_scenes_with_this_limit() {
        let init = include_str!("init.sh");
        let call = |s: &Scene| {
            let beside = if s.beside { " beside" } else { "" };
            format!("scene {} {} {} {}{beside}\n", s.name, s.limited, s.cgroup, s.secs)
        };
        let at: Vec<usize> = SCENES
            .iter()
            .map(|s| init.find(&call(s)).unwrap_or_else(|| panic!("init.sh has no `{}`", call(s))))
            .collect();
        assert!(at.is_sorted(), "init.sh runs the scenes in another order");
        assert!(init.contains(&format!("echo \"{CPU_MAX}\" > $L/cpu.max")), "init.sh's cpu.max is not {CPU_MAX}");
        // The threads' waits, read as the loop moves in (asleep) and out (every thread asleep).
        let moved_in = init.find("waited > /tmp/$name.tasks0\n  echo $LOOP > $T/cgroup.procs");
        let moved_out = init.find("waited > /tmp/$name.tasks1\n  echo $LOOP > /sys/fs/cgroup/cgroup.procs");
        assert!(moved_in.is_some() && moved_out.is_some(), "init.sh reads the threads' waits elsewhere");
        assert!(
            init.contains("for part in max stat0 stat1 local prom blind err tasks0 tasks1; do"),
            "init.sh puts other parts"
        );
        let names: Vec<&str> = SCENES.iter().map(|s| s.name).collect();
        assert!(init.contains(&format!("for name in {}; do", names.join(" "))), "init.sh puts other scenes");
        assert!(
            init.contains(&format!("put {0}.bpf /tmp/{0}.bpf", SCENES[0].name)),
            "init.sh counts BPF runs elsewhere"
        );
    }

    #[test]
    fn a_throttle_from_the_guests_sections() {
        let scene = &SCENES[1];
        let cgroup = scene.cgroup;
        let series = |c: &str, v: f64| {
            format!("runqlat_cgroup_wait_cause_seconds_total{{cgroup=\"{cgroup}\",cause=\"{c}\"}} {v}\n")
        };
        let prom = format!(
            "runqlat_feature_info{{feature=\"throttle_split\",state=\"on\"}} 1\n\
             runqlat_feature_info{{feature=\"throttle_split\",state=\"off\"}} 0\n\
             runqlat_cgroup_delay_seconds_sum{{cgroup=\"{cgroup}\"}} 2.25\n{}{}",
            series("throttled", 2.2),
            series("idle", 0.05)
        );
        let done = "{\"event\":\"done\",\"name\":\"cpu/0\",\"tid\":9,\"group\":\"cpu\",\"nice\":0,\"weight\":null,\
                    \"sleeps\":0,\"cpu_ns\":250000000,\"run_delay_ns\":2250000000,\"largest_gap_ns\":null}";
        let data = format!(
            "@@begin pod.max\n10000 100000\n@@end pod.max\n\
             @@begin pod.stat0\nusage_usec 0\nnr_throttled 0\nthrottled_usec 0\n@@end pod.stat0\n\
             @@begin pod.stat1\nusage_usec 250000\nnr_throttled 24\nthrottled_usec 2180000\n@@end pod.stat1\n\
             @@begin pod.json\n{done}\n@@end pod.json 0\n\
             @@begin pod.prom\n{prom}@@end pod.prom 0\n@@begin pod.err\n@@end pod.err\n\
             @@begin pod.bpf\nsched_switch 3000 10\nthrottle_down 0 0\n@@end pod.bpf\n\
             @@begin pod.tasks0\n620 5000\n@@end pod.tasks0\n\
             @@begin pod.tasks1\n620 105000\n626 2250000000\n@@end pod.tasks1\n"
        );
        let t = Throttled::parse(&Sections::parse(&data), scene);
        assert_eq!(t.scene, "pod");
        assert_eq!((t.period_us, t.nr_throttled, t.throttled_us, t.local_throttled_us), (100_000, 24, 2_180_000, None));
        assert_eq!((t.split.as_deref(), t.rc, t.error.as_deref()), (Some("on"), Some(0), None));
        assert_eq!((t.hooks.as_deref(), t.source()), (None, Some("throttle_split")));
        assert_eq!((t.cause_s("throttled"), t.cause_s("idle"), t.waited_s), (2.2, 0.05, 2.25));
        assert_eq!((t.spun_ns, t.run_delay_ns), (250_000_000, 2_250_000_000));
        // The main thread waited 0.1 ms in the cgroup, the spinning one (new there) all its wait.
        assert_eq!((t.tasks.as_slice(), t.waiters()), ([(620, 100_000), (626, 2_250_000_000)].as_slice(), 2));
        assert_eq!(t.throttled_bound_s(), (100_000u64 + 2_180_000_000) as f64 / 1e9);
        assert_eq!(t.by_cause(), "throttled 2.200 s, idle 0.050 s");
        assert_eq!(t.program_runs(), "sched_switch 10 runs × 300 ns");
    }
}
