//! Each drain's wait scan (and `Names`) → what the exposition shows of waits in progress (the
//! longest per reason, per CPU and per exported cgroup, how many wait longer than each alert
//! threshold, the longest ones named) and the alert engine's in-progress transitions.
use std::{collections::HashMap, sync::Arc};

use latency_common::{
    Reason,
    maps::{FINALS_KEPT, FinalRing, RunRing},
};

use super::{Names, Pipeline};
use crate::{
    alert::engine::{Ran, Transition},
    model::waits::{LISTED, NamedWait, Waits, WaitsNow},
};

impl Pipeline {
    /// This drain's scan: `rings` are the CPUs' run rings (index = CPU; empty when attribution is
    /// off), read after the scan. Returns the alerts that fired or changed; `now_unix_ns` is when
    /// the scan ran.
    pub fn waits(
        &mut self,
        waits: &Waits,
        rings: &[RunRing],
        now_unix_ns: u64,
        names: &mut impl Names,
    ) -> Vec<Transition> {
        let rules = &self.settings.rules;
        let mut now = WaitsNow::default();
        if let Some(prev) = &self.exposition.waits {
            (now.scans, now.scan_errors, now.scan_seconds) = (prev.scans, prev.scan_errors, prev.scan_seconds);
        }
        for w in &waits.waiting {
            let o = &mut now.oldest_ns[w.reason as usize];
            *o = (*o).max(w.waited_ns);
        }
        let mut thresholds: Vec<u64> = rules
            .per_cgroup_ns
            .iter()
            .map(|(_, t)| *t)
            .chain(rules.per_reason_ns.iter().flatten().copied())
            .chain(rules.max_delay_ns)
            .collect();
        thresholds.sort_unstable();
        thresholds.dedup();
        now.over = std::iter::once(0).chain(thresholds).map(|t| (t, waits.over(t))).collect();
        now.per_cpu = waits.oldest_per_cpu().iter().map(|w| (w.cpu, w.waited_ns, w.tid)).collect();

        // Paths once per cgroup id; the exported series' labels get their longest wait.
        let mut paths: HashMap<u64, String> = HashMap::new();
        let mut path = |names: &mut dyn FnMut(u64) -> Option<String>, id: u64| -> String {
            if id == 0 {
                return "unknown".to_owned();
            }
            paths.entry(id).or_insert_with(|| names(id).unwrap_or_else(|| format!("id:{id}"))).clone()
        };
        if self.settings.per_cgroup {
            let exported: Vec<&str> = self.exposition.cgroups.iter().map(|(l, _)| l.as_str()).collect();
            let mut longest: HashMap<&str, u64> = exported.iter().map(|l| (*l, 0)).collect();
            for w in &waits.waiting {
                let label = names.label(w.cgroup_id);
                let key = label.as_deref().and_then(|l| exported.iter().find(|e| **e == l).copied()).unwrap_or("other");
                if let Some(v) = longest.get_mut(key) {
                    *v = (*v).max(w.waited_ns);
                }
            }
            now.cgroups = exported.iter().map(|l| (l.to_string(), longest[l])).collect();
        }
        for w in waits.waiting.iter().take(LISTED) {
            let cgroup = path(&mut |id| names.path(id), w.cgroup_id);
            let labels = names.containers(&cgroup);
            now.longest.push(NamedWait {
                wait: w.clone(),
                cgroup,
                names: labels,
                holder: waits.holder(w.cpu).cloned(),
            });
        }

        // Alerts: every wait over its threshold, attributed like a finished delay.
        let wall = self.meta.wall;
        let mut breaches = Vec::new();
        if let Some(lowest) = rules.lowest() {
            for w in waits.waiting.iter().take_while(|w| w.waited_ns > lowest) {
                let cgroup = path(&mut |id| names.path(id), w.cgroup_id);
                if rules.threshold(w.reason, &cgroup).is_none_or(|t| w.waited_ns <= t) {
                    continue;
                }
                let ring = rings.get(w.cpu as usize);
                let mut a = waits.attribution(w, ring, wall, |_| Some(cgroup.clone()));
                let victim = names.containers(&a.cgroup);
                crate::model::attribution::name(&mut a, victim, |pid| names.process(pid));
                breaches.push(a);
            }
        }
        // Only where windows are attributed: a window's `evaluate` resolves what this fires.
        let transitions = if self.settings.attribute {
            self.alerts.evaluate_waiting(rules, &breaches, now_unix_ns)
        } else {
            Vec::new()
        };
        self.apply_transitions(&transitions);
        self.exposition.waits = Some(Arc::new(now));
        transitions
    }

    /// Whether an alert waits for a task's final delay: the caller then reads the kernel's rings
    /// of final delays and hands them to [`finals`](Self::finals).
    pub fn awaiting_final(&self) -> bool {
        self.alerts.awaiting_final()
    }

    /// The CPUs' rings of delays at or above the attribution threshold (index = CPU): an alert
    /// fired on a wait in progress takes its task's final delay from them as soon as it ran.
    pub fn finals(&mut self, rings: &[FinalRing]) -> Vec<Transition> {
        let wall = self.meta.wall;
        let ran: Vec<Ran> = rings
            .iter()
            .flat_map(|ring| ring.finals.iter().take(ring.head.min(FINALS_KEPT as u64) as usize))
            .filter_map(|f| {
                let reason = Reason::ALL.into_iter().find(|r| *r as u32 == f.reason)?;
                Some(Ran {
                    reason,
                    tid: f.tid,
                    delay_ns: f.delay_ns,
                    end_ns: f.end_ns,
                    end_unix_ns: wall.unix_ns(f.end_ns),
                })
            })
            .collect();
        let transitions = self.alerts.ran(&ran);
        self.apply_transitions(&transitions);
        transitions
    }

    /// A scan ran (it took `seconds`) or failed: counted for `runqlat_wait_scans_total`.
    pub fn scan_done(&mut self, seconds: f64, failed: bool) {
        let e = &mut self.exposition;
        let w = Arc::make_mut(e.waits.get_or_insert_with(Default::default));
        w.scans += 1;
        w.scan_seconds += seconds;
        if failed {
            w.scan_errors += 1;
        }
    }
}
