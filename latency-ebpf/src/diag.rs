//! Rare conditions → a line in the daemon's log through aya-log: the first of each kind on each
//! CPU at once, then at most one per kind and CPU every 10 s, with how many there were. Called
//! only on the rare branches, so the common path carries none of it.
use aya_ebpf::{macros::map, maps::PerCpuArray, programs::BtfTracePointContext};
#[cfg(not(feature = "no-diag"))]
use {aya_ebpf::helpers::generated::bpf_ktime_get_ns, aya_log_ebpf::warn};

/// What happened; the index of its slot in `DiagState`.
#[derive(Clone, Copy)]
#[repr(u32)]
pub enum Rare {
    /// A tid at or beyond the stamp array (`kernel.pid_max` raised after load).
    LostStamp = 0,
    /// A stamp later than the clock read at switch-in.
    FutureStamp = 1,
    /// The per-cgroup overflow map was full.
    FullCgroups = 2,
    /// The per-task map was full.
    FullTasks = 3,
}

pub const KINDS: usize = 4;
#[cfg(not(feature = "no-diag"))]
const EVERY_NS: u64 = 10_000_000_000;

/// Per CPU: when each kind was last logged, and how often it happened.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DiagState {
    pub last_ns: [u64; KINDS],
    pub seen: [u64; KINDS],
}

/// Per CPU: when each rare condition was last logged and how often it happened (off the hot
/// cache lines: touched only on the rare branches). Here rather than in maps.rs, which would
/// otherwise import `DiagState` from this file while this file imports the map from it.
#[map]
pub static DIAG: PerCpuArray<DiagState> = PerCpuArray::with_max_entries(1, 0);

/// With the `no-diag` feature: nothing, so a build without diagnostics shows what they add.
#[cfg(feature = "no-diag")]
#[inline(always)]
pub fn rare(_ctx: &BtfTracePointContext, _what: Rare, _id: u64) {}

/// Note one `what` about `id` (a tid or cgroup id), and log it unless this CPU logged the same
/// kind less than 10 s ago. A function of its own (a BPF-to-BPF call), so the formatting code is
/// not inlined into the handlers' common path.
#[cfg(not(feature = "no-diag"))]
#[inline(never)]
pub fn rare(ctx: &BtfTracePointContext, what: Rare, id: u64) {
    let Some(state) = DIAG.get_ptr_mut(0) else { return };
    // SAFETY: this CPU's slot; these programs do not nest on one CPU.
    let state = unsafe { &mut *state };
    let i = what as usize & (KINDS - 1);
    state.seen[i] += 1;
    // SAFETY: a helper without arguments or side effects.
    let now = unsafe { bpf_ktime_get_ns() };
    if state.last_ns[i] != 0 && now.wrapping_sub(state.last_ns[i]) < EVERY_NS {
        return;
    }
    state.last_ns[i] = now;
    let seen = state.seen[i];
    match what {
        Rare::LostStamp => warn!(
            ctx,
            "kernel: tid {} is beyond the stamp array (kernel.pid_max raised after load): its delays are not \
             measured ({} such stamps on this CPU so far; restart to resize)",
            id,
            seen
        ),
        Rare::FutureStamp => warn!(
            ctx,
            "kernel: tid {}'s enqueue stamp is later than its switch-in; delay discarded ({} on this CPU so far)",
            id,
            seen
        ),
        Rare::FullCgroups => warn!(
            ctx,
            "kernel: the per-cgroup overflow map is full: a delay of cgroup {} is in the totals only ({} on this \
             CPU so far; raise --max-cgroups)",
            id,
            seen
        ),
        Rare::FullTasks => warn!(
            ctx,
            "kernel: the per-task map is full: tid {} is not kept ({} on this CPU so far; raise --max-tasks)", id, seen
        ),
    }
}
