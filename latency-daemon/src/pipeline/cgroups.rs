//! A closed window's per-cgroup deltas (and `Names`) → its top cgroups for the timeline, its
//! report's cgroups, the exported series (top N and "other"; removed cgroups' series dropped and
//! their containers forgotten), and the container labels of what is exported and alerting.
use std::collections::{HashMap, HashSet};

use super::{Names, Pipeline};
use crate::model::{
    report::cgroup_reports,
    timeline::{self, CgroupSummary},
    window::Window,
};

impl Pipeline {
    /// Folds the window's cgroups into the exported series and names them in its report; returns
    /// the window's top cgroups for the live view. Cgroups removed during the window leave the
    /// series here (their last deltas go to "other") and their containers' names are forgotten.
    pub(super) fn fold_cgroups(&mut self, window: &mut Window, names: &mut impl Names) -> Vec<CgroupSummary> {
        let mut top = timeline::top_cgroups(&window.cgroups, |id| names.path(id), timeline::TOP_CGROUPS);
        for c in &mut top {
            c.names = names.containers(&c.cgroup);
        }
        // Each id's path once, then its container: the two lookups cannot borrow `names` together.
        let paths: HashMap<u64, String> =
            window.cgroups.iter().filter_map(|(id, _)| Some((*id, names.path(*id)?))).collect();
        window.report.cgroups =
            cgroup_reports(&window.cgroups, |id| paths.get(&id).cloned(), |path| names.containers(path));
        // Series are keyed by the bounded label, container names by the path.
        let gone = std::mem::take(&mut self.gone);
        // Thousands a window under fast churn: looked up once per window cgroup below.
        let gone_set: HashSet<u64> = gone.iter().copied().collect();
        let gone_labels: Vec<String> = gone.iter().filter_map(|id| names.label(*id)).collect();
        let gone_paths: Vec<String> = gone.iter().filter_map(|id| names.path(*id)).collect();
        self.series.add_window(
            &window.cgroups,
            |id| if gone_set.contains(&id) { None } else { names.label(id) },
            self.settings.top_cgroups,
        );
        for label in &gone_labels {
            self.series.remove(label);
        }
        for path in &gone_paths {
            names.forget(path);
        }
        self.exposition.cgroups = self.series.exported().into_iter().map(|(l, h)| (l.to_string(), *h)).collect();
        top
    }

    /// Names the containers behind the exported series (at most N + 1 lookups a window, each
    /// cached by the host) and active alerts (named when they fired: a removed container's alert
    /// keeps its names without looking up, and re-filling, what was forgotten).
    pub(super) fn label_containers(&mut self, names: &mut impl Names) {
        let e = &mut self.exposition;
        e.containers = e
            .cgroups
            .iter()
            .filter_map(|(path, _)| {
                let labels = names.containers(path);
                (!labels.is_empty()).then(|| (path.clone(), labels))
            })
            .collect();
        for a in self.alerts.active() {
            if !a.worst.names.is_empty() {
                e.containers.entry(a.key.cgroup.clone()).or_insert_with(|| a.worst.names.clone());
            }
        }
    }
}
