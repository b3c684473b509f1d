//! Each drain's reading of the open window's incidents (the kernel's longest finished wait so far
//! per reason and CPU, what the window's close will judge) and `Names` → the ones new since the
//! last drain that are over their alert threshold and could fire when the window closes (their
//! alert neither firing nor in its cooldown): the capture trigger reads the CPUs' rings for them
//! at once, while the rings still hold them, rather than at the window's close.
use std::collections::HashMap;

use latency_common::Reason;

use super::{Names, Pipeline};
use crate::{
    alert::engine::AlertKey,
    model::{
        attribution::{Attribution, attribution},
        snapshot::Incidents,
    },
};

/// What the last drains saw of the open window's incidents: (end, victim) per reason and CPU.
#[derive(Debug, Default)]
pub(super) struct Seen {
    epoch: u64,
    incidents: HashMap<(Reason, u32), (u64, u32)>,
}

impl Pipeline {
    /// Whether windows are attributed (some threshold is set): only then do finished waits fire
    /// alerts.
    pub fn attributes(&self) -> bool {
        self.settings.attribute
    }

    /// The window the kernel writes now: the caller reads its incidents so far and hands them to
    /// [`finished`](Self::finished).
    pub fn open_epoch(&self) -> u64 {
        self.epoch
    }

    /// The open window `epoch`'s incidents as read at this drain (`now_unix_ns`) → those new since
    /// the last drain (a longer wait of the same reason on the same CPU, or the window's first) that
    /// are over their threshold and whose alert may fire at the window's close. Their victims'
    /// containers are named; their culprits are not (that needs /proc, and the close does it).
    pub fn finished(
        &mut self,
        epoch: u64,
        incidents: &Incidents,
        now_unix_ns: u64,
        names: &mut impl Names,
    ) -> Vec<Attribution> {
        if epoch != self.epoch {
            return Vec::new();
        }
        if self.seen.epoch != epoch {
            self.seen = Seen { epoch, incidents: HashMap::new() };
        }
        let rules = &self.settings.rules;
        let wall = self.meta.wall;
        let mut out = Vec::new();
        for (reason, cpu, inc) in incidents {
            let now = (inc.end_ns, inc.victim_tid);
            if inc.delay_ns == 0 || self.seen.incidents.insert((*reason, *cpu), now) == Some(now) {
                continue;
            }
            let mut a = attribution(*reason, *cpu, inc, wall, |id| names.path(id));
            let over = rules.threshold(a.reason, &a.cgroup).is_some_and(|t| a.delay_ns > t);
            let key = AlertKey { reason: a.reason, cgroup: a.cgroup.clone() };
            if over && self.alerts.may_fire(&key, now_unix_ns) {
                a.names = names.containers(&a.cgroup);
                out.push(a);
            }
        }
        out
    }
}
