//! Why a task waited and what its wait was spent on: the enums that index the counter slots.

/// Why a task was waiting on a run queue.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// It slept, was woken (`sched_wakeup`/`sched_wakeup_new`) and waited for a CPU.
    Wakeup = 0,
    /// It was switched out while still runnable and waited to get the CPU back.
    Preempt = 1,
}

impl Reason {
    pub const COUNT: usize = 2;
    pub const ALL: [Reason; Self::COUNT] = [Reason::Wakeup, Reason::Preempt];

    pub const fn name(self) -> &'static str {
        match self {
            Reason::Wakeup => "wakeup",
            Reason::Preempt => "preempt",
        }
    }

    pub const fn from_u32(v: u32) -> Option<Reason> {
        match v {
            0 => Some(Reason::Wakeup),
            1 => Some(Reason::Preempt),
            _ => None,
        }
    }
}

/// What a wait was spent on. The first two come from the kernel's own clocks over the wait; the
/// rest of the wait is charged to who held the CPU when it ended (`prev` at that switch). All six
/// add up to the wait exactly.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The waiting task's cgroup (or an ancestor) was throttled by its CPU limit (CFS bandwidth)
    /// on that CPU.
    Throttled = 0,
    /// The CPU was in hard or soft IRQ (where the kernel accounts IRQ time) or taken by the
    /// hypervisor (steal, where the kernel accounts it).
    IrqSteal = 1,
    /// A task of the waiting task's own cgroup held the CPU.
    Same = 2,
    /// A user task of another cgroup (named, with how long it ran, in that cgroup's
    /// [`CgroupHist::held_others_ns`]). With per-cgroup histograms off, any user task.
    Other = 3,
    /// A kernel thread (`PF_KTHREAD`).
    Kernel = 4,
    /// The CPU's idle task: nothing held the CPU; the wait is the wakeup's own latency.
    Idle = 5,
}

impl Cause {
    pub const COUNT: usize = 6;
    pub const ALL: [Cause; Self::COUNT] =
        [Cause::Throttled, Cause::IrqSteal, Cause::Same, Cause::Other, Cause::Kernel, Cause::Idle];

    /// As a label value (`cause`).
    pub const fn name(self) -> &'static str {
        match self {
            Cause::Throttled => "throttled",
            Cause::IrqSteal => "irq_steal",
            Cause::Same => "same",
            Cause::Other => "other",
            Cause::Kernel => "kernel",
            Cause::Idle => "idle",
        }
    }
}
