//! Every map the program writes, each with the reason for its size, except `DIAG`, which only
//! diag.rs touches and so is defined there. Names come from latency-common's `maps::names` (the
//! symbol name is the map name).
use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap, RingBuf},
};
use latency_common::maps::{
    CaptureRecord, CgroupHist, CgroupSlot, Control, CpuState, FinalRing, Incident, IrqClock, REMOVED_BYTES, Reason,
    RunRing, StampPair, TaskStats, ThrottleClock, WINDOW_SLOTS,
};

/// Enqueue stamp per tid, with the cause split's throttle snapshot and migration count (see
/// latency-common's `StampPair`), two tids to an element. Indexed by tid, so a lookup never fails
/// and never fills; the daemon resizes it to half of `kernel.pid_max` before load (2 Mi here is
/// for PID_MAX_LIMIT, the largest possible).
#[map]
pub static STAMPS: Array<StampPair> = Array::with_max_entries(2 * 1024 * 1024, 0);

/// Counters, idle bookkeeping, one histogram per reason and the window maxima (double-buffered:
/// the kernel writes slot `epoch % 2`), one entry per CPU: no atomics, no contention, one lookup.
#[map]
pub static CPU_STATS: PerCpuArray<CpuState> = PerCpuArray::with_max_entries(1, 0);

/// The epoch, written by user space when it closes a window: a global of the object's `.bss`
/// (a one-entry array map the loader names after the section), so the switch path reads it with a
/// plain load instead of a map lookup, which the compiler treats as a call and spills around.
#[unsafe(no_mangle)]
pub static mut CONTROL: Control = Control { epoch: 0 };

/// The current window epoch.
#[inline(always)]
pub fn epoch() -> u64 {
    // SAFETY: a static, always valid; user space updates it whole (an 8-byte map value).
    unsafe { core::ptr::read_volatile(&raw const CONTROL.epoch) }
}

/// Per-task statistics; the daemon sizes it (`--max-tasks`) and shrinks it to 1 entry when the
/// per-task feature is off. A full map is counted in `Lost::Tasks`.
#[map]
pub static TASKS: HashMap<u32, TaskStats> = HashMap::with_max_entries(32 * 1024, 0);

/// tids and tgids to keep when filtering; the daemon sizes it to the list it was given.
#[map]
pub static FILTER: HashMap<u32, u8> = HashMap::with_max_entries(1, 0);

/// Coarse histogram per cgroup v2 id of the task that waited, per CPU (no atomics), for delays
/// whose slot in `CGROUP_SLOTS` is held by another cgroup on that CPU. The daemon sizes it
/// (`max_cgroups`; memory = entries × CPUs × 128 B) and deletes entries of removed cgroups; a
/// full map is counted in `Lost::Cgroups`.
#[map]
pub static CGROUPS: PerCpuHashMap<u64, CgroupHist> = PerCpuHashMap::with_max_entries(1, 0);

/// Per-cgroup histograms by slot (see latency-common's `cgroup_slot`), per CPU: the common
/// case is an array store. The daemon sizes it (the power of two ≥ `max_cgroups`); a slot held by
/// another cgroup on this CPU sends the delay to `CGROUPS`.
#[map]
pub static CGROUP_SLOTS: PerCpuArray<CgroupSlot> = PerCpuArray::with_max_entries(1, 0);

/// Per slot, a removed cgroup whose final counts the daemon has read: its slot may be reused.
#[map]
pub static CGROUP_RETIRED: Array<u64> = Array::with_max_entries(1, 0);

/// Per CPU, one bit per slot ever claimed there (one word per 64 slots), so the daemon reads
/// only claimed slots.
#[map]
pub static CGROUP_USED: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Ids of removed v2 cgroups, for the daemon to retire their slots as they come (one record per
/// rmdir; a full ring is counted in `Lost::Removals`). The daemon shrinks it to a page when
/// per-cgroup histograms are off.
#[map]
pub static CGROUP_REMOVED: RingBuf = RingBuf::with_byte_size(REMOVED_BYTES, 0);

/// The last runs on each CPU, so an incident can name who ran while its victim waited.
#[map]
pub static RUNS: PerCpuArray<RunRing> = PerCpuArray::with_max_entries(1, 0);

/// The worst attributed delay per reason, per CPU and window slot (like `WINDOW_MAX`).
#[map]
pub static INCIDENTS: PerCpuArray<Incident> = PerCpuArray::with_max_entries(WINDOW_SLOTS * Reason::COUNT as u32, 0);

/// The last delays at or above the attribution threshold on each CPU (see latency-common's
/// `FinalRing`), written only with attribution on and only for those delays.
#[map]
pub static FINALS: PerCpuArray<FinalRing> = PerCpuArray::with_max_entries(1, 0);

/// Run-queue depth at each tid's last enqueue; the daemon sizes it like `STAMPS` when
/// attribution is on and to 1 entry otherwise.
#[map]
pub static DEPTHS: Array<u32> = Array::with_max_entries(1, 0);

/// Per CPU, indexed by CPU number: the time it spent in device IRQ handlers and softirqs (irq.rs).
/// An array, not per-CPU, because a wakeup reads the clock of the CPU its task is queued on;
/// the daemon sizes it to the possible CPUs with `--irq-tracepoints` and to 1 entry otherwise.
#[map]
pub static IRQ_CLOCKS: Array<IrqClock> = Array::with_max_entries(1, 0);

/// Per CPU, the capture recorder's ring of the last scheduler events there (capture.rs): slot
/// `seq & capture_mask`. The daemon sizes it to the slots per CPU (a power of two) when the
/// recorder is on and to 1 entry otherwise; older records are overwritten, which the daemon
/// counts from the CPU's head.
#[map]
pub static CAPTURE: PerCpuArray<CaptureRecord> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU, how many events the capture recorder has written there (its ring's head, entry 0)
/// and how many it gave up (entry 1: no free slot after `CLAIMS` tries, see capture.rs).
#[map]
pub static CAPTURE_HEAD: PerCpuArray<u64> = PerCpuArray::with_max_entries(2, 0);

/// Per group and CPU, keyed by the `struct cfs_rq *`: its throttle clock (throttle_hooks.rs), on
/// kernels before 6.8, whose `cfs_rq` has none of its own. Preallocated (the hooks run under the
/// run queue's lock); the daemon sizes it to the per-cgroup capacity times the possible CPUs with
/// the hooks on and to 1 entry otherwise. An entry is made when a group is throttled and dropped
/// once no wait holds a snapshot of it: when the group is unthrottled with no task queued in it,
/// or its only queued task gets the CPU. A full map is counted in `Lost::ThrottleClocks`.
#[map]
pub static THROTTLE_CLOCKS: HashMap<u64, ThrottleClock> = HashMap::with_max_entries(1, 0);

/// The throttle clock of the group whose `struct cfs_rq` is at `cfs_rq`: (ns spent throttled
/// before the throttle in progress, when that began or 0), or `None` where it has no entry (a
/// clock of 0 so far: an entry starts at 0).
#[inline(always)]
pub fn throttle_clock(cfs_rq: u64) -> Option<(u64, u64)> {
    // SAFETY: plain integers, read once each; their writers hold this group's run queue lock,
    // as the scheduler tracepoints that read them do.
    unsafe { THROTTLE_CLOCKS.get(cfs_rq) }.map(|c| (c.total_ns, c.since_ns))
}

/// Drop the group's clock entry (see `Task::hooked_throttle_clock`): the next throttle starts it at 0
/// again, and the waits that begin before that read 0 at both ends, as without an entry.
#[inline(always)]
pub fn forget_throttle_clock(cfs_rq: u64) {
    let _ = THROTTLE_CLOCKS.remove(cfs_rq);
}
