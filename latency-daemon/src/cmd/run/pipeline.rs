//! The drain thread: every interval, kernel maps → `Snapshot`; every window, → `Window` →
//! attributed incidents → alert transitions (to the sinks) → cgroup series; after every drain, a new
//! `Exposition` published for HTTP to encode. It owns the probe, so detaching happens when it ends.
use std::{
    sync::{Arc, mpsc},
    thread,
    time::{Duration, Instant},
};

use latency_common::{Lost, Reason, maps::CgroupHist};
use tokio::sync::watch;

use crate::{
    alert::{Alert, Engine, Transition, notify::Notifier},
    config::Config,
    host::{cgroups::CgroupNames, clock, containers::ContainerNames, process_cgroups::ProcessCgroups, system},
    kernel::{
        cgroups::{CgroupTable, Retirer},
        drain::{self, Extras},
        probe::{Probe, ProbeError},
        removals::Removals,
    },
    model::{
        attribution::{self, Attribution, attribution},
        cgroup_series::CgroupSeries,
        exposition::Exposition,
        report::{Meta, cgroup_reports},
        snapshot::{self, CpuMax, Snapshot, WindowSlot},
        timeline::{self, CgroupSummary, LastAlert, WindowSummary},
        window::Window,
    },
};

/// After flipping the epoch, how long to wait before reading the closed slot: a program that
/// read the old epoch finishes within microseconds (it runs with preemption off).
const EPOCH_GRACE: Duration = Duration::from_millis(2);

/// Messages from the async side to the drain thread.
pub(super) enum Command {
    Reload(Box<Config>),
    /// From the removal reader: cgroups it retired (their series go when the window closes).
    Removed(Vec<u64>),
    Stop,
}

/// The drain thread's state: owns the probe, so detaching happens when it returns.
pub(super) struct Drainer {
    probe: Probe,
    names: Option<CgroupNames>,
    /// Namespace, pod and container of the cgroups we export, from the runtimes' OCI configs.
    containers: ContainerNames,
    /// The cgroup of each culprit's process, for the pods named in alerts.
    processes: ProcessCgroups,
    config: Config,
    published: watch::Sender<Arc<Exposition>>,
    duration: prometheus_client::metrics::histogram::Histogram,
    meta: Meta,
    epoch: u64,
    window_start: Option<Snapshot>,
    drains_in_window: u32,
    /// The per-cgroup maps' reader; the reader of the kernel's removal ring, which retires
    /// removed cgroups as they come (on its own thread) and tells us which; a retirer of ours for
    /// removed cgroups the walk of the cgroup tree found (only when the ring lost some) and for
    /// those waiting for their slot, at each drain.
    cgroups: CgroupTable,
    removals: Option<Removals>,
    retirer: Option<Retirer>,
    removed: Vec<u64>,
    /// Removals the kernel could not put in its ring (full), at the last drain, and at the last
    /// sweep of the maps for cgroups that are gone.
    removals_lost: u64,
    removals_swept: u64,
    /// Failed retirements, as last added to the drain errors.
    retire_errors: u64,
    /// Cgroups removed since the window opened: at its close their series go (their last deltas
    /// into "other") and their container names are forgotten.
    gone: Vec<u64>,
    series: CgroupSeries,
    alerts: Engine,
    notifier: Option<Notifier>,
    /// What we last read from each WINDOW_MAX slot (by epoch parity), to spot late writes.
    last_read: [WindowSlot; 2],
    exposition: Exposition,
}

impl Drainer {
    pub(super) fn new(
        mut probe: Probe,
        names: Option<CgroupNames>,
        config: Config,
        published: watch::Sender<Arc<Exposition>>,
        duration: prometheus_client::metrics::histogram::Histogram,
        notifier: Option<Notifier>,
        commands: mpsc::Sender<Command>,
    ) -> Drainer {
        let exposition = (**published.borrow()).clone();
        let cgroups = CgroupTable::new(config.max_cgroups);
        let meta = Meta {
            kernel: system::kernel_release(),
            wall: clock::wall_clock(),
            filter: Vec::new(),
            clock: config.clock,
        };
        // The first window starts at attach, from maps that are all zero.
        let attached = Snapshot::empty(clock::monotonic_ns(), drain::possible_cpus());
        // Without a reader the ring fills and the kernel counts what it drops (`Lost::Removals`);
        // the walk of the cgroup tree then finds the removed cgroups, later.
        let late = |e: &dyn std::fmt::Display| log::error!("removed cgroups will be retired late: {e}");
        let retirer = names.as_ref().and_then(|_| cgroups.retirer(&probe).map_err(|e| late(&e)).ok());
        let removals = names.as_ref().and_then(|_| {
            let ring = probe.take_removals().map_err(|e| late(&e)).ok()?;
            let mut retirer = cgroups.retirer(&probe).map_err(|e| late(&e)).ok()?;
            Removals::spawn(ring, move |ids| {
                retirer.retire(&ids);
                commands.send(Command::Removed(ids)).is_ok()
            })
            .map_err(|e| late(&e))
            .ok()
        });
        Drainer {
            probe,
            names,
            containers: ContainerNames::new(crate::host::paths::get().rootfs.clone()),
            processes: ProcessCgroups::new(crate::host::paths::get().procfs.clone()),
            config,
            published,
            duration,
            meta,
            epoch: 0,
            window_start: Some(attached),
            drains_in_window: 0,
            cgroups,
            removals,
            retirer,
            removed: Vec::new(),
            removals_lost: 0,
            removals_swept: 0,
            retire_errors: 0,
            gone: Vec::new(),
            series: CgroupSeries::default(),
            alerts: Engine::default(),
            notifier,
            last_read: [Vec::new(), Vec::new()],
            exposition,
        }
    }

    pub(super) fn run(mut self, inbox: &mpsc::Receiver<Command>) {
        let mut next = Instant::now() + self.config.interval;
        loop {
            match inbox.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok(Command::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Ok(Command::Reload(config)) => {
                    self.apply(*config);
                    continue;
                }
                Ok(Command::Removed(ids)) => {
                    self.gone.extend(ids);
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            next += self.config.interval;
            // Behind by more than an interval (suspend, a stall): skip ticks rather than burst.
            if next < Instant::now() {
                next = Instant::now() + self.config.interval;
            }
            let started = Instant::now();
            let cpu_before = clock::thread_cpu_ns();
            let result = self.drain();
            // CPU time, unlike the wall time above, excludes waiting for a CPU: on a saturated
            // machine that is what shows a drain costs the same whatever the event rate.
            self.exposition.drain_cpu_seconds += clock::thread_cpu_ns().saturating_sub(cpu_before) as f64 / 1e9;
            match result {
                Ok(()) => self.duration.observe(started.elapsed().as_secs_f64()),
                Err(e) => {
                    self.exposition.drain_errors += 1;
                    log::error!("drain failed: {e}");
                }
            }
            self.published.send_replace(Arc::new(self.exposition.clone()));
        }
        // The removal reader first (it holds a sender to us), then the probe: every program
        // detaches, every map closes.
        drop(self.removals.take());
    }

    fn apply(&mut self, config: Config) {
        self.exposition.window_seconds = config.window.as_secs_f64();
        self.exposition.classic = config.classic_buckets.clone();
        self.exposition.cgroup_classic = config.cgroup_buckets.clone();
        self.config = config;
    }

    fn drain(&mut self) -> Result<(), ProbeError> {
        self.probe.flush_kernel_log();
        let mut now = drain::snapshot(&self.probe, Extras { tasks: self.config.per_task })?;
        if self.names.is_some() {
            now.cgroups = self.cgroups.read(&self.probe)?;
            // Those the walk found (the ring lost them), and those still waiting for their slot.
            let removed = std::mem::take(&mut self.removed);
            if let Some(retirer) = self.retirer.as_mut()
                && (!removed.is_empty() || self.cgroups.waiting() > 0)
            {
                self.gone.extend(retirer.retire_found(&removed));
            }
            let (retired, failed) = self.cgroups.retired();
            self.exposition.cgroups_pruned = retired;
            self.exposition.drain_errors += failed.saturating_sub(self.retire_errors);
            self.retire_errors = failed;
            let lost: u64 = now.cpus.iter().map(|c| c.lost[Lost::Removals as usize]).sum();
            if lost > 0 && self.removals_lost == 0 {
                log::warn!(
                    "the kernel's ring of removed cgroups was full: their slots are freed when the next walk of \
                     the cgroup tree finds them (runqlat_lost_total{{map=\"cgroup_removed\"}})"
                );
            }
            self.removals_lost = lost;
        }
        self.drains_in_window += 1;
        let start = self.window_start.get_or_insert_with(|| now.clone());
        if self.drains_in_window >= self.config.intervals_per_window() {
            let start = start.clone();
            let closed = self.epoch;
            let maxima = self.close_epoch()?;
            let mut window = Window::close(&start, &now, &maxima, &self.meta);
            self.attribute(&mut window, closed)?;
            let top = self.fold_cgroups(&mut window, &now.cgroups);
            self.label_containers();
            Arc::make_mut(&mut self.exposition.timeline).push(WindowSummary::of_report(&window.report, true, top));
            self.exposition.window = Some(Arc::new(window));
            self.window_start = Some(now.clone());
            self.drains_in_window = 0;
            self.cgroups.window_closed();
        }
        self.exposition.drains += 1;
        self.exposition.last_drain_unix = clock::realtime_ns() as f64 / 1e9;
        self.exposition.snapshot = Some(now);
        Ok(())
    }

    /// Flip the epoch so the kernel writes the other slot, then read the closed one.
    fn close_epoch(&mut self) -> Result<Vec<(Reason, CpuMax)>, ProbeError> {
        let closed = self.epoch;
        self.epoch += 1;
        self.probe.set_epoch(self.epoch)?;
        thread::sleep(EPOCH_GRACE);
        let slot = drain::window_slot(&self.probe, closed)?;
        let parity = (closed & 1) as usize;
        self.exposition.late_window_writes += snapshot::late_writes(&self.last_read[parity], &slot, closed);
        let maxima = snapshot::maxima(&slot, closed);
        self.last_read[parity] = slot;
        Ok(maxima)
    }

    /// The window's attributed incidents → its report and the alert engine; transitions go to
    /// the sinks without waiting for them.
    fn attribute(&mut self, window: &mut Window, closed: u64) -> Result<(), ProbeError> {
        if self.config.alert.attribute_ns() == 0 {
            return Ok(());
        }
        let incidents = drain::incidents(&self.probe, closed)?;
        let wall = self.meta.wall;
        let names = &mut self.names;
        let mut attributed: Vec<Attribution> = incidents
            .iter()
            .map(|(reason, cpu, inc)| {
                attribution(*reason, *cpu, inc, wall, |id| names.as_mut().and_then(|n| n.path(id).map(str::to_string)))
            })
            .collect();
        let now = Instant::now();
        let (containers, processes) = (&mut self.containers, &mut self.processes);
        for a in &mut attributed {
            let victim = containers.resolve(&a.cgroup, now);
            attribution::name(a, victim, |pid| {
                let path = processes.cgroup(pid, now)?;
                let labels = containers.resolve(&path, now);
                Some((path, labels))
            });
        }
        self.exposition.culprit_cgroups_unknown = self.processes.gone_total();
        attributed.sort_by_key(|a| std::cmp::Reverse(a.delay_ns));
        let end_unix_ns = wall.unix_ns(window.report.end_ns);
        for t in self.alerts.evaluate(&self.config.alert.rules(), &attributed, end_unix_ns) {
            if let Transition::Fired(a) = &t {
                self.exposition.alerts_total[a.key.reason as usize] += 1;
            }
            self.note_last_alert(&t);
            if let Some(n) = &self.notifier {
                n.send(t);
            }
        }
        self.exposition.alerts_active =
            self.alerts.active().iter().map(|a| (a.key.reason, a.key.cgroup.clone())).collect();
        // While the last alert fires, its worst delay may grow.
        let firing = self.exposition.last_alert.as_ref().filter(|l| l.resolved_unix_ns.is_none());
        if let Some(last) = firing
            && let Some(a) = self.alerts.active().into_iter().find(|a| same_alert(a, last))
            && a.worst != last.worst
        {
            self.exposition.last_alert = Some(Arc::new(last_alert(a)));
        }
        self.exposition.alerts_suppressed = self.alerts.suppressed;
        window.report.attributed = attributed;
        Ok(())
    }

    /// The last fired alert for the live view: replaced when one fires, marked when it resolves.
    fn note_last_alert(&mut self, t: &Transition) {
        match t {
            Transition::Fired(a) => self.exposition.last_alert = Some(Arc::new(last_alert(a))),
            Transition::Resolved(a) => {
                if self.exposition.last_alert.as_deref().is_some_and(|last| same_alert(a, last)) {
                    self.exposition.last_alert = Some(Arc::new(last_alert(a)));
                }
            }
        }
    }

    /// Folds the window's cgroups into the exported series and names them in its report; returns
    /// the window's top cgroups for the live view. Cgroups removed during the window leave the
    /// series here (their last deltas go to "other") and their containers' names are forgotten.
    fn fold_cgroups(&mut self, window: &mut Window, in_maps: &[(u64, CgroupHist)]) -> Vec<CgroupSummary> {
        let Some(names) = self.names.as_mut() else { return Vec::new() };
        let now = Instant::now();
        let containers = &mut self.containers;
        let mut top =
            timeline::top_cgroups(&window.cgroups, |id| names.path(id).map(str::to_string), timeline::TOP_CGROUPS);
        for c in &mut top {
            c.names = containers.resolve(&c.cgroup, now);
        }
        window.report.cgroups = cgroup_reports(
            &window.cgroups,
            |id| names.path(id).map(str::to_string),
            |path| containers.resolve(path, now),
        );
        // Series are keyed by the bounded label, container names by the path.
        let gone = std::mem::take(&mut self.gone);
        // Thousands a window under fast churn: looked up once per window cgroup below.
        let gone_set: std::collections::HashSet<u64> = gone.iter().copied().collect();
        let gone_labels: Vec<String> = gone.iter().filter_map(|id| names.label(*id)).collect();
        let gone_paths: Vec<String> = gone.iter().filter_map(|id| names.path(*id).map(str::to_string)).collect();
        self.series.add_window(
            &window.cgroups,
            |id| if gone_set.contains(&id) { None } else { names.label(id) },
            self.config.top_cgroups,
        );
        for label in &gone_labels {
            self.series.remove(label);
        }
        for path in &gone_paths {
            containers.forget(path);
        }
        self.exposition.cgroups_unresolved = names.unresolved_total();
        self.exposition.cgroups = self.series.exported().into_iter().map(|(l, h)| (l.to_string(), *h)).collect();
        // The kernel's ring reports every removal unless it was full. Then what the walk finds
        // gone is retired at the next drain: the cgroups it had named, and every cgroup in the
        // maps that a fresh walk of the whole hierarchy no longer finds (most of a fast churn
        // was never named).
        let mut removed = names.prune();
        if self.removals_lost > self.removals_swept {
            removed.extend(names.sweep(in_maps.iter().map(|(id, _)| *id)).unwrap_or_default());
            self.removals_swept = self.removals_lost;
        }
        if self.removals_lost > 0 {
            // Retired at the next drain, those that still hold a slot or an overflow entry.
            self.removed.extend(removed);
        }
        top
    }

    /// Names the containers behind the exported series (at most N + 1 lookups a window, each
    /// cached) and active alerts (named when they fired: a removed container's alert keeps its
    /// names without looking up, and re-filling, what was forgotten).
    fn label_containers(&mut self) {
        let now = Instant::now();
        let e = &mut self.exposition;
        e.containers = e
            .cgroups
            .iter()
            .filter_map(|(path, _)| {
                let labels = self.containers.resolve(path, now);
                (!labels.is_empty()).then(|| (path.clone(), labels))
            })
            .collect();
        for a in self.alerts.active() {
            if !a.worst.names.is_empty() {
                e.containers.entry(a.key.cgroup.clone()).or_insert_with(|| a.worst.names.clone());
            }
        }
        e.containers_unresolved = self.containers.unresolved_total();
        e.container_names_cached = self.containers.cached() as u64;
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
