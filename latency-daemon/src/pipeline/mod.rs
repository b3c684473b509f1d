//! Each drain's `Snapshot` — and at a window's close the kernel's maxima slot and incidents as read,
//! with `Names` for cgroups, containers and processes — in; the next `Exposition` and the alert
//! `Transition`s out. The run pipeline's rules: when a window closes, its report and late writes,
//! attribution, alerts and the last alert (`alerts`), the cgroup series with top N and "other",
//! removed cgroups forgotten, container labels (`cgroups`), each reason's worst wait as an exemplar
//! (`exemplars`), the timeline; at each drain, the open window's finished waits that may fire an
//! alert, for the capture trigger (`finished`). Pure: the kernel reads and the host lookups are
//! the caller's (`cmd::run`'s drainer, `benches/pipeline.rs`), so every rule is tested without root.
mod alerts;
mod cgroups;
mod exemplars;
mod finished;
#[cfg(test)]
mod tests;
mod waits;

use std::sync::Arc;

use latency_common::Reason;

use crate::{
    alert::engine::{Engine, Rules, Transition},
    model::{
        cgroup_series::CgroupSeries,
        container::ContainerLabels,
        exposition::Exposition,
        report::Meta,
        snapshot::{self, CpuMax, Incidents, Snapshot, WindowSlot},
        timeline::WindowSummary,
        window::Window,
    },
};

/// What the pipeline takes from the configuration (`cmd::run` builds it; a reload applies a new one).
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Drains per window: the window closes at every Nth.
    pub intervals_per_window: u32,
    /// Cgroups with a series of their own (N); the rest go to "other".
    pub top_cgroups: usize,
    pub rules: Rules,
    /// The kernel attributes delays (some threshold is set): each closing window's incidents are read.
    pub attribute: bool,
    /// Per-cgroup delays are on (the kernel fills per-cgroup slots and cgroups have names): the
    /// window's cgroups are folded into series. Fixed at start.
    pub per_cgroup: bool,
    pub window_seconds: f64,
    /// Classic bounds of `runqlat_delay_seconds` (native indices) and of the per-cgroup histogram.
    pub classic: Vec<i32>,
    pub cgroup_classic: Vec<u8>,
}

/// The lookups a window's rules need that read the host (the cgroup tree, /proc, the container
/// runtimes' state), answered by the caller: `cmd::run` from `host`'s caches, tests from tables.
pub trait Names {
    /// A cgroup id's path; None: unknown.
    fn path(&mut self, id: u64) -> Option<String>;
    /// A cgroup id's bounded label, the key of its series; None: unknown (a miss the host counts).
    fn label(&mut self, id: u64) -> Option<String>;
    /// Namespace, pod and container of a cgroup path (empty: not a container's).
    fn containers(&mut self, path: &str) -> ContainerLabels;
    /// A process's cgroup path and its container's names; None: the process is gone.
    fn process(&mut self, pid: u32) -> Option<(String, ContainerLabels)>;
    /// Drop what is known of a removed cgroup path's container.
    fn forget(&mut self, path: &str);
}

/// A window this drain closes: the caller points the kernel at epoch `next`, waits for programs
/// that read the old one to finish, then reads `epoch`'s maxima slot (and its incidents if
/// `incidents`) and hands them to [`Pipeline::slot_read`] and [`Pipeline::end`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closing {
    pub epoch: u64,
    pub next: u64,
    /// Read the window's incidents: attribution is on.
    pub incidents: bool,
}

/// What the kernel kept of a closed window: its maxima, and its incidents when they were read.
#[derive(Clone, Debug)]
pub struct Closed {
    pub maxima: Vec<(Reason, CpuMax)>,
    /// None: not read (attribution off); the window has no attribution and alerts stand still.
    pub incidents: Option<Incidents>,
}

/// The state between drains: the open window, the series, the alert engine, the exposition being built.
#[derive(Debug)]
pub struct Pipeline {
    settings: Settings,
    meta: Meta,
    /// The epoch the kernel writes now.
    epoch: u64,
    /// The snapshot the open window started at.
    window_start: Snapshot,
    drains_in_window: u32,
    /// What we last read from each maxima slot (by epoch parity), to spot late writes.
    last_read: [WindowSlot; 2],
    /// Cgroups removed since the window opened: at its close their series go (their last deltas
    /// into "other") and their container names are forgotten.
    gone: Vec<u64>,
    series: CgroupSeries,
    alerts: Engine,
    exposition: Exposition,
    /// The open window's incidents as the last drains saw them (`finished`).
    seen: finished::Seen,
}

impl Pipeline {
    /// The first window opens at `start` (for the daemon: maps all zero at attach), epoch 0;
    /// `exposition` is what was published so far, the settings' fields applied to it.
    pub fn new(settings: Settings, meta: Meta, start: Snapshot, exposition: Exposition) -> Pipeline {
        let mut pipeline = Pipeline {
            settings: settings.clone(),
            meta,
            epoch: 0,
            window_start: start,
            drains_in_window: 0,
            last_read: [Vec::new(), Vec::new()],
            gone: Vec::new(),
            series: CgroupSeries::default(),
            alerts: Engine::default(),
            exposition,
            seen: finished::Seen::default(),
        };
        pipeline.apply(settings);
        pipeline
    }

    /// A reload's settings, from the next drain on (an open window keeps its start).
    pub fn apply(&mut self, settings: Settings) {
        self.exposition.window_seconds = settings.window_seconds;
        self.exposition.classic = settings.classic.clone();
        self.exposition.cgroup_classic = settings.cgroup_classic.clone();
        self.settings = settings;
    }

    /// Cgroups removed (their kernel slots retired): their series go when the window closes.
    pub fn removed(&mut self, ids: impl IntoIterator<Item = u64>) {
        self.gone.extend(ids);
    }

    /// A drain begins (its snapshot read): whether it closes the window, and then which epoch.
    pub fn begin(&mut self) -> Option<Closing> {
        self.drains_in_window += 1;
        if self.drains_in_window < self.settings.intervals_per_window {
            return None;
        }
        let epoch = self.epoch;
        self.epoch += 1;
        Some(Closing { epoch, next: self.epoch, incidents: self.settings.attribute })
    }

    /// The closing window's maxima slot as read: records of the slot's previous window that arrived
    /// after we read it are counted as late writes; this window's records are its maxima.
    pub fn slot_read(&mut self, closing: &Closing, slot: WindowSlot) -> Closed {
        let parity = (closing.epoch & 1) as usize;
        self.exposition.late_window_writes += snapshot::late_writes(&self.last_read[parity], &slot, closing.epoch);
        let maxima = snapshot::maxima(&slot, closing.epoch);
        self.last_read[parity] = slot;
        Closed { maxima, incidents: None }
    }

    /// A drain ends with its snapshot `now`; `closed` when [`begin`](Self::begin) said it closes the
    /// window. Leaves the next exposition ready and returns the alerts that fired or resolved.
    pub fn end(&mut self, now: Snapshot, closed: Option<Closed>, names: &mut impl Names) -> Vec<Transition> {
        let mut transitions = Vec::new();
        if let Some(closed) = closed {
            let mut window = Window::close(&self.window_start, &now, &closed.maxima, &self.meta);
            self.exposition.exemplars = exemplars::worst(&window.report.window_max, names);
            if let Some(incidents) = &closed.incidents {
                transitions = self.attribute(&mut window, incidents, names);
            }
            let top = if self.settings.per_cgroup { self.fold_cgroups(&mut window, names) } else { Vec::new() };
            self.label_containers(names);
            Arc::make_mut(&mut self.exposition.timeline).push(WindowSummary::of_report(&window.report, true, top));
            self.exposition.window = Some(Arc::new(window));
            self.window_start = now.clone();
            self.drains_in_window = 0;
        }
        self.exposition.snapshot = Some(now);
        transitions
    }

    /// What a scrape shows after the last drain.
    pub fn exposition(&self) -> &Exposition {
        &self.exposition
    }

    /// For the caller's own counters (drains, errors, the host's lookup and retirement counts).
    pub fn exposition_mut(&mut self) -> &mut Exposition {
        &mut self.exposition
    }
}
