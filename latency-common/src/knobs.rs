//! Load-time settings and kernel struct offsets, handed to the kernel program as one read-only
//! global (`.rodata`, frozen before load) so the verifier treats every field as a constant: loads
//! at these offsets are checked against BTF, and branches on switched-off features are pruned.

/// Name of the global in the object file.
pub const KNOBS_SYMBOL: &str = "KNOBS";

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
    };
}

/// Default ceiling: ten minutes. A real run-queue wait can reach seconds (an RT hog with
/// throttling off); beyond ten minutes a delay says more about a broken stamp than a queue.
pub const DEFAULT_CEILING_NS: u64 = 600 * 1_000_000_000;

const _: () = assert!(core::mem::size_of::<Knobs>() == 40);

#[cfg(feature = "user")]
// SAFETY: #[repr(C)] integers only, no padding (size assert above).
unsafe impl aya::Pod for Knobs {}
