//! The kernel program: three BTF tracepoints that stamp when a task enters a run queue and, when
//! it gets a CPU, aggregate the delay per CPU. No per-event traffic to user space.
#![no_std]
#![no_main]

mod attribute;
mod cgroup;
mod diag;
mod knobs;
mod maps;
mod observe;
mod switch;
mod task;
mod wakeup;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any reachable call into this: nothing here can panic at run time.
    loop {}
}

/// Tracing programs must be GPL-compatible to attach to kernel BTF tracepoints.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
