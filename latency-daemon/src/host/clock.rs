//! The kernel program's clock (`bpf_ktime_get_ns` = CLOCK_MONOTONIC) and a thread's CPU time,
//! read from the kernel; a [`WallClock`] linking monotonic stamps to the wall clock (the one in
//! `model::wall`).
use crate::model::wall::{WallClock, now_unix_ns};

/// CLOCK_MONOTONIC in ns.
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// CPU time of the calling thread in ns.
pub fn thread_cpu_ns() -> u64 {
    read(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a valid out-pointer; these clocks cannot fail on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Monotonic and wall time read together: realtime between two monotonic reads, paired with
/// their midpoint.
pub fn wall_clock() -> WallClock {
    let a = monotonic_ns();
    let real_ns = now_unix_ns();
    let b = monotonic_ns();
    WallClock::new(a + (b - a) / 2, real_ns)
}
