//! A closed window's incidents (and `Names`) → its attributions, named and largest first, the
//! alert engine's transitions; any path's transitions → the exposition's alert fields: fired per
//! reason, active, suppressed, and the last alert (replaced when one fires, its worst delay grown
//! while it fires — a wait in progress included — replaced when updated, marked when it resolves).
use std::{cmp::Reverse, sync::Arc};

use super::{Names, Pipeline};
use crate::{
    alert::engine::{Alert, Transition},
    model::{
        attribution::{self, Attribution, attribution},
        snapshot::Incidents,
        timeline::LastAlert,
        window::Window,
    },
};

impl Pipeline {
    /// The window's attributed incidents → its report and the alert engine.
    pub(super) fn attribute(
        &mut self,
        window: &mut Window,
        incidents: &Incidents,
        names: &mut impl Names,
    ) -> Vec<Transition> {
        let wall = self.meta.wall;
        let mut attributed: Vec<Attribution> = incidents
            .iter()
            .map(|(reason, cpu, inc)| attribution(*reason, *cpu, inc, wall, |id| names.path(id)))
            .collect();
        for a in &mut attributed {
            let victim = names.containers(&a.cgroup);
            attribution::name(a, victim, |pid| names.process(pid));
        }
        attributed.sort_by_key(|a| Reverse(a.delay_ns));
        let end_unix_ns = wall.unix_ns(window.report.end_ns);
        let transitions = self.alerts.evaluate(&self.settings.rules, &attributed, end_unix_ns);
        self.apply_transitions(&transitions);
        window.report.attributed = attributed;
        transitions
    }

    /// The alert engine's `transitions` (from a window or a drain's waits in progress; none is
    /// fine) → the exposition: fired per reason, active, suppressed, the last alert.
    pub fn apply_transitions(&mut self, transitions: &[Transition]) {
        let e = &mut self.exposition;
        for t in transitions {
            if let Transition::Fired(a) = t {
                e.alerts_total[a.key.reason as usize] += 1;
            }
            note_last_alert(&mut e.last_alert, t);
        }
        e.alerts_active = self.alerts.active().iter().map(|a| (a.key.reason, a.key.cgroup.clone())).collect();
        // While the last alert fires, its worst delay may grow (a wait in progress, every drain).
        let firing = e.last_alert.as_ref().filter(|l| l.resolved_unix_ns.is_none());
        if let Some(last) = firing
            && let Some(a) = self.alerts.active().into_iter().find(|a| same_alert(a, last))
            && a.worst != last.worst
        {
            e.last_alert = Some(Arc::new(last_alert(a)));
        }
        e.alerts_suppressed = self.alerts.suppressed;
    }
}

/// The last fired alert for the live view: replaced when one fires, updated (its wait's final
/// delay) or marked when it resolves.
fn note_last_alert(last: &mut Option<Arc<LastAlert>>, t: &Transition) {
    match t {
        Transition::Fired(a) => *last = Some(Arc::new(last_alert(a))),
        Transition::Updated(a) | Transition::Resolved(a) | Transition::Grown(a) => {
            if last.as_deref().is_some_and(|l| same_alert(a, l)) {
                *last = Some(Arc::new(last_alert(a)));
            }
        }
    }
}

fn last_alert(a: &Alert) -> LastAlert {
    LastAlert {
        threshold_ns: a.threshold_ns,
        fired_unix_ns: a.since_unix_ns,
        resolved_unix_ns: a.resolved_unix_ns,
        worst: a.worst.clone(),
    }
}

/// The same alert: its key (reason and cgroup of the victim) and when it fired.
fn same_alert(a: &Alert, last: &LastAlert) -> bool {
    a.since_unix_ns == last.fired_unix_ns && a.key.reason == last.worst.reason && a.key.cgroup == last.worst.cgroup
}
