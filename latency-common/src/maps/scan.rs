//! The wait scan's record: one task seen waiting in a run queue or on a CPU.

use super::cause::Reason;

/// What [`Seen::kind`] says a task was doing when the wait scan saw it.
pub const SEEN_WAITING_WAKEUP: u32 = Reason::Wakeup as u32;
pub const SEEN_WAITING_PREEMPT: u32 = Reason::Preempt as u32;
pub const SEEN_RUNNING: u32 = 2;

/// One task the wait scan (the `iter/task` program) wrote: runnable but not on a CPU with a stamp
/// (a wait in progress, kind = its [`Reason`]), or on a CPU now ([`SEEN_RUNNING`]: who holds it).
/// A task that is stopped, traced, sleeping (D state included) or exiting is neither.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The program's clock (as the stamps) when the record was written.
    pub now_ns: u64,
    /// When the wait began (the stamp's time); 0 for a running task.
    pub since_ns: u64,
    /// cgroup v2 id (0 if not read: per-cgroup histograms off).
    pub cgroup: u64,
    pub tid: u32,
    pub tgid: u32,
    /// The CPU whose run queue it is on (`task_cpu()`).
    pub cpu: u32,
    pub kind: u32,
    pub prio: i32,
    /// Run-queue depth when it was enqueued (as [`Incident::queue_depth`]), or [`DEPTH_UNKNOWN`].
    pub queue_depth: u32,
    pub comm: [u8; 16],
}

impl Seen {
    pub const ZERO: Seen = Seen {
        now_ns: 0,
        since_ns: 0,
        cgroup: 0,
        tid: 0,
        tgid: 0,
        cpu: 0,
        kind: 0,
        prio: 0,
        queue_depth: 0,
        comm: [0; 16],
    };
}

const _: () = assert!(core::mem::size_of::<Seen>() == 64);

super::pod!(Seen);
