//! Named workload threads in this test process (names via prctl, as `ps`/perf/our comm show
//! them). Each thread does its work, reads its own `run_delay`, then parks — blocked, so it
//! accrues no further run-queue delay — until the test releases it.
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

/// What a thread did, reported by the thread itself.
#[derive(Clone, Debug)]
pub struct Done {
    pub name: String,
    pub tid: u32,
    /// Loop iterations: sleeps completed for sleepers, 0 for spinners.
    pub sleeps: u64,
    /// Its `run_delay` (`/proc/thread-self/schedstat`), read as its last act before parking.
    pub run_delay_ns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Pure spin (the experiment's `cpu` and `compete`).
    Spin,
    /// Loop on a 1 ms sleep (the experiment's `io`).
    Sleep1ms,
}

/// Parked threads, released when this is dropped.
#[derive(Default)]
pub struct Park {
    open: Arc<AtomicBool>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for Park {
    fn drop(&mut self) {
        self.open.store(true, Ordering::SeqCst);
        for h in &self.handles {
            h.thread().unpark();
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

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

/// This thread's `run_delay` in ns.
fn own_run_delay() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    text.split_whitespace().nth(1).and_then(|f| f.parse().ok()).unwrap_or(0)
}

/// Run `threads` threads of `kind` named `prefix/i` for `secs` each, from when each starts;
/// returns once every thread is done and parked.
///
/// No start barrier, and parking with `thread::park` (no lock to contend) after reading
/// run_delay: a thread that sleeps can be left on its run queue by EEVDF's delayed dequeue and
/// migrated while asleep, and the kernel's run_delay then counts part of that sleep as waiting
/// (perf sched and our program, rightly, see no wait there).
pub fn phase(park: &mut Park, prefix: &str, kind: Kind, threads: usize, secs: f64) -> Vec<Done> {
    let (tx, rx) = mpsc::channel();
    for i in 0..threads {
        let name = format!("{prefix}/{i}");
        let tx = tx.clone();
        let open = park.open.clone();
        park.handles.push(std::thread::spawn(move || {
            set_thread_name(name.as_bytes());
            let tid = gettid();
            let until = Instant::now() + Duration::from_secs_f64(secs);
            let mut sleeps = 0u64;
            match kind {
                Kind::Spin => {
                    let mut x = 0u64;
                    while Instant::now() < until {
                        for _ in 0..1000 {
                            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                        }
                    }
                }
                Kind::Sleep1ms => {
                    while Instant::now() < until {
                        // SAFETY: plain usleep, as the experiment's io mode does.
                        unsafe { libc::usleep(1000) };
                        sleeps += 1;
                    }
                }
            }
            let run_delay_ns = own_run_delay();
            let _ = tx.send(Done { name, tid, sleeps, run_delay_ns });
            while !open.load(Ordering::SeqCst) {
                std::thread::park();
            }
        }));
    }
    drop(tx);
    // Parked threads keep their sender, so take exactly one message per thread.
    let mut done: Vec<Done> = rx.iter().take(threads).collect();
    done.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(done.len(), threads, "a {prefix} thread died");
    // Let the last one finish blocking.
    std::thread::sleep(Duration::from_millis(20));
    done
}

pub fn cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
