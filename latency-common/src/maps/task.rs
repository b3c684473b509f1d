//! Per-task statistics (the per-task map).

use super::cause::{Cause, Reason};

/// Per-task statistics (the per-task feature, on for `record`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskStats {
    pub tgid: u32,
    /// Kernel priority (`task_struct.prio`): 100–139 for normal tasks, 120 is nice 0.
    pub prio: i32,
    pub comm: [u8; 16],
    /// Time spent running, summed from switch-in to switch-out.
    pub runtime_ns: u64,
    /// When the task last switched in, or 0 if it is not running (or not seen yet).
    pub last_in_ns: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    /// Delays recorded, per [`Reason`].
    pub delays: [u64; Reason::COUNT],
    pub delay_sum_ns: u64,
    pub delay_max_ns: u64,
    /// When the maximum delay ended (monotonic ns).
    pub delay_max_at_ns: u64,
    /// The [`Reason`] of the maximum delay, as `u32`.
    pub delay_max_reason: u32,
    /// Switches in or out of this task the kernel raised no tracepoint for ([`Lost::Switches`]):
    /// its run time and delays miss what happened around them.
    pub untraced: u32,
    /// `delay_sum_ns` split by [`Cause`].
    pub waited_ns: [u64; Cause::COUNT],
}

impl TaskStats {
    pub const ZERO: TaskStats = TaskStats {
        tgid: 0,
        prio: 0,
        comm: [0; 16],
        runtime_ns: 0,
        last_in_ns: 0,
        voluntary: 0,
        involuntary: 0,
        delays: [0; Reason::COUNT],
        delay_sum_ns: 0,
        delay_max_ns: 0,
        delay_max_at_ns: 0,
        delay_max_reason: 0,
        untraced: 0,
        waited_ns: [0; Cause::COUNT],
    };
}

// Shared with the kernel program byte for byte: pin the sizes so an accidental field change
// shows up here, not as garbage in user space.
const _: () = assert!(core::mem::size_of::<TaskStats>() == 104 + 8 * Cause::COUNT);
const _: () = assert!(core::mem::align_of::<TaskStats>() == 8);

super::pod!(TaskStats);
