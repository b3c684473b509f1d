//! The only code that touches aya, the kernel's maps or its BTF: everything here needs CAP_BPF
//! and CAP_PERFMON (or root). `probe` loads and attaches, `drain` reads the maps into plain data,
//! `caps` is the gate in front of both, `cgroups` reads and retires the per-cgroup slots (`removals` hears of removed cgroups), `btf`
//! reads struct layouts from the running kernel, `features` loads with whichever optional paths
//! this kernel gives, and `privileges` drops every capability once they are attached (the file
//! descriptors held need none).
pub mod btf;
pub mod caps;
pub mod cgroups;
pub mod drain;
pub mod features;
pub mod privileges;
pub mod probe;
pub mod removals;
