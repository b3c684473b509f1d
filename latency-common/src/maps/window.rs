//! The per-CPU state the switch path writes (counters, histograms, window maxima) and the window
//! epoch user space moves on.

use super::{cause::Reason, counters::CpuStats, histogram::Histogram};

/// Everything the switch path writes on one CPU, in one per-CPU value, so an event finds it with
/// one lookup: the counters, one histogram per [`Reason`] and the window maxima.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CpuState {
    pub stats: CpuStats,
    pub histograms: [Histogram; Reason::COUNT],
    /// Indexed by [`window_index`]: the kernel writes slot `epoch % 2`, user space reads the
    /// other once the epoch moved on.
    pub window: [WindowMax; WINDOW_SLOTS as usize * Reason::COUNT],
}

/// Written by user space; read by the kernel to pick the [`WindowMax`] slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Control {
    pub epoch: u64,
}

/// Number of [`WindowMax`] slots per CPU: the kernel writes slot `epoch % 2` while user space
/// reads the other.
pub const WINDOW_SLOTS: u32 = 2;

/// Index in [`CpuState::window`] of a slot and reason: each reason keeps its own maximum.
#[inline(always)]
pub const fn window_index(epoch: u64, reason: Reason) -> u32 {
    ((epoch & 1) as u32) * Reason::COUNT as u32 + reason as u32
}

/// The largest delay of one reason that ended on one CPU in one window, with who waited and who
/// ran before.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowMax {
    /// The window this record belongs to; a record from another epoch is stale.
    pub epoch: u64,
    pub delay_ns: u64,
    /// When the victim got the CPU (CLOCK_MONOTONIC ns, `bpf_ktime_get_ns`).
    pub end_ns: u64,
    pub victim_tid: u32,
    pub victim_tgid: u32,
    /// The task that ran on this CPU just before the victim (`prev` at that switch).
    pub prev_tid: u32,
    pub prev_tgid: u32,
    /// A [`Reason`] as `u32`.
    pub reason: u32,
    pub victim_prio: i32,
    pub victim_comm: [u8; 16],
    pub prev_comm: [u8; 16],
}

impl WindowMax {
    pub const ZERO: WindowMax = WindowMax {
        epoch: 0,
        delay_ns: 0,
        end_ns: 0,
        victim_tid: 0,
        victim_tgid: 0,
        prev_tid: 0,
        prev_tgid: 0,
        reason: 0,
        victim_prio: 0,
        victim_comm: [0; 16],
        prev_comm: [0; 16],
    };
}

// Shared with the kernel program byte for byte: pin the sizes so an accidental field change
// shows up here, not as garbage in user space.
const _: () = assert!(core::mem::size_of::<Control>() == 8);
const _: () = assert!(
    core::mem::size_of::<CpuState>()
        == core::mem::size_of::<CpuStats>()
            + Reason::COUNT * core::mem::size_of::<Histogram>()
            + WINDOW_SLOTS as usize * Reason::COUNT * 80
);
const _: () = assert!(core::mem::size_of::<WindowMax>() == 80);
const _: () = assert!(core::mem::align_of::<WindowMax>() == 8);

super::pod!(CpuState, Control, WindowMax);
