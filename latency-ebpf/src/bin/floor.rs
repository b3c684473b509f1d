//! The benchmark's floor: the cheapest program that can sit on our three tracepoints (it only
//! counts events in a per-CPU array). What we add on top of this is what our logic costs.
#![no_std]
#![no_main]

use aya_ebpf::{
    macros::{btf_tracepoint, map},
    maps::PerCpuArray,
    programs::BtfTracePointContext,
};

/// Events seen per CPU.
#[map]
static FLOOR_EVENTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn count() {
    if let Some(n) = FLOOR_EVENTS.get_ptr_mut(0) {
        // SAFETY: this CPU's counter; tracepoint programs do not nest on one CPU.
        unsafe { *n += 1 };
    }
}

#[btf_tracepoint(function = "sched_wakeup")]
pub fn sched_wakeup(_ctx: BtfTracePointContext) -> i32 {
    count();
    0
}

#[btf_tracepoint(function = "sched_wakeup_new")]
pub fn sched_wakeup_new(_ctx: BtfTracePointContext) -> i32 {
    count();
    0
}

#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(_ctx: BtfTracePointContext) -> i32 {
    count();
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
