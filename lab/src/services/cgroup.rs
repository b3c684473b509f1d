//! A cgroup v2 directory of a test's own under the cgroup2 mount (found in /proc/self/mountinfo,
//! wherever it is): in, a name; out, the directory, its path as the daemon labels it, and
//! processes started inside. Everything inside is killed and the directory removed on drop.
use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context as _;

use crate::guard::{Forked, Proc};

#[derive(Debug)]
pub struct TestCgroup {
    dir: PathBuf,
    /// What `new` created right under the mount, when `name` had a '/' in it (nested dirs), so
    /// drop removes the parents too; `None` for a single directory.
    top: Option<PathBuf>,
    /// Its path as the daemon labels it: relative to the cgroup2 mount, starting with '/'.
    pub path: String,
}

impl TestCgroup {
    /// `runqlat-test-<our pid>-<name>` right under the cgroup2 mount.
    pub fn new(name: &str) -> anyhow::Result<TestCgroup> {
        let mount = cgroup2_mount()?;
        let top = format!("runqlat-test-{}-{name}", std::process::id());
        let dir = mount.join(&top);
        std::fs::create_dir_all(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        let first = top.split('/').next().map(|f| mount.join(f)).filter(|f| *f != dir);
        Ok(TestCgroup { dir, top: first, path: format!("/{top}") })
    }

    /// A child cgroup `name` inside this one (removed on drop, like its parent: drop it first).
    pub fn child(&self, name: &str) -> anyhow::Result<TestCgroup> {
        let dir = self.dir.join(name);
        std::fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        Ok(TestCgroup { dir, top: None, path: format!("{}/{name}", self.path) })
    }

    /// Moves process `pid` (all its threads) into this cgroup.
    pub fn enter(&self, pid: u32) -> anyhow::Result<()> {
        let procs = self.dir.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string()).with_context(|| format!("moving {pid} into {}", procs.display()))
    }

    /// Moves this process into this cgroup until the guard drops, then back where it was (before
    /// the cgroup goes, which kills whatever is still inside).
    pub fn enter_self(&self) -> anyhow::Result<Inside<'_>> {
        let own = std::fs::read_to_string("/proc/self/cgroup").context("reading /proc/self/cgroup")?;
        let home = own.lines().find_map(|l| l.strip_prefix("0::")).context("no cgroup v2 line in /proc/self/cgroup")?;
        let home = home.to_owned();
        self.enter(std::process::id())?;
        Ok(Inside { _cgroup: self, home })
    }

    /// The contents of one of its files (`cpu.pressure`, `cpu.stat`…).
    pub fn read(&self, file: &str) -> anyhow::Result<String> {
        let path = self.dir.join(file);
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    }

    /// Starts `argv` inside this cgroup (a shell moves itself in, then execs it).
    pub fn spawn(&self, argv: &[&str]) -> anyhow::Result<Proc> {
        let procs = self.dir.join("cgroup.procs");
        let script = format!("echo $$ > '{}' && exec \"$@\"", procs.display().to_string().replace('\'', "'\\''"));
        let mut command = Command::new("sh");
        command.arg("-c").arg(script).arg("sh").args(argv).stdout(Stdio::null()).stderr(Stdio::null());
        Proc::spawn(&mut command, "cgroup workload")
    }
}

/// This process inside a [`TestCgroup`] while it lives (see [`TestCgroup::enter_self`]).
#[derive(Debug)]
pub struct Inside<'a> {
    _cgroup: &'a TestCgroup,
    home: String,
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        // The file is written, never created.
        let procs = match cgroup2_mount() {
            Ok(mount) => mount.join(self.home.trim_start_matches('/')).join("cgroup.procs"),
            Err(e) => return eprintln!("cgroup: no cgroup2 mount to move back to: {e:#}"),
        };
        let moved = std::fs::OpenOptions::new()
            .write(true)
            .open(&procs)
            .and_then(|mut f| std::io::Write::write_all(&mut f, std::process::id().to_string().as_bytes()));
        if let Err(e) = moved {
            eprintln!("cgroup: could not move back to {}: {e}", procs.display());
        }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // Kill anything still inside (each Proc kills its own; this catches what they started).
        if let Ok(pids) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in pids.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                // SAFETY: kill(2) on processes in a cgroup this process created for itself.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        // A name with '/' made nested directories: remove the empty parents up to the top one.
        if let Some(top) = &self.top {
            let mut parent = self.dir.parent();
            while let Some(p) = parent.filter(|p| p.starts_with(top)) {
                let _ = std::fs::remove_dir(p);
                parent = p.parent();
            }
        }
    }
}

/// A process that wakes every `period` and goes back to sleep, forever: one wakeup delay per
/// period wherever it is moved, for the price of a timer (a fork of the test, no exec). Killed
/// and reaped on drop.
#[derive(Debug)]
pub struct Waker(Forked);

impl Waker {
    pub fn spawn(period: Duration) -> anyhow::Result<Waker> {
        let ts =
            libc::timespec { tv_sec: period.as_secs() as libc::time_t, tv_nsec: period.subsec_nanos() as libc::c_long };
        // SAFETY: the child makes only raw system calls (nanosleep) on its own stack.
        let child = unsafe {
            Forked::spawn(move || {
                loop {
                    // SAFETY: a valid timespec on this stack; no remainder wanted.
                    libc::nanosleep(&ts, std::ptr::null_mut());
                }
            })
        }?;
        Ok(Waker(child))
    }

    pub fn pid(&self) -> u32 {
        self.0.pid()
    }
}

/// A top-level cgroup a container runtime creates in every hierarchy it uses (podman's
/// `libpod_parent`, a kubelet-style `kubepods`): where it did not exist when the guard was made, it
/// is removed on drop, deepest first, retrying for a few seconds while the runtime's last processes
/// (conmon, a shim) leave it; where it did, the children made meanwhile are (the runtime leaves a
/// container's cgroup v2 directory behind on a hybrid host).
#[derive(Debug)]
pub(crate) struct RuntimeCgroups {
    /// Parents that did not exist before us: removed whole.
    tops: Vec<PathBuf>,
    /// Parents that did (left by a run that was killed, or by someone else), with the children
    /// they had: only children that appeared while we ran go.
    existing: Vec<(PathBuf, std::collections::BTreeSet<std::ffi::OsString>)>,
}

impl RuntimeCgroups {
    pub(crate) fn new(name: &str) -> RuntimeCgroups {
        let (existing, tops): (Vec<PathBuf>, Vec<PathBuf>) =
            cgroup_mounts().into_iter().map(|m| m.point.join(name)).partition(|p| p.exists());
        let existing = existing.into_iter().map(|p| (p.clone(), child_names(&p))).collect();
        RuntimeCgroups { tops, existing }
    }
}

/// The names of `dir`'s subdirectories (child cgroups).
fn child_names(dir: &std::path::Path) -> std::collections::BTreeSet<std::ffi::OsString> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name())
        .collect()
}

impl Drop for RuntimeCgroups {
    fn drop(&mut self) {
        fn remove_tree(dir: &std::path::Path) {
            if let Ok(entries) = std::fs::read_dir(dir) {
                for child in entries.filter_map(Result::ok).filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
                    remove_tree(&child.path());
                }
            }
            let _ = std::fs::remove_dir(dir);
        }
        for (parent, before) in std::mem::take(&mut self.existing) {
            let ours = child_names(&parent).into_iter().filter(|name| !before.contains(name)).map(|n| parent.join(n));
            self.tops.extend(ours);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            self.tops.retain(|p| p.exists());
            if self.tops.is_empty() || Instant::now() > deadline {
                break;
            }
            self.tops.iter().for_each(|t| remove_tree(t));
            if self.tops.iter().any(|p| p.exists()) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        if !self.tops.is_empty() {
            eprintln!("cgroups left behind: {:?}", self.tops);
        }
    }
}

/// One cgroup file system mounted, as /proc/self/mountinfo has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupMount {
    /// Where it is mounted (the 5th field).
    pub point: PathBuf,
    /// The hierarchy's directory shown there (the 4th field; "/" unless a namespace narrowed it).
    pub root: String,
    /// cgroup2, or a v1 hierarchy.
    pub v2: bool,
    /// Its super options (after " - " and the source): a v1 hierarchy's controllers among them.
    pub options: Vec<String>,
}

impl CgroupMount {
    /// A v1 hierarchy that holds `controller`.
    pub fn v1_with(&self, controller: &str) -> bool {
        !self.v2 && self.options.iter().any(|o| o == controller)
    }
}

/// Every cgroup (v1 and v2) mount in `mountinfo`, in its order.
pub fn cgroup_mounts_in(mountinfo: &str) -> Vec<CgroupMount> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mut left = left.split_whitespace();
            let root = left.nth(3)?.to_owned();
            let point = PathBuf::from(left.next()?);
            let mut right = right.split_whitespace();
            let v2 = match right.next()? {
                "cgroup" => false,
                "cgroup2" => true,
                _ => return None,
            };
            let options = right.nth(1).unwrap_or_default().split(',').map(str::to_owned).collect();
            Some(CgroupMount { point, root, v2, options })
        })
        .collect()
}

/// Every cgroup mount of this process's mount namespace (none if /proc/self/mountinfo cannot be read).
pub fn cgroup_mounts() -> Vec<CgroupMount> {
    cgroup_mounts_in(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

/// Where cgroup2 is mounted: the mount point of the mountinfo line whose filesystem type (after
/// " - ") is cgroup2.
fn cgroup2_mount() -> anyhow::Result<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    find_cgroup2(&info).context("no cgroup2 mount in /proc/self/mountinfo")
}

fn find_cgroup2(mountinfo: &str) -> Option<PathBuf> {
    cgroup_mounts_in(mountinfo).into_iter().find(|m| m.v2).map(|m| m.point)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup2_wherever_it_is_mounted() {
        let hybrid = "25 30 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
                      26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n\
                      27 25 0:24 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        assert_eq!(find_cgroup2(hybrid), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(find_cgroup2("27 25 0:24 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"), None);
    }
}
