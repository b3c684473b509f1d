//! The irq+steal part of each wait: this kernel's BTF in; `rq->clock - rq->clock_task` (which
//! grows by the IRQ time and steal the kernel accounts), the run queue chain and the migration
//! count as knobs out.
use latency_common::Knobs;

use super::{
    Room,
    run_queue_clock::{self, RqClockLayout},
};
use crate::kernel::{
    btf::{Btf, BtfError, Member},
    options::ProbeOptions,
};

/// What the irq+steal part of a wait reads: `rq->clock - rq->clock_task`, which grows by the IRQ
/// time (CONFIG_IRQ_TIME_ACCOUNTING: `rq.prev_irq_time`) and steal (CONFIG_PARAVIRT_TIME_ACCOUNTING:
/// `rq.prev_steal_time_rq`) the kernel accounts; which of the two this kernel has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StolenLayout {
    pub rq: RqClockLayout,
    pub clock_task: Member,
    pub nr_migrations: Member,
    pub irq: bool,
    pub steal: bool,
}

impl StolenLayout {
    /// What the part holds on this kernel, for the log.
    pub fn holds(&self) -> &'static str {
        match (self.irq, self.steal) {
            (true, true) => "IRQ time and steal",
            (true, false) => "IRQ time (this kernel does not account steal)",
            _ => "steal (this kernel does not account IRQ time: CONFIG_IRQ_TIME_ACCOUNTING is off)",
        }
    }
}

/// Offsets for the irq+steal part; an error where the kernel accounts neither.
pub fn layout(btf: &Btf) -> Result<StolenLayout, BtfError> {
    let irq = btf.member("rq", "prev_irq_time").is_ok();
    let steal = btf.member("rq", "prev_steal_time_rq").is_ok();
    if !irq && !steal {
        return Err(BtfError::NotAccounted);
    }
    Ok(StolenLayout {
        rq: run_queue_clock::layout(btf)?,
        clock_task: btf.sized("rq", "clock_task", &[8])?,
        nr_migrations: btf.sized("task_struct", "se.nr_migrations", &[8])?,
        irq,
        steal,
    })
}

pub const ROOM: Room = Room::new("irq_steal_split", flag!(split_stolen), |btf| layout(btf).map(drop), knobs);

fn knobs(btf: &Btf, _o: &ProbeOptions, knobs: Knobs) -> Result<Knobs, BtfError> {
    let s = layout(btf)?;
    log::info!("the irq_steal part of each wait holds {}", s.holds());
    let (task_se_nr_migrations, rq_clock_task) = (s.nr_migrations.offset, s.clock_task.offset);
    Ok(Knobs { task_se_nr_migrations, split_stolen: 1, rq_clock_task, ..run_queue_clock::with_chain(&s.rq, knobs) })
}
