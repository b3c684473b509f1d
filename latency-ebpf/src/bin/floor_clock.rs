//! The floor with one clock read: the empty program of `floor.rs`, plus the `bpf_ktime_get_ns`
//! that any tracer timing a wait from one event to another pays at every event. Beside the floor,
//! it shows what the clock alone costs (`cargo xtask bench`): the least an exact tracer can add.
#![no_std]
#![no_main]

#[macro_use]
#[path = "../floor_programs.rs"]
mod floor_programs;
#[path = "../object.rs"]
mod object;

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::map, maps::PerCpuArray};

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

floor_programs!(stamp);
