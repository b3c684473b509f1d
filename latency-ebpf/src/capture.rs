//! `sched_switch`, `sched_waking`, `sched_migrate_task` (attached only with the capture recorder)
//! → one `CaptureRecord` each in this CPU's ring: who ran, who woke whom from where, who moved.
//! Separate programs from the core's, so a kernel without the recorder pays nothing for it; each
//! event costs a clock read, two per-CPU lookups and a 96-byte store. The three tracepoints run
//! with interrupts off (under the run queue's or the woken task's lock); the recorder's other
//! programs (capture_cpu.rs) may not, so `write` takes a slot no record begun inside it took.
use aya_ebpf::{
    helpers::{
        bpf_get_current_comm,
        generated::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_boot_ns},
    },
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use latency_common::maps::{CAPTURE_MIGRATE, CAPTURE_SWITCH, CAPTURE_WAKING, CaptureRecord};

use crate::{
    knobs,
    maps::{CAPTURE, CAPTURE_HEAD},
    task::Task,
};

/// `TASK_RUNNING`, as switch.rs reads prev's state.
const TASK_RUNNING: u32 = 0;

// TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
//          unsigned int prev_state)            since 5.18; before, without prev_state.
#[btf_tracepoint(function = "sched_switch")]
pub fn capture_switch(ctx: BtfTracePointContext) -> i32 {
    let prev = Task::arg(&ctx, 1);
    let next = Task::arg(&ctx, 2);
    let state = if knobs::switch_has_prev_state() { ctx.arg::<u64>(3) as u32 } else { prev.state() };
    let preempt = ctx.arg::<u64>(0) & 0xff != 0;
    write(|r| {
        r.kind = CAPTURE_SWITCH;
        r.pid = prev.tid();
        r.tgid = prev.tgid();
        r.prio = prev.prio();
        r.comm = prev.comm();
        r.arg = if preempt { TASK_RUNNING } else { state };
        r.other_pid = next.tid();
        r.other_tgid = next.tgid();
        r.other_prio = next.prio();
        r.other_comm = next.comm();
    });
    0
}

// TP_PROTO(struct task_struct *p)                                    since 4.3
#[btf_tracepoint(function = "sched_waking")]
pub fn capture_waking(ctx: BtfTracePointContext) -> i32 {
    let woken = Task::arg(&ctx, 0);
    write(|r| {
        r.kind = CAPTURE_WAKING;
        woken_fields(r, woken);
        r.arg = woken.cpu();
        current(r);
    });
    0
}

// TP_PROTO(struct task_struct *p, int dest_cpu)                      since 2.6.32
#[btf_tracepoint(function = "sched_migrate_task")]
pub fn capture_migrate(ctx: BtfTracePointContext) -> i32 {
    let moved = Task::arg(&ctx, 0);
    let dest = ctx.arg::<u64>(1) as u32;
    write(|r| {
        r.kind = CAPTURE_MIGRATE;
        woken_fields(r, moved);
        r.arg = moved.cpu();
        r.other_arg = dest;
        current(r);
    });
    0
}

#[inline(always)]
fn woken_fields(r: &mut CaptureRecord, task: Task) {
    r.pid = task.tid();
    r.tgid = task.tgid();
    r.prio = task.prio();
    r.comm = task.comm();
}

/// The task running on this CPU as the `other_*` side.
#[inline(always)]
pub fn current(r: &mut CaptureRecord) {
    // SAFETY: a helper without arguments.
    let id = unsafe { bpf_get_current_pid_tgid() };
    r.other_pid = id as u32;
    r.other_tgid = (id >> 32) as u32;
    r.other_comm = bpf_get_current_comm().unwrap_or_default();
}

/// How many slots a writer tries before it gives its record up: more than an interrupt arriving
/// between its read and its write of the head writes (see `claim`).
const CLAIMS: u64 = 8;

/// Fills the next free slot of this CPU's ring: the time first, then `seq`, the fields, `seq_end`
/// last.
#[inline(always)]
pub fn write(fill: impl FnOnce(&mut CaptureRecord)) {
    // SAFETY: a helper without arguments. Read first, so a record begun before an interrupt is
    // stamped before that interrupt's records, as the tracepoints fired.
    let now = unsafe { bpf_ktime_get_boot_ns() };
    let Some((r, seq)) = claim() else { return };
    r.ts_ns = now;
    // SAFETY: a helper without arguments.
    r.cpu = unsafe { bpf_get_smp_processor_id() };
    r.other_arg = 0;
    fill(r);
    // SAFETY: volatile stores keep the order the reader's check relies on.
    unsafe { core::ptr::write_volatile(&raw mut r.seq_end, seq) };
}

/// The next free slot of this CPU's ring with its `seq` written, or none after `CLAIMS` tries
/// (counted in `CAPTURE_HEAD`'s entry 1).
/// The sched tracepoints run with interrupts off, but `softirq_entry`/`_exit` (and `cpu_idle` on
/// some kernels) with them on: an interrupt's records may be written between this program's read
/// of the head and its write. They finish before it resumes (one CPU, last in first out), having
/// taken the slots from that head on and written their numbers there; the head this program then
/// writes is behind, so it moves on past every slot already holding its own number. A slot holds
/// its number only once written (before, it holds the one a ring's length below, or 0).
#[inline(always)]
fn claim() -> Option<(&'static mut CaptureRecord, u64)> {
    let head = CAPTURE_HEAD.get_ptr_mut(0)?;
    for _ in 0..CLAIMS {
        // SAFETY: this CPU's element of a per-CPU array, written only by these programs on this
        // CPU; volatile, so each try reads what an interrupt may have left.
        let seq = unsafe { core::ptr::read_volatile(head) } + 1;
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(head, seq) };
        let r = CAPTURE.get_ptr_mut((seq as u32) & knobs::capture_mask())?;
        // SAFETY: this CPU's slot; the daemon reads it only as a copy and checks `seq_end`.
        if unsafe { core::ptr::read_volatile(&raw const (*r).seq) } != seq {
            // SAFETY: as above; written before the fields (volatile keeps the order).
            unsafe { core::ptr::write_volatile(&raw mut (*r).seq, seq) };
            // SAFETY: as above; claimed, so no record begun later on this CPU takes it.
            return Some((unsafe { &mut *r }, seq));
        }
    }
    if let Some(given_up) = CAPTURE_HEAD.get_ptr_mut(1) {
        // SAFETY: as the head; an interrupt's count in between may be lost, a count not.
        unsafe { core::ptr::write_volatile(given_up, core::ptr::read_volatile(given_up) + 1) };
    }
    None
}
