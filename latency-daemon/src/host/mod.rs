//! Facts about this machine from /proc and /sys, no aya: clocks, the kernel release and host name,
//! this process's own cost, each CPU's steal, the names of cgroup v2 ids and of the containers
//! behind them, the cgroup of a process; `paths`: where the host's procfs, sysfs, cgroupfs and root are (`--path.*`).
pub mod captures;
pub mod cgroups;
pub mod clock;
pub mod containers;
pub mod paths;
pub mod process_cgroups;
pub mod procstat;
pub mod steal;
pub mod system;
