//! Alert rules + each closed window's attributed incidents, and each drain's waits in progress
//! (`waiting`) → `Transition`s (fired, updated, resolved). Pure: no clock reads, no I/O, so the
//! hysteresis and cooldown are tested as tables. The sinks that deliver transitions are
//! `alert::notify`'s.
mod waiting;

pub use waiting::Ran;

use std::collections::HashMap;

use latency_common::Reason;
use serde::Serialize;

use crate::model::{attribution::Attribution, ser_reason};

/// An alert's identity: one per reason and cgroup of the victim.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct AlertKey {
    #[serde(serialize_with = "ser_reason")]
    pub reason: Reason,
    pub cgroup: String,
}

/// By reason name, then cgroup: the order alerts are listed in (metrics, Alertmanager payloads).
impl Ord for AlertKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.reason.name(), &self.cgroup).cmp(&(other.reason.name(), &other.cgroup))
    }
}

impl PartialOrd for AlertKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A firing alert, as sinks see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Alert {
    pub key: AlertKey,
    /// The threshold it crossed.
    pub threshold_ns: u64,
    /// Unix ns of the window end (or, fired by a wait in progress, of the drain) at which it fired.
    pub since_unix_ns: u64,
    /// The worst delay seen while firing: a wait still in progress (`worst.waiting`) while that is
    /// the longest, replaced by its final delay once the task has run.
    pub worst: Attribution,
    /// Unix ns of the window end at which it resolved.
    pub resolved_unix_ns: Option<u64>,
    /// `worst` is the final delay of a wait this alert carried while it was in progress: the task
    /// finally ran (see [`Transition::Updated`]). Left out of JSON when false.
    #[serde(skip_serializing_if = "is_false")]
    pub ran_after_waiting: bool,
    /// Where the capture of the CPUs' last scheduler events taken when it fired is served
    /// (`/api/v1/captures/…`), with the capture recorder on. Left out of JSON when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Alert {
    /// An alert firing now (at `since_unix_ns`) for `key`, its worst delay `worst`.
    fn fired(key: &AlertKey, threshold_ns: u64, since_unix_ns: u64, worst: &Attribution) -> Alert {
        Alert {
            key: key.clone(),
            threshold_ns,
            since_unix_ns,
            worst: worst.clone(),
            resolved_unix_ns: None,
            ran_after_waiting: false,
            capture: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Transition {
    Fired(Alert),
    /// A firing alert whose worst was a wait in progress now carries that wait's final delay: the
    /// task finally ran. Not sent as a wait in progress grows, which would be once per drain.
    Updated(Alert),
    Resolved(Alert),
    /// A firing alert's wait in progress grew (at most once per drain and alert). Only the state
    /// Alertmanager re-sends (`--alert-resend`) takes it; no sink sends or logs it by itself.
    Grown(Alert),
}

/// Thresholds and timing.
#[derive(Clone, Debug, PartialEq)]
pub struct Rules {
    /// For any delay (None: off unless an override applies).
    pub max_delay_ns: Option<u64>,
    /// Per reason (index = `Reason as usize`); overrides `max_delay_ns`.
    pub per_reason_ns: [Option<u64>; Reason::COUNT],
    /// Per cgroup path; overrides the others for delays of tasks in that cgroup.
    pub per_cgroup_ns: Vec<(String, u64)>,
    /// Consecutive windows over the threshold before firing; for a wait in progress, consecutive
    /// drains (see [`Engine::evaluate_waiting`]).
    pub for_windows: u32,
    /// Consecutive windows under it before resolving.
    pub resolve_after: u32,
    /// After resolving, the same alert does not fire again for this long (Unix ns).
    pub cooldown_ns: u64,
}

impl Rules {
    /// The threshold for a delay of `reason` by a task in `cgroup`, if any.
    pub fn threshold(&self, reason: Reason, cgroup: &str) -> Option<u64> {
        if let Some((_, t)) = self.per_cgroup_ns.iter().find(|(path, _)| path == cgroup) {
            return Some(*t);
        }
        self.per_reason_ns[reason as usize].or(self.max_delay_ns)
    }

    /// The smallest threshold anywhere: the kernel attributes every delay at or above it.
    pub fn lowest(&self) -> Option<u64> {
        self.per_cgroup_ns
            .iter()
            .map(|(_, t)| *t)
            .chain(self.per_reason_ns.iter().flatten().copied())
            .chain(self.max_delay_ns)
            .min()
    }
}

#[derive(Clone, Debug, Default)]
struct KeyState {
    /// Consecutive windows with a finished delay over the threshold.
    over: u32,
    /// Consecutive clean windows: no finished delay and no wait in progress over the threshold.
    under: u32,
    /// Consecutive drains, up to the latest, with a wait in progress over the threshold. Nonzero:
    /// one is in progress now, so no window resolves the key.
    drains_over: u32,
    firing: Option<Alert>,
    quiet_until_unix_ns: u64,
}

/// Bound on remembered keys (one per reason × cgroup that breached recently).
const MAX_KEYS: usize = 4096;

#[derive(Debug, Default)]
pub struct Engine {
    states: HashMap<AlertKey, KeyState>,
    /// Breaches that would have fired but fell in a cooldown.
    pub suppressed: u64,
}

impl Engine {
    /// Feed one closed window: its attributed incidents (any CPU, any reason; finished delays —
    /// waits in progress are [`evaluate_waiting`](Self::evaluate_waiting)'s and ignored here) and
    /// the Unix time of its end. Returns what changed: fired, resolved, and updated where a firing
    /// alert's worst was a wait in progress and this window holds that wait's final delay (the
    /// same victim, at least as long). A key with a wait in progress over its threshold at the
    /// latest drain is not resolved, however quiet the window.
    pub fn evaluate(&mut self, rules: &Rules, incidents: &[Attribution], window_end_unix_ns: u64) -> Vec<Transition> {
        let worst = worst_per_key(rules, incidents.iter().filter(|a| !a.waiting));
        let mut out = Vec::new();
        for (key, (a, threshold)) in &worst {
            let s = self.states.entry(key.clone()).or_default();
            s.over += 1;
            s.under = 0;
            match &mut s.firing {
                Some(alert) => {
                    // The update tells of that wait; a longer delay of another task then grows
                    // the alert as any would, without a transition.
                    if let Some(ran) = final_delay(&alert.worst, key, incidents) {
                        alert.worst = ran.clone();
                        alert.ran_after_waiting = true;
                        out.push(Transition::Updated(alert.clone()));
                    }
                    if a.delay_ns > alert.worst.delay_ns {
                        alert.worst = (*a).clone();
                        alert.ran_after_waiting = false;
                    }
                }
                None if s.over >= rules.for_windows.max(1) => {
                    if window_end_unix_ns < s.quiet_until_unix_ns {
                        self.suppressed += 1;
                        continue;
                    }
                    let alert = Alert::fired(key, *threshold, window_end_unix_ns, a);
                    s.firing = Some(alert.clone());
                    out.push(Transition::Fired(alert));
                }
                None => {}
            }
        }
        for (key, s) in self.states.iter_mut() {
            if worst.contains_key(key) {
                continue;
            }
            if s.drains_over > 0 {
                // A wait over the threshold is in progress: not a clean window. Nor a window over
                // it (`over`): its delay is not known until the task runs.
                s.under = 0;
                continue;
            }
            s.under += 1;
            s.over = 0;
            if s.under >= rules.resolve_after.max(1)
                && let Some(mut alert) = s.firing.take()
            {
                alert.resolved_unix_ns = Some(window_end_unix_ns);
                s.quiet_until_unix_ns = window_end_unix_ns.saturating_add(rules.cooldown_ns);
                out.push(Transition::Resolved(alert));
            }
        }
        self.forget(window_end_unix_ns);
        out.sort_by(|a, b| key_of(a).cmp(key_of(b)));
        out
    }

    /// Forgets keys with nothing left to remember.
    fn forget(&mut self, now_unix_ns: u64) {
        self.states.retain(|_, s| {
            s.firing.is_some() || s.over > 0 || s.drains_over > 0 || now_unix_ns < s.quiet_until_unix_ns
        });
        if self.states.len() > MAX_KEYS {
            self.states.retain(|_, s| s.firing.is_some());
        }
    }

    /// Whether a delay over its threshold for `key` could fire an alert at a window's close after
    /// `now_unix_ns`: that alert is not firing and not in its cooldown.
    pub fn may_fire(&self, key: &AlertKey, now_unix_ns: u64) -> bool {
        self.states.get(key).is_none_or(|s| s.firing.is_none() && now_unix_ns >= s.quiet_until_unix_ns)
    }

    /// Alerts firing now, for `runqlat_alert_active` and re-sending.
    pub fn active(&self) -> Vec<&Alert> {
        let mut v: Vec<&Alert> = self.states.values().filter_map(|s| s.firing.as_ref()).collect();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }
}

fn key_of(t: &Transition) -> &AlertKey {
    match t {
        Transition::Fired(a) | Transition::Updated(a) | Transition::Resolved(a) | Transition::Grown(a) => &a.key,
    }
}

/// The longest delay over its threshold per key, with that threshold.
fn worst_per_key<'a>(
    rules: &Rules,
    delays: impl Iterator<Item = &'a Attribution>,
) -> HashMap<AlertKey, (&'a Attribution, u64)> {
    let mut worst: HashMap<AlertKey, (&Attribution, u64)> = HashMap::new();
    for a in delays {
        let Some(threshold) = rules.threshold(a.reason, &a.cgroup) else { continue };
        if a.delay_ns <= threshold {
            continue;
        }
        let key = AlertKey { reason: a.reason, cgroup: a.cgroup.clone() };
        let slot = worst.entry(key).or_insert((a, threshold));
        if a.delay_ns > slot.0.delay_ns {
            *slot = (a, threshold);
        }
    }
    worst
}

/// When `worst` is a wait in progress: the final delay of that wait among `incidents` — the same
/// key and victim, finished, at least as long as the wait was when last seen (a later, shorter
/// wait of the same task is another wait). The longest, if several.
fn final_delay<'a>(worst: &Attribution, key: &AlertKey, incidents: &'a [Attribution]) -> Option<&'a Attribution> {
    if !worst.waiting {
        return None;
    }
    incidents
        .iter()
        .filter(|i| !i.waiting && i.victim_tid == worst.victim_tid && i.delay_ns >= worst.delay_ns)
        .filter(|i| i.reason == key.reason && i.cgroup == key.cgroup)
        .max_by_key(|i| i.delay_ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Reason::{Preempt, Wakeup};

    pub(super) const MS: u64 = 1_000_000;
    pub(super) const S: u64 = 1_000_000_000;

    pub(super) fn rules() -> Rules {
        Rules {
            max_delay_ns: Some(10 * MS),
            per_reason_ns: [None, None],
            per_cgroup_ns: Vec::new(),
            for_windows: 1,
            resolve_after: 1,
            cooldown_ns: 0,
        }
    }

    pub(super) fn incident(reason: Reason, cgroup: &str, delay_ns: u64) -> Attribution {
        Attribution {
            reason,
            delay_ns,
            throttled_ns: 0,
            irq_steal_ns: 0,
            unknown_ns: 0,
            cpu: 0,
            victim_tid: 7,
            victim_pid: 7,
            victim_comm: "victim".into(),
            victim_prio: 120,
            cgroup: cgroup.into(),
            names: Default::default(),
            end_ns: 1,
            end_unix_ns: 1,
            queue_depth: Some(3),
            culprits: Vec::new(),
            culprits_truncated: false,
            waiting: false,
        }
    }

    /// "+preempt/a" fired, "~preempt/a" updated, "-preempt/a" resolved.
    pub(super) fn short(t: &Transition) -> String {
        let (sign, a) = match t {
            Transition::Fired(a) => ('+', a),
            Transition::Updated(a) => ('~', a),
            Transition::Resolved(a) => ('-', a),
            Transition::Grown(a) => ('^', a),
        };
        format!("{sign}{}{}", a.key.reason.name(), a.key.cgroup)
    }

    /// Runs windows (each a list of (reason, cgroup, delay)) and returns, per window, what
    /// fired (+) and resolved (-) as short strings.
    fn run(rules: &Rules, windows: &[&[(Reason, &str, u64)]]) -> Vec<Vec<String>> {
        let mut e = Engine::default();
        windows
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let incidents: Vec<Attribution> = w.iter().map(|(r, c, d)| incident(*r, c, *d)).collect();
                e.evaluate(rules, &incidents, (i as u64 + 1) * 15 * S).iter().map(short).collect()
            })
            .collect()
    }

    #[test]
    fn fires_over_the_threshold_and_resolves_when_clean() {
        let r = rules();
        let out = run(&r, &[&[(Preempt, "/a", 12 * MS)], &[(Preempt, "/a", 20 * MS)], &[], &[(Preempt, "/a", 9 * MS)]]);
        assert_eq!(out, vec![vec!["+preempt/a"], vec![], vec!["-preempt/a"], vec![]]);
    }

    #[test]
    fn equal_to_the_threshold_does_not_fire() {
        assert_eq!(run(&rules(), &[&[(Wakeup, "/", 10 * MS)]]), vec![Vec::<String>::new()]);
    }

    #[test]
    fn for_and_resolve_after_count_consecutive_windows() {
        let r = Rules { for_windows: 2, resolve_after: 2, ..rules() };
        let bad: &[(Reason, &str, u64)] = &[(Preempt, "/", 50 * MS)];
        let out = run(&r, &[bad, &[], bad, bad, &[], bad, &[], &[]]);
        // One bad window, then a clean one: the streak restarts. Two in a row fire; one clean
        // window between bad ones does not resolve; two clean ones do.
        assert_eq!(out, vec![vec![], vec![], vec![], vec!["+preempt/"], vec![], vec![], vec![], vec!["-preempt/"]]);
    }

    #[test]
    fn cooldown_keeps_a_flapping_alert_quiet() {
        let r = Rules { cooldown_ns: 40 * S, ..rules() };
        let bad: &[(Reason, &str, u64)] = &[(Preempt, "/", 50 * MS)];
        let mut e = Engine::default();
        let key = AlertKey { reason: Preempt, cgroup: "/".into() };
        let (mut log, mut may) = (Vec::new(), Vec::new());
        for (i, w) in [bad, &[], bad, &[], &[], bad].iter().enumerate() {
            let incidents: Vec<Attribution> = w.iter().map(|(r, c, d)| incident(*r, c, *d)).collect();
            let end = (i as u64 + 1) * 15 * S;
            log.push(e.evaluate(&r, &incidents, end).len());
            may.push(e.may_fire(&key, end + S));
        }
        // Fired at 15 s, resolved at 30 s; the breach at 45 s is inside the 40 s cooldown;
        // at 90 s it is past it and fires again. A delay could fire it neither while it fires
        // nor in its cooldown (until 70 s).
        assert_eq!(log, vec![1, 1, 0, 0, 0, 1]);
        assert_eq!(may, vec![false, false, false, false, true, false]);
        assert!(e.may_fire(&AlertKey { reason: Wakeup, cgroup: "/".into() }, 0), "another key");
        assert_eq!(e.suppressed, 1);
    }

    #[test]
    fn overrides_per_reason_and_per_cgroup() {
        let r = Rules {
            max_delay_ns: None,
            per_reason_ns: [Some(5 * MS), None],
            per_cgroup_ns: vec![("/batch".into(), 100 * MS)],
            ..rules()
        };
        assert_eq!(r.threshold(Wakeup, "/web"), Some(5 * MS));
        assert_eq!(r.threshold(Preempt, "/web"), None, "no global threshold: preempt is off");
        assert_eq!(r.threshold(Preempt, "/batch"), Some(100 * MS));
        assert_eq!(r.lowest(), Some(5 * MS));
        let out = run(&r, &[&[(Wakeup, "/web", 6 * MS), (Preempt, "/web", 900 * MS), (Wakeup, "/batch", 50 * MS)]]);
        assert_eq!(out, vec![vec!["+wakeup/web"]]);
    }

    #[test]
    fn the_worst_breach_of_a_key_is_kept_while_firing() {
        let mut e = Engine::default();
        let r = rules();
        e.evaluate(&r, &[incident(Preempt, "/", 12 * MS), incident(Preempt, "/", 30 * MS)], 15 * S);
        assert_eq!(e.active()[0].worst.delay_ns, 30 * MS);
        e.evaluate(&r, &[incident(Preempt, "/", 40 * MS)], 30 * S);
        assert_eq!(e.active()[0].worst.delay_ns, 40 * MS);
        assert_eq!(e.active()[0].since_unix_ns, 15 * S);
    }

    #[test]
    fn separate_keys_per_reason_and_cgroup() {
        let out = run(&rules(), &[&[(Preempt, "/a", 20 * MS), (Preempt, "/b", 20 * MS), (Wakeup, "/a", 20 * MS)]]);
        assert_eq!(out, vec![vec!["+preempt/a", "+preempt/b", "+wakeup/a"]]);
    }
}
