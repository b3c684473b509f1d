//! The kernel program's clock (`bpf_ktime_get_ns` = CLOCK_MONOTONIC) and its link to wall time.

/// CLOCK_MONOTONIC in ns.
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// CPU time of the calling thread in ns.
pub fn thread_cpu_ns() -> u64 {
    read(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CLOCK_REALTIME in ns since the Unix epoch.
pub fn realtime_ns() -> u64 {
    read(libc::CLOCK_REALTIME)
}

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a valid out-pointer; these clocks cannot fail on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Converts monotonic stamps to wall-clock time, from one pair of readings taken together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WallClock {
    mono_ns: u64,
    real_ns: u64,
}

impl WallClock {
    pub fn now() -> WallClock {
        // Read realtime between two monotonic reads and take their midpoint.
        let a = monotonic_ns();
        let real_ns = realtime_ns();
        let b = monotonic_ns();
        WallClock { mono_ns: a + (b - a) / 2, real_ns }
    }

    #[cfg(test)]
    pub fn fixed(mono_ns: u64, real_ns: u64) -> WallClock {
        WallClock { mono_ns, real_ns }
    }

    /// The Unix time (ns) of a monotonic stamp.
    pub fn unix_ns(self, mono_ns: u64) -> u64 {
        if mono_ns >= self.mono_ns {
            self.real_ns.saturating_add(mono_ns - self.mono_ns)
        } else {
            self.real_ns.saturating_sub(self.mono_ns - mono_ns)
        }
    }
}
