//! Facts about this machine from /proc and /sys, no aya: clocks, the kernel release and host name,
//! this process's own cost, and the names of cgroup v2 ids.
pub mod cgroups;
pub mod clock;
pub mod procstat;
pub mod system;
