//! The capture recorder: this kernel's BTF in; the ring's slot mask and the task's CPU offset as
//! knobs, the per-CPU ring's size and three programs of its own (`sched_switch`, `sched_waking`,
//! `sched_migrate_task`) out. Off unless asked for (`capture_events`): its programs are separate
//! from the core's, so off, it costs the scheduler nothing.
use latency_common::{Knobs, maps::names};

use super::{Room, Switch, wait_scan};
use crate::kernel::{
    btf::{Btf, BtfError},
    object::Program,
    options::ProbeOptions,
};

/// What its programs read besides the core's layout: the task's CPU (where a woken task is
/// queued, where a moved one leaves), on a kernel with the two tracepoints it adds.
fn available(btf: &Btf) -> Result<(), BtfError> {
    for (_, tracepoint) in names::CAPTURE_PROGRAMS {
        btf.tracepoint_arity(tracepoint)?;
    }
    wait_scan::layout(btf).map(drop)
}

/// The ring's slots per CPU for `events` asked for: the power of two at or above it, at least 2.
pub fn slots(events: u32) -> u32 {
    events.max(2).checked_next_power_of_two().unwrap_or(1 << 31)
}

pub const ROOM: Room = Room {
    maps: |on, o, _| {
        let slots = if on { slots(o.capture_events) } else { 1 };
        vec![(names::CAPTURE, slots), (names::CAPTURE_HEAD, 1)]
    },
    programs: |_| {
        names::CAPTURE_PROGRAMS
            .into_iter()
            .map(|(name, tracepoint)| Program::TracepointAs { name, tracepoint })
            .collect()
    },
    without: "no capture of the scheduler's events",
    ..Room::new(
        "capture",
        Switch::Own {
            wanted: |o| o.capture_events > 0,
            set: |o, from, on| o.capture_events = if on { from.capture_events } else { 0 },
        },
        available,
        knobs,
    )
};

fn knobs(btf: &Btf, o: &ProbeOptions, knobs: Knobs) -> Result<Knobs, BtfError> {
    let cpu = wait_scan::layout(btf)?.cpu;
    Ok(Knobs { capture_mask: slots(o.capture_events) - 1, task_cpu: cpu.offset, ..knobs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_a_power_of_two_at_or_above_the_ask() {
        assert_eq!([slots(0), slots(1), slots(2), slots(3), slots(4096), slots(5000)], [2, 2, 2, 4, 4096, 8192]);
        assert_eq!(slots(u32::MAX), 1 << 31);
    }
}
