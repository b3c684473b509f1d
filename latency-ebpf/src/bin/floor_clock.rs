//! The floor with one clock read: the empty program of `floor.rs`, plus the `bpf_ktime_get_ns`
//! that any tracer timing a wait from one event to another pays at every event. Beside the floor,
//! it shows what the clock alone costs (`cargo xtask bench`): the least an exact tracer can add.
#![no_std]
#![no_main]

use aya_ebpf::{
    helpers::bpf_ktime_get_ns,
    macros::{btf_tracepoint, map},
    maps::PerCpuArray,
    programs::BtfTracePointContext,
};

/// The last event's time per CPU (kept, so the read is the program's work, as a stamp is ours).
#[map]
static FLOOR_CLOCK: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn stamp() {
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(slot) = FLOOR_CLOCK.get_ptr_mut(0) {
        // SAFETY: this CPU's slot; tracepoint programs do not nest on one CPU.
        unsafe { *slot = now };
    }
}

#[btf_tracepoint(function = "sched_wakeup")]
pub fn sched_wakeup(_ctx: BtfTracePointContext) -> i32 {
    stamp();
    0
}

#[btf_tracepoint(function = "sched_wakeup_new")]
pub fn sched_wakeup_new(_ctx: BtfTracePointContext) -> i32 {
    stamp();
    0
}

#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(_ctx: BtfTracePointContext) -> i32 {
    stamp();
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
