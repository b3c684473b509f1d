//! The capture recorder's records: what one scheduler event looked like, as the capture programs
//! write it into their CPU's ring and the daemon reads it back to write a trace.

/// A `sched_switch`: `pid`/`tgid`/`prio`/`comm` are prev's, `other_*` next's, `arg` prev's state
/// (0: still runnable, so preempted; else the kernel's task state bits).
pub const CAPTURE_SWITCH: u32 = 1;
/// A `sched_waking`, on the waker's CPU: `pid`/`tgid`/`prio`/`comm` are the woken task's,
/// `other_pid`/`other_tgid`/`other_comm` the waker's (the task running there; 0 in an interrupt
/// of the idle task), `arg` the CPU the woken task last ran on (where it is queued unless moved).
pub const CAPTURE_WAKING: u32 = 2;
/// A `sched_migrate_task`: `pid`/`tgid`/`prio`/`comm` are the moved task's, `arg` the CPU it
/// leaves, `other_arg` the one it goes to; `other_pid` the task running where it happened.
pub const CAPTURE_MIGRATE: u32 = 3;
/// A `cpu_idle`: `arg` the idle state the CPU enters (the cpuidle driver's index, or 1 where the
/// CPU idles without a driver), or `CAPTURE_IDLE_EXIT` when it leaves the state it entered last;
/// `other_arg` the tracepoint's `cpu_id`. No task: `pid`, `other_pid` and the other task fields 0.
pub const CAPTURE_IDLE: u32 = 4;
/// `CaptureRecord::arg` of a `CAPTURE_IDLE` leaving its state: the kernel's `PWR_EVENT_EXIT`.
pub const CAPTURE_IDLE_EXIT: u32 = u32::MAX;
/// An `irq_handler_entry`: `arg` the IRQ number, `comm` the handler's name (`irqaction.name`, cut
/// to 15 bytes; empty where this kernel's BTF does not describe it); `other_pid`/`other_tgid`/
/// `other_comm` the task it interrupted (0 in the idle task); `pid`, `tgid` and `prio` 0.
pub const CAPTURE_IRQ: u32 = 5;
/// An `irq_handler_exit`: `arg` the IRQ number, `other_arg` what the handler returned
/// (`irqreturn_t`: 0 not its device's, 1 handled, 2 woke its thread); the interrupted task as in
/// `CAPTURE_IRQ`.
pub const CAPTURE_IRQ_EXIT: u32 = 6;
/// A `softirq_entry`: `arg` the vector (0 HI, 1 TIMER, 2 NET_TX, 3 NET_RX, 4 BLOCK, 5 IRQ_POLL,
/// 6 TASKLET, 7 SCHED, 8 HRTIMER, 9 RCU); the task it runs in (`ksoftirqd`, or the one an IRQ's
/// end interrupted) as in `CAPTURE_IRQ`.
pub const CAPTURE_SOFTIRQ: u32 = 7;
/// A `softirq_exit`: as `CAPTURE_SOFTIRQ`.
pub const CAPTURE_SOFTIRQ_EXIT: u32 = 8;

/// One event in its CPU's ring. `seq` (the CPU's count of events, from 1) is written first and
/// `seq_end` last with the same value: a record read while being rewritten shows two different
/// numbers and is dropped, never guessed. A record begun inside another on the same CPU (an IRQ
/// handler's inside a softirq's, which runs with interrupts on) takes the next free slot, so the
/// sequence numbers of one CPU are not always in time order. `ts_ns` is CLOCK_BOOTTIME, ftrace's
/// and Perfetto's default clock, so a capture lines up with a trace taken beside it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureRecord {
    pub seq: u64,
    pub ts_ns: u64,
    pub kind: u32,
    pub cpu: u32,
    pub pid: u32,
    pub tgid: u32,
    pub other_pid: u32,
    pub other_tgid: u32,
    pub arg: u32,
    pub other_arg: u32,
    pub prio: i32,
    pub other_prio: i32,
    pub comm: [u8; 16],
    pub other_comm: [u8; 16],
    pub seq_end: u64,
}

const _: () = assert!(core::mem::size_of::<CaptureRecord>() == 96);

super::pod!(CaptureRecord);
