//! The only code that reads kernel structs. Offsets come from the running kernel's BTF through
//! KNOBS; in a tp_btf program the arguments are typed `task_struct` pointers, so the verifier
//! accepts direct loads at constant offsets and checks each one against BTF (no helper call).
use aya_ebpf::programs::BtfTracePointContext;

use crate::knobs;

/// A `struct task_struct *` passed to a BTF tracepoint (or, inside `rq_clock`, another
/// BTF-typed kernel pointer reached from it).
#[derive(Clone, Copy)]
pub struct Task(*const u8);

impl Task {
    /// The `n`th tracepoint argument, which the caller knows to be a `task_struct *`.
    #[inline(always)]
    pub fn arg(ctx: &BtfTracePointContext, n: usize) -> Task {
        Task(ctx.arg::<*const u8>(n))
    }

    #[inline(always)]
    fn load<T: Copy>(self, offset: u32) -> T {
        // SAFETY: the pointer is a tracepoint's task_struct argument (never NULL for these
        // tracepoints) and `offset` is a field offset taken from this kernel's BTF; the verifier
        // re-checks both before the program may run.
        unsafe { core::ptr::read_volatile(self.0.add(offset as usize).cast::<T>()) }
    }

    /// `task_struct.pid`: the thread id.
    #[inline(always)]
    pub fn tid(self) -> u32 {
        self.load::<u32>(knobs::task_pid())
    }

    /// `task_struct.tgid`: the process id.
    #[inline(always)]
    pub fn tgid(self) -> u32 {
        self.load::<u32>(knobs::task_tgid())
    }

    /// `task_struct.prio`: the kernel priority (120 = nice 0).
    #[inline(always)]
    pub fn prio(self) -> i32 {
        self.load::<i32>(knobs::task_prio())
    }

    /// `task_struct.__state` (or `.state`), for kernels whose sched_switch lacks `prev_state`.
    #[inline(always)]
    pub fn state(self) -> u32 {
        self.load::<u32>(knobs::task_state())
    }

    /// `task->se.cfs_rq->rq->clock`: the clock of the run queue this task is on, or 0 if a
    /// pointer on the way is NULL. Loads through the two pointers are checked by the verifier
    /// (BTF-typed) and fault-safe.
    #[inline(always)]
    pub fn rq_clock(self) -> u64 {
        let cfs_rq = self.load::<*const u8>(knobs::task_se_cfs_rq());
        if cfs_rq.is_null() {
            return 0;
        }
        let rq = Task(cfs_rq).load::<*const u8>(knobs::cfs_rq_rq());
        if rq.is_null() {
            return 0;
        }
        Task(rq).load::<u64>(knobs::rq_clock())
    }

    /// `task->cgroups->dfl_cgrp->kn->id`: the task's cgroup v2 id (what
    /// `bpf_get_current_cgroup_id` returns for the current task), or 0 if a pointer is NULL.
    #[inline(always)]
    pub fn cgroup_id(self) -> u64 {
        let css_set = self.load::<*const u8>(knobs::task_cgroups());
        if css_set.is_null() {
            return 0;
        }
        let cgroup = Task(css_set).load::<*const u8>(knobs::css_set_dfl_cgrp());
        if cgroup.is_null() {
            return 0;
        }
        let kn = Task(cgroup).load::<*const u8>(knobs::cgroup_kn());
        if kn.is_null() {
            return 0;
        }
        Task(kn).load::<u64>(knobs::kernfs_node_id())
    }

    /// `task_struct.comm`, 16 bytes, read as two words (NUL-padded by the kernel).
    #[inline(always)]
    pub fn comm(self) -> [u8; 16] {
        let base = knobs::task_comm();
        let lo = self.load::<u64>(base).to_ne_bytes();
        let hi = self.load::<u64>(base + 8).to_ne_bytes();
        let mut comm = [0u8; 16];
        comm[..8].copy_from_slice(&lo);
        comm[8..].copy_from_slice(&hi);
        comm
    }
}
