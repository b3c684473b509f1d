//! `--path.procfs`, `--path.sysfs`, `--path.cgroupfs`, `--path.rootfs` (node_exporter's flags) →
//! where every host file is read: set once by `run` before anything is read, defaults /proc, /sys,
//! /sys/fs/cgroup and / otherwise (`check`, `record`, tests). A process-wide setting, like the
//! flags of node_exporter, so the readers of /proc and /sys need no parameter threaded to them.
use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
};

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HostPaths {
    /// The procfs of the PID namespace the kernel program's tids live in (the host's: hostPID).
    pub procfs: PathBuf,
    pub sysfs: PathBuf,
    /// Where the cgroup hierarchies are mounted; cgroup2 is found at or below it (`host::cgroups`).
    pub cgroupfs: PathBuf,
    /// The host's root: container runtimes' state directories are read below it.
    pub rootfs: PathBuf,
}

impl Default for HostPaths {
    fn default() -> Self {
        HostPaths {
            procfs: PathBuf::from("/proc"),
            sysfs: PathBuf::from("/sys"),
            cgroupfs: PathBuf::from("/sys/fs/cgroup"),
            rootfs: PathBuf::from("/"),
        }
    }
}

static PATHS: OnceLock<HostPaths> = OnceLock::new();

/// Sets the paths for the life of the process; false if they were set (or read) before.
pub fn set(paths: HostPaths) -> bool {
    PATHS.set(paths).is_ok()
}

/// The paths in force (the defaults if `set` was not called before the first read).
pub fn get() -> &'static HostPaths {
    PATHS.get_or_init(HostPaths::default)
}

/// `rel` (no leading '/') under the procfs.
pub fn proc(rel: impl AsRef<Path>) -> PathBuf {
    get().procfs.join(rel)
}

/// `rel` (no leading '/') under the sysfs.
pub fn sys(rel: impl AsRef<Path>) -> PathBuf {
    get().sysfs.join(rel)
}
