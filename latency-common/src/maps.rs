//! Names and `#[repr(C)]` value layouts of every map the kernel program writes and the daemon
//! reads, plus the enums that index their counter slots (so slot order is defined once).

use crate::buckets::BUCKETS;

/// Map and program names, as the object file spells them.
pub mod names {
    /// Per-tid enqueue stamp and the cause split's snapshot, two tids to an element
    /// (`Array<StampPair>`, indexed by tid / 2), sized to half of `kernel.pid_max` at load.
    pub const STAMPS: &str = "STAMPS";
    /// Per-CPU state of the switch path (`PerCpuArray<CpuState>`, one entry): counters, the
    /// histogram per [`super::Reason`] and the window maximum per reason, two slots each (see
    /// [`super::window_index`]).
    pub const CPU_STATS: &str = "CPU_STATS";
    /// Written by user space: the current window epoch. The object's `.bss` section, whose only
    /// global is a [`super::Control`]: the loader makes it a one-entry array map of that name.
    pub const CONTROL: &str = ".bss";
    /// Per-task statistics when the per-task feature is on (`HashMap<u32, TaskStats>`).
    pub const TASKS: &str = "TASKS";
    /// tids/tgids to keep when filtering is on (`HashMap<u32, u8>`).
    pub const FILTER: &str = "FILTER";
    /// Per-CPU coarse histogram per cgroup v2 id of the task that waited
    /// (`PerCpuHashMap<u64, CgroupHist>`).
    pub const CGROUPS: &str = "CGROUPS";
    /// Per-CPU table of cgroup slots (`PerCpuArray<CgroupSlot>`, a power of two of them), indexed
    /// by [`super::cgroup_slot`]: where a delay's cgroup histogram lives unless its slot is held
    /// by another cgroup on that CPU (then `CGROUPS` takes it).
    pub const CGROUP_SLOTS: &str = "CGROUP_SLOTS";
    /// Written by user space: per slot, the id of a removed cgroup whose counts it has read for
    /// the last time (`Array<u64>`, as many as `CGROUP_SLOTS`). The kernel may then reuse the
    /// slot on any CPU.
    pub const CGROUP_RETIRED: &str = "CGROUP_RETIRED";
    /// Per-CPU bitmap of the slots ever claimed on that CPU (`PerCpuArray<u64>`, one word per 64
    /// slots), so user space reads only those.
    pub const CGROUP_USED: &str = "CGROUP_USED";
    /// Ring buffer of the ids of removed cgroup v2 cgroups (`RingBuf`, [`super::REMOVED_BYTES`]),
    /// written by `cgroup_rmdir`, so the daemon retires each within milliseconds of its removal.
    pub const CGROUP_REMOVED: &str = "CGROUP_REMOVED";
    /// Per-CPU ring of the last runs on that CPU (`PerCpuArray<RunRing>`, one entry), kept when
    /// attribution is on.
    pub const RUNS: &str = "RUNS";
    /// Per-CPU worst attributed delay per reason and window slot (`PerCpuArray<Incident>`,
    /// indexed like `WINDOW_MAX`).
    pub const INCIDENTS: &str = "INCIDENTS";
    /// Run-queue depth when each tid was last enqueued (`Array<u32>`, sized like `STAMPS`).
    pub const DEPTHS: &str = "DEPTHS";
    /// Per-CPU ring of the last delays at or above the attribution threshold
    /// (`PerCpuArray<FinalRing>`, one entry): an alert fired on a wait in progress finds its
    /// task's final delay here, whatever else was the window's worst on that CPU.
    pub const FINALS: &str = "FINALS";
    /// Per CPU (`Array<IrqClock>`, indexed by CPU number, sized to the possible CPUs when the IRQ
    /// tracepoints are on and to 1 entry otherwise): the time that CPU spent in device IRQ
    /// handlers and softirqs, timed by the irq tracepoints.
    pub const IRQ_CLOCKS: &str = "IRQ_CLOCKS";

    /// Programs, one per tracepoint; the program name is the tracepoint name.
    pub const PROGRAMS: [&str; 3] = ["sched_wakeup", "sched_wakeup_new", "sched_switch"];
    /// The program attached with per-cgroup histograms only (not part of the bench's floor).
    pub const CGROUP_RMDIR: &str = "cgroup_rmdir";
    /// The task iterator (`iter/task`) the daemon runs once per drain: waits in progress. Never on
    /// the scheduler's path; not part of the bench's floor.
    pub const WAIT_SCAN: &str = "wait_scan";
    /// The programs attached with `--irq-tracepoints` only (not part of the bench's floor): they
    /// time device IRQ handlers and softirqs on kernels that do not account IRQ time.
    pub const IRQ_PROGRAMS: [&str; 4] = ["irq_handler_entry", "irq_handler_exit", "softirq_entry", "softirq_exit"];
}

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

/// A delay the kernel measured but refused to record.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discard {
    /// The stamp is later than the clock read at switch-in.
    FutureStamp = 0,
    /// The delay exceeds the configured ceiling.
    OverCeiling = 1,
}

impl Discard {
    pub const COUNT: usize = 2;
    pub const ALL: [Discard; Self::COUNT] = [Discard::FutureStamp, Discard::OverCeiling];

    pub const fn name(self) -> &'static str {
        match self {
            Discard::FutureStamp => "future_stamp",
            Discard::OverCeiling => "over_ceiling",
        }
    }
}

/// Something the kernel could not keep: a map had no room for it, or the kernel never showed it.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// A tid at or above the size of `STAMPS` (pid_max raised after load): its stamp was not kept.
    Stamps = 0,
    /// The per-task map was full: a new task's statistics were not kept.
    Tasks = 1,
    /// The per-cgroup map was full: a delay was not added to its cgroup's histogram (it is
    /// still in the per-CPU histograms).
    Cgroups = 2,
    /// Context switches the kernel raised no `sched_switch` for: seen as a break in a CPU's
    /// chain of switches (a `prev` that is not the previous `next`). The delay and run time
    /// around each are unknown to every tracer; the kernel's own accounting still has them.
    Switches = 3,
    /// Removed cgroups whose id found the removal ring buffer full: the daemon learns of them
    /// only from its next walk of the cgroup tree, so their slots are freed late.
    Removals = 4,
}

impl Lost {
    pub const COUNT: usize = 5;
    pub const ALL: [Lost; Self::COUNT] = [Lost::Stamps, Lost::Tasks, Lost::Cgroups, Lost::Switches, Lost::Removals];

    /// What was lost, as a label value: the map that had no room, or `switches`.
    pub const fn map(self) -> &'static str {
        match self {
            Lost::Stamps => "stamps",
            Lost::Tasks => "tasks",
            Lost::Cgroups => "cgroups",
            Lost::Switches => "switches",
            Lost::Removals => "cgroup_removed",
        }
    }
}

/// A stamp packs, in one `u64`, the enqueue time (monotonic ns, its low [`STAMP_TIME_BITS`]
/// bits), the reason (bit [`STAMP_TIME_BITS`], set for [`Reason::Preempt`]) and, with the cause
/// split on, the low bits of the run queue's irq+steal clock at that moment (the rest, in
/// [`SPLIT_UNIT_SHIFT`] units). `0` means "no stamp". The time is kept modulo 2^41 ns (36 min):
/// every delay is below the ceiling ([`MAX_CEILING_NS`]), so `now - at` modulo that is exact, and a
/// difference of more than half of it is a stamp from the future.
pub const STAMP_TIME_BITS: u32 = 41;
pub const STAMP_TIME_MASK: u64 = (1 << STAMP_TIME_BITS) - 1;
pub const STAMP_PREEMPT_BIT: u64 = 1 << STAMP_TIME_BITS;
/// Where the irq+steal snapshot starts, and how many bits it has.
pub const STAMP_STOLEN_SHIFT: u32 = STAMP_TIME_BITS + 1;
pub const STAMP_STOLEN_BITS: u32 = 64 - STAMP_STOLEN_SHIFT;
/// The ceiling's largest value: half the stamp's time range (18 min).
pub const MAX_CEILING_NS: u64 = 1 << (STAMP_TIME_BITS - 1);
/// The cause split's snapshots count in units of 2^10 ns (1.024 µs): the parts of a wait are
/// differences of two such snapshots, exact to a unit each, and the holder's part is the rest, so
/// the parts always add up to the wait exactly.
pub const SPLIT_UNIT_SHIFT: u32 = 10;
/// The stamps of tids `2i` and `2i + 1` (see [`stamp_pack`]) and, with the cause split on, their
/// split snapshots (see [`SPLIT_THROTTLE_BITS`]): 12 bytes per tid, and a task's stamp and
/// snapshot found by one lookup, mostly in one cache line.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StampPair {
    pub stamp: [u64; 2],
    pub split: [u32; 2],
}

const _: () = assert!(core::mem::size_of::<StampPair>() == 24);

/// The `STAMPS` element of tid `tid`, and its index in that element's arrays.
#[inline(always)]
pub const fn stamp_slot(tid: u32) -> (u32, usize) {
    (tid >> 1, (tid & 1) as usize)
}

/// Bits of the throttle snapshot in a `StampPair`'s split entry (the rest, [`SPLIT_MIGRATION_BITS`], is the
/// task's migration count): a throttled part wraps at 2^(28+10) ns ≈ 275 s, an irq+steal part at
/// 2^(22+10) ns ≈ 4.3 s (longer parts are taken modulo that).
pub const SPLIT_THROTTLE_BITS: u32 = 28;
pub const SPLIT_MIGRATION_BITS: u32 = 32 - SPLIT_THROTTLE_BITS;

#[inline(always)]
pub const fn stamp_pack(now_ns: u64, reason: Reason, stolen_units: u64) -> u64 {
    let s = (now_ns & STAMP_TIME_MASK)
        | match reason {
            Reason::Wakeup => 0,
            Reason::Preempt => STAMP_PREEMPT_BIT,
        }
        | (stolen_units << STAMP_STOLEN_SHIFT);
    // 0 means "no stamp": a wakeup at a multiple of 2^41 ns with nothing stolen is 1 ns late.
    if s == 0 { 1 } else { s }
}

/// `(enqueue time modulo 2^41 ns, reason, irq+steal snapshot)` of a non-zero stamp.
#[inline(always)]
pub const fn stamp_unpack(stamp: u64) -> (u64, Reason, u64) {
    let reason = if stamp & STAMP_PREEMPT_BIT != 0 { Reason::Preempt } else { Reason::Wakeup };
    (stamp & STAMP_TIME_MASK, reason, stamp >> STAMP_STOLEN_SHIFT)
}

/// How long ago (ns) a stamp's time `at` (from [`stamp_unpack`]) was at `now`, or `None` if it is
/// in the future (more than half the stamp's range away).
#[inline(always)]
pub const fn stamp_age(at: u64, now_ns: u64) -> Option<u64> {
    let age = now_ns.wrapping_sub(at) & STAMP_TIME_MASK;
    if age >= MAX_CEILING_NS { None } else { Some(age) }
}

/// `(snapshot - earlier) mod 2^bits`, in ns: a part of a wait from two wrapped snapshots.
#[inline(always)]
pub const fn split_part(now_units: u64, then_units: u64, bits: u32) -> u64 {
    (now_units.wrapping_sub(then_units) & ((1 << bits) - 1)) << SPLIT_UNIT_SHIFT
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

/// One reason's delays on one CPU: bucket counts (see [`crate::buckets`]) and the exact sum.
/// The count is the sum of the buckets, so the kernel does not keep it separately.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Histogram {
    pub sum_ns: u64,
    pub buckets: [u64; BUCKETS],
}

impl Histogram {
    pub const ZERO: Histogram = Histogram { sum_ns: 0, buckets: [0; BUCKETS] };
}

/// Buckets of a per-cgroup histogram: every other octave, so bucket `m` holds delays up to
/// `2^(-20 + 2m)` s (m = 0: ≤ 2^-20 s ≈ 0.95 µs … m = 13: ≤ 64 s); the last holds what is above
/// 64 s. Each bound is a boundary of the fine buckets, so coarsening is exact.
pub const CGROUP_BUCKETS: usize = 15;

/// The coarse cgroup bucket of fine bucket `k` (see [`crate::buckets`]).
#[inline(always)]
pub const fn cgroup_bucket(k: usize) -> usize {
    // Octave j = ceil((k + NATIVE_OFFSET) / 8) + 20 = (k + 7) / 8 for k ≥ 1 (0 for the zero
    // bucket); pairs of octaves share a coarse bucket.
    let m = (((k + 7) >> 3) + 1) >> 1;
    if m < CGROUP_BUCKETS - 1 { m } else { CGROUP_BUCKETS - 1 }
}

/// One cgroup's delays on one CPU, and the delays of other cgroups' tasks it ended by giving the
/// CPU up. The small fields come first: a delay touches `sum_ns` and up to three `waited_ns` (same
/// cache line as the slot's id) and one bucket.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupHist {
    pub sum_ns: u64,
    /// `sum_ns` split by [`Cause`]; the six add up to `sum_ns` exactly.
    pub waited_ns: [u64; Cause::COUNT],
    /// How long tasks of this cgroup ran while a task of another cgroup waited for their CPU:
    /// at each switch that ends a wait held by [`Cause::Other`], the part of the wait that `prev` (of
    /// this cgroup) was running, i.e. `min(delay, prev's run)`. Who held others back, and for how
    /// long; a task that ran 50 µs at the end of a 3 ms wait is charged 50 µs, not 3 ms.
    pub held_others_ns: u64,
    pub buckets: [u64; CGROUP_BUCKETS],
}

impl CgroupHist {
    pub const ZERO: CgroupHist =
        CgroupHist { sum_ns: 0, waited_ns: [0; Cause::COUNT], held_others_ns: 0, buckets: [0; CGROUP_BUCKETS] };
}

/// One slot of the per-cgroup table on one CPU: the cgroup it holds (0: free) and its delays.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupSlot {
    pub id: u64,
    pub hist: CgroupHist,
}

impl CgroupSlot {
    pub const ZERO: CgroupSlot = CgroupSlot { id: 0, hist: CgroupHist::ZERO };
}

/// The slot of cgroup `id` in a table of `2^bits` slots (`1 ≤ bits ≤ 32`): Fibonacci hashing,
/// one multiply and a shift. Cgroup ids are kernfs inode numbers handed out in sequence with
/// each cgroup's files in between, a stride that would alias in a plain `id % 2^bits`.
#[inline(always)]
pub const fn cgroup_slot(id: u64, bits: u32) -> u32 {
    (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as u32
}

/// The table's size for a per-cgroup capacity of `max_cgroups`, as the `bits` of [`cgroup_slot`]:
/// a power of two, at least 64 slots so the bitmap has whole words. Chosen by the daemon, which
/// loads it as the `cgroup_slot_bits` knob and hashes with it too.
pub fn cgroup_slot_bits(max_cgroups: u32) -> u32 {
    max_cgroups.max(64).next_power_of_two().trailing_zeros()
}

/// Bytes of the removal ring buffer: 8,192 removals of 16 bytes (the kernel's 8-byte record
/// header + the id) before the daemon reads them — 8 s of removals at 1,000/s with the daemon
/// stopped. A power of two and a multiple of every page size (4, 16 and 64 KiB).
pub const REMOVED_BYTES: u32 = 128 * 1024;

/// How many runs a CPU remembers, and so how many culprits an incident can name.
pub const RUNS_KEPT: usize = 8;

/// `Incident::queue_depth` when the kernel's BTF lacks what is needed to read it.
pub const DEPTH_UNKNOWN: u32 = u32::MAX;

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

/// How many final delays (at or above the attribution threshold) a CPU remembers.
pub const FINALS_KEPT: usize = 8;

/// One delay at or above the attribution threshold: who, why, how long, when it ended.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Final {
    pub tid: u32,
    /// A [`Reason`] as `u32`.
    pub reason: u32,
    pub delay_ns: u64,
    pub end_ns: u64,
}

/// The last [`FINALS_KEPT`] such delays on one CPU; the next goes to `finals[head % FINALS_KEPT]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinalRing {
    pub head: u64,
    pub finals: [Final; FINALS_KEPT],
}

impl FinalRing {
    pub const ZERO: FinalRing =
        FinalRing { head: 0, finals: [Final { tid: 0, reason: 0, delay_ns: 0, end_ns: 0 }; FINALS_KEPT] };
}

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

/// Per-CPU counters, one entry per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStats {
    /// `sched_switch` events seen on this CPU (including switches away from idle).
    pub switches: u64,
    /// Switches of a task that blocked (left the run queue).
    pub voluntary: u64,
    /// Switches of a task that stayed runnable (preempted).
    pub involuntary: u64,
    /// Time this CPU's idle task ran, completed periods only.
    pub idle_ns: u64,
    /// When the idle task last switched in, or 0 if it is not running (or not seen yet).
    pub idle_since_ns: u64,
    /// 1 + the tid of the last `next` on this CPU (0: none seen yet), to find [`Lost::Switches`].
    pub last_next: u64,
    /// When the task now on this CPU got it (the last switch seen; 0: none yet): how long a
    /// holder ran while another task waited ([`CgroupHist::held_others_ns`]).
    pub running_since_ns: u64,
    /// The cgroup v2 id of the task now on this CPU, if its switch-in read it (it ended a delay
    /// with per-cgroup histograms on); 0 otherwise. Saves reading it again when that task is the
    /// `prev` that ends someone else's wait.
    pub running_cgroup: u64,
    /// Waits not split by cause because the task migrated between CPUs while it waited (the
    /// clocks of its first CPU are not this one's): the whole wait is its holder's.
    pub unsplit: u64,
    /// Time waited on this CPU, by [`Cause`] (adds up to the histograms' sums).
    pub waited_ns: [u64; Cause::COUNT],
    pub discarded: [u64; Discard::COUNT],
    pub lost: [u64; Lost::COUNT],
}

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

/// One CPU's IRQ clock, kept by the irq tracepoints when `--irq-tracepoints` is on (written only on
/// that CPU, read by the cause split on any): `total_ns` is the time spent in device IRQ handlers
/// and softirqs so far, not counting the softirq or handler in progress, which began at
/// `soft_since_ns` / `hard_since_ns` (0: none). A handler that runs inside a softirq is part of
/// that softirq's time, so it is counted once. No nesting count: an entry always starts its level
/// afresh, so one missed exit (attaching in between) costs at most one period. A cache line each,
/// so CPUs do not share one.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IrqClock {
    pub total_ns: u64,
    pub soft_since_ns: u64,
    pub hard_since_ns: u64,
    pub _pad: [u64; 5],
}

const _: () = assert!(core::mem::size_of::<IrqClock>() == 64);

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

// Layouts are shared with the kernel program byte for byte: pin their sizes so an accidental
// field change shows up here, not as garbage in user space.
const _: () = assert!(core::mem::size_of::<Histogram>() == 8 + 8 * BUCKETS);
const _: () = assert!(core::mem::size_of::<CpuStats>() == 8 * (9 + Cause::COUNT + Discard::COUNT + Lost::COUNT));
const _: () = assert!(core::mem::size_of::<Control>() == 8);
const _: () = assert!(
    core::mem::size_of::<CpuState>()
        == core::mem::size_of::<CpuStats>()
            + Reason::COUNT * core::mem::size_of::<Histogram>()
            + WINDOW_SLOTS as usize * Reason::COUNT * 80
);
const _: () = assert!(core::mem::size_of::<CgroupHist>() == 184);
const _: () = assert!(core::mem::size_of::<CgroupSlot>() == 192);
const _: () = assert!(core::mem::size_of::<Run>() == 40);
const _: () = assert!(core::mem::size_of::<RunRing>() == 16 + 40 * RUNS_KEPT);
const _: () = assert!(core::mem::size_of::<Incident>() == 64 + 32 + 40 * RUNS_KEPT);
const _: () = assert!(RUNS_KEPT.is_power_of_two());
const _: () = assert!(core::mem::size_of::<WindowMax>() == 80);
const _: () = assert!(core::mem::size_of::<TaskStats>() == 104 + 8 * Cause::COUNT);
const _: () = assert!(core::mem::align_of::<WindowMax>() == 8);
const _: () = assert!(core::mem::align_of::<TaskStats>() == 8);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are #[repr(C)] plain integers and integer arrays with no padding
    // (the size asserts above), so every bit pattern is a valid value.
    unsafe impl aya::Pod for super::Histogram {}
    unsafe impl aya::Pod for super::CpuStats {}
    unsafe impl aya::Pod for super::CpuState {}
    unsafe impl aya::Pod for super::Control {}
    unsafe impl aya::Pod for super::IrqClock {}
    unsafe impl aya::Pod for super::WindowMax {}
    unsafe impl aya::Pod for super::TaskStats {}
    unsafe impl aya::Pod for super::CgroupHist {}
    unsafe impl aya::Pod for super::CgroupSlot {}
    unsafe impl aya::Pod for super::RunRing {}
    unsafe impl aya::Pod for super::Incident {}
    unsafe impl aya::Pod for super::Seen {}
    unsafe impl aya::Pod for super::FinalRing {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_tids_share_a_stamp_element() {
        assert_eq!(stamp_slot(0), (0, 0));
        assert_eq!(stamp_slot(1), (0, 1));
        assert_eq!(stamp_slot(32_769), (16_384, 1));
        // The last tid of PID_MAX_LIMIT (4 Mi) is in the last of 2 Mi elements.
        assert_eq!(stamp_slot(4 * 1024 * 1024 - 1), (2 * 1024 * 1024 - 1, 1));
    }

    #[test]
    fn stamp_round_trip() {
        for reason in Reason::ALL {
            for now in [1u64, 123_456_789, (1 << 62) + 7] {
                for stolen in [0u64, 5, (1 << STAMP_STOLEN_BITS) - 1] {
                    let (at, r, s) = stamp_unpack(stamp_pack(now, reason, stolen));
                    assert_eq!((at, r, s), (now & STAMP_TIME_MASK, reason, stolen));
                    // The age is exact across the wrap of the stamp's time.
                    assert_eq!(stamp_age(at, now + 600_000_000_000), Some(600_000_000_000));
                    assert_eq!(stamp_age(at, now), Some(0));
                }
            }
        }
        assert_ne!(stamp_pack(1 << STAMP_TIME_BITS, Reason::Wakeup, 0), 0);
        // A stamp later than now is not an age.
        assert_eq!(stamp_age(1000, 999), None);
        assert_eq!(stamp_age(0, MAX_CEILING_NS - 1), Some(MAX_CEILING_NS - 1));
    }

    #[test]
    fn split_parts_survive_the_wrap() {
        let bits = SPLIT_THROTTLE_BITS;
        let top = (1u64 << bits) - 1;
        assert_eq!(split_part(3, top, bits), 4 << SPLIT_UNIT_SHIFT);
        assert_eq!(split_part(10, 10, bits), 0);
        assert_eq!(split_part((1 << 40) + 10, 4, STAMP_STOLEN_BITS), 6 << SPLIT_UNIT_SHIFT);
    }

    #[test]
    fn cgroup_buckets_are_pairs_of_octaves() {
        use crate::buckets::{BUCKETS, UPPER_NS, bucket_of};
        // Bucket m holds up to 2^(-20+2m) s: check both sides of every coarse boundary.
        for m in 0..CGROUP_BUCKETS - 1 {
            let bound_ns = 1e9 * 2f64.powi(-20 + 2 * m as i32);
            let below = bound_ns.floor() as u64;
            assert_eq!(cgroup_bucket(bucket_of(below)), m, "at {below} ns");
            assert_eq!(cgroup_bucket(bucket_of(below + 1)), m + 1, "above {below} ns");
        }
        assert_eq!(cgroup_bucket(0), 0);
        assert_eq!(cgroup_bucket(BUCKETS - 1), CGROUP_BUCKETS - 1);
        assert_eq!(cgroup_bucket(bucket_of(UPPER_NS[BUCKETS - 2])), CGROUP_BUCKETS - 1);
    }

    #[test]
    fn cgroup_slots_are_a_power_of_two_of_whole_words() {
        assert_eq!(cgroup_slot_bits(16), 6);
        assert_eq!(cgroup_slot_bits(1024), 10);
        assert_eq!(cgroup_slot_bits(1025), 11);
        assert_eq!(cgroup_slot_bits(65536), 16);
    }

    #[test]
    fn cgroup_slots_spread_strided_ids() {
        // kernfs ids of consecutive cgroups, 20 inodes apart: 1000 of them in 2048 slots.
        let bits = 11;
        let mut seen = [false; 1 << 11];
        for i in 0..1000u64 {
            seen[cgroup_slot(1000 + 20 * i, bits) as usize] = true;
        }
        let distinct = seen.iter().filter(|s| **s).count();
        assert!(distinct > 750, "only {distinct} distinct slots");
    }

    #[test]
    fn enum_slots_are_dense() {
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
            assert_eq!(Reason::from_u32(i as u32), Some(*r));
        }
        for (i, d) in Discard::ALL.iter().enumerate() {
            assert_eq!(*d as usize, i);
        }
        for (i, l) in Lost::ALL.iter().enumerate() {
            assert_eq!(*l as usize, i);
        }
        for (i, c) in Cause::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }
}
