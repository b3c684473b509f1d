//! The only code that reads kernel structs. Offsets come from the running kernel's BTF through
//! KNOBS; in a tp_btf program the arguments are typed `task_struct` pointers, so the verifier
//! accepts direct loads at constant offsets and checks each one against BTF (no helper call).
//! The throttle hooks' arguments (a kprobe's are not typed) and the pointers in a group's `cfs_rq`
//! array: those reads go through `bpf_probe_read_kernel` (`Group`). An IRQ handler's name, read
//! through its `irqaction` (`IrqAction`), is copied with `bpf_probe_read_kernel_str`.
use aya_ebpf::{
    helpers::{bpf_probe_read_kernel, generated::bpf_probe_read_kernel_str},
    programs::BtfTracePointContext,
};

use latency_common::{THROTTLE_FROM_HOOKS, THROTTLE_FROM_OVERLAP, maps::SPLIT_UNIT_SHIFT};

use crate::{irq, knobs, maps};

/// See [`Task::split_clocks`].
#[derive(Clone, Copy)]
pub struct SplitClocks {
    pub throttled: u64,
    pub stolen: u64,
    pub migrations: u64,
}

/// A `struct task_struct *` passed to a BTF tracepoint (or another BTF-typed kernel pointer:
/// one reached from it, or `cgroup_rmdir`'s `struct cgroup *`).
#[derive(Clone, Copy)]
pub struct Task(*const u8);

impl Task {
    /// The `n`th tracepoint argument, which the caller knows to be a `task_struct *`.
    #[inline(always)]
    pub fn arg(ctx: &BtfTracePointContext, n: usize) -> Task {
        Task(ctx.arg::<*const u8>(n))
    }

    /// A `task_struct *` the kernel handed over otherwise (the task iterator's context), not NULL.
    #[inline(always)]
    pub fn from_ptr(p: *const u8) -> Task {
        Task(p)
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

    /// `task_struct.on_rq`: non-zero while the task is in a run queue (queued or migrating).
    #[inline(always)]
    pub fn on_rq(self) -> u32 {
        self.load::<u32>(knobs::task_on_rq())
    }

    /// `task_struct.on_cpu`: the task is running on a CPU (or being switched out of it).
    #[inline(always)]
    pub fn on_cpu(self) -> bool {
        self.load::<u32>(knobs::task_on_cpu()) != 0
    }

    /// `task_cpu()`: the CPU whose run queue the task is on, or last ran on.
    #[inline(always)]
    pub fn cpu(self) -> u32 {
        self.load::<u32>(knobs::task_cpu())
    }

    /// The kernel object a pointer field at `offset` points to, or `None` if it is NULL. Loads
    /// through it are checked by the verifier against BTF and are fault-safe.
    #[inline(always)]
    fn follow(self, offset: u32) -> Option<Task> {
        let p = self.load::<*const u8>(offset);
        if p.is_null() { None } else { Some(Task(p)) }
    }

    /// `task->se.cfs_rq->rq->clock`: the clock of the run queue this task is on, or 0 if a
    /// pointer on the way is NULL.
    #[inline(always)]
    pub fn rq_clock(self) -> u64 {
        self.follow(knobs::task_se_cfs_rq())
            .and_then(|cfs_rq| cfs_rq.follow(knobs::cfs_rq_rq()))
            .map_or(0, |rq| rq.load::<u64>(knobs::rq_clock()))
    }

    /// The clocks the cause split reads at an enqueue and at the switch-in that ends the wait
    /// (`now`), in `SPLIT_UNIT_SHIFT` units: how long `task->se.cfs_rq` (the task's own group on
    /// its CPU) has been throttled, by itself or an ancestor, in all (`throttled_clock_self_time`,
    /// plus the throttle in progress since `throttled_clock_self`), and the run queue's irq+steal
    /// clock (`clock - clock_task`) plus, with the irq tracepoints, the IRQ time they timed on its
    /// CPU; with `se.nr_migrations`. Parts switched off (or a NULL on the way) read 0.
    /// `switch_in`: read at the switch-in that ends a wait (a constant at each call site).
    #[inline(always)]
    pub fn split_clocks(self, now: u64, switch_in: bool) -> SplitClocks {
        let migrations = self.load::<u64>(knobs::task_se_nr_migrations());
        let irq = if knobs::split_irq() { irq::clock(self.cpu(), now) } else { 0 };
        let (throttled, stolen) = self.rq_split_clocks(switch_in);
        SplitClocks { throttled: throttled >> SPLIT_UNIT_SHIFT, stolen: (stolen + irq) >> SPLIT_UNIT_SHIFT, migrations }
    }

    /// The run queue's part of `split_clocks`, in ns: (throttle clock, irq+steal clock). The run
    /// queue is reached only when its clocks are needed: for the irq+steal part, or for a throttle
    /// in progress (where the kernel accounts neither IRQ time nor steal, that saves two of the
    /// BTF-checked loads in most waits). The group's throttle clock is its own (6.8+) or, with the
    /// throttle hooks, theirs (`hooked_throttle_clock`).
    #[inline(always)]
    fn rq_split_clocks(self, switch_in: bool) -> (u64, u64) {
        // One load of the throttle's source: whether there is a part, and which clock.
        let source = knobs::throttle_source();
        let (throttle, stolen) = (source != 0, knobs::split_stolen());
        // With only the irq tracepoints on, the chain's offsets are not set.
        if !throttle && !stolen {
            return (0, 0);
        }
        let Some(cfs_rq) = self.follow(knobs::task_se_cfs_rq()) else { return (0, 0) };
        let (mut throttled, mut since) = (0, 0);
        if throttle {
            (throttled, since) = if source == THROTTLE_FROM_HOOKS {
                self.hooked_throttle_clock(cfs_rq, switch_in)
            } else if source == THROTTLE_FROM_OVERLAP {
                // Only whether a throttle ended meanwhile: no `since`.
                (cfs_rq.load::<u64>(knobs::cfs_rq_throttled_clock_self_time()), 0)
            } else {
                (
                    cfs_rq.load::<u64>(knobs::cfs_rq_throttled_clock_self_time()),
                    cfs_rq.load::<u64>(knobs::cfs_rq_throttled_clock_self()),
                )
            };
        }
        if !stolen && since == 0 {
            return (throttled, 0);
        }
        let Some(rq) = cfs_rq.follow(knobs::cfs_rq_rq()) else { return (throttled, 0) };
        let clock = rq.load::<u64>(knobs::rq_clock());
        if since != 0 && clock > since {
            throttled += clock - since;
        }
        let stolen = if stolen { clock.wrapping_sub(rq.load::<u64>(knobs::rq_clock_task())) } else { 0 };
        (throttled, stolen)
    }

    /// The throttle hooks' clock of this task's group (`cfs_rq`): (ns throttled before the
    /// throttle in progress, when that began or 0), one hash lookup by the `cfs_rq`'s address.
    /// At a switch-in, when the group is not throttled and this task is the only one queued in it
    /// or below, no other wait holds a snapshot of that clock, so its entry goes
    /// (`maps::forget_throttle_clock`): what keeps entries of groups since removed from piling up.
    #[inline(always)]
    fn hooked_throttle_clock(self, cfs_rq: Task, switch_in: bool) -> (u64, u64) {
        let group = cfs_rq.0 as u64;
        let Some((throttled, mut since)) = maps::throttle_clock(group) else { return (0, 0) };
        // A `since` outlives its throttle only in an entry of a group freed while throttled whose
        // address a new group took: that one is not throttled.
        if since != 0 && cfs_rq.load::<i32>(knobs::cfs_rq_throttle_count()) == 0 {
            since = 0;
        }
        if switch_in
            && since == 0
            && self.load::<u32>(knobs::task_se_on_rq()) != 0
            && cfs_rq.load::<u32>(knobs::cfs_rq_h_nr_running()) == 1
        {
            maps::forget_throttle_clock(group);
        }
        (throttled, since)
    }

    /// `task->se.cfs_rq->rq->nr_running`: tasks runnable on this task's CPU (including itself
    /// once it is enqueued), or `None` if a pointer on the way is NULL.
    #[inline(always)]
    pub fn rq_nr_running(self) -> Option<u32> {
        self.follow(knobs::task_se_cfs_rq())
            .and_then(|cfs_rq| cfs_rq.follow(knobs::cfs_rq_rq()))
            .map(|rq| rq.load::<u32>(knobs::rq_nr_running()))
    }

    /// `task->cgroups->dfl_cgrp->kn->id`: the task's cgroup v2 id (what
    /// `bpf_get_current_cgroup_id` returns for the current task), or 0 if a pointer is NULL.
    #[inline(always)]
    pub fn cgroup_id(self) -> u64 {
        self.follow(knobs::task_cgroups())
            .and_then(|css_set| css_set.follow(knobs::css_set_dfl_cgrp()))
            .and_then(|cgroup| cgroup.follow(knobs::cgroup_kn()))
            .map_or(0, |kn| kn.load::<u64>(knobs::kernfs_node_id()))
    }

    /// Whether this is a kernel thread: `PF_KTHREAD` in `task_struct.flags` (the kernel's own
    /// test, the same bit from 2.6 to 6.18).
    #[inline(always)]
    pub fn is_kthread(self) -> bool {
        const PF_KTHREAD: u32 = 0x0020_0000;
        self.load::<u32>(knobs::task_flags()) & PF_KTHREAD != 0
    }

    /// For a `struct cgroup *` (not a task): its id if it belongs to the v2 hierarchy (whose
    /// `hierarchy_id` is 0; v1 hierarchies have their own ids, which may equal v2 ones).
    #[inline(always)]
    pub fn v2_cgroup_id(self) -> Option<u64> {
        let root = self.follow(knobs::cgroup_root())?;
        if root.load::<u32>(knobs::cgroup_root_hierarchy_id()) != 0 {
            return None;
        }
        self.follow(knobs::cgroup_kn()).map(|kn| kn.load::<u64>(knobs::kernfs_node_id()))
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

/// One group's `struct cfs_rq` on one CPU as a throttle hook sees it once the kernel function
/// returned: its address (the key of its throttle clock), `throttle_count` (0 → 1 on entering the
/// throttled state, back to 0 on leaving it), `h_nr_running` (tasks queued in it and below) and
/// its run queue's `clock`, the clock 6.8+ times `throttled_clock_self` by.
#[derive(Clone, Copy)]
pub struct Group {
    pub cfs_rq: u64,
    pub throttle_count: i32,
    pub h_nr_running: u32,
    pub clock: u64,
}

/// A `T` at the untyped kernel address `at` (fault-safe), or `None` where it cannot be read.
#[inline(always)]
fn read<T>(at: u64) -> Option<T> {
    // SAFETY: bpf_probe_read_kernel copies into a local and fails instead of faulting; the
    // addresses are a kernel function's argument or read from one, at offsets from its BTF.
    unsafe { bpf_probe_read_kernel(at as *const T).ok() }
}

impl Group {
    /// From the arguments of `tg_throttle_down` / `tg_unthrottle_up`, `(struct task_group *tg,
    /// void *data)` with `data` the `struct rq *` (both since 2.6.39): `tg->cfs_rq[cpu_of(rq)]`,
    /// every read fault-safe (a kprobe's arguments are not typed).
    #[inline(always)]
    pub fn at(tg: u64, rq: u64) -> Option<Group> {
        let cpu = read::<u32>(rq + u64::from(knobs::rq_cpu()))?;
        let cfs_rqs = read::<u64>(tg + u64::from(knobs::task_group_cfs_rq()))?;
        let cfs_rq = read::<u64>(cfs_rqs + 8 * u64::from(cpu))?;
        Some(Group {
            cfs_rq,
            throttle_count: read::<i32>(cfs_rq + u64::from(knobs::cfs_rq_throttle_count()))?,
            h_nr_running: read::<u32>(cfs_rq + u64::from(knobs::cfs_rq_h_nr_running()))?,
            clock: read::<u64>(rq + u64::from(knobs::rq_clock()))?,
        })
    }
}

/// A `struct irqaction *` passed to `irq_handler_entry` (BTF-typed, as a task is).
#[derive(Clone, Copy)]
pub struct IrqAction(*const u8);

impl IrqAction {
    /// The `n`th tracepoint argument, which the caller knows to be a `struct irqaction *`.
    #[inline(always)]
    pub fn arg(ctx: &BtfTracePointContext, n: usize) -> IrqAction {
        IrqAction(ctx.arg::<*const u8>(n))
    }

    /// `irqaction.name` into `out` (cut to 15 bytes and a NUL), where the knob gives its offset;
    /// `out` is left as it was without the knob, and zeroed where the name cannot be read.
    #[inline(always)]
    pub fn name_into(self, out: &mut [u8; 16]) {
        let offset = knobs::irqaction_name();
        if offset == 0 {
            return;
        }
        // SAFETY: the pointer is the tracepoint's irqaction argument and `offset` that of its
        // `name` pointer in this kernel's BTF; the verifier re-checks both (a faulting load reads 0).
        let name = unsafe { core::ptr::read_volatile(self.0.add(offset as usize).cast::<*const u8>()) };
        if name.is_null() {
            return;
        }
        // SAFETY: the helper reads at most 16 bytes of kernel memory, fault-safe, into `out`.
        unsafe { bpf_probe_read_kernel_str(out.as_mut_ptr().cast(), out.len() as u32, name.cast()) };
    }
}
