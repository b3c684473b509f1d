//! Map and program names in, as the object file spells them: the one list both sides look names up in.

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
/// Per group and CPU (`HashMap<u64, ThrottleClock>`, keyed by the `struct cfs_rq *`, sized to
/// the per-cgroup capacity times the possible CPUs when the throttle hooks are on and to 1 entry
/// otherwise): the throttle clock of each group the throttle hooks saw throttled.
pub const THROTTLE_CLOCKS: &str = "THROTTLE_CLOCKS";

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
/// The throttle hooks (attached with the throttled part on kernels before 6.8 only, not part of
/// the bench's floor): the fexit program, the kprobe that stands in for it where the kernel has no
/// BPF trampolines, and the kernel function both follow. They run only when a group is throttled
/// or unthrottled, never on the scheduler's per-switch path.
pub const THROTTLE_HOOKS: [(&str, &str, &str); 2] =
    [("throttle_down", "kp_throttle", "tg_throttle_down"), ("unthrottle_up", "kp_unthrottle", "tg_unthrottle_up")];
/// The capture recorder's ring (`PerCpuArray<CaptureRecord>`, sized to the slots per CPU when the
/// recorder is on and to 1 entry otherwise) and each CPU's count of events written into it
/// (`PerCpuArray<u64>`, 1 entry).
pub const CAPTURE: &str = "CAPTURE";
pub const CAPTURE_HEAD: &str = "CAPTURE_HEAD";
/// The capture recorder's programs (attached only when it is on; not part of the bench's floor):
/// each program's name and the tracepoint it follows.
pub const CAPTURE_PROGRAMS: [(&str, &str); 4] = [
    ("capture_switch", "sched_switch"),
    ("capture_waking", "sched_waking"),
    ("capture_migrate", "sched_migrate_task"),
    ("capture_idle", "cpu_idle"),
];
/// The capture recorder's programs on the irq tracepoints, attached only when both the recorder
/// and the IRQ tracepoints (`IRQ_PROGRAMS`) are on: each program's name and its tracepoint.
pub const CAPTURE_IRQ_PROGRAMS: [(&str, &str); 4] = [
    ("capture_irq", "irq_handler_entry"),
    ("capture_irq_end", "irq_handler_exit"),
    ("capture_softirq", "softirq_entry"),
    ("capture_softend", "softirq_exit"),
];
