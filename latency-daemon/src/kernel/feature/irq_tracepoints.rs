//! The irq tracepoints' IRQ time in each wait's irq+steal part, on kernels that do not account
//! IRQ time: this kernel's BTF in; the task's CPU and migration count as knobs, the per-CPU IRQ
//! clock array's size and the four irq tracepoints out.
use latency_common::{Knobs, maps::names};

use super::{Room, wait_scan};
use crate::kernel::{
    btf::{Btf, BtfError, Member},
    object::Program,
    options::ProbeOptions,
};

/// What the IRQ tracepoints' part of a wait needs: the task's CPU (whose IRQ clock a wakeup
/// reads) and its migration count, on a kernel with the four tracepoints that does not account
/// IRQ time itself (where it does, the irq+steal part already holds it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqLayout {
    pub task_cpu: Member,
    pub nr_migrations: Member,
}

/// Offsets for the IRQ tracepoints' part; an error where the kernel accounts IRQ time itself
/// or lacks a tracepoint.
pub fn layout(btf: &Btf) -> Result<IrqLayout, BtfError> {
    if btf.member("rq", "prev_irq_time").is_ok() {
        return Err(BtfError::IrqAccounted);
    }
    for tracepoint in names::IRQ_PROGRAMS {
        btf.tracepoint_arity(tracepoint)?;
    }
    Ok(IrqLayout {
        task_cpu: wait_scan::layout(btf)?.cpu,
        nr_migrations: btf.sized("task_struct", "se.nr_migrations", &[8])?,
    })
}

/// The per-CPU IRQ clocks and the four irq tracepoints.
pub const ROOM: Room = Room {
    maps: |on, _, sizes| vec![(names::IRQ_CLOCKS, if on { sizes.cpus } else { 1 })],
    programs: |_| names::IRQ_PROGRAMS.into_iter().map(Program::Tracepoint).collect(),
    ..Room::new("irq_tracepoints", flag!(split_irq), |btf| layout(btf).map(drop), knobs)
};

fn knobs(btf: &Btf, _o: &ProbeOptions, knobs: Knobs) -> Result<Knobs, BtfError> {
    let i = layout(btf)?;
    Ok(Knobs { split_irq: 1, task_cpu: i.task_cpu.offset, task_se_nr_migrations: i.nr_migrations.offset, ..knobs })
}
