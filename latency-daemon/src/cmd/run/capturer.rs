//! The capture trigger, on the drain thread: the alert transitions of one drain (and the
//! operator's asks) in; for an alert that fires, every CPU's ring of scheduler events read (a few
//! milliseconds) and handed to a writer thread that turns it into a Perfetto trace and an SVG
//! picture in the capture directory, and the capture's address set on that alert's transitions
//! from then on (so sinks and re-sends carry it). While the alert's wait in progress grows
//! (`Grown`, at most once a drain) the rings are read again and kept; when it ends (`Updated`),
//! read once more and the capture rewritten with every reading, so a stall longer than a ring's
//! reach is kept whole from its start to its end. A capture on demand
//! (SIGUSR1) reads now and at every drain until `capture_demand` has passed, and is rewritten
//! with every reading at the end. At most one new
//! capture per `capture_interval` in all and one per `capture_cpu_interval` per CPU; while the
//! writer is busy a capture is suppressed, never waited for. Everything is counted (`runqlat_captures_total`).
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use latency_common::maps::CaptureRecord;

use crate::{
    alert::engine::{AlertKey, Transition},
    host::{captures::Store, clock},
    kernel::{capture, drain, probe::Probe},
    metrics::instruments::capture::CaptureStats,
    model::{self, capture::Wait, perfetto, wall},
    serve::view,
};

/// Captures the writer may have waiting.
const QUEUE: usize = 2;
/// Readings the writer keeps to merge a capture rewritten when its wait ends.
const KEPT: usize = 4;

struct Job {
    name: String,
    records: Vec<CaptureRecord>,
    wait: Option<Wait>,
    reading: Reading,
    /// The drain thread's CPU time reading the rings.
    read_cpu: Duration,
}

/// Which reading of a capture a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reading {
    /// The first: written, and counted as written.
    New,
    /// A later one, kept to merge with the next (a wait still growing: its CPU's ring may wrap
    /// before it ends), not written.
    Interim,
    /// The last (the wait ended, the demand's time is up): the capture rewritten with every reading.
    Last,
}

/// A capture on demand still reading.
struct Demand {
    name: String,
    until: Instant,
}

/// How often new captures of alerts may be taken: in all, and per CPU of the waits.
#[derive(Debug, Default)]
struct Limiter {
    interval: Duration,
    cpu_interval: Duration,
    last: Option<Instant>,
    last_on: HashMap<u32, Instant>,
}

impl Limiter {
    /// Whether a capture of a wait on `cpu` may be taken at `now`.
    fn allows(&self, cpu: u32, now: Instant) -> bool {
        let clear = |at: Option<&Instant>, gap: Duration| at.is_none_or(|at| now.saturating_duration_since(*at) >= gap);
        clear(self.last.as_ref(), self.interval) && clear(self.last_on.get(&cpu), self.cpu_interval)
    }

    /// A capture of a wait on `cpu` was taken at `now`.
    fn took(&mut self, cpu: u32, now: Instant) {
        self.last = Some(now);
        self.last_on.insert(cpu, now);
        // Forget CPUs past their gap, so the map stays as small as the CPUs in a storm.
        let gap = self.cpu_interval;
        self.last_on.retain(|_, at| now.saturating_duration_since(*at) < gap || *at == now);
    }
}

pub(super) struct Capturer {
    slots: u32,
    demand_for: Duration,
    jobs: mpsc::SyncSender<Job>,
    stats: Arc<CaptureStats>,
    limiter: Limiter,
    /// Each firing alert's capture, until it resolves.
    names: HashMap<AlertKey, String>,
    demand: Option<Demand>,
}

/// CLOCK_BOOTTIME − CLOCK_MONOTONIC now (time suspended): the records' clock from the delays'.
fn boot_minus_mono_ns() -> u64 {
    let read = |clock| {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `t` is a valid timespec for the call to fill.
        unsafe { libc::clock_gettime(clock, &raw mut t) };
        t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
    };
    read(libc::CLOCK_BOOTTIME).saturating_sub(read(libc::CLOCK_MONOTONIC))
}

/// How captures are limited and how long one on demand reads.
pub(super) struct Limits {
    pub interval: Duration,
    pub cpu_interval: Duration,
    pub demand: Duration,
}

impl Capturer {
    /// The trigger for rings of `slots` records, writing into `store` on a thread of its own.
    pub(super) fn start(
        store: Store,
        slots: u32,
        limits: Limits,
        stats: Arc<CaptureStats>,
    ) -> std::io::Result<Capturer> {
        let (jobs, inbox) = mpsc::sync_channel::<Job>(QUEUE);
        let host = perfetto::Host {
            release: crate::host::system::kernel_release(),
            machine: std::env::consts::ARCH.to_owned(),
            cpus: drain::possible_cpus() as u32,
        };
        let writer_stats = Arc::clone(&stats);
        std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || write(&store, &host, &inbox, &writer_stats))?;
        stats.enable();
        Ok(Capturer {
            slots,
            demand_for: limits.demand,
            jobs,
            stats,
            limiter: Limiter { interval: limits.interval, cpu_interval: limits.cpu_interval, ..Limiter::default() },
            names: HashMap::new(),
            demand: None,
        })
    }

    /// Takes the captures this drain's transitions call for and sets their addresses on them;
    /// reads again for a capture on demand still going.
    pub(super) fn annotate(&mut self, probe: &Probe, transitions: &mut [Transition]) {
        for t in transitions {
            match t {
                Transition::Fired(a) => {
                    let cpu = a.worst.cpu;
                    if !self.limiter.allows(cpu, Instant::now()) {
                        self.stats.suppressed();
                        continue;
                    }
                    let name = model::capture::name(a.worst.end_unix_ns, cpu, a.worst.victim_tid);
                    let wait = Wait::of(&a.worst, boot_minus_mono_ns());
                    if self.take(probe, &name, Some(wait), Reading::New) {
                        self.limiter.took(cpu, Instant::now());
                        a.capture = Some(model::capture::url(&name));
                        self.names.insert(a.key.clone(), name);
                    }
                }
                Transition::Updated(a) => {
                    if let Some(name) = self.names.get(&a.key).cloned() {
                        // Its wait has ended: the rest of it, into the same capture.
                        self.take(probe, &name, Some(Wait::of(&a.worst, boot_minus_mono_ns())), Reading::Last);
                        a.capture = Some(model::capture::url(&name));
                    }
                }
                Transition::Grown(a) => {
                    if let Some(name) = self.names.get(&a.key).cloned() {
                        // Still waiting: a reading kept for when it ends, should its CPU's ring wrap.
                        self.take(probe, &name, None, Reading::Interim);
                        a.capture = Some(model::capture::url(&name));
                    }
                }
                Transition::Resolved(a) => a.capture = self.names.remove(&a.key).map(|n| model::capture::url(&n)),
            }
        }
        if let Some(d) = &self.demand {
            let name = d.name.clone();
            let done = Instant::now() >= d.until;
            self.take(probe, &name, None, if done { Reading::Last } else { Reading::Interim });
            if done {
                self.demand = None;
            }
        }
    }

    /// A capture of every CPU asked for by the operator: read now and at each drain for
    /// `capture_demand`. One at a time; not limited by `capture_interval`.
    pub(super) fn ask(&mut self, probe: &Probe) {
        if let Some(d) = &self.demand {
            log::warn!("a capture on demand is already reading ({}); this ask is ignored", d.name);
            return;
        }
        let name = model::capture::demand_name(wall::now_unix_ns());
        if self.take(probe, &name, None, Reading::New) {
            log::info!(
                "capture on demand: reading every CPU's events for {}, to {}",
                humantime::format_duration(self.demand_for),
                model::capture::url(&name)
            );
            self.demand = Some(Demand { name, until: Instant::now() + self.demand_for });
        }
    }

    /// Reads the rings and queues them as capture `name`; whether it was queued.
    fn take(&self, probe: &Probe, name: &str, wait: Option<Wait>, reading: Reading) -> bool {
        let cpu_before = clock::thread_cpu_ns();
        let rings = match capture::read(probe, self.slots) {
            Ok(rings) => rings,
            Err(e) => {
                log::warn!("a capture could not be read: {e} (runqlat_captures_total{{result=\"failed\"}})");
                self.stats.failed();
                return false;
            }
        };
        self.stats.torn(rings.cpus.iter().map(|c| c.torn).sum());
        let read_cpu = Duration::from_nanos(clock::thread_cpu_ns().saturating_sub(cpu_before));
        match self.jobs.try_send(Job { name: name.to_owned(), records: rings.records, wait, reading, read_cpu }) {
            Ok(()) => true,
            Err(_) => {
                if reading == Reading::New {
                    self.stats.suppressed();
                }
                false
            }
        }
    }
}

/// The writer thread: each reading merged with the earlier ones of the same capture, encoded,
/// drawn and stored, until the trigger is gone.
fn write(store: &Store, host: &perfetto::Host, inbox: &mpsc::Receiver<Job>, stats: &CaptureStats) {
    let mut kept: VecDeque<(String, Vec<CaptureRecord>, u64)> = VecDeque::new();
    for job in inbox {
        if job.reading != Reading::New && !store.has(&job.name) {
            // The caps removed it since (newer captures came): a later reading does not bring it back.
            kept.retain(|(name, _, _)| *name != job.name);
            continue;
        }
        let (records, lost_before) = match kept.iter().position(|(name, _, _)| *name == job.name) {
            Some(i) => {
                let (_, earlier, lost) = kept.remove(i).unwrap_or_default();
                (capture::merge(earlier, job.records), lost)
            }
            None => (job.records, 0),
        };
        // Only what this reading newly lost is counted: a capture read ten times counts a gap once.
        let lost = capture::gaps(&records);
        stats.overwritten(lost.saturating_sub(lost_before));
        if job.reading == Reading::Interim {
            keep(&mut kept, job.name, records, lost);
            continue;
        }
        let cpu_before = clock::thread_cpu_ns();
        let trace = perfetto::trace(&records, host, job.wait.as_ref());
        let picture = view::capture::picture(&records, job.wait.as_ref());
        match store.write(&job.name, &trace, Some(picture.as_bytes())) {
            Ok(removed) => {
                if job.reading == Reading::New {
                    stats.written();
                }
                stats.removed(removed);
                let written_cpu = Duration::from_nanos(clock::thread_cpu_ns().saturating_sub(cpu_before));
                let what = match (job.wait.is_some(), job.reading) {
                    (true, Reading::New) => "capture written",
                    (true, _) => "capture rewritten with its later readings",
                    (false, Reading::New) => "capture on demand, its first reading written",
                    (false, _) => "capture on demand written",
                };
                log::info!(
                    "{what}: {}: {} events, {} KiB of trace and {} KiB of picture; CPU: read {:.1} ms (drain thread), \
                     encoded, drawn and written {:.1} ms (capture thread)",
                    model::capture::url(&job.name),
                    records.len(),
                    trace.len().div_ceil(1024),
                    picture.len().div_ceil(1024),
                    job.read_cpu.as_secs_f64() * 1e3,
                    written_cpu.as_secs_f64() * 1e3,
                );
            }
            Err(e) => {
                log::warn!(
                    "capture {} not written to {}: {e} (runqlat_captures_total{{result=\"failed\"}})",
                    job.name,
                    store.dir().display()
                );
                stats.failed();
            }
        }
        keep(&mut kept, job.name, records, lost);
    }
}

/// Keeps a capture's records (and the records it lacks) to merge with its next reading.
fn keep(kept: &mut VecDeque<(String, Vec<CaptureRecord>, u64)>, name: String, records: Vec<CaptureRecord>, lost: u64) {
    kept.push_back((name, records, lost));
    if kept.len() > KEPT {
        kept.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_are_limited_in_all_and_per_cpu() {
        let s = Duration::from_secs(1);
        let t0 = Instant::now();
        let mut l = Limiter { interval: 10 * s, cpu_interval: 60 * s, ..Limiter::default() };
        assert!(l.allows(1, t0));
        l.took(1, t0);
        assert!(!l.allows(2, t0 + 9 * s), "within the interval in all");
        assert!(l.allows(2, t0 + 10 * s), "another CPU after the interval");
        assert!(!l.allows(1, t0 + 59 * s), "the same CPU within its interval");
        l.took(2, t0 + 10 * s);
        assert!(l.allows(1, t0 + 60 * s));
        l.took(3, t0 + 65 * s);
        assert_eq!(l.last_on.len(), 2, "CPU 1, past its gap, forgotten: {:?}", l.last_on.keys());
        let none = Limiter::default();
        assert!(none.allows(1, t0) && none.allows(1, t0), "zero intervals: no limit");
    }
}
