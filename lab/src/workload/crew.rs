//! The workload's threads: in, a spec (name, body, nice); out, a named thread that does the work,
//! reports itself and then blocks until released, so it accrues no delay after its last report.
//! The same crew runs in the workload process (the demo's) and in a test process.
use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
    mpsc::{self, Sender},
};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context as _;

use super::event::{Done, Event};
use crate::oracle::run_delay::Schedstat;

/// What a thread does for its `secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// Pure spin (`cpu`, `compete`, `stall`'s hogs, `nice`).
    Spin,
    /// Loop on usleep(1000) (`io`).
    Sleep1ms,
    /// lat3's loop: read CLOCK_MONOTONIC as fast as possible, keep the largest gap.
    ClockLoop,
}

#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub group: String,
    pub body: Body,
    pub nice: i32,
}

/// `count` threads named `prefix/0`, `prefix/1`… in group `prefix`, each doing `body` at nice 0.
pub fn group(prefix: &str, body: Body, count: usize) -> Vec<Spec> {
    (0..count).map(|i| Spec { name: format!("{prefix}/{i}"), group: prefix.to_owned(), body, nice: 0 }).collect()
}

/// Spawned threads; they block after reporting until `release` (or drop).
#[derive(Debug, Default)]
pub struct Crew {
    open: Arc<AtomicBool>,
    handles: Vec<JoinHandle<()>>,
}

impl Crew {
    /// Spawns one thread per spec, each working `secs` from its own start; they report on
    /// `events`.
    pub fn spawn(specs: Vec<Spec>, secs: f64, events: &Sender<Event>) -> anyhow::Result<Crew> {
        let mut crew = Crew::default();
        crew.add(specs, secs, events)?;
        Ok(crew)
    }

    /// Spawns more threads into this crew, each announcing its start (`Started`).
    pub fn add(&mut self, specs: Vec<Spec>, secs: f64, events: &Sender<Event>) -> anyhow::Result<()> {
        self.add_threads(specs, secs, events, true)
    }

    /// Spawns the threads at once: no start barrier (a thread sleeping at a barrier can be
    /// migrated while EEVDF keeps it queued, and run_delay would count part of that sleep).
    fn add_threads(
        &mut self,
        specs: Vec<Spec>,
        secs: f64,
        events: &Sender<Event>,
        announce: bool,
    ) -> anyhow::Result<()> {
        for spec in specs {
            let events = events.clone();
            let open = self.open.clone();
            let handle = std::thread::Builder::new()
                .name(spec.name.clone())
                .spawn(move || work(spec, secs, &events, announce, &open))
                .context("spawning a workload thread")?;
            self.handles.push(handle);
        }
        Ok(())
    }

    /// Runs `specs` in this process beside the threads already parked here, and returns their
    /// reports, by name, once every one is done and parked (a phase of a test's workload). The
    /// threads do not announce their start: the caller, blocked on their reports, would wake
    /// for each and run beside them.
    pub fn phase(&mut self, specs: Vec<Spec>, secs: f64) -> anyhow::Result<Vec<Done>> {
        let count = specs.len();
        let (tx, rx) = mpsc::channel();
        self.add_threads(specs, secs, &tx, false)?;
        drop(tx);
        let mut done = Vec::new();
        // Parked threads keep their senders, so stop at the last Done, not at disconnect.
        while done.len() < count {
            if let Event::Done(d) = rx.recv().context("a workload thread died")? {
                done.push(d);
            }
        }
        done.sort_by(|a, b| a.name.cmp(&b.name));
        // Let the last one finish blocking.
        std::thread::sleep(Duration::from_millis(20));
        Ok(done)
    }

    /// Lets every blocked thread return, and joins them.
    pub fn release(&mut self) {
        self.open.store(true, Ordering::SeqCst);
        for handle in &self.handles {
            handle.thread().unpark();
        }
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        self.release();
    }
}

fn work(spec: Spec, secs: f64, events: &Sender<Event>, announce: bool, open: &AtomicBool) {
    set_thread_name(spec.name.as_bytes());
    let tid = gettid();
    if spec.nice != 0 {
        // SAFETY: setpriority on our own tid; on Linux PRIO_PROCESS with a tid sets that thread.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, spec.nice) };
    }
    let nice = current_nice(tid);
    if announce {
        let _ = events.send(Event::Started { name: spec.name.clone(), tid, group: spec.group.clone(), nice });
    }
    let until = now_ns(libc::CLOCK_MONOTONIC) + (secs * 1e9) as u64;
    let mut sleeps = 0;
    let mut longest_sleep_ns = 0;
    let mut largest = None;
    match spec.body {
        Body::Spin => spin(until),
        Body::Sleep1ms => {
            let mut now = now_ns(libc::CLOCK_MONOTONIC);
            while now < until {
                // SAFETY: plain usleep, as the experiment's io mode does.
                unsafe { libc::usleep(1000) };
                let after = now_ns(libc::CLOCK_MONOTONIC);
                longest_sleep_ns = longest_sleep_ns.max(after - now);
                (now, sleeps) = (after, sleeps + 1);
            }
        }
        Body::ClockLoop => largest = Some(clock_loop(until, &spec.name, tid, events)),
    }
    let done = Done {
        name: spec.name,
        tid,
        group: spec.group,
        nice,
        weight: own_weight(),
        sleeps,
        longest_sleep_ns,
        migrations: own_migrations(),
        cpu_ns: now_ns(libc::CLOCK_THREAD_CPUTIME_ID),
        // Last act: after this the thread only blocks, so no later delay can be missed here.
        run_delay_ns: own_run_delay(),
        largest_gap_ns: largest.map(|(gap, _)| gap),
        largest_gap_end_ns: largest.map(|(_, end)| end),
        blocks: own_blocks(),
    };
    let _ = events.send(Event::Done(done));
    // park() (no lock to contend) until released; a spurious return just parks again.
    while !open.load(Ordering::SeqCst) {
        std::thread::park();
    }
}

fn spin(until: u64) {
    let mut x = 0u64;
    while now_ns(libc::CLOCK_MONOTONIC) < until {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

/// Returns the largest gap and when it ended; reports each second's largest as it goes.
fn clock_loop(until: u64, name: &str, tid: u32, events: &Sender<Event>) -> (u64, u64) {
    const OVER: u64 = 10_000_000;
    let mut prev = now_ns(libc::CLOCK_MONOTONIC);
    let mut second_ends = prev + 1_000_000_000;
    let (mut second, mut over) = (1, 0);
    // (gap, end) of this second and of the whole run.
    let (mut largest, mut overall) = ((0, 0), (0, 0));
    loop {
        let now = now_ns(libc::CLOCK_MONOTONIC);
        let gap = now - prev;
        if gap > largest.0 {
            largest = (gap, now);
        }
        over += u32::from(gap > OVER);
        prev = now;
        if now >= second_ends || now >= until {
            if largest.0 > overall.0 {
                overall = largest;
            }
            let _ = events.send(Event::Gap {
                name: name.to_owned(),
                tid,
                second,
                largest_gap_ns: largest.0,
                largest_gap_end_ns: largest.1,
                gaps_over_10ms: over,
            });
            if now >= until {
                return overall;
            }
            (second, largest, over) = (second + 1, (0, 0), 0);
            second_ends += 1_000_000_000;
            // Reporting took time that is not a scheduling gap.
            prev = now_ns(libc::CLOCK_MONOTONIC);
        }
    }
}

pub fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec; MONOTONIC and THREAD_CPUTIME_ID always exist.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Names the calling thread as `ps`, perf and our `comm` show it: the first 15 bytes, any bytes.
pub fn set_thread_name(name: &[u8]) {
    let mut buf = [0u8; 16];
    let n = name.len().min(15);
    buf[..n].copy_from_slice(&name[..n]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated buffer of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, buf.as_ptr()) };
}

pub fn gettid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::gettid() as u32 }
}

fn current_nice(tid: u32) -> i32 {
    // SAFETY: getpriority on our own tid; -1 is also a valid nice, and errors cannot happen here.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) }
}

/// This thread's run_delay in ns (0 if the kernel shows none).
fn own_run_delay() -> u64 {
    Schedstat::own().map_or(0, |s| s.run_delay_ns)
}

/// How often this thread has blocked: its voluntary context switches (`getrusage(RUSAGE_THREAD)`).
fn own_blocks() -> Option<u64> {
    // SAFETY: getrusage fills the zeroed struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is the calling thread.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    (rc == 0).then(|| u64::try_from(usage.ru_nvcsw).unwrap_or(0))
}

/// How often the kernel moved this thread between CPUs (`se.nr_migrations`).
fn own_migrations() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/sched").ok()?;
    super::weights::parse_sched_field(&text, "se.nr_migrations")
}

/// This thread's load weight as the kernel holds it.
fn own_weight() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/sched").ok()?;
    super::weights::parse_sched_weight(&text)
}
