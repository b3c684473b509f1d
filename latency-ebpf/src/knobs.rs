//! The read-only global that carries load-time settings and BTF offsets (see latency-common's
//! knobs.rs). Every read is volatile so the compiler cannot fold the placeholder value; the
//! verifier then sees the frozen map's real value as a constant.
use latency_common::Knobs;

#[unsafe(no_mangle)]
static KNOBS: Knobs = Knobs::UNSET;

macro_rules! knob {
    ($field:ident) => {
        // SAFETY: KNOBS is a static, always valid; volatile only defeats constant folding.
        unsafe { core::ptr::read_volatile(&raw const KNOBS.$field) }
    };
}

#[inline(always)]
pub fn task_pid() -> u32 {
    knob!(task_pid)
}
#[inline(always)]
pub fn task_tgid() -> u32 {
    knob!(task_tgid)
}
#[inline(always)]
pub fn task_comm() -> u32 {
    knob!(task_comm)
}
#[inline(always)]
pub fn task_prio() -> u32 {
    knob!(task_prio)
}
#[inline(always)]
pub fn task_state() -> u32 {
    knob!(task_state)
}
#[inline(always)]
pub fn switch_has_prev_state() -> bool {
    knob!(switch_has_prev_state) != 0
}
#[inline(always)]
pub fn per_task() -> bool {
    knob!(per_task) != 0
}
#[inline(always)]
pub fn filter() -> bool {
    knob!(filter) != 0
}
#[inline(always)]
pub fn ceiling_ns() -> u64 {
    knob!(ceiling_ns)
}
#[inline(always)]
pub fn clock_rq() -> bool {
    knob!(clock_rq) != 0
}
#[inline(always)]
pub fn task_se_cfs_rq() -> u32 {
    knob!(task_se_cfs_rq)
}
#[inline(always)]
pub fn cfs_rq_rq() -> u32 {
    knob!(cfs_rq_rq)
}
#[inline(always)]
pub fn rq_clock() -> u32 {
    knob!(rq_clock)
}
#[inline(always)]
pub fn cgroups() -> bool {
    knob!(cgroups) != 0
}
#[inline(always)]
pub fn task_cgroups() -> u32 {
    knob!(task_cgroups)
}
#[inline(always)]
pub fn css_set_dfl_cgrp() -> u32 {
    knob!(css_set_dfl_cgrp)
}
#[inline(always)]
pub fn cgroup_kn() -> u32 {
    knob!(cgroup_kn)
}
#[inline(always)]
pub fn kernfs_node_id() -> u32 {
    knob!(kernfs_node_id)
}
#[inline(always)]
pub fn cgroup_slot_bits() -> u32 {
    knob!(cgroup_slot_bits)
}
#[inline(always)]
pub fn cgroup_root() -> u32 {
    knob!(cgroup_root)
}
#[inline(always)]
pub fn cgroup_root_hierarchy_id() -> u32 {
    knob!(cgroup_root_hierarchy_id)
}
#[inline(always)]
pub fn attribute_ns() -> u64 {
    knob!(attribute_ns)
}
#[inline(always)]
pub fn depth_known() -> bool {
    knob!(depth_known) != 0
}
#[inline(always)]
pub fn rq_nr_running() -> u32 {
    knob!(rq_nr_running)
}
#[inline(always)]
pub fn task_flags() -> u32 {
    knob!(task_flags)
}
#[inline(always)]
pub fn task_on_rq() -> u32 {
    knob!(task_on_rq)
}
#[inline(always)]
pub fn task_on_cpu() -> u32 {
    knob!(task_on_cpu)
}
#[inline(always)]
pub fn task_cpu() -> u32 {
    knob!(task_cpu)
}
#[inline(always)]
pub fn split_throttle() -> bool {
    knob!(split_throttle) != 0
}
#[inline(always)]
pub fn split_stolen() -> bool {
    knob!(split_stolen) != 0
}
#[inline(always)]
pub fn split_irq() -> bool {
    knob!(split_irq) != 0
}
/// Either part of the cause split is on (then `STAMPS` holds each task's migration count).
#[inline(always)]
pub fn split() -> bool {
    split_throttle() || split_stolen() || split_irq()
}
#[inline(always)]
pub fn cfs_rq_throttled_clock_self() -> u32 {
    knob!(cfs_rq_throttled_clock_self)
}
#[inline(always)]
pub fn cfs_rq_throttled_clock_self_time() -> u32 {
    knob!(cfs_rq_throttled_clock_self_time)
}
#[inline(always)]
pub fn task_se_nr_migrations() -> u32 {
    knob!(task_se_nr_migrations)
}
#[inline(always)]
pub fn rq_clock_task() -> u32 {
    knob!(rq_clock_task)
}
#[inline(always)]
pub fn wakeup_running_known() -> bool {
    knob!(wakeup_running_known) != 0
}
/// Where the throttled part comes from (`THROTTLE_FROM_SELF_CLOCK`, `THROTTLE_FROM_HOOKS`), 0 where it is
/// not split off.
#[inline(always)]
pub fn throttle_source() -> u32 {
    knob!(split_throttle)
}
#[inline(always)]
pub fn throttle_hooks() -> bool {
    throttle_source() == latency_common::THROTTLE_FROM_HOOKS
}
#[inline(always)]
pub fn cfs_rq_throttle_count() -> u32 {
    knob!(cfs_rq_throttle_count)
}
#[inline(always)]
pub fn cfs_rq_h_nr_running() -> u32 {
    knob!(cfs_rq_h_nr_running)
}
#[inline(always)]
pub fn task_group_cfs_rq() -> u32 {
    knob!(task_group_cfs_rq)
}
#[inline(always)]
pub fn rq_cpu() -> u32 {
    knob!(rq_cpu)
}
#[inline(always)]
pub fn task_se_on_rq() -> u32 {
    knob!(task_se_on_rq)
}
/// The capture rings' slots per CPU minus one (capture.rs).
#[inline(always)]
pub fn capture_mask() -> u32 {
    knob!(capture_mask)
}
/// Offset of `irqaction.name`, or 0 not to read it (capture_cpu.rs).
#[inline(always)]
pub fn irqaction_name() -> u32 {
    knob!(irqaction_name)
}
