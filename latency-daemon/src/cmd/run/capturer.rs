//! The capture trigger, on the drain thread: the alert transitions of one drain, the finished
//! waits it first saw that may fire an alert (and the operator's asks) in; for an alert that
//! fires, every CPU's ring of scheduler events read (a few milliseconds, once a drain at most) and
//! handed to a writer thread that turns it into a Perfetto trace and an SVG picture in the capture
//! directory, and the capture's address set on that alert's transitions from then on (so sinks
//! and re-sends carry it). A finished wait is judged when its window closes, seconds after it
//! ended, when a busy CPU's ring no longer holds it: so the rings are read at the drain that first
//! sees it (`Held`, kept in memory, not counted) and its alert's capture is written from that
//! reading. While the alert's wait in progress grows (`Grown`, at most once a drain) the rings are
//! read again and kept; when it ends (`Updated`), read once more and the capture rewritten with
//! every reading, so a stall longer than a ring's reach is kept whole from its start to its end. A
//! capture on demand (SIGUSR1) reads now and at every drain until `capture_demand` has passed, and
//! is rewritten with every reading at the end. At most one new capture per `capture_interval` in
//! all and one per `capture_cpu_interval` per CPU; while the writer is busy a capture is
//! suppressed, never waited for. Everything is counted (`runqlat_captures_total`).
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use latency_common::maps::CaptureRecord;

use crate::{
    alert::engine::{AlertKey, Transition},
    host::{captures::Store, clock},
    kernel::{
        capture, drain,
        probe::{Probe, ProbeError},
    },
    metrics::instruments::capture::CaptureStats,
    model::{self, attribution::Attribution, capture::Wait, perfetto, wall},
    serve::view,
};

/// Captures the writer may have waiting.
const QUEUE: usize = 2;
/// Readings the writer keeps to merge a capture rewritten when its wait ends.
const KEPT: usize = 4;
/// Finished waits whose reading the trigger holds for their window's close: the longest.
const HELD: usize = 4;

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

/// A reading of every CPU's ring taken at the drain that first saw a finished wait that may
/// fire an alert, held until its window closes.
struct Held {
    /// The wait's CPU, victim and end (CLOCK_MONOTONIC), as its alert will name it.
    cpu: u32,
    tid: u32,
    end_ns: u64,
    delay_ns: u64,
    key: AlertKey,
    at: Instant,
    reading: Arc<Taken>,
}

/// One reading of the rings.
struct Taken {
    records: Vec<CaptureRecord>,
    /// The drain thread's CPU time reading them.
    read_cpu: Duration,
}

impl Taken {
    /// Whether the reading holds the end of `wait` on its CPU (the victim's run), and how far
    /// before the wait's start its ring there reaches back (negative: it starts inside the wait).
    fn reach(&self, wait: &Wait) -> Option<i128> {
        let mut on_cpu = self.records.iter().filter(|r| r.cpu == wait.cpu).map(|r| r.ts_ns);
        let first = on_cpu.next()?;
        let last = on_cpu.next_back().unwrap_or(first);
        (first <= wait.end_ns && wait.end_ns <= last).then(|| i128::from(wait.start_ns) - i128::from(first))
    }
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
    /// How long a held reading may wait for its window's close.
    hold: Duration,
    held: Vec<Held>,
    /// This drain's reading of the rings, shared by every capture it takes and every wait it holds.
    fresh: Option<Arc<Taken>>,
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
    /// How long after a finished wait its alert may fire: the window's close (`window` ×
    /// `alert_for`, and a drain more).
    pub hold: Duration,
}

/// How long after a finished wait its alert may fire under `config`: its window's close
/// (`window` × `alert_for`) and a drain more.
pub(super) fn hold(config: &crate::config::Config) -> Duration {
    config.window * config.alert.for_windows.max(1) + config.interval
}

impl Capturer {
    /// A reloaded configuration's `window` and `alert_for`: how long readings are held from now on
    /// (those held already included).
    pub(super) fn reconfigure(&mut self, config: &crate::config::Config) {
        self.hold = hold(config);
    }

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
            .spawn(move || write(&store, &host, &inbox, &writer_stats, slots))?;
        stats.enable();
        Ok(Capturer {
            slots,
            demand_for: limits.demand,
            hold: limits.hold,
            held: Vec::new(),
            fresh: None,
            jobs,
            stats,
            limiter: Limiter { interval: limits.interval, cpu_interval: limits.cpu_interval, ..Limiter::default() },
            names: HashMap::new(),
            demand: None,
        })
    }

    /// One drain's alert transitions and the finished waits it first saw that may fire an alert
    /// when their window closes (the pipeline's `finished`): the captures the transitions call for
    /// taken and their addresses set on them, then readings held for those waits. The rings are
    /// read once at most, however many alerts fire: a reading takes milliseconds, and the next
    /// would no longer reach as far back.
    pub(super) fn drained(&mut self, probe: &Probe, transitions: &mut [Transition], finished: &[Attribution]) {
        // First the transitions: a held reading of the window that just closed may be replaced
        // below by one of the next window's waits on the same CPU.
        self.annotate(probe, transitions);
        self.hold_readings(probe, finished);
        self.fresh = None;
    }

    /// For the finished waits a capture could be taken of (the limits allow their CPU now),
    /// every CPU's ring read and held, the longest waits' readings kept.
    fn hold_readings(&mut self, probe: &Probe, finished: &[Attribution]) {
        let now = Instant::now();
        let hold = self.hold;
        self.held.retain(|h| now.saturating_duration_since(h.at) < hold);
        let due: Vec<&Attribution> = finished.iter().filter(|a| self.limiter.allows(a.cpu, now)).collect();
        if due.is_empty() {
            return;
        }
        let reading = match self.reading(probe) {
            Ok(taken) => taken,
            Err(e) => {
                // Counted if its alert fires and the rings cannot be read then either.
                log::debug!("the rings could not be read for a finished wait: {e}");
                return;
            }
        };
        for a in due {
            // The window keeps one wait per reason and CPU, the longest: a new one replaces it.
            self.held.retain(|h| !(h.cpu == a.cpu && h.key.reason == a.reason));
            self.held.push(Held {
                cpu: a.cpu,
                tid: a.victim_tid,
                end_ns: a.end_ns,
                delay_ns: a.delay_ns,
                key: AlertKey { reason: a.reason, cgroup: a.cgroup.clone() },
                at: now,
                reading: Arc::clone(&reading),
            });
        }
        self.held.sort_by_key(|h| std::cmp::Reverse(h.delay_ns));
        self.held.truncate(HELD);
    }

    /// A held reading for the finished wait `worst` whose alert fires: the one taken for it, or
    /// else the one that reaches furthest back before it while holding its end.
    fn held_for(&self, worst: &Attribution, wait: &Wait) -> Option<Arc<Taken>> {
        if worst.waiting {
            return None;
        }
        let own =
            self.held.iter().find(|h| h.cpu == worst.cpu && h.tid == worst.victim_tid && h.end_ns == worst.end_ns);
        if let Some(h) = own
            && h.reading.reach(wait).is_some()
        {
            return Some(Arc::clone(&h.reading));
        }
        let reach = |h: &&Held| h.reading.reach(wait);
        self.held.iter().filter(|h| reach(h).is_some()).max_by_key(reach).map(|h| Arc::clone(&h.reading))
    }

    /// Takes the captures this drain's transitions call for and sets their addresses on them;
    /// reads again for a capture on demand still going.
    fn annotate(&mut self, probe: &Probe, transitions: &mut [Transition]) {
        for t in transitions {
            match t {
                Transition::Fired(a) => {
                    let cpu = a.worst.cpu;
                    let wait = Wait::of(&a.worst, boot_minus_mono_ns());
                    let held = self.held_for(&a.worst, &wait);
                    // Its alert fires: its other finished waits need no capture of their own.
                    self.held.retain(|h| h.key != a.key);
                    if !self.limiter.allows(cpu, Instant::now()) {
                        self.stats.suppressed();
                        continue;
                    }
                    let name = model::capture::name(a.worst.end_unix_ns, cpu, a.worst.victim_tid);
                    let queued = match held {
                        Some(taken) => self.queue(&name, &taken, Some(wait), Reading::New),
                        None => self.take(probe, &name, Some(wait), Reading::New),
                    };
                    if queued {
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
        // Between drains: read now.
        self.fresh = None;
        let taken = self.take(probe, &name, None, Reading::New);
        self.fresh = None;
        if taken {
            log::info!(
                "capture on demand: reading every CPU's events for {}, to {}",
                humantime::format_duration(self.demand_for),
                model::capture::url(&name)
            );
            self.demand = Some(Demand { name, until: Instant::now() + self.demand_for });
        }
    }

    /// This drain's reading of every CPU's ring: read now if it was not yet.
    fn reading(&mut self, probe: &Probe) -> Result<Arc<Taken>, ProbeError> {
        if let Some(taken) = &self.fresh {
            return Ok(Arc::clone(taken));
        }
        let cpu_before = clock::thread_cpu_ns();
        let rings = capture::read(probe, self.slots)?;
        let taken = Arc::new(Taken {
            records: rings.records,
            read_cpu: Duration::from_nanos(clock::thread_cpu_ns().saturating_sub(cpu_before)),
        });
        self.stats.torn(rings.cpus.iter().map(|c| c.torn).sum());
        self.stats.given_up(rings.cpus.iter().map(|c| c.given_up).sum());
        self.fresh = Some(Arc::clone(&taken));
        Ok(taken)
    }

    /// Queues this drain's reading of the rings as capture `name`; whether it was queued.
    fn take(&mut self, probe: &Probe, name: &str, wait: Option<Wait>, reading: Reading) -> bool {
        match self.reading(probe) {
            Ok(taken) => self.queue(name, &taken, wait, reading),
            Err(e) => {
                log::warn!("a capture could not be read: {e} (runqlat_captures_total{{result=\"failed\"}})");
                self.stats.failed();
                false
            }
        }
    }

    /// Queues reading `taken` as capture `name`; whether it was queued.
    fn queue(&self, name: &str, taken: &Taken, wait: Option<Wait>, reading: Reading) -> bool {
        let job =
            Job { name: name.to_owned(), records: taken.records.clone(), wait, reading, read_cpu: taken.read_cpu };
        match self.jobs.try_send(job) {
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

/// The writer thread: each reading merged with the earlier ones of the same capture (each CPU's
/// records bounded at two rings of `slots`: see `capture::bound`), encoded, drawn and stored,
/// until the trigger is gone.
fn write(store: &Store, host: &perfetto::Host, inbox: &mpsc::Receiver<Job>, stats: &CaptureStats, slots: u32) {
    let per_cpu = 2 * slots as usize;
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
                (capture::bound(capture::merge(earlier, job.records), per_cpu), lost)
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
                    "{what}: {}: {} events{}, {} KiB of trace and {} KiB of picture; CPU: read {:.1} ms (drain thread), \
                     encoded, drawn and written {:.1} ms (capture thread)",
                    model::capture::url(&job.name),
                    records.len(),
                    job.wait.as_ref().map_or(String::new(), |w| reach(&records, w)),
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

/// How far back a capture's records reach on its wait's CPU, for the log: from before the wait
/// began, or only from inside it (its CPU's ring had wrapped when it was read).
fn reach(records: &[CaptureRecord], wait: &Wait) -> String {
    let Some(first) = records.iter().find(|r| r.cpu == wait.cpu).map(|r| r.ts_ns) else {
        return format!(", none of CPU {}", wait.cpu);
    };
    let ms = |ns: u64| ns as f64 / 1e6;
    if first <= wait.start_ns {
        format!(", CPU {} from {:.1} ms before the wait began", wait.cpu, ms(wait.start_ns - first))
    } else {
        format!(", CPU {} only from {:.1} ms into the wait (its ring had wrapped)", wait.cpu, ms(first - wait.start_ns))
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
    fn a_reading_reaches_a_wait_when_it_holds_its_end_on_its_cpu() {
        let record = |cpu: u32, ts_ns: u64| CaptureRecord { cpu, ts_ns, ..CaptureRecord::default() };
        let taken = Taken {
            records: vec![record(1, 100), record(0, 150), record(1, 200), record(1, 900)],
            read_cpu: Duration::ZERO,
        };
        let wait = |cpu: u32, start_ns: u64, end_ns: u64| Wait { cpu, start_ns, end_ns, ..Wait::default() };
        assert_eq!(taken.reach(&wait(1, 300, 800)), Some(200), "from 100, 200 ns before its start");
        assert_eq!(taken.reach(&wait(1, 50, 800)), Some(-50), "its start overwritten");
        assert_eq!(taken.reach(&wait(1, 300, 950)), None, "read before it ended");
        assert_eq!(taken.reach(&wait(1, 10, 90)), None, "its end overwritten");
        assert_eq!(taken.reach(&wait(2, 300, 800)), None, "nothing of its CPU");
    }

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
