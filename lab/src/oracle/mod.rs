//! Independent views of what our program measures, each a tool of its own: the kernel's
//! `run_delay`, `perf sched`, libbpf-tools `runqlat`; and bpftool for what stays loaded.
pub mod bpftool;
pub mod perf;
pub mod run_delay;
pub mod runqlat;
pub mod throttle;
