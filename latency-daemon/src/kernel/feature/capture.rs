//! The capture recorder: this kernel's BTF in; the ring's slot mask and the task's CPU offset as
//! knobs, the per-CPU ring's size and four programs of its own (`sched_switch`, `sched_waking`,
//! `sched_migrate_task`, `cpu_idle`) out, and four more on the irq tracepoints when the IRQ
//! tracepoints are on too. Off unless asked for (`capture_events`): its programs are separate
//! from the core's, so off, it costs the scheduler nothing.
use latency_common::{Knobs, maps::names};

use super::{Room, Switch, wait_scan};
use crate::kernel::{
    btf::{Btf, BtfError},
    object::Program,
    options::ProbeOptions,
};

/// What its programs read besides the core's layout: the task's CPU (where a woken task is
/// queued, where a moved one leaves), on a kernel with the tracepoints it adds (its irq
/// tracepoints' are the IRQ tracepoints feature's to check).
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
        vec![(names::CAPTURE, slots), (names::CAPTURE_HEAD, 2)]
    },
    programs: |o| programs(o.split_irq),
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

/// Its programs; with `irq` (the IRQ tracepoints in the same load, on only where this kernel
/// gives them) those on the irq tracepoints too.
fn programs(irq: bool) -> Vec<Program> {
    let on_irq = if irq { &names::CAPTURE_IRQ_PROGRAMS[..] } else { &[] };
    names::CAPTURE_PROGRAMS
        .iter()
        .chain(on_irq)
        .map(|&(name, tracepoint)| Program::TracepointAs { name, tracepoint })
        .collect()
}

fn knobs(btf: &Btf, o: &ProbeOptions, knobs: Knobs) -> Result<Knobs, BtfError> {
    let cpu = wait_scan::layout(btf)?.cpu;
    // The IRQ handler's name, where the irq programs are in and this kernel describes it: without
    // it the handlers' slices are unnamed, nothing else is lost.
    let irq_name = if o.split_irq { btf.sized("irqaction", "name", &[8]).map_or(0, |m| m.offset) } else { 0 };
    Ok(Knobs { capture_mask: slots(o.capture_events) - 1, task_cpu: cpu.offset, irqaction_name: irq_name, ..knobs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_a_power_of_two_at_or_above_the_ask() {
        assert_eq!([slots(0), slots(1), slots(2), slots(3), slots(4096), slots(5000)], [2, 2, 2, 4, 4096, 8192]);
        assert_eq!(slots(u32::MAX), 1 << 31);
    }

    #[test]
    fn the_irq_programs_come_only_with_the_irq_tracepoints() {
        let on = |split_irq| {
            let o = ProbeOptions { capture_events: 64, split_irq, ..ProbeOptions::default() };
            let tracepoints: Vec<&str> = ROOM
                .programs(&o)
                .into_iter()
                .filter_map(|p| match p {
                    Program::TracepointAs { tracepoint, .. } => Some(tracepoint),
                    _ => None,
                })
                .collect();
            tracepoints
        };
        assert_eq!(on(false), ["sched_switch", "sched_waking", "sched_migrate_task", "cpu_idle"]);
        assert_eq!(
            on(true),
            [
                "sched_switch",
                "sched_waking",
                "sched_migrate_task",
                "cpu_idle",
                "irq_handler_entry",
                "irq_handler_exit",
                "softirq_entry",
                "softirq_exit"
            ]
        );
    }
}
