//! The benchmark's floor: the cheapest program that can sit on our three tracepoints (it only
//! counts events in a per-CPU array). What we add on top of this is what our logic costs.
#![no_std]
#![no_main]

#[macro_use]
#[path = "../floor_programs.rs"]
mod floor_programs;
#[path = "../object.rs"]
mod object;

use aya_ebpf::{macros::map, maps::PerCpuArray};

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

floor_programs!(count);
