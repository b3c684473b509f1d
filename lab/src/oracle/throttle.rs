//! The kernel's own account of a CPU limit (CFS bandwidth): in, a process; out, the cgroup that
//! holds its limit — the v1 cpu controller's directory on a hybrid host, else its cgroup v2 one —
//! the limit, the threads in it and how long it has been throttled (cpu.stat), which the daemon's
//! cause="throttled" is checked against.
use std::path::PathBuf;

use anyhow::Context as _;

use crate::services::{CgroupMount, cgroup_mounts_in};

/// The cpu cgroup of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuCgroup {
    pub dir: PathBuf,
    /// A v1 cpu hierarchy's (cpu.cfs_quota_us, `throttled_time` in ns), not v2's (cpu.max,
    /// `throttled_usec`).
    pub v1: bool,
}

impl CpuCgroup {
    /// Where `pid`'s cpu controller is: from /proc/<pid>/cgroup and this process's mountinfo.
    pub fn of(pid: u32) -> anyhow::Result<CpuCgroup> {
        let cgroup =
            std::fs::read_to_string(format!("/proc/{pid}/cgroup")).with_context(|| format!("cgroup of {pid}"))?;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
        locate(&cgroup, &mountinfo).with_context(|| format!("no cpu controller for {pid} in\n{cgroup}"))
    }

    /// How long the group has been throttled by its own limit so far, ns (cpu.stat).
    pub fn throttled_ns(&self) -> anyhow::Result<u64> {
        let text = self.read("cpu.stat")?;
        let ns =
            if self.v1 { field(&text, "throttled_time") } else { field(&text, "throttled_usec").map(|us| us * 1000) };
        ns.with_context(|| format!("no throttled time in {}/cpu.stat:\n{text}", self.dir.display()))
    }

    /// How long it has been throttled by its limit or an ancestor's, ns (cpu.stat.local, 6.8+:
    /// the kernel's `throttled_clock_self_time`), or `None` on an older kernel.
    pub fn throttled_local_ns(&self) -> Option<u64> {
        let text = self.read("cpu.stat.local").ok()?;
        if self.v1 { field(&text, "throttled_time") } else { field(&text, "throttled_usec").map(|us| us * 1000) }
    }

    /// Its limit as (quota, period) in µs; `None` without one.
    pub fn limit_us(&self) -> anyhow::Result<Option<(u64, u64)>> {
        let (quota, period) = if self.v1 {
            (self.read("cpu.cfs_quota_us")?, self.read("cpu.cfs_period_us")?)
        } else {
            let max = self.read("cpu.max")?;
            let mut parts = max.split_whitespace();
            (parts.next().unwrap_or_default().to_owned(), parts.next().unwrap_or_default().to_owned())
        };
        // "-1" (v1) and "max" (v2) mean no limit.
        Ok(quota.trim().parse::<u64>().ok().zip(period.trim().parse::<u64>().ok()))
    }

    /// The threads in it now.
    pub fn threads(&self) -> anyhow::Result<usize> {
        Ok(self.read(if self.v1 { "tasks" } else { "cgroup.threads" })?.lines().count())
    }

    fn read(&self, file: &str) -> anyhow::Result<String> {
        let path = self.dir.join(file);
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    }
}

/// The v1 line whose controllers include `cpu` under the mount of that hierarchy, else the v2
/// ("0::") line under the cgroup2 mount.
fn locate(proc_cgroup: &str, mountinfo: &str) -> Option<CpuCgroup> {
    let mounts = cgroup_mounts_in(mountinfo);
    let under = |m: &CgroupMount, path: &str| {
        let rel = path.strip_prefix(m.root.as_str()).unwrap_or(path).trim_start_matches('/');
        m.point.join(rel)
    };
    let lines = proc_cgroup.lines().filter_map(|l| {
        let mut parts = l.splitn(3, ':');
        Some((parts.next()?, parts.next()?, parts.next()?))
    });
    let v1 = lines.clone().find(|(id, controllers, _)| *id != "0" && controllers.split(',').any(|c| c == "cpu"));
    if let Some((_, _, path)) = v1 {
        let mount = mounts.iter().find(|m| m.v1_with("cpu"))?;
        return Some(CpuCgroup { dir: under(mount, path), v1: true });
    }
    let (_, _, path) = lines.clone().find(|(id, _, _)| *id == "0")?;
    let mount = mounts.iter().find(|m| m.v2)?;
    Some(CpuCgroup { dir: under(mount, path), v1: false })
}

/// A `key value` line of a cpu.stat.
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                          32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
                          33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n\
                          34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n\
                          41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

    #[test]
    fn the_v1_cpu_hierarchy_first_then_cgroup2() {
        let hybrid = "4:cpuset:/libpod_parent/libpod-abc\n2:cpu:/libpod_parent/libpod-abc\n\
                      3:cpuacct:/libpod_parent/libpod-abc\n0::/libpod_parent/libpod-abc\n";
        assert_eq!(
            locate(hybrid, HYBRID),
            Some(CpuCgroup { dir: "/sys/fs/cgroup/cpu/libpod_parent/libpod-abc".into(), v1: true })
        );
        let v2 = "0::/machine.slice/libpod-abc.scope\n";
        let unified = "25 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            locate(v2, unified),
            Some(CpuCgroup { dir: "/sys/fs/cgroup/machine.slice/libpod-abc.scope".into(), v1: false })
        );
        // cpuset and cpuacct are not cpu; a bind-mounted subtree is joined below its root.
        assert_eq!(locate("3:cpuacct:/a\n", HYBRID.lines().nth(2).unwrap_or_default()), None);
        let bound = "32 31 0:29 /kubepods /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n";
        assert_eq!(
            locate("2:cpu,cpuacct:/kubepods/pod1/c\n", bound),
            Some(CpuCgroup { dir: "/sys/fs/cgroup/cpu/pod1/c".into(), v1: true })
        );
    }

    #[test]
    fn cpu_stat_fields_by_exact_key() {
        let v1 = "nr_periods 60\nnr_throttled 59\nthrottled_time 5312000000\nnr_bursts 0\nburst_time 0\n";
        assert_eq!(field(v1, "throttled_time"), Some(5_312_000_000));
        assert_eq!(field(v1, "throttled"), None);
        assert_eq!(field("usage_usec 9\nthrottled_usec 42\n", "throttled_usec"), Some(42));
    }
}
