//! The only code that touches aya, the kernel's maps or its BTF: everything here needs CAP_BPF
//! and CAP_PERFMON (or root). `probe` loads the core and walks `feature`'s table (one file per
//! optional feature: its layout, knobs, map sizes and programs), `load` loads with whichever
//! features this kernel gives, `object` holds the loader's helpers below both, `options` what a
//! load takes and how it fails; `drain` reads the maps into plain data, `caps` is the gate in
//! front of both, `cgroups` reads and retires the per-cgroup slots (`removals` hears of removed
//! cgroups), `btf` reads struct layouts from the running kernel, and `privileges` drops every
//! capability once they are attached (the file descriptors held need none).
pub mod btf;
pub mod caps;
pub mod capture;
pub mod cgroups;
pub mod drain;
pub mod feature;
pub mod load;
pub mod object;
pub mod options;
pub mod privileges;
pub mod probe;
pub mod removals;
