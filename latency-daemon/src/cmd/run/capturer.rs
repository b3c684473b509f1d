//! The capture trigger, on the drain thread: the alert transitions of one drain in; for an alert
//! that fires, every CPU's ring of scheduler events read (a few milliseconds) and handed to a
//! writer thread that turns it into a Perfetto trace in the capture directory, and the capture's
//! address set on that alert's transitions from then on (so sinks and re-sends carry it). When
//! the alert's wait in progress ends (`Updated`), the rings are read once more and the capture
//! rewritten with both readings, so a stall longer than a ring's reach is kept whole from its
//! start to its end. At most one new capture per `MIN_GAP`; while the writer is busy a capture is
//! suppressed, never waited for. Everything is counted (`runqlat_captures_total`).
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use latency_common::maps::CaptureRecord;

use crate::{
    alert::engine::{AlertKey, Transition},
    host::captures::Store,
    kernel::{capture, drain, probe::Probe},
    metrics::instruments::capture::CaptureStats,
    model::{self, perfetto},
};

/// New captures at most this often (re-reading for an alert that already has one excepted).
const MIN_GAP: Duration = Duration::from_secs(10);
/// Captures the writer may have waiting.
const QUEUE: usize = 2;
/// Readings the writer keeps to merge a capture rewritten when its wait ends.
const KEPT: usize = 4;

struct Job {
    name: String,
    records: Vec<CaptureRecord>,
}

pub(super) struct Capturer {
    slots: u32,
    jobs: mpsc::SyncSender<Job>,
    stats: Arc<CaptureStats>,
    last: Option<Instant>,
    /// Each firing alert's capture, until it resolves.
    names: HashMap<AlertKey, String>,
}

impl Capturer {
    /// The trigger for rings of `slots` records, writing into `store` on a thread of its own.
    pub(super) fn start(store: Store, slots: u32, stats: Arc<CaptureStats>) -> std::io::Result<Capturer> {
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
        Ok(Capturer { slots, jobs, stats, last: None, names: HashMap::new() })
    }

    /// Takes the captures this drain's transitions call for and sets their addresses on them.
    pub(super) fn annotate(&mut self, probe: &Probe, transitions: &mut [Transition]) {
        for t in transitions {
            match t {
                Transition::Fired(a) => {
                    if self.last.is_some_and(|at| at.elapsed() < MIN_GAP) {
                        self.stats.suppressed();
                        continue;
                    }
                    let name = model::capture::name(a.worst.end_unix_ns, a.worst.cpu, a.worst.victim_tid);
                    if self.take(probe, &name) {
                        self.last = Some(Instant::now());
                        a.capture = Some(model::capture::url(&name));
                        self.names.insert(a.key.clone(), name);
                    }
                }
                Transition::Updated(a) => {
                    if let Some(name) = self.names.get(&a.key).cloned() {
                        // Its wait has ended: the rest of it, into the same capture.
                        self.take(probe, &name);
                        a.capture = Some(model::capture::url(&name));
                    }
                }
                Transition::Grown(a) => a.capture = self.names.get(&a.key).map(|n| model::capture::url(n)),
                Transition::Resolved(a) => a.capture = self.names.remove(&a.key).map(|n| model::capture::url(&n)),
            }
        }
    }

    /// Reads the rings and queues them as capture `name`; whether it was queued.
    fn take(&self, probe: &Probe, name: &str) -> bool {
        let rings = match capture::read(probe, self.slots) {
            Ok(rings) => rings,
            Err(e) => {
                log::warn!("a capture could not be read: {e} (runqlat_captures_total{{result=\"failed\"}})");
                self.stats.failed();
                return false;
            }
        };
        self.stats.torn(rings.cpus.iter().map(|c| c.torn).sum());
        match self.jobs.try_send(Job { name: name.to_owned(), records: rings.records }) {
            Ok(()) => true,
            Err(_) => {
                self.stats.suppressed();
                false
            }
        }
    }
}

/// The writer thread: each reading merged with the earlier ones of the same capture, encoded and
/// stored, until the trigger is gone.
fn write(store: &Store, host: &perfetto::Host, inbox: &mpsc::Receiver<Job>, stats: &CaptureStats) {
    let mut kept: VecDeque<(String, Vec<CaptureRecord>)> = VecDeque::new();
    for job in inbox {
        let records = match kept.iter().position(|(name, _)| *name == job.name) {
            Some(i) => {
                let (_, earlier) = kept.remove(i).unwrap_or_default();
                capture::merge(earlier, job.records)
            }
            None => job.records,
        };
        match store.write(&job.name, &perfetto::trace(&records, host)) {
            Ok(removed) => {
                stats.written();
                stats.removed(removed);
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
        kept.push_back((job.name, records));
        if kept.len() > KEPT {
            kept.pop_front();
        }
    }
}
