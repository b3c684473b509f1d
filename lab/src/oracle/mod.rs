//! Independent views of what our program measures, each a tool of its own: the kernel's
//! `run_delay`, `perf sched`, libbpf-tools `runqlat`, the cgroup's own throttle counters, perf's trace of
//! the irq tracepoints, perf's trace of the scheduler events, Perfetto's classes; and bpftool for
//! what stays loaded.
pub mod bpftool;
pub mod irq_time;
pub mod otlp;
pub mod perf;
pub mod perfetto;
pub mod run_delay;
pub mod runqlat;
pub mod throttle;
