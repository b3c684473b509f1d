//! Attribution: the runs a CPU remembers and the incident (who waited, how deep the queue was,
//! who ran meanwhile) of a window's worst attributed delay.

/// How many runs a CPU remembers, and so how many culprits an incident can name.
pub const RUNS_KEPT: usize = 8;

/// `Incident::queue_depth` when the kernel's BTF lacks what is needed to read it.
pub const DEPTH_UNKNOWN: u32 = u32::MAX;

/// One stretch of a task running on a CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub tid: u32,
    pub tgid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub comm: [u8; 16],
}

impl Run {
    pub const ZERO: Run = Run { tid: 0, tgid: 0, start_ns: 0, end_ns: 0, comm: [0; 16] };
}

/// The last [`RUNS_KEPT`] runs on one CPU: written at every switch when attribution is on.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunRing {
    /// When the task now on the CPU got it (0: not seen yet).
    pub running_since_ns: u64,
    /// Runs written so far; the next goes to `runs[head % RUNS_KEPT]`.
    pub head: u64,
    pub runs: [Run; RUNS_KEPT],
}

impl RunRing {
    pub const ZERO: RunRing = RunRing { running_since_ns: 0, head: 0, runs: [Run::ZERO; RUNS_KEPT] };
}

/// The worst delay of one reason on one CPU in one window that reached the attribution
/// threshold, with who waited, how deep the queue was, and who ran meanwhile.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Incident {
    /// The window this record belongs to (as in [`WindowMax`]).
    pub epoch: u64,
    pub delay_ns: u64,
    /// When the victim got the CPU (monotonic ns); it waited from `end_ns - delay_ns`.
    pub end_ns: u64,
    /// The victim's cgroup v2 id (0 if not read).
    pub cgroup: u64,
    pub victim_tid: u32,
    pub victim_tgid: u32,
    pub victim_prio: i32,
    /// A [`Reason`] as `u32`.
    pub reason: u32,
    /// Tasks runnable on the CPU, besides the victim, when it was enqueued; [`DEPTH_UNKNOWN`]
    /// if that could not be read.
    pub queue_depth: u32,
    /// How many entries of `runs` are filled (most recent first).
    pub culprits: u32,
    /// 1 if more tasks ran during the wait than `runs` holds (the oldest are not kept).
    pub truncated: u32,
    pub _pad: u32,
    /// The parts of `delay_ns` its group was throttled and its CPU in IRQ or steal (see
    /// [`Cause`]; 0 with the split off or after a migration).
    pub throttled_ns: u64,
    pub stolen_ns: u64,
    pub victim_comm: [u8; 16],
    /// The runs on this CPU while the victim waited, most recent first.
    pub runs: [Run; RUNS_KEPT],
}

impl Incident {
    pub const ZERO: Incident = Incident {
        epoch: 0,
        delay_ns: 0,
        end_ns: 0,
        cgroup: 0,
        victim_tid: 0,
        victim_tgid: 0,
        victim_prio: 0,
        reason: 0,
        queue_depth: 0,
        culprits: 0,
        truncated: 0,
        _pad: 0,
        throttled_ns: 0,
        stolen_ns: 0,
        victim_comm: [0; 16],
        runs: [Run::ZERO; RUNS_KEPT],
    };
}

// Shared with the kernel program byte for byte: pin the sizes so an accidental field change
// shows up here, not as garbage in user space.
const _: () = assert!(core::mem::size_of::<Run>() == 40);
const _: () = assert!(core::mem::size_of::<RunRing>() == 16 + 40 * RUNS_KEPT);
const _: () = assert!(core::mem::size_of::<Incident>() == 64 + 32 + 40 * RUNS_KEPT);
const _: () = assert!(RUNS_KEPT.is_power_of_two());

super::pod!(RunRing, Incident);
