//! Load-time settings and kernel struct offsets, handed to the kernel program as one read-only
//! global (`.rodata`, frozen before load) so the verifier treats every field as a constant: loads
//! at these offsets are checked against BTF, and branches on switched-off features are pruned.

/// Name of the global in the object file.
pub const KNOBS_SYMBOL: &str = "KNOBS";

/// `Knobs::split_throttle`: the group's own throttle clock (`cfs_rq.throttled_clock_self`, 6.8+).
pub const THROTTLE_FROM_SELF_CLOCK: u32 = 1;
/// `Knobs::split_throttle`: the throttle hooks' clock of the group (before 6.8).
pub const THROTTLE_FROM_HOOKS: u32 = 2;
/// `Knobs::split_throttle`: no clock of the group's throttles, only whether one ended during the
/// wait (the kernel's own total, `cfs_rq.throttled_clock_pelt_time` or, before 5.12,
/// `throttled_clock_task_time`, at `cfs_rq_throttled_clock_self_time`): such a wait goes whole to the
/// throttled slot, which the daemon then reports as `unknown`.
pub const THROTTLE_FROM_OVERLAP: u32 = 3;

/// Everything the kernel program needs to know before it is verified.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Knobs {
    /// Byte offsets inside `struct task_struct`, from the running kernel's BTF.
    pub task_pid: u32,
    pub task_tgid: u32,
    pub task_comm: u32,
    pub task_prio: u32,
    /// `__state` (5.14+) or `state`; read only when the tracepoint lacks `prev_state`.
    pub task_state: u32,
    /// 1 when `sched_switch` passes `prev_state` as its 4th argument (5.18+).
    pub switch_has_prev_state: u32,
    /// 1 to keep per-task statistics in `TASKS` (a hash update per switch).
    pub per_task: u32,
    /// 1 to record only tasks whose tid or tgid is in `FILTER`.
    pub filter: u32,
    /// Delays above this are discarded (and counted), never recorded.
    pub ceiling_ns: u64,
    /// 1 to read the run queue's clock (`rq->clock`, see [`Clock::RunQueue`]) instead of
    /// `bpf_ktime_get_ns`.
    pub clock_rq: u32,
    /// Offsets of `task_struct.se.cfs_rq`, `cfs_rq.rq`, `rq.clock` (used only with `clock_rq`).
    pub task_se_cfs_rq: u32,
    pub cfs_rq_rq: u32,
    pub rq_clock: u32,
    /// 1 to add each delay to its cgroup's histogram in `CGROUPS` (a per-CPU hash update).
    pub cgroups: u32,
    /// Offsets of `task_struct.cgroups`, `css_set.dfl_cgrp`, `cgroup.kn`, `kernfs_node.id`:
    /// the cgroup v2 id of a task (used only with `cgroups`).
    pub task_cgroups: u32,
    pub css_set_dfl_cgrp: u32,
    pub cgroup_kn: u32,
    pub kernfs_node_id: u32,
    /// log2 of the number of slots in `CGROUP_SLOTS` (1..=16).
    pub cgroup_slot_bits: u32,
    /// Delays at or above this get an attributed `Incident` (runs meanwhile, queue depth); 0
    /// turns attribution off, and with it the run ring and queue-depth writes.
    pub attribute_ns: u64,
    /// 1 when `rq_nr_running` (and the `task_se_cfs_rq`/`cfs_rq_rq` chain) can be read.
    pub depth_known: u32,
    /// Offset of `rq.nr_running`.
    pub rq_nr_running: u32,
    /// Offsets of `cgroup.root` and `cgroup_root.hierarchy_id`: `cgroup_rmdir` keeps only
    /// cgroups of the v2 hierarchy (id 0) (used only with `cgroups`).
    pub cgroup_root: u32,
    pub cgroup_root_hierarchy_id: u32,
    /// Offset of `task_struct.flags` (`PF_KTHREAD` tells a kernel thread): who held the CPU
    /// when a wait ended (used only with `cgroups`).
    pub task_flags: u32,
    /// Offsets of `task_struct.on_rq`, `.on_cpu` and the CPU (`thread_info.cpu` or `cpu`): the
    /// wait scan's test for a task waiting in a run queue (used only by `wait_scan`).
    pub task_on_rq: u32,
    pub task_on_cpu: u32,
    pub task_cpu: u32,
    /// Where each wait's throttled part (see `Cause::Throttled`) comes from, 0 where it is not
    /// split off: `THROTTLE_FROM_SELF_CLOCK` the offsets of `cfs_rq.throttled_clock_self` and
    /// `.throttled_clock_self_time` (6.8+), `THROTTLE_FROM_HOOKS` the hooks' clocks (below); with the
    /// offset of `task_struct.se.nr_migrations` and the `task_se_cfs_rq`/`cfs_rq_rq`/`rq_clock`
    /// chain.
    pub split_throttle: u32,
    pub cfs_rq_throttled_clock_self: u32,
    pub cfs_rq_throttled_clock_self_time: u32,
    pub task_se_nr_migrations: u32,
    /// 1 to split each wait's irq+steal part off (see `Cause::IrqSteal`): `rq.clock -
    /// rq.clock_task` grows by exactly the IRQ and steal time the kernel accounts.
    pub split_stolen: u32,
    pub rq_clock_task: u32,
    /// 1 when `task_on_cpu` is set (CONFIG_SMP): a wakeup of a task still on its CPU is not
    /// stamped.
    pub wakeup_running_known: u32,
    /// 1 to add the IRQ time the irq tracepoints timed (`IRQ_CLOCKS`) to each wait's irq+steal
    /// part, on kernels that do not account IRQ time; needs `task_cpu`.
    pub split_irq: u32,
    /// With `split_throttle` = `THROTTLE_FROM_HOOKS` (the throttle hooks' `THROTTLE_CLOCKS`, kernels
    /// before 6.8): the offsets of `cfs_rq.throttle_count` (whether the clock's `since` is
    /// current) and `.h_nr_running`, of `task_group.cfs_rq` (the group's per-CPU `cfs_rq` array)
    /// and `rq.cpu`, and of `task_struct.se.on_rq` (a task in the fair class).
    pub cfs_rq_throttle_count: u32,
    pub cfs_rq_h_nr_running: u32,
    pub task_group_cfs_rq: u32,
    pub rq_cpu: u32,
    pub task_se_on_rq: u32,
    /// The capture rings' slots per CPU minus one (a power of two minus one); 0 with the
    /// recorder off.
    pub capture_mask: u32,
    /// Offset of `irqaction.name` (a `const char *`): the IRQ handler's name in the capture's
    /// `irq_handler_entry` records; 0 where it is not read (the recorder or the IRQ tracepoints
    /// off, or this kernel's BTF does not describe it).
    pub irqaction_name: u32,
}

impl Knobs {
    /// The value compiled into the object; always overridden at load.
    pub const UNSET: Knobs = Knobs {
        task_pid: 0,
        task_tgid: 0,
        task_comm: 0,
        task_prio: 0,
        task_state: 0,
        switch_has_prev_state: 0,
        per_task: 0,
        filter: 0,
        ceiling_ns: 0,
        clock_rq: 0,
        task_se_cfs_rq: 0,
        cfs_rq_rq: 0,
        rq_clock: 0,
        cgroups: 0,
        task_cgroups: 0,
        css_set_dfl_cgrp: 0,
        cgroup_kn: 0,
        kernfs_node_id: 0,
        cgroup_slot_bits: 1,
        attribute_ns: 0,
        depth_known: 0,
        rq_nr_running: 0,
        cgroup_root: 0,
        cgroup_root_hierarchy_id: 0,
        task_flags: 0,
        task_on_rq: 0,
        task_on_cpu: 0,
        task_cpu: 0,
        split_throttle: 0,
        cfs_rq_throttled_clock_self: 0,
        cfs_rq_throttled_clock_self_time: 0,
        task_se_nr_migrations: 0,
        split_stolen: 0,
        rq_clock_task: 0,
        wakeup_running_known: 0,
        split_irq: 0,
        cfs_rq_throttle_count: 0,
        cfs_rq_h_nr_running: 0,
        task_group_cfs_rq: 0,
        rq_cpu: 0,
        task_se_on_rq: 0,
        capture_mask: 0,
        irqaction_name: 0,
    };
}

/// Which clock stamps and delays are read from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Clock {
    /// `bpf_ktime_get_ns` (CLOCK_MONOTONIC) read at each tracepoint, like perf sched and
    /// runqlat: the delay is exactly the time between the two events. The default.
    #[default]
    Monotonic,
    /// The run queue's own clock, `rq->clock`, which the kernel's `run_delay` (schedstat,
    /// delay accounting, node_exporter's schedstat metrics) reads. The scheduler skips updating
    /// it between a preempting wakeup and the switch that follows, so it charges that window to
    /// the preempted task instead of the woken one. Use it to reconcile with `run_delay`.
    RunQueue,
}

/// Default ceiling: ten minutes. A real run-queue wait can reach seconds (an RT hog with
/// throttling off); beyond ten minutes a delay says more about a broken stamp than a queue.
pub const DEFAULT_CEILING_NS: u64 = 600 * 1_000_000_000;

const _: () = assert!(core::mem::size_of::<Knobs>() == 184);

#[cfg(feature = "user")]
// SAFETY: #[repr(C)] integers only, no padding (size assert above).
unsafe impl aya::Pod for Knobs {}
