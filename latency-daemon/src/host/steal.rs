//! The host's /proc/stat (under `--path.procfs`) in; each CPU's steal time since boot, as the
//! kernel reports it (the 8th value of each `cpuN` line, in USER_HZ ticks), in ns out.
use std::io;

/// One CPU's steal time since boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSteal {
    pub cpu: u32,
    pub ns: u64,
}

/// Each online CPU's steal (offline CPUs have no line); an error if /proc/stat cannot be read or
/// has no `cpuN` line with a steal value.
pub fn read() -> io::Result<Vec<CpuSteal>> {
    let text = std::fs::read_to_string(super::paths::proc("stat"))?;
    let steal = parse(&text, super::procstat::user_hz());
    if steal.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "no cpuN line with a steal value"));
    }
    Ok(steal)
}

/// The `cpuN` lines of /proc/stat's `text` with at least 8 values (older kernels and some
/// emulations print fewer: such a line is skipped, never read as another column); `ticks`:
/// USER_HZ. The all-CPU `cpu` line is skipped.
pub fn parse(text: &str, ticks: u64) -> Vec<CpuSteal> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let cpu = fields.next()?.strip_prefix("cpu")?.parse::<u32>().ok()?;
            let values: Vec<u64> = fields.map(str::parse).collect::<Result<_, _>>().ok()?;
            let steal = *values.get(7)?;
            Some(CpuSteal { cpu, ns: ticks_to_ns(steal, ticks) })
        })
        .collect()
}

/// USER_HZ ticks in ns (exact for USER_HZ 100, the value on every Linux architecture but Alpha).
fn ticks_to_ns(n: u64, ticks: u64) -> u64 {
    let ns = u128::from(n) * 1_000_000_000 / u128::from(ticks.max(1));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_the_eighth_value_of_each_cpu_line() {
        let stat = "\
cpu  10132153 290696 3084719 46828483 16683 0 25195 1735 0 0
cpu0 1393280 32966 572056 13343292 6130 0 17875 1234 0 0
cpu1 1335880 31398 548102 13385431 4317 0 2467 501 0 0
cpu2 1 2 3 4 5 6 7
cpu3 1 2 3 4 5 6 7 x 0 0
cpu4 1 2 3 4 5 6 7 8
intr 1462898 0 9 0
ctxt 115315
btime 1700000000
softirq 1 2 3
";
        let steal = parse(stat, 100);
        assert_eq!(
            steal,
            [
                CpuSteal { cpu: 0, ns: 12_340_000_000 },
                CpuSteal { cpu: 1, ns: 5_010_000_000 },
                CpuSteal { cpu: 4, ns: 80_000_000 }
            ],
            "cpu2 (7 values) and cpu3 (not a number) skipped, the all-CPU line left out"
        );
        assert_eq!(parse(stat, 1000)[0].ns, 1_234_000_000);
        assert!(parse("cpu 1 2 3 4 5 6 7 8\nintr 0\n", 100).is_empty());
    }

    #[test]
    fn reads_this_machine() {
        // Every Linux since 2.6.11 prints the steal column; this test runs on one.
        let steal = read().unwrap_or_else(|e| panic!("/proc/stat: {e}"));
        assert!(!steal.is_empty());
    }
}
