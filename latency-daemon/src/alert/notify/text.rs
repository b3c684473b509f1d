//! An [`Alert`] in, the human words about it out: durations, timestamps, the one-line summary,
//! the multi-line description, the split of the worst delay (throttled by the victim's own CPU
//! limit, in IRQ or steal, behind who ran) and the culprit list that the Alertmanager annotations
//! carry.
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use crate::alert::Alert;
use crate::model::{
    attribution::{Attribution, Culprit},
    container::ContainerLabels,
};

/// RFC 3339 UTC with milliseconds. Any u64 of ns is before the year 2555, well inside what
/// humantime formats (years up to 9999), so its `Display` cannot fail and `to_string` cannot panic.
pub fn rfc3339(unix_ns: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_nanos(unix_ns)).to_string()
}

/// 812 → "812 ns", 12_345_678 → "12.3 ms", 2_500_000_000 → "2.50 s"; rounded, never "1000.0 µs".
pub fn duration(ns: u64) -> String {
    if ns < 1_000 {
        return format!("{ns} ns");
    }
    let tenths_us = ns.saturating_add(50) / 100;
    if tenths_us < 10_000 {
        return format!("{}.{} µs", tenths_us / 10, tenths_us % 10);
    }
    let tenths_ms = ns.saturating_add(50_000) / 100_000;
    if tenths_ms < 10_000 {
        return format!("{}.{} ms", tenths_ms / 10, tenths_ms % 10);
    }
    // In u128: rounding u64::MAX up must not saturate.
    let hundredths_s = (u128::from(ns) + 5_000_000) / 10_000_000;
    format!("{}.{:02} s", hundredths_s / 100, hundredths_s % 100)
}

/// A thread name as one line of text: control characters (a comm may hold a newline or an
/// escape sequence) are shown escaped, everything else as it is.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

pub fn queue_depth(a: &Attribution) -> String {
    a.queue_depth.map_or_else(|| "unknown".to_string(), |d| d.to_string())
}

/// "myapp (tid 1234, pid 1200)", and " in pod ns/web container app" where the victim is a pod's.
pub fn victim(a: &Attribution) -> String {
    format!("{} (tid {}, pid {}){}", printable(&a.victim_comm), a.victim_tid, a.victim_pid, in_pod(&a.names))
}

/// " in pod ns/web container app", " in container <short id>", or nothing.
fn in_pod(names: &ContainerLabels) -> String {
    let container = |c: &str| if c.is_empty() { String::new() } else { format!(" container {}", printable(c)) };
    match names.pod_name() {
        Some(pod) => format!(" in pod {}{}", printable(&pod), container(&names.container)),
        None => container(&names.container).replacen(" container", " in container", 1),
    }
}

/// Where one culprit lived: its pod, else its cgroup ("unknown": its process was gone).
fn culprit_place(c: &Culprit) -> String {
    match c.names.pod_name() {
        Some(pod) => format!("pod {}", printable(&pod)),
        None if !c.names.container.is_empty() => format!("container {}", printable(&c.names.container)),
        None => format!("cgroup {}", printable(&c.cgroup)),
    }
}

/// The culprits' pods (or cgroups) by time they ran during the wait, longest first:
/// "pod batch/hog 11.8 ms; cgroup / 0.2 ms"; "none recorded" without culprits.
pub fn culprit_pods(a: &Attribution) -> String {
    let mut by_place: Vec<(String, u64)> = Vec::new();
    for c in a.culprits.iter().filter(|c| !c.cgroup.is_empty()) {
        let place = culprit_place(c);
        match by_place.iter_mut().find(|(p, _)| *p == place) {
            Some((_, ns)) => *ns += c.ran_ns,
            None => by_place.push((place, c.ran_ns)),
        }
    }
    by_place.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    let parts: Vec<String> = by_place.iter().map(|(p, ns)| format!("{p} {}", duration(*ns))).collect();
    if parts.is_empty() { "none recorded".into() } else { parts.join("; ") }
}

/// "hog:99 ran 11.8 ms (pod batch/hog); kworker/1:0:23 ran 0.2 ms (cgroup /)", most recent
/// first, as the kernel kept them.
pub fn culprits(a: &Attribution) -> String {
    let mut parts: Vec<String> = a
        .culprits
        .iter()
        .map(|c| {
            let place = if c.cgroup.is_empty() { String::new() } else { format!(" ({})", culprit_place(c)) };
            format!("{}:{} ran {}{place}", printable(&c.comm), c.tid, duration(c.ran_ns))
        })
        .collect();
    if a.culprits_truncated {
        parts.push("(and more, not kept)".into());
    }
    if parts.is_empty() { "none recorded".into() } else { parts.join("; ") }
}

/// At most this many characters of a cgroup path in the split: the summary stays one short line.
const PLACE_CHARS: usize = 120;

/// Where the victim's CPU limit is: its pod, else its container, else its cgroup (a long path cut
/// to its last [`PLACE_CHARS`] characters, where the leaf's name is).
fn victim_place(a: &Attribution) -> String {
    match a.names.pod_name() {
        Some(pod) => format!("pod {}", printable(&pod)),
        None if !a.names.container.is_empty() => format!("container {}", printable(&a.names.container)),
        None => {
            let path = printable(&a.cgroup);
            let n = path.chars().count();
            if n <= PLACE_CHARS {
                format!("cgroup {path}")
            } else {
                format!("cgroup …{}", path.chars().skip(n - PLACE_CHARS).collect::<String>())
            }
        }
    }
}

/// Who the rest of the wait was behind: the culprit that ran longest, by its pod where known.
fn held_by(a: &Attribution) -> String {
    if idle_only(a) {
        return "with the CPU idle".into();
    }
    match a.culprits.iter().max_by_key(|c| c.ran_ns) {
        Some(top) if !top.cgroup.is_empty() => format!("behind {}", culprit_place(top)),
        Some(top) => format!("behind {} (tid {})", printable(&top.comm), top.tid),
        None => "behind other tasks".into(),
    }
}

/// How the worst delay splits, when the kernel split it: "95.0 ms throttled by the CPU limit of
/// pod shop/web-0, 5.0 ms in IRQ or steal, 20.0 ms behind pod shop/cache-1" (parts that are 0 left
/// out). None when neither throttling nor IRQ or steal took any of it: the whole delay was behind
/// who ran (or the kernel could not split it).
pub fn split(a: &Attribution) -> Option<String> {
    if a.throttled_ns == 0 && a.irq_steal_ns == 0 && a.unknown_ns == 0 {
        return None;
    }
    let mut parts = Vec::new();
    if a.throttled_ns > 0 {
        parts.push(format!("{} throttled by the CPU limit of {}", duration(a.throttled_ns), victim_place(a)));
    }
    if a.unknown_ns > 0 {
        parts.push(format!(
            "{} cause unknown on this kernel (a CPU-limit throttle overlapped it)",
            duration(a.unknown_ns)
        ));
    }
    if a.irq_steal_ns > 0 {
        parts.push(format!("{} in IRQ or steal", duration(a.irq_steal_ns)));
    }
    if a.held_ns() > 0 {
        parts.push(format!("{} {}", duration(a.held_ns()), held_by(a)));
    }
    Some(parts.join(", "))
}

/// What an alert's worst delay is, for the words about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Worst {
    /// A delay that ended (the task ran) before anyone saw it in progress.
    Ended,
    /// A wait still in progress: the task has not run yet.
    Waiting,
    /// A wait in progress when last seen, on an alert since resolved: its end was never seen.
    LastSeenWaiting,
    /// The final delay of a wait the alert carried in progress: the task finally ran.
    FinallyRan,
}

fn worst(alert: &Alert) -> Worst {
    match (alert.worst.waiting, alert.resolved_unix_ns.is_some(), alert.ran_after_waiting) {
        (true, false, _) => Worst::Waiting,
        (true, true, _) => Worst::LastSeenWaiting,
        (false, _, true) => Worst::FinallyRan,
        (false, _, false) => Worst::Ended,
    }
}

/// "preempt delay 12.3 ms on cpu 1: myapp (tid 1234) waited; ran meanwhile: hog (tid 99) 11.8 ms"
/// — the culprit named is the one that ran longest. For a wait in progress "preempt delay on cpu 1:
/// myapp (tid 1234) has waited 1.20 s so far and has not run yet; …", and once it ended "… finally
/// ran after 1.90 s; …".
pub fn summary(alert: &Alert) -> String {
    let a = &alert.worst;
    let (reason, cpu, d) = (a.reason.name(), a.cpu, duration(a.delay_ns));
    let who = format!("{} (tid {}){}", printable(&a.victim_comm), a.victim_tid, in_pod(&a.names));
    let mut s = match (worst(alert), split(a)) {
        (Worst::Ended, Some(split)) => {
            format!("{reason} delay on cpu {cpu}: {who} waited {d}: {split}; ran meanwhile: ")
        }
        (Worst::FinallyRan, Some(split)) => {
            format!("{reason} delay on cpu {cpu}: {who} finally ran after {d}: {split}; ran meanwhile: ")
        }
        (Worst::Ended, None) => format!("{reason} delay {d} on cpu {cpu}: {who} waited; ran meanwhile: "),
        (Worst::Waiting, _) => {
            format!("{reason} delay on cpu {cpu}: {who} has waited {d} so far and has not run yet; ran meanwhile: ")
        }
        (Worst::LastSeenWaiting, _) => {
            format!("{reason} delay on cpu {cpu}: {who} had waited {d} and not run yet when last seen; ran meanwhile: ")
        }
        (Worst::FinallyRan, None) => {
            format!("{reason} delay on cpu {cpu}: {who} finally ran after {d}; ran meanwhile: ")
        }
    };
    if idle_only(a) {
        let _ = write!(s, "only the idle task, {}: {IDLE_HINT}", duration(a.delay_ns));
        return s;
    }
    match a.culprits.iter().max_by_key(|c| c.ran_ns) {
        None if a.culprits_truncated => s.push_str("more tasks than were kept"),
        None => s.push_str("nothing recorded"),
        Some(top) => {
            let _ = write!(s, "{} (tid {}) {}", printable(&top.comm), top.tid, duration(top.ran_ns));
            if top.names.pod_name().is_some() || !top.names.container.is_empty() {
                let _ = write!(s, " in {}", culprit_place(top));
            }
            let others = a.culprits.len() - 1;
            match (others, a.culprits_truncated) {
                (0, false) => {}
                (n, false) => {
                    let _ = write!(s, " and {n} more");
                }
                (_, true) => s.push_str(" and more"),
            }
        }
    }
    s
}

/// What a wait behind nothing but the idle task means.
const IDLE_HINT: &str = "the CPU sat idle instead of running the woken task (a slow exit from a deep idle state, \
     or a virtual CPU the hypervisor did not run: check steal time)";

/// Whether nothing but the CPU's idle task (tid 0) ran while the victim waited.
fn idle_only(a: &Attribution) -> bool {
    !a.culprits.is_empty() && !a.culprits_truncated && a.culprits.iter().all(|c| c.tid == 0)
}

/// Everything the alert knows, one fact a line.
pub fn description(alert: &Alert) -> String {
    let a = &alert.worst;
    // Writing to a String cannot fail; the results are ignored for that reason.
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Run-queue delay over {} for {} in cgroup {}.",
        duration(alert.threshold_ns),
        a.reason.name(),
        printable(&alert.key.cgroup)
    );
    let (since, d, cpu, at) = (rfc3339(alert.since_unix_ns), duration(a.delay_ns), a.cpu, rfc3339(a.end_unix_ns));
    let _ = match worst(alert) {
        Worst::Ended => writeln!(s, "Firing since {since}; worst delay {d} on cpu {cpu}, ended {at}."),
        Worst::Waiting => {
            writeln!(
                s,
                "Firing since {since}; worst delay {d} so far on cpu {cpu}: still waiting at {at}, not run yet."
            )
        }
        Worst::LastSeenWaiting => writeln!(
            s,
            "Firing since {since}; worst delay at least {d} on cpu {cpu}: still waiting when last seen, at {at}."
        ),
        Worst::FinallyRan => {
            writeln!(s, "Firing since {since}; worst delay {d} on cpu {cpu}: it finally ran at {at}.")
        }
    };
    if let Some(split) = split(a) {
        let _ = writeln!(s, "Of that delay: {split}.");
    }
    let _ = writeln!(s, "Victim: {}, prio {}.", victim(a), a.victim_prio);
    let _ = writeln!(s, "Other runnable tasks on that CPU when it was enqueued: {}.", queue_depth(a));
    if a.culprits.is_empty() && !a.culprits_truncated {
        let _ = writeln!(s, "Ran meanwhile: none recorded.");
    } else {
        let _ = writeln!(s, "Ran meanwhile (most recent first):");
        for c in &a.culprits {
            let place = if c.cgroup.is_empty() { String::new() } else { format!(", {}", culprit_place(c)) };
            let _ =
                writeln!(s, "  {} (tid {}, pid {}) {}{place}", printable(&c.comm), c.tid, c.pid, duration(c.ran_ns));
        }
        if a.culprits_truncated {
            let _ = writeln!(s, "  (and more, not kept)");
        }
        if idle_only(a) {
            let _ = writeln!(s, "So {IDLE_HINT}.");
        }
    }
    if let Some(at) = alert.resolved_unix_ns {
        let _ = writeln!(s, "Resolved {}.", rfc3339(at));
    }
    s
}

#[cfg(test)]
pub(super) mod tests {
    use latency_common::Reason;

    use super::*;
    use crate::alert::AlertKey;

    pub const MS: u64 = 1_000_000;

    /// The alert used across the notify tests: a preempt delay of 12.3 ms, two culprits.
    pub fn alert() -> Alert {
        Alert {
            key: AlertKey { reason: Reason::Preempt, cgroup: "/app.slice".into() },
            threshold_ns: 10 * MS,
            since_unix_ns: 1_700_000_000_000_000_000,
            worst: Attribution {
                reason: Reason::Preempt,
                delay_ns: 12_300_000,
                throttled_ns: 0,
                irq_steal_ns: 0,
                unknown_ns: 0,
                cpu: 1,
                victim_tid: 1234,
                victim_pid: 1200,
                victim_comm: "myapp".into(),
                victim_prio: 120,
                cgroup: "/app.slice".into(),
                names: ContainerLabels::default(),
                end_ns: 5,
                end_unix_ns: 1_699_999_999_500_000_000,
                queue_depth: None,
                culprits: vec![
                    Culprit { tid: 99, pid: 99, comm: "hog".into(), ran_ns: 11_800_000, ..Culprit::default() },
                    Culprit { tid: 23, pid: 23, comm: "kworker/1:0".into(), ran_ns: 200_000, ..Culprit::default() },
                ],
                culprits_truncated: true,
                waiting: false,
            },
            resolved_unix_ns: None,
            ran_after_waiting: false,
            capture: None,
        }
    }

    #[test]
    fn durations_at_unit_boundaries() {
        let cases = [
            (0, "0 ns"),
            (999, "999 ns"),
            (1_000, "1.0 µs"),
            (999_949, "999.9 µs"),
            (999_950, "1.0 ms"),
            (12_345_678, "12.3 ms"),
            (999_949_999, "999.9 ms"),
            (999_950_000, "1.00 s"),
            (2_500_000_000, "2.50 s"),
            (u64::MAX, "18446744073.71 s"),
        ];
        for (ns, want) in cases {
            assert_eq!(duration(ns), want, "{ns}");
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_700_000_000_123_456_789), "2023-11-14T22:13:20.123Z");
        assert!(rfc3339(u64::MAX).starts_with("2554-"));
    }

    #[test]
    fn summary_is_one_line_naming_the_longest_culprit() {
        let mut a = alert();
        assert_eq!(
            summary(&a),
            "preempt delay 12.3 ms on cpu 1: myapp (tid 1234) waited; ran meanwhile: hog (tid 99) 11.8 ms and more"
        );
        a.worst.culprits_truncated = false;
        assert!(summary(&a).ends_with("hog (tid 99) 11.8 ms and 1 more"));
        a.worst.culprits.truncate(1);
        assert!(summary(&a).ends_with("hog (tid 99) 11.8 ms"));
        a.worst.culprits.clear();
        assert!(summary(&a).ends_with("ran meanwhile: nothing recorded"));
        a.worst.victim_comm = "evil\n\u{1b}[31mname".into();
        let s = summary(&a);
        assert!(!s.contains('\n') && !s.contains('\u{1b}'), "{s}");
        assert!(s.contains(r"evil\n\u{1b}[31mname"), "{s}");
    }

    #[test]
    fn a_wait_in_progress_says_so_and_its_end_says_it_finally_ran() {
        let mut a = alert();
        a.worst.delay_ns = 1_200_000_000;
        a.worst.waiting = true;
        let cases = [
            // (waiting, ran after waiting, resolved) → summary, description's second line
            (
                (false, false, false),
                "preempt delay 1.20 s on cpu 1: myapp (tid 1234) waited; ran meanwhile: hog",
                "worst delay 1.20 s on cpu 1, ended 2023-11-14T22:13:19.500Z.",
            ),
            (
                (true, false, false),
                "preempt delay on cpu 1: myapp (tid 1234) has waited 1.20 s so far and has not run yet; ran meanwhile: hog",
                "worst delay 1.20 s so far on cpu 1: still waiting at 2023-11-14T22:13:19.500Z, not run yet.",
            ),
            (
                (true, false, true),
                "preempt delay on cpu 1: myapp (tid 1234) had waited 1.20 s and not run yet when last seen; ran",
                "worst delay at least 1.20 s on cpu 1: still waiting when last seen, at 2023-11-14T22:13:19.500Z.",
            ),
            (
                (false, true, false),
                "preempt delay on cpu 1: myapp (tid 1234) finally ran after 1.20 s; ran meanwhile: hog",
                "worst delay 1.20 s on cpu 1: it finally ran at 2023-11-14T22:13:19.500Z.",
            ),
        ];
        for ((waiting, ran, resolved), want_summary, want_description) in cases {
            a.worst.waiting = waiting;
            a.ran_after_waiting = ran;
            a.resolved_unix_ns = resolved.then_some(1_700_000_060_000_000_000);
            let s = summary(&a);
            assert!(s.starts_with(want_summary), "{s}");
            assert!(description(&a).contains(want_description), "{}", description(&a));
        }
    }

    #[test]
    fn a_wait_behind_only_the_idle_task_says_the_cpu_sat_idle() {
        let mut a = alert();
        a.worst.culprits_truncated = false;
        a.worst.culprits =
            vec![Culprit { tid: 0, pid: 0, comm: "swapper/1".into(), ran_ns: 12_345_678, ..Culprit::default() }];
        let s = summary(&a);
        assert!(s.ends_with(&format!("ran meanwhile: only the idle task, 12.3 ms: {IDLE_HINT}")), "{s}");
        assert!(description(&a).contains("So the CPU sat idle"), "{}", description(&a));
        // One real task beside the idle one: that task is named, no idle hint.
        a.worst.culprits.push(Culprit { tid: 7, pid: 7, comm: "hog".into(), ran_ns: 1, ..Culprit::default() });
        assert!(!summary(&a).contains("idle task") && !description(&a).contains("sat idle"));
    }

    #[test]
    fn culprits_and_queue_depth() {
        let mut a = alert();
        assert_eq!(culprits(&a.worst), "hog:99 ran 11.8 ms; kworker/1:0:23 ran 200.0 µs; (and more, not kept)");
        assert_eq!(queue_depth(&a.worst), "unknown");
        a.worst.queue_depth = Some(3);
        assert_eq!(queue_depth(&a.worst), "3");
        a.worst.culprits.clear();
        a.worst.culprits_truncated = false;
        assert_eq!(culprits(&a.worst), "none recorded");
    }

    #[test]
    fn description_has_everything() {
        let mut a = alert();
        a.resolved_unix_ns = Some(1_700_000_060_000_000_000);
        let d = description(&a);
        for want in [
            "over 10.0 ms for preempt in cgroup /app.slice",
            "12.3 ms on cpu 1",
            "myapp (tid 1234, pid 1200), prio 120",
            "when it was enqueued: unknown",
            "  hog (tid 99, pid 99) 11.8 ms\n  kworker/1:0 (tid 23, pid 23) 200.0 µs\n  (and more, not kept)",
            "Resolved 2023-11-14T22:14:20.000Z",
        ] {
            assert!(d.contains(want), "{want:?} missing in:\n{d}");
        }
    }
}

#[cfg(test)]
mod split_tests {
    use super::{tests::alert, *};
    use crate::model::attribution::Culprit;

    const MS: u64 = 1_000_000;

    #[test]
    fn throttling_names_the_victims_own_limit_and_the_rest_who_ran() {
        let mut a = alert();
        a.worst.delay_ns = 120 * MS;
        a.worst.throttled_ns = 95 * MS;
        a.worst.irq_steal_ns = 5 * MS;
        a.worst.names = ContainerLabels {
            namespace: "shop".into(),
            pod: "web-0".into(),
            container: "app".into(),
            container_id: String::new(),
        };
        a.worst.culprits[0].cgroup = "/kubepods/podc/x".into();
        a.worst.culprits[0].names.namespace = "shop".into();
        a.worst.culprits[0].names.pod = "cache-1".into();
        assert_eq!(
            summary(&a),
            "preempt delay on cpu 1: myapp (tid 1234) in pod shop/web-0 container app waited 120.0 ms: 95.0 ms \
             throttled by the CPU limit of pod shop/web-0, 5.0 ms in IRQ or steal, 20.0 ms behind pod shop/cache-1; \
             ran meanwhile: hog (tid 99) 11.8 ms in pod shop/cache-1 and more"
        );
        let d = description(&a);
        assert!(d.contains("\nOf that delay: 95.0 ms throttled by the CPU limit of pod shop/web-0, 5.0 ms in IRQ or steal, 20.0 ms behind pod shop/cache-1.\n"), "{d}");
        // Once the wait ended after being seen in progress, the split comes with the final delay.
        a.ran_after_waiting = true;
        assert!(summary(&a).contains("finally ran after 120.0 ms: 95.0 ms throttled"), "{}", summary(&a));
    }

    #[test]
    fn each_part_only_when_there_is_some() {
        let mut a = alert();
        assert_eq!(split(&a.worst), None, "not split: the words stay as they were");
        assert!(!description(&a).contains("Of that delay"));
        // Only IRQ or steal, the rest behind a culprit without a known cgroup (record).
        a.worst.irq_steal_ns = 300_000;
        assert_eq!(split(&a.worst).unwrap(), "300.0 µs in IRQ or steal, 12.0 ms behind hog (tid 99)");
        // All of it throttled, in a plain cgroup whose long hostile path is cut and escaped.
        a.worst.irq_steal_ns = 0;
        a.worst.throttled_ns = a.worst.delay_ns;
        a.worst.cgroup = format!("/{}\n{}", "x".repeat(300), "leaf");
        let s = split(&a.worst).unwrap();
        assert!(s.starts_with("12.3 ms throttled by the CPU limit of cgroup …x") && s.ends_with(r"x\nleaf"), "{s}");
        assert!(s.chars().count() < 200 && !s.contains('\n'), "{s}");
        assert!(!summary(&a).contains("behind"), "nothing held it: {}", summary(&a));
        // The rest behind only the idle task.
        a.worst.throttled_ns = MS;
        a.worst.culprits_truncated = false;
        a.worst.culprits =
            vec![Culprit { tid: 0, pid: 0, comm: "swapper/1".into(), ran_ns: 11 * MS, ..Culprit::default() }];
        assert!(split(&a.worst).unwrap().ends_with(", 11.3 ms with the CPU idle"), "{:?}", split(&a.worst));
    }

    #[test]
    fn where_the_kernel_keeps_no_throttle_clock_the_part_is_cause_unknown() {
        let mut a = alert();
        // `throttle_unknown`: a throttle overlapped 10 ms of the wait's 12.3 ms, for how long unknown.
        a.worst.unknown_ns = 10 * MS;
        let s = split(&a.worst).unwrap();
        assert_eq!(
            s,
            "10.0 ms cause unknown on this kernel (a CPU-limit throttle overlapped it), 2.3 ms behind hog (tid 99)"
        );
        assert!(!s.contains("throttled"), "{s}");
        assert!(summary(&a).contains(": 10.0 ms cause unknown on this kernel"), "{}", summary(&a));
        let d = description(&a);
        assert!(d.contains("\nOf that delay: 10.0 ms cause unknown on this kernel (a CPU-limit throttle"), "{d}");
        // All of it: nothing behind who ran.
        a.worst.unknown_ns = a.worst.delay_ns;
        assert_eq!(
            split(&a.worst).unwrap(),
            "12.3 ms cause unknown on this kernel (a CPU-limit throttle overlapped it)"
        );
    }
}

#[cfg(test)]
mod pod_tests {
    use super::{tests::alert, *};

    fn labels(ns: &str, pod: &str, container: &str) -> ContainerLabels {
        ContainerLabels {
            namespace: ns.into(),
            pod: pod.into(),
            container: container.into(),
            container_id: String::new(),
        }
    }

    #[test]
    fn the_victims_and_the_culprits_pods_are_named() {
        let mut a = alert();
        a.worst.names = labels("web", "front-1\n", "app");
        a.worst.culprits[0].cgroup = "/kubepods/pod1/x".into();
        a.worst.culprits[0].names = labels("batch", "hog-7", "hog");
        a.worst.culprits[1].cgroup = "/".into();
        a.worst.culprits.push(Culprit {
            tid: 5,
            pid: 5,
            comm: "hog2".into(),
            ran_ns: 1_000_000,
            cgroup: "/kubepods/pod1/y".into(),
            names: labels("batch", "hog-7", "side"),
        });
        a.worst.culprits.push(Culprit {
            tid: 6,
            pid: 6,
            comm: "gone".into(),
            ran_ns: 10,
            cgroup: "unknown".into(),
            ..Culprit::default()
        });
        assert_eq!(victim(&a.worst), r"myapp (tid 1234, pid 1200) in pod web/front-1\n container app");
        assert_eq!(culprit_pods(&a.worst), "pod batch/hog-7 12.8 ms; cgroup / 200.0 µs; cgroup unknown 10 ns");
        assert!(
            culprits(&a.worst)
                .starts_with("hog:99 ran 11.8 ms (pod batch/hog-7); kworker/1:0:23 ran 200.0 µs (cgroup /)")
        );
        assert!(summary(&a).contains(r"myapp (tid 1234) in pod web/front-1\n container app waited"), "{}", summary(&a));
        assert!(summary(&a).contains("hog (tid 99) 11.8 ms in pod batch/hog-7"), "{}", summary(&a));
        assert!(description(&a).contains("  hog (tid 99, pid 99) 11.8 ms, pod batch/hog-7\n"), "{}", description(&a));
        // Without names (record, a host without containers) nothing changes.
        assert_eq!(culprit_pods(&alert().worst), "none recorded");
        assert_eq!(victim(&alert().worst), "myapp (tid 1234, pid 1200)");
    }
}
