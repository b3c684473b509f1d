//! The drain thread: every interval, kernel maps → `Snapshot` → the `pipeline` (at a window's
//! close, after flipping the epoch: the closed maxima slot and incidents) → alert transitions to
//! the sinks, and a new `Exposition` published for HTTP to encode. The kernel reads, the host's
//! name lookups and retirement of removed cgroups are here; the rules are the pipeline's. It owns
//! the probe, so detaching happens when it ends.
use std::{
    sync::{Arc, mpsc},
    thread,
    time::{Duration, Instant},
};

use latency_common::Lost;
use tokio::sync::watch;

use super::capturer::Capturer;
use crate::{
    alert::notify::Notifier,
    config::Config,
    host::{cgroups::CgroupNames, clock, containers::ContainerNames, process_cgroups::ProcessCgroups, steal, system},
    kernel::{
        cgroups::{CgroupTable, Retirer},
        drain::{self, Extras},
        probe::{Probe, ProbeError},
        removals::Removals,
    },
    model::{container::ContainerLabels, exposition::Exposition, report::Meta, snapshot::Snapshot, waits::Waits, wall},
    pipeline::{Closed, Closing, Names, Pipeline, Settings},
};

/// After flipping the epoch, how long to wait before reading the closed slot: a program that
/// read the old epoch finishes within microseconds (it runs with preemption off).
const EPOCH_GRACE: Duration = Duration::from_millis(2);

/// Messages from the async side to the drain thread.
pub(super) enum Command {
    Reload(Box<Config>),
    /// From the removal reader: cgroups it retired (their series go when the window closes).
    Removed(Vec<u64>),
    /// The operator asked for a capture (SIGUSR1).
    Capture,
    Stop,
}

/// The pipeline's settings from the configuration; `per_cgroup`: cgroups have names (the
/// per-cgroup feature is on and the cgroup2 mount was found).
pub fn pipeline_settings(config: &Config, per_cgroup: bool) -> Settings {
    Settings {
        intervals_per_window: config.intervals_per_window(),
        top_cgroups: config.top_cgroups,
        rules: config.alert.rules(),
        attribute: config.alert.attribute_ns() != 0,
        per_cgroup,
        window_seconds: config.window.as_secs_f64(),
        classic: config.classic_buckets.clone(),
        cgroup_classic: config.cgroup_buckets.clone(),
    }
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
    notifier: Option<Notifier>,
    /// The capture trigger, with the capture recorder on.
    capturer: Option<Capturer>,
    pipeline: Pipeline,
    /// The last wait scan failed (logged once until one succeeds).
    scan_failing: bool,
    /// The last read of the host's /proc/stat for steal failed (logged once until one succeeds).
    steal_failing: bool,
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
        let pipeline = Pipeline::new(pipeline_settings(&config, names.is_some()), meta, attached, exposition);
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
            cgroups,
            removals,
            retirer,
            removed: Vec::new(),
            removals_lost: 0,
            removals_swept: 0,
            retire_errors: 0,
            notifier,
            capturer: None,
            pipeline,
            scan_failing: false,
            steal_failing: false,
        }
    }

    /// With the capture trigger: an alert that fires takes a capture.
    pub(super) fn with_capturer(self, capturer: Option<Capturer>) -> Drainer {
        Drainer { capturer, ..self }
    }

    pub(super) fn run(mut self, inbox: &mpsc::Receiver<Command>) {
        let mut next = Instant::now() + self.config.interval;
        loop {
            match inbox.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok(Command::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Ok(Command::Reload(config)) => {
                    self.pipeline.apply(pipeline_settings(&config, self.names.is_some()));
                    if let Some(capturer) = &mut self.capturer {
                        capturer.reconfigure(&config);
                    }
                    self.config = *config;
                    continue;
                }
                Ok(Command::Removed(ids)) => {
                    self.pipeline.removed(ids);
                    continue;
                }
                Ok(Command::Capture) => {
                    match &mut self.capturer {
                        Some(capturer) => capturer.ask(&self.probe),
                        None => log::warn!("SIGUSR1 asks for a capture, but captures are off (capture_dir); ignored"),
                    }
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
            let e = self.pipeline.exposition_mut();
            // CPU time, unlike the wall time above, excludes waiting for a CPU: on a saturated
            // machine that is what shows a drain costs the same whatever the event rate.
            e.drain_cpu_seconds += clock::thread_cpu_ns().saturating_sub(cpu_before) as f64 / 1e9;
            match result {
                Ok(()) => self.duration.observe(started.elapsed().as_secs_f64()),
                Err(err) => {
                    e.drain_errors += 1;
                    log::error!("drain failed: {err}");
                }
            }
            self.published.send_replace(Arc::new(self.pipeline.exposition().clone()));
        }
        // The removal reader first (it holds a sender to us), then the probe: every program
        // detaches, every map closes.
        drop(self.removals.take());
    }

    /// Read the kernel → the pipeline → the sinks.
    fn drain(&mut self) -> Result<(), ProbeError> {
        self.probe.flush_kernel_log();
        let mut now = drain::snapshot(&self.probe, Extras { tasks: self.config.per_task })?;
        now.steal_ns = self.read_steal();
        if self.names.is_some() {
            now.cgroups = self.cgroups.read(&self.probe)?;
            self.retire_removed(&now);
        }
        let closing = self.pipeline.begin();
        let closed = match &closing {
            Some(c) => Some(self.close_epoch(c)?),
            None => None,
        };
        let mut names = HostNames {
            cgroups: self.names.as_mut(),
            containers: &mut self.containers,
            processes: &mut self.processes,
            now: Instant::now(),
        };
        let mut transitions = self.pipeline.end(now, closed, &mut names);
        let started = Instant::now();
        let scan = self.probe.scan_waits();
        self.pipeline.scan_done(started.elapsed().as_secs_f64(), scan.is_err());
        let seen = match scan {
            Ok(seen) => {
                self.scan_failing = false;
                seen
            }
            Err(e) => {
                // Once per failing stretch; the gauges read 0 meanwhile (no evidence, no alert).
                if !self.scan_failing {
                    log::error!("waits in progress are not seen: {e} (runqlat_wait_scan_errors_total)");
                }
                self.scan_failing = true;
                Some(Vec::new())
            }
        };
        if let Some(seen) = seen {
            let waits = Waits::from_seen(&seen);
            let lowest = self.config.alert.attribute_ns();
            let rings = if lowest != 0 && waits.over(lowest) > 0 {
                drain::run_rings(&self.probe).unwrap_or_default()
            } else {
                Vec::new()
            };
            transitions.extend(self.pipeline.waits(&waits, &rings, wall::now_unix_ns(), &mut names));
        }
        if self.pipeline.awaiting_final() {
            match drain::final_rings(&self.probe) {
                Ok(rings) => transitions.extend(self.pipeline.finals(&rings)),
                Err(e) => log::debug!("final delays not read: {e}"),
            }
        }
        if let Some(capturer) = &mut self.capturer {
            // The open window's finished waits, while the rings still hold them.
            let epoch = self.pipeline.open_epoch();
            let finished = match self.pipeline.attributes().then(|| drain::incidents(&self.probe, epoch)) {
                Some(Ok(incidents)) => self.pipeline.finished(epoch, &incidents, wall::now_unix_ns(), &mut names),
                Some(Err(e)) => {
                    log::debug!("the open window's incidents not read: {e}");
                    Vec::new()
                }
                None => Vec::new(),
            };
            capturer.drained(&self.probe, &mut transitions, &finished);
        }
        for t in transitions {
            if let Some(n) = &self.notifier {
                n.send(t);
            }
        }
        if let Some(c) = closing {
            self.window_closed(&c);
        }
        let e = self.pipeline.exposition_mut();
        e.drains += 1;
        e.last_drain_unix = wall::now_unix_ns() as f64 / 1e9;
        Ok(())
    }

    /// Each CPU's steal from the host's /proc/stat; None (the family left out) if it cannot be
    /// read, logged once per failing stretch.
    fn read_steal(&mut self) -> Option<Vec<(u32, u64)>> {
        match steal::read() {
            Ok(cpus) => {
                self.steal_failing = false;
                Some(cpus.into_iter().map(|c| (c.cpu, c.ns)).collect())
            }
            Err(e) => {
                if !self.steal_failing {
                    log::warn!(
                        "steal per CPU is not exported: {}: {e} (runqlat_cpu_steal_seconds_total left out until it reads)",
                        crate::host::paths::proc("stat").display()
                    );
                }
                self.steal_failing = true;
                None
            }
        }
    }

    /// Retire the removed cgroups the walk found (the ring lost them) and those still waiting for
    /// their slot; count retirements and what the ring lost.
    fn retire_removed(&mut self, now: &Snapshot) {
        let removed = std::mem::take(&mut self.removed);
        if let Some(retirer) = self.retirer.as_mut()
            && (!removed.is_empty() || self.cgroups.waiting() > 0)
        {
            self.pipeline.removed(retirer.retire_found(&removed));
        }
        let (retired, failed) = self.cgroups.retired();
        let e = self.pipeline.exposition_mut();
        e.cgroups_pruned = retired;
        e.drain_errors += failed.saturating_sub(self.retire_errors);
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

    /// Flip the epoch so the kernel writes the other slot, then read the closed one (and its
    /// incidents when attribution is on).
    fn close_epoch(&mut self, closing: &Closing) -> Result<Closed, ProbeError> {
        self.probe.set_epoch(closing.next)?;
        thread::sleep(EPOCH_GRACE);
        let slot = drain::window_slot(&self.probe, closing.epoch)?;
        let mut closed = self.pipeline.slot_read(closing, slot);
        if closing.incidents {
            closed.incidents = Some(drain::incidents(&self.probe, closing.epoch)?);
        }
        Ok(closed)
    }

    /// After a window closed: the host's lookup counters into the exposition, then the names of
    /// removed cgroups pruned (and, when the ring lost removals, the maps swept for cgroups gone).
    fn window_closed(&mut self, closing: &Closing) {
        let e = self.pipeline.exposition_mut();
        if closing.incidents {
            e.culprit_cgroups_unknown = self.processes.gone_total();
        }
        e.containers_unresolved = self.containers.unresolved_total();
        e.container_names_cached = self.containers.cached() as u64;
        if let Some(names) = self.names.as_mut() {
            e.cgroups_unresolved = names.unresolved_total();
            // The kernel's ring reports every removal unless it was full. Then what the walk finds
            // gone is retired at the next drain: the cgroups it had named, and every cgroup in the
            // maps that a fresh walk of the whole hierarchy no longer finds (most of a fast churn
            // was never named).
            let mut removed = names.prune();
            if self.removals_lost > self.removals_swept {
                let in_maps = e.snapshot.iter().flat_map(|s| s.cgroups.iter().map(|(id, _)| *id));
                removed.extend(names.sweep(in_maps).unwrap_or_default());
                self.removals_swept = self.removals_lost;
            }
            if self.removals_lost > 0 {
                // Retired at the next drain, those that still hold a slot or an overflow entry.
                self.removed.extend(removed);
            }
        }
        self.cgroups.window_closed();
    }
}

/// The pipeline's name lookups, answered from the host's caches; `now` for their expiry.
struct HostNames<'a> {
    /// None: per-cgroup delays are off; ids have no names.
    cgroups: Option<&'a mut CgroupNames>,
    containers: &'a mut ContainerNames,
    processes: &'a mut ProcessCgroups,
    now: Instant,
}

impl Names for HostNames<'_> {
    fn path(&mut self, id: u64) -> Option<String> {
        self.cgroups.as_mut().and_then(|n| n.path(id).map(str::to_string))
    }

    fn label(&mut self, id: u64) -> Option<String> {
        self.cgroups.as_mut().and_then(|n| n.label(id))
    }

    fn containers(&mut self, path: &str) -> ContainerLabels {
        self.containers.resolve(path, self.now)
    }

    fn process(&mut self, pid: u32) -> Option<(String, ContainerLabels)> {
        let path = self.processes.cgroup(pid, self.now)?;
        let labels = self.containers.resolve(&path, self.now);
        Some((path, labels))
    }

    fn forget(&mut self, path: &str) {
        self.containers.forget(path);
    }
}
