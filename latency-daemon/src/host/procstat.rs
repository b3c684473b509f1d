//! This process's own cost, from /proc/self: CPU seconds, resident memory, start time — the
//! standard `process_*` figures, so the monitor's overhead is visible next to what it measures.
use crate::model::exposition::ProcessSample;

/// Clock ticks per second of /proc's tick counts (USER_HZ, 100 on every Linux we meet).
pub(super) fn user_hz() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|&t| t > 0).unwrap_or(100)
}

fn ticks_per_second() -> f64 {
    user_hz() as f64
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as u64 } else { 4096 }
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcStat {
    /// User + system CPU time.
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    /// Seconds since boot when the process started.
    pub start_seconds_after_boot: f64,
}

impl ProcStat {
    /// Read /proc/self/stat; `None` if it cannot be read or parsed (the metric is then left out).
    pub fn read() -> Option<ProcStat> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        ProcStat::parse(&stat, ticks_per_second(), page_size())
    }

    /// Fields after the `(comm)` field, which may itself contain spaces and parentheses.
    pub fn parse(stat: &str, ticks: f64, page: u64) -> Option<ProcStat> {
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // After comm: state is field 3, utime 14, stime 15, starttime 22, rss 24 (1-based).
        let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
        Some(ProcStat {
            cpu_seconds: (field(14)? + field(15)?) as f64 / ticks,
            resident_bytes: field(24)? * page,
            start_seconds_after_boot: field(22)? as f64 / ticks,
        })
    }
}

/// This process now, as the `process_*` metrics show it; `None` if /proc/self/stat is unreadable.
pub fn sample() -> Option<ProcessSample> {
    let p = ProcStat::read()?;
    Some(ProcessSample {
        cpu_seconds: p.cpu_seconds,
        resident_bytes: p.resident_bytes,
        start_time_unix: boot_time_unix().map(|boot| boot + p.start_seconds_after_boot),
    })
}

/// Unix time of boot, from /proc/stat's `btime`.
pub fn boot_time_unix() -> Option<f64> {
    let stat = std::fs::read_to_string(super::paths::proc("stat")).ok()?;
    stat.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_with_a_hostile_comm() {
        let line = "4242 (a) b (c) R 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 12345 100000 2560 \
                    18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let p = ProcStat::parse(line, 100.0, 4096).unwrap();
        assert_eq!(p.cpu_seconds, 3.0);
        assert_eq!(p.resident_bytes, 2560 * 4096);
        assert_eq!(p.start_seconds_after_boot, 123.45);
    }

    #[test]
    fn reads_itself() {
        let p = ProcStat::read().unwrap();
        assert!(p.resident_bytes > 0);
        assert!(boot_time_unix().unwrap() > 1e9);
    }
}
