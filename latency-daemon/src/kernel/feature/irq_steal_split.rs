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
    pub fn holds(&self) -> String {
        let holds = match (self.irq, self.steal) {
            (true, true) => "IRQ time and steal",
            (true, false) => "IRQ time (this kernel does not account steal: CONFIG_PARAVIRT_TIME_ACCOUNTING is off)",
            _ => "steal (this kernel does not account IRQ time: CONFIG_IRQ_TIME_ACCOUNTING is off)",
        };
        if self.steal { holds.to_string() } else { format!("{holds}; {STEAL_ELSEWHERE}") }
    }
}

/// Where to look for steal when the irq_steal part does not hold it.
pub const STEAL_ELSEWHERE: &str = "a hypervisor's steal is charged to who held the CPU, and \
     runqlat_cpu_steal_seconds_total{cpu} shows it per CPU";

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

pub const ROOM: Room = Room {
    without: STEAL_ELSEWHERE,
    ..Room::new("irq_steal_split", flag!(split_stolen), |btf| layout(btf).map(drop), knobs)
};

fn knobs(btf: &Btf, _o: &ProbeOptions, knobs: Knobs) -> Result<Knobs, BtfError> {
    let s = layout(btf)?;
    log::info!("the irq_steal part of each wait holds {}", s.holds());
    let (task_se_nr_migrations, rq_clock_task) = (s.nr_migrations.offset, s.clock_task.offset);
    Ok(Knobs { task_se_nr_migrations, split_stolen: 1, rq_clock_task, ..run_queue_clock::with_chain(&s.rq, knobs) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{feature::Feature, load::Degraded};

    fn stolen(irq: bool, steal: bool) -> StolenLayout {
        let m = Member { offset: 0, size: 8 };
        let rq = RqClockLayout { task_se_cfs_rq: m, cfs_rq_rq: m, rq_clock: m };
        StolenLayout { rq, clock_task: m, nr_migrations: m, irq, steal }
    }

    #[test]
    fn the_log_points_at_the_steal_counter_only_where_the_part_lacks_steal() {
        assert_eq!(stolen(true, true).holds(), "IRQ time and steal");
        assert!(!stolen(false, true).holds().contains("runqlat_cpu_steal_seconds_total"));
        let irq_only = stolen(true, false).holds();
        assert!(irq_only.starts_with("IRQ time (this kernel does not account steal"), "{irq_only}");
        assert!(irq_only.contains("runqlat_cpu_steal_seconds_total{cpu}"), "{irq_only}");
        let unavailable = Degraded { feature: Feature::IrqStealSplit, why: "x".into() };
        assert_eq!(unavailable.reason(), format!("x; {STEAL_ELSEWHERE}"));
        let other = Degraded { feature: Feature::ThrottleSplit, why: "x".into() };
        assert_eq!(other.reason(), "x", "only features that say what running without them means add to the line");
    }
}
