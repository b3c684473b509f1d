//! The experiment's cgroups: in, child names and which one gets a CPU limit; out, a cgroup v2
//! directory per name (the daemon labels waits by the cgroup2 path) and, where the cpu
//! controller is on a v1 mount (a hybrid host), a v1 cpu cgroup of the same name that carries
//! the limit; on a pure cgroup2 host the limit is cpu.max. Both mounts are found in
//! /proc/self/mountinfo. Everything inside is killed and every directory removed on drop, pass
//! or fail.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::services::cgroup_mounts_in;

/// A CPU limit: `quota_us` of CPU time every `period_us`.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub quota_us: u64,
    pub period_us: u64,
}

/// Where the cpu controller is.
#[derive(Debug)]
enum Cpu {
    /// A cgroup v1 cpu hierarchy: our parent directory there.
    V1(PathBuf),
    /// cgroup2's own cpu controller; `enabled_root` is set when we had to turn it on in the
    /// root's subtree_control (turned off again on drop).
    V2 { enabled_root: Option<PathBuf> },
}

#[derive(Debug)]
pub struct Groups {
    /// `<cgroup2 mount>/runqlat-causes-<pid>`.
    v2: PathBuf,
    cpu: Cpu,
    /// Our parent as the daemon labels it: relative to the cgroup2 mount, starting with '/'.
    pub path: String,
    /// In words, for the report: which files hold the limit.
    pub how: String,
}

fn write(path: &Path, value: &str) -> anyhow::Result<()> {
    std::fs::write(path, value).with_context(|| format!("writing {value:?} to {}", path.display()))
}

fn mkdir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir(dir).with_context(|| format!("mkdir {}", dir.display()))
}

impl Groups {
    /// `runqlat-causes-<our pid>` right under the cgroup2 mount (and the v1 cpu mount, if any).
    pub fn new() -> anyhow::Result<Groups> {
        Groups::named(&format!("runqlat-causes-{}", std::process::id()))
    }

    /// `name` right under the cgroup2 mount (and the v1 cpu mount, if any); it must not exist.
    pub fn named(name: &str) -> anyhow::Result<Groups> {
        let info = std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
        let mounts = cgroup_mounts_in(&info);
        let mount = mounts.iter().find(|m| m.v2).map(|m| m.point.clone()).context(
            "no cgroup2 file system is mounted (see /proc/self/mountinfo): the daemon labels waits by cgroup v2 path",
        )?;
        let v1 = mounts.iter().find(|m| m.v1_with("cpu")).map(|m| m.point.clone());
        let v2 = mount.join(name);
        let (cpu, how) = match v1 {
            Some(v1) => {
                let how = format!(
                    "cgroup v1 cpu controller at {} (cpu.cfs_quota_us / cpu.cfs_period_us), the task also in the \
                     cgroup2 directory of the same name at {} so the daemon names it",
                    v1.display(),
                    mount.display()
                );
                (Cpu::V1(v1.join(name)), how)
            }
            None => {
                let controllers = std::fs::read_to_string(mount.join("cgroup.controllers")).unwrap_or_default();
                if !controllers.split_whitespace().any(|c| c == "cpu") {
                    bail!("no cpu controller: none on a cgroup v1 mount, none in {}", mount.display());
                }
                let root = mount.join("cgroup.subtree_control");
                let on = std::fs::read_to_string(&root).unwrap_or_default().split_whitespace().any(|c| c == "cpu");
                if !on {
                    write(&root, "+cpu")?;
                }
                let how = format!("cgroup2's cpu controller at {} (cpu.max)", mount.display());
                (Cpu::V2 { enabled_root: (!on).then_some(root) }, how)
            }
        };
        // From here on, drop undoes whatever was made.
        let groups = Groups { v2, cpu, path: format!("/{name}"), how };
        mkdir(&groups.v2)?;
        match &groups.cpu {
            Cpu::V1(dir) => mkdir(dir)?,
            Cpu::V2 { .. } => write(&groups.v2.join("cgroup.subtree_control"), "+cpu")?,
        }
        Ok(groups)
    }

    /// A child `name` in both hierarchies, limited to `limit` if given.
    pub fn make(&self, name: &str, limit: Option<Limit>) -> anyhow::Result<()> {
        mkdir(&self.v2.join(name))?;
        match (&self.cpu, limit) {
            (Cpu::V1(dir), limit) => {
                let dir = dir.join(name);
                mkdir(&dir)?;
                if let Some(l) = limit {
                    // The period first: a quota is checked against the period in force.
                    write(&dir.join("cpu.cfs_period_us"), &l.period_us.to_string())?;
                    write(&dir.join("cpu.cfs_quota_us"), &l.quota_us.to_string())?;
                }
            }
            (Cpu::V2 { .. }, Some(l)) => {
                write(&self.v2.join(name).join("cpu.max"), &format!("{} {}", l.quota_us, l.period_us))?
            }
            (Cpu::V2 { .. }, None) => {}
        }
        Ok(())
    }

    /// The daemon's label for child `name`.
    pub fn label(&self, name: &str) -> String {
        format!("{}/{name}", self.path)
    }

    /// Moves process `pid` into child `name` of both hierarchies.
    pub fn enter(&self, name: &str, pid: u32) -> anyhow::Result<()> {
        write(&self.v2.join(name).join("cgroup.procs"), &pid.to_string())?;
        if let Cpu::V1(dir) = &self.cpu {
            write(&dir.join(name).join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// How long child `name` has been throttled by its limit, from cpu.stat (v1 `throttled_time`
    /// in ns, cgroup2 `throttled_usec`).
    pub fn throttled_ns(&self, name: &str) -> anyhow::Result<u64> {
        let (file, key, scale) = match &self.cpu {
            Cpu::V1(dir) => (dir.join(name).join("cpu.stat"), "throttled_time", 1),
            Cpu::V2 { .. } => (self.v2.join(name).join("cpu.stat"), "throttled_usec", 1000),
        };
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok())
            .map(|v| v * scale)
            .with_context(|| format!("no {key} in {}", file.display()))
    }
}

/// Kills what is left in `dir`'s children and `dir`, then removes them, deepest first, retrying
/// for a few seconds while the killed leave.
fn remove(dir: &Path) {
    let children: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    for d in children.iter().chain([&dir.to_path_buf()]) {
        if let Ok(pids) = std::fs::read_to_string(d.join("cgroup.procs")) {
            for pid in pids.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                // SAFETY: kill(2) on processes in a cgroup this process created for itself.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for d in children.iter().chain([&dir.to_path_buf()]) {
        while std::fs::remove_dir(d).is_err() && d.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if d.exists() {
            eprintln!("demo: cgroup left behind: {}", d.display());
        }
    }
}

impl Drop for Groups {
    fn drop(&mut self) {
        remove(&self.v2);
        match &self.cpu {
            Cpu::V1(dir) => remove(dir),
            Cpu::V2 { enabled_root: Some(root) } => {
                let _ = std::fs::write(root, "-cpu");
            }
            Cpu::V2 { enabled_root: None } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::CgroupMount;

    #[test]
    fn finds_the_v1_cpu_mount_and_cgroup2() {
        let info = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n\
                    33 31 0:30 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n\
                    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n";
        let mounts = cgroup_mounts_in(info);
        let v1: Vec<PathBuf> = mounts.iter().filter(|m| m.v1_with("cpu")).map(|m| m.point.clone()).collect();
        assert_eq!(v1, [PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")]);
        let v2: Vec<&CgroupMount> = mounts.iter().filter(|m| m.v2).collect();
        assert_eq!((v2.len(), v2[0].point.as_path()), (1, Path::new("/sys/fs/cgroup/unified")));
    }
}
