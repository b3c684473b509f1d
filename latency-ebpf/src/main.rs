//! The kernel program: three BTF tracepoints that stamp when a task enters a run queue and, when
//! it gets a CPU, aggregate the delay per CPU. No per-event traffic to user space.
#![no_std]
#![no_main]

mod attribute;
mod capture;
mod capture_cpu;
mod cgroup;
mod delay;
mod diag;
mod irq;
mod knobs;
mod maps;
mod object;
mod observe;
mod switch;
mod task;
mod throttle_hooks;
mod wait_scan;
mod wakeup;
