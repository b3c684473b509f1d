//! Parsed [`Btf`] in; the `task_struct` offsets and the `rq->clock` and cgroup-id pointer chains
//! the kernel program reads out, each member checked against the size of the load the kernel program does.

use super::{Btf, BtfError, Member};

/// Offsets of what the kernel program reads from `struct task_struct`, and tracepoint shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskLayout {
    pub pid: Member,
    pub tgid: Member,
    pub comm: Member,
    pub prio: Member,
    /// `__state` (5.14+) or `state` (older kernels)
    pub state: Member,
    /// Which of the two this kernel has.
    pub state_name: &'static str,
    /// true when the sched_switch tracepoint passes `prev_state` (4 args: preempt, prev, next,
    /// prev_state; since 5.18)
    pub switch_has_prev_state: bool,
}

/// The pointer chain from a task to its run queue's clock (`rq->clock`, what the kernel's own
/// `run_delay` accounting reads): `task->se.cfs_rq->rq->clock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RqClockLayout {
    pub task_se_cfs_rq: Member,
    pub cfs_rq_rq: Member,
    pub rq_clock: Member,
}

/// The pointer chain from a task to its cgroup v2 id: `task->cgroups->dfl_cgrp->kn->id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupLayout {
    pub task_cgroups: Member,
    pub css_set_dfl_cgrp: Member,
    pub cgroup_kn: Member,
    pub kernfs_node_id: Member,
    /// `cgroup->root->hierarchy_id`: which hierarchy a removed cgroup belonged to.
    pub cgroup_root: Member,
    pub cgroup_root_hierarchy_id: Member,
    /// `task_struct.flags` (`unsigned int` since 2.6): `PF_KTHREAD` marks a kernel thread, the
    /// holder class of a wait that ended when one gave the CPU up.
    pub task_flags: Member,
}

/// The chain from a task to the number of runnable tasks on its CPU:
/// `task->se.cfs_rq->rq->nr_running`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DepthLayout {
    pub task_se_cfs_rq: Member,
    pub cfs_rq_rq: Member,
    pub rq_nr_running: Member,
}

/// What the wait scan reads to tell a task waiting in a run queue: `task_struct.on_rq`, `.on_cpu`
/// (CONFIG_SMP) and its CPU, `thread_info.cpu` (5.16+ with the thread info in the task) or `cpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitLayout {
    pub on_rq: Member,
    pub on_cpu: Member,
    pub cpu: Member,
}

/// What the throttled part of a wait reads: the task's own group on its CPU,
/// `task->se.cfs_rq`, its throttle clocks (`throttled_clock_self`, `throttled_clock_self_time`:
/// 6.8+, what cgroup v2's `cpu.stat.local` reports) and its run queue's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThrottleLayout {
    pub rq: RqClockLayout,
    pub throttled_clock_self: Member,
    pub throttled_clock_self_time: Member,
    pub nr_migrations: Member,
}

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

/// What the IRQ tracepoints' part of a wait needs: the task's CPU (whose IRQ clock a wakeup
/// reads) and its migration count, on a kernel with the four tracepoints that does not account
/// IRQ time itself (where it does, the irq+steal part already holds it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqLayout {
    pub task_cpu: Member,
    pub nr_migrations: Member,
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

impl Btf {
    /// Offsets for the throttled part of the cause split; an error names what this kernel lacks
    /// (before 6.8, the per-group throttle clock; without CONFIG_CFS_BANDWIDTH, all of it).
    pub fn throttle_layout(&self) -> Result<ThrottleLayout, BtfError> {
        let eight = |s: &str, member: &str| -> Result<Member, BtfError> {
            check_size(s, member, self.member(s, member)?, &[8])
        };
        Ok(ThrottleLayout {
            rq: self.rq_clock_layout()?,
            throttled_clock_self: eight("cfs_rq", "throttled_clock_self")?,
            throttled_clock_self_time: eight("cfs_rq", "throttled_clock_self_time")?,
            nr_migrations: eight("task_struct", "se.nr_migrations")?,
        })
    }

    /// Offsets for the irq+steal part; an error where the kernel accounts neither.
    pub fn stolen_layout(&self) -> Result<StolenLayout, BtfError> {
        let eight = |s: &str, member: &str| -> Result<Member, BtfError> {
            check_size(s, member, self.member(s, member)?, &[8])
        };
        let irq = self.member("rq", "prev_irq_time").is_ok();
        let steal = self.member("rq", "prev_steal_time_rq").is_ok();
        if !irq && !steal {
            return Err(BtfError::NotAccounted);
        }
        Ok(StolenLayout {
            rq: self.rq_clock_layout()?,
            clock_task: eight("rq", "clock_task")?,
            nr_migrations: eight("task_struct", "se.nr_migrations")?,
            irq,
            steal,
        })
    }

    /// Offsets for the IRQ tracepoints' part; an error where the kernel accounts IRQ time itself
    /// or lacks a tracepoint.
    pub fn irq_layout(&self) -> Result<IrqLayout, BtfError> {
        if self.member("rq", "prev_irq_time").is_ok() {
            return Err(BtfError::IrqAccounted);
        }
        for tracepoint in ["irq_handler_entry", "irq_handler_exit", "softirq_entry", "softirq_exit"] {
            self.tracepoint_arity(tracepoint)?;
        }
        Ok(IrqLayout {
            task_cpu: self.wait_layout()?.cpu,
            nr_migrations: check_size(
                "task_struct",
                "se.nr_migrations",
                self.member("task_struct", "se.nr_migrations")?,
                &[8],
            )?,
        })
    }

    /// Offsets for the wait scan; an error names what this kernel's BTF lacks.
    pub fn wait_layout(&self) -> Result<WaitLayout, BtfError> {
        const TASK: &str = "task_struct";
        let four =
            |member: &str| -> Result<Member, BtfError> { check_size(TASK, member, self.member(TASK, member)?, &[4]) };
        let cpu = match self.member(TASK, "thread_info.cpu") {
            Ok(m) => check_size(TASK, "thread_info.cpu", m, &[4])?,
            Err(BtfError::MemberNotFound { .. }) => four("cpu")?,
            Err(e) => return Err(e),
        };
        Ok(WaitLayout { on_rq: four("on_rq")?, on_cpu: four("on_cpu")?, cpu })
    }

    /// Offsets to read a run queue's depth from a task; an error where this kernel's BTF lacks
    /// them (no `cfs_rq.rq` without CONFIG_FAIR_GROUP_SCHED), and the depth is then unknown.
    pub fn depth_layout(&self) -> Result<DepthLayout, BtfError> {
        let rq = self.rq_clock_layout()?;
        let nr = self.member("rq", "nr_running")?;
        Ok(DepthLayout {
            task_se_cfs_rq: rq.task_se_cfs_rq,
            cfs_rq_rq: rq.cfs_rq_rq,
            rq_nr_running: check_size("rq", "nr_running", nr, &[4])?,
        })
    }

    /// Offsets to reach a task's cgroup v2 id (the kernfs node id of its default-hierarchy
    /// cgroup); three 8-byte pointers and the 8-byte id.
    pub fn cgroup_layout(&self) -> Result<CgroupLayout, BtfError> {
        let eight = |s: &str, member: &str| -> Result<Member, BtfError> {
            let m = self.member(s, member)?;
            check_size(s, member, m, &[8])
        };
        Ok(CgroupLayout {
            task_cgroups: eight("task_struct", "cgroups")?,
            css_set_dfl_cgrp: eight("css_set", "dfl_cgrp")?,
            cgroup_kn: eight("cgroup", "kn")?,
            kernfs_node_id: eight("kernfs_node", "id")?,
            cgroup_root: eight("cgroup", "root")?,
            cgroup_root_hierarchy_id: check_size(
                "cgroup_root",
                "hierarchy_id",
                self.member("cgroup_root", "hierarchy_id")?,
                &[4],
            )?,
            task_flags: check_size("task_struct", "flags", self.member("task_struct", "flags")?, &[4])?,
        })
    }

    /// Everything the kernel program needs from `task_struct`, with sizes checked against the
    /// loads it does: 4-byte pid/tgid/prio/state and the 16-byte comm (TASK_COMM_LEN).
    pub fn task_layout(&self) -> Result<TaskLayout, BtfError> {
        const TASK: &str = "task_struct";
        let sized = |member: &str, expected: u32| -> Result<Member, BtfError> {
            let m = self.member(TASK, member)?;
            check_size(TASK, member, m, &[expected])
        };
        let (state_name, state) = match self.member(TASK, "__state") {
            Ok(m) => ("__state", check_size(TASK, "__state", m, &[4])?),
            // Before 5.14 it was `volatile long state`. Every state bit is in its low 4 bytes, and
            // on a little-endian kernel (the only BTF we accept) those come first, so the kernel
            // program's 4-byte load at this offset still reads the state.
            Err(BtfError::MemberNotFound { .. }) => {
                ("state", check_size(TASK, "state", self.member(TASK, "state")?, &[4, 8])?)
            }
            Err(e) => return Err(e),
        };
        Ok(TaskLayout {
            pid: sized("pid", 4)?,
            tgid: sized("tgid", 4)?,
            comm: sized("comm", 16)?,
            prio: sized("prio", 4)?,
            state,
            state_name,
            switch_has_prev_state: self.tracepoint_arity("sched_switch")? >= 4,
        })
    }

    /// Offsets to reach `rq->clock` from a task; needs CONFIG_FAIR_GROUP_SCHED (`cfs_rq.rq`).
    pub fn rq_clock_layout(&self) -> Result<RqClockLayout, BtfError> {
        let ptr = |s: &str, member: &str| -> Result<Member, BtfError> {
            let m = self.member(s, member)?;
            check_size(s, member, m, &[8])
        };
        Ok(RqClockLayout {
            task_se_cfs_rq: ptr("task_struct", "se.cfs_rq")?,
            cfs_rq_rq: ptr("cfs_rq", "rq")?,
            rq_clock: ptr("rq", "clock")?,
        })
    }
}

/// `allowed[0]` is the size current kernels use and the one an error reports as expected.
fn check_size(struct_name: &str, member: &str, m: Member, allowed: &[u32]) -> Result<Member, BtfError> {
    if allowed.contains(&m.size) {
        return Ok(m);
    }
    Err(BtfError::SizeMismatch {
        struct_name: struct_name.to_owned(),
        member: member.to_owned(),
        expected: allowed.first().copied().unwrap_or_default(),
        found: m.size,
    })
}
