//! Alert rules + each drain's waits in progress (tasks runnable and not yet run, as attributions
//! marked `waiting`, their delay the wait so far) → the `Transition`s they cause: fired, never
//! resolved (a window does that once no wait is left over the threshold).
use super::{Alert, Engine, Rules, Transition, key_of, worst_per_key};
use crate::model::attribution::Attribution;

impl Engine {
    /// Feed one drain's waits in progress (`waiting`: each `waiting == true`, `delay_ns` its age
    /// so far; any others are ignored) and the Unix time of the drain. A key (reason, cgroup) with
    /// a wait over its threshold at `rules.for_windows` consecutive drains fires — drains, not
    /// windows: a wait in progress is continuous evidence, and counting whole windows would delay
    /// the page by up to a window. Cooldown applies as in [`evaluate`](Self::evaluate); a streak of
    /// drains that would fire inside it counts once in `suppressed`. A firing key's `worst` is
    /// replaced by a longer wait in progress (the alert grows while the task waits) without a
    /// transition; [`Transition::Updated`] follows from `evaluate` when that wait's final delay
    /// arrives. While a key has a wait over its threshold at the latest drain no window resolves it.
    pub fn evaluate_waiting(&mut self, rules: &Rules, waiting: &[Attribution], now_unix_ns: u64) -> Vec<Transition> {
        let longest = worst_per_key(rules, waiting.iter().filter(|a| a.waiting));
        let need = rules.for_windows.max(1);
        let mut out = Vec::new();
        for (key, (a, threshold)) in &longest {
            let s = self.states.entry(key.clone()).or_default();
            s.drains_over = s.drains_over.saturating_add(1);
            s.under = 0;
            match &mut s.firing {
                Some(alert) if a.delay_ns > alert.worst.delay_ns => {
                    alert.worst = (*a).clone();
                    alert.ran_after_waiting = false;
                    out.push(Transition::Grown(alert.clone()));
                }
                Some(_) => {}
                None if s.drains_over >= need => {
                    if now_unix_ns < s.quiet_until_unix_ns {
                        // Once per streak: one long wait is one breach, not one per drain.
                        if s.drains_over == need {
                            self.suppressed += 1;
                        }
                        continue;
                    }
                    let alert = Alert::fired(key, *threshold, now_unix_ns, a);
                    s.firing = Some(alert.clone());
                    out.push(Transition::Fired(alert));
                }
                None => {}
            }
        }
        for (key, s) in self.states.iter_mut() {
            if !longest.contains_key(key) {
                s.drains_over = 0;
            }
        }
        self.forget(now_unix_ns);
        out.sort_by(|a, b| key_of(a).cmp(key_of(b)));
        out
    }
}

/// A delay the kernel measured when its task finally ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ran {
    pub reason: latency_common::Reason,
    pub tid: u32,
    pub delay_ns: u64,
    /// When it ended: the program's clock and Unix ns.
    pub end_ns: u64,
    pub end_unix_ns: u64,
}

impl Engine {
    /// Whether a firing alert still carries a wait in progress: its final delay is wanted.
    pub fn awaiting_final(&self) -> bool {
        self.states.values().any(|s| s.firing.as_ref().is_some_and(|a| a.worst.waiting))
    }

    /// Final delays as the kernel recorded them when their tasks ran (its per-CPU ring of delays
    /// at or above the attribution threshold, read every drain while
    /// [`awaiting_final`](Self::awaiting_final)): a firing alert whose worst is a wait in progress
    /// of the same task and reason, at least as long as seen, takes that final delay and is
    /// [`Transition::Updated`] — within a drain of the task running, whatever else was the
    /// window's worst on that CPU.
    pub fn ran(&mut self, finals: &[Ran]) -> Vec<Transition> {
        let mut out = Vec::new();
        for s in self.states.values_mut() {
            let Some(alert) = s.firing.as_mut().filter(|a| a.worst.waiting) else { continue };
            let w = &alert.worst;
            let found = finals
                .iter()
                .filter(|r| r.reason == w.reason && r.tid == w.victim_tid && r.delay_ns >= w.delay_ns)
                .max_by_key(|r| r.delay_ns);
            if let Some(r) = found {
                let w = &mut alert.worst;
                w.delay_ns = r.delay_ns;
                w.end_ns = r.end_ns;
                w.end_unix_ns = r.end_unix_ns;
                w.waiting = false;
                alert.ran_after_waiting = true;
                out.push(Transition::Updated(alert.clone()));
            }
        }
        out.sort_by(|a, b| key_of(a).cmp(key_of(b)));
        out
    }
}

#[cfg(test)]
mod tests {
    use latency_common::Reason::{self, Preempt, Wakeup};

    use super::*;
    use crate::alert::engine::tests::{MS, S, incident, rules, short};

    /// One step a second: a drain's waits in progress, or a window's finished delays. Each is
    /// (reason, cgroup, victim tid, delay or age so far).
    enum Step<'a> {
        Drain(&'a [(Reason, &'a str, u32, u64)]),
        Window(&'a [(Reason, &'a str, u32, u64)]),
    }
    use Step::{Drain, Window};

    fn delay(waiting: bool, &(reason, cgroup, tid, ns): &(Reason, &str, u32, u64)) -> Attribution {
        Attribution { victim_tid: tid, waiting, ..incident(reason, cgroup, ns) }
    }

    /// Runs the steps; per step, what changed ("+" fired, "~" updated, "-" resolved; "" nothing).
    fn run(e: &mut Engine, rules: &Rules, steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .enumerate()
            .map(|(i, step)| {
                let now = (i as u64 + 1) * S;
                let t = match step {
                    Drain(w) => e.evaluate_waiting(rules, &w.iter().map(|d| delay(true, d)).collect::<Vec<_>>(), now),
                    Window(w) => e.evaluate(rules, &w.iter().map(|d| delay(false, d)).collect::<Vec<_>>(), now),
                };
                t.iter().map(short).collect::<Vec<_>>().join(" ")
            })
            .collect()
    }

    /// (delay, still waiting, victim tid) of the one firing alert's worst.
    fn worst(e: &Engine) -> (u64, bool, u32) {
        let a = &e.active()[0].worst;
        (a.delay_ns, a.waiting, a.victim_tid)
    }

    #[test]
    fn fires_after_for_consecutive_drains_over_the_threshold() {
        let r = Rules { for_windows: 3, ..rules() };
        let mut e = Engine::default();
        let out = run(
            &mut e,
            &r,
            &[
                Drain(&[(Preempt, "/", 1, 20 * MS)]),
                Drain(&[(Preempt, "/", 1, 30 * MS)]),
                // The task ran: the streak restarts.
                Drain(&[]),
                Drain(&[(Preempt, "/", 2, 20 * MS)]),
                // Equal to the threshold is not over it.
                Drain(&[(Preempt, "/", 2, 10 * MS)]),
                Drain(&[(Preempt, "/", 3, 11 * MS)]),
                Drain(&[(Preempt, "/", 3, 12 * MS), (Wakeup, "/", 4, 50 * MS)]),
                Drain(&[(Preempt, "/", 3, 13 * MS), (Wakeup, "/", 4, 60 * MS)]),
            ],
        );
        assert_eq!(out, vec!["", "", "", "", "", "", "", "+preempt/"]);
        let a = e.active()[0];
        assert_eq!((a.since_unix_ns, a.threshold_ns), (8 * S, 10 * MS), "at the drain");
        assert_eq!(worst(&e), (13 * MS, true, 3));
        // for_windows 0 means 1, as for windows.
        let out =
            run(&mut Engine::default(), &Rules { for_windows: 0, ..rules() }, &[Drain(&[(Wakeup, "/", 4, 11 * MS)])]);
        assert_eq!(out, vec!["+wakeup/"]);
    }

    #[test]
    fn grows_while_waiting_then_updates_once_with_the_final_delay() {
        let mut e = Engine::default();
        let r = rules();
        let out = run(&mut e, &r, &[Drain(&[(Preempt, "/", 7, 20 * MS)]), Drain(&[(Preempt, "/", 7, 30 * MS)])]);
        assert_eq!(out, vec!["+preempt/", "^preempt/"], "growing is only the quiet Grown");
        assert_eq!(worst(&e), (30 * MS, true, 7));

        // The task ran after 35 ms: the window carries that delay; the alert has it now.
        let out = run(&mut e, &r, &[Window(&[(Preempt, "/", 7, 35 * MS)])]);
        assert_eq!(out, vec!["~preempt/"]);
        assert_eq!(worst(&e), (35 * MS, false, 7));
        // A later finished delay of the same task is ordinary growth.
        assert_eq!(run(&mut e, &r, &[Window(&[(Preempt, "/", 7, 36 * MS)])]), vec![""]);
        assert_eq!(e.active()[0].since_unix_ns, S, "still the same alert");
    }

    /// For an alert whose worst is tid 7 waiting 30 ms so far, a window's finished delays →
    /// the update's worst (delay, tid), if any, and the alert's worst after.
    #[test]
    fn only_that_waits_final_delay_updates() {
        /// Finished delays; the update's (delay, tid); the worst's (delay, waiting, tid) after.
        type Case<'a> = (&'a [(Reason, &'a str, u32, u64)], Option<(u64, u32)>, (u64, bool, u32));
        let cases: &[Case] = &[
            // Equal to the last age seen: the same wait, ended just after the scan.
            (&[(Preempt, "/", 7, 30 * MS)], Some((30 * MS, 7)), (30 * MS, false, 7)),
            // Shorter: a later wait of the same task, not this one.
            (&[(Preempt, "/", 7, 29 * MS)], None, (30 * MS, true, 7)),
            // Another task's longer delay: growth, not an update.
            (&[(Preempt, "/", 8, 40 * MS)], None, (40 * MS, false, 8)),
            // Both: the update tells of tid 7; the alert then grows to the longest.
            (&[(Preempt, "/", 7, 31 * MS), (Preempt, "/", 8, 40 * MS)], Some((31 * MS, 7)), (40 * MS, false, 8)),
            (&[(Preempt, "/", 7, 41 * MS), (Preempt, "/", 8, 40 * MS)], Some((41 * MS, 7)), (41 * MS, false, 7)),
            // The same tid in another key is another task's wait.
            (&[(Wakeup, "/", 7, 35 * MS)], None, (30 * MS, true, 7)),
        ];
        for (finished, update, after) in cases {
            let mut e = Engine::default();
            let r = rules();
            run(&mut e, &r, &[Drain(&[(Preempt, "/", 7, 30 * MS)])]);
            let incidents: Vec<Attribution> = finished.iter().map(|d| delay(false, d)).collect();
            let t = e.evaluate(&r, &incidents, 2 * S);
            let updated: Vec<&Alert> =
                t.iter().filter_map(|t| if let Transition::Updated(a) = t { Some(a) } else { None }).collect();
            let got = updated.first().map(|a| (a.worst.delay_ns, a.worst.victim_tid));
            assert_eq!(got, *update, "{finished:?}");
            assert!(updated.iter().all(|a| a.ran_after_waiting && !a.worst.waiting), "{finished:?}");
            let a = e.active().into_iter().find(|a| a.key.reason == Preempt).unwrap();
            assert_eq!((a.worst.delay_ns, a.worst.waiting, a.worst.victim_tid), *after, "{finished:?}");
            assert_eq!(a.ran_after_waiting, update.is_some_and(|u| u.1 == after.2 && u.0 == after.0), "{finished:?}");
        }
    }

    #[test]
    fn a_window_does_not_resolve_a_key_with_a_wait_in_progress() {
        let mut e = Engine::default();
        let r = Rules { resolve_after: 1, ..rules() };
        let waits: &[(Reason, &str, u32, u64)] = &[(Preempt, "/", 7, 20 * MS)];
        let out = run(
            &mut e,
            &r,
            &[
                Drain(waits),
                // The window has no finished delay over the threshold, but the task still waits.
                Window(&[]),
                Drain(waits),
                Window(&[]),
                // It ran (its delay lost, say): the next clean window resolves.
                Drain(&[]),
                Window(&[]),
            ],
        );
        assert_eq!(out, vec!["+preempt/", "", "", "", "", "-preempt/"]);
    }

    #[test]
    fn a_window_keeps_the_streak_of_a_key_not_yet_firing() {
        let r = Rules { for_windows: 3, ..rules() };
        let waits: &[(Reason, &str, u32, u64)] = &[(Wakeup, "/a", 7, 20 * MS)];
        let out = run(&mut Engine::default(), &r, &[Drain(waits), Window(&[]), Drain(waits), Drain(waits)]);
        assert_eq!(out, vec!["", "", "", "+wakeup/a"]);
    }

    #[test]
    fn a_wait_in_progress_keeps_a_window_fired_alert_and_updates_it_when_it_ends() {
        let mut e = Engine::default();
        let r = Rules { resolve_after: 1, ..rules() };
        let out = run(
            &mut e,
            &r,
            &[
                Window(&[(Preempt, "/", 1, 20 * MS)]),
                Drain(&[(Preempt, "/", 2, 50 * MS)]),
                Window(&[]),
                Window(&[(Preempt, "/", 2, 60 * MS)]),
            ],
        );
        assert_eq!(out, vec!["+preempt/", "^preempt/", "", "~preempt/"]);
        assert_eq!(worst(&e), (60 * MS, false, 2));
        // A shorter wait in progress leaves a longer final delay alone.
        run(&mut e, &r, &[Drain(&[(Preempt, "/", 3, 40 * MS)])]);
        assert_eq!(worst(&e), (60 * MS, false, 2));
    }

    #[test]
    fn cooldown_suppresses_a_wait_once_per_streak() {
        let r = Rules { cooldown_ns: 10 * S, resolve_after: 1, ..rules() };
        let mut e = Engine::default();
        let w: &[(Reason, &str, u32, u64)] = &[(Preempt, "/", 7, 20 * MS)];
        let out = run(
            &mut e,
            &r,
            &[
                Drain(w),    // 1 s: fires
                Drain(&[]),  // 2 s
                Window(&[]), // 3 s: resolves, quiet until 13 s
                Drain(w),    // 4 s: suppressed
                Drain(w),
                Drain(w),
                Drain(&[]), // 7 s: that wait ended
                Drain(w),   // 8 s: another, suppressed
                Drain(w),
                Drain(w),
                Drain(w),
                Drain(w),
                Drain(w), // 13 s: the cooldown is over
            ],
        );
        let mut want = [""; 13];
        (want[0], want[2], want[12]) = ("+preempt/", "-preempt/", "+preempt/");
        assert_eq!(out, want);
        assert_eq!(e.suppressed, 2);
    }

    #[test]
    fn each_path_ignores_the_others_delays() {
        let mut e = Engine::default();
        let r = rules();
        let finished = [delay(false, &(Preempt, "/", 7, 50 * MS))];
        assert!(e.evaluate_waiting(&r, &finished, S).is_empty());
        let waiting = [delay(true, &(Preempt, "/", 7, 50 * MS))];
        assert!(e.evaluate(&r, &waiting, 2 * S).is_empty());
        assert!(e.active().is_empty());
    }
}
