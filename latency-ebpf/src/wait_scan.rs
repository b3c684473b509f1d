//! The wait scan: a task iterator (`iter/task`) the daemon runs once per drain, never on the
//! scheduler's path. It writes a `Seen` record for each task that waits in a run queue with a
//! stamp (a wait in progress, aged from its stamp on the stamps' own clock) and for each task on a
//! CPU (who holds it); every other task — sleeping (D state too), stopped, traced, exiting — is
//! skipped.
use core::ffi::c_void;

use aya_ebpf::helpers::generated::bpf_seq_write;
use latency_common::maps::{DEPTH_UNKNOWN, SEEN_RUNNING, Seen, stamp_age, stamp_slot, stamp_unpack};

use crate::{
    knobs,
    maps::{DEPTHS, STAMPS},
    observe,
    task::Task,
};

/// `TASK_RUNNING`: set by a wakeup, kept by a task that is preempted.
const TASK_RUNNING: u32 = 0;

/// `struct bpf_iter__task`: the iterator's context (one pointer each; `task` is NULL once, after
/// the last task).
#[repr(C)]
struct IterTask {
    meta: *const IterMeta,
    task: *const u8,
}

/// The start of `struct bpf_iter_meta`: the seq_file the records go to.
#[repr(C)]
struct IterMeta {
    seq: *mut c_void,
}

#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub extern "C" fn wait_scan(ctx: *mut c_void) -> i32 {
    // SAFETY: the kernel passes a `bpf_iter__task`; the verifier checks each load against its BTF.
    let (meta, task) = unsafe {
        let ctx = ctx.cast::<IterTask>();
        (core::ptr::read_volatile(&raw const (*ctx).meta), core::ptr::read_volatile(&raw const (*ctx).task))
    };
    if task.is_null() || meta.is_null() {
        return 0;
    }
    let task = Task::from_ptr(task);
    let tid = task.tid();
    let mut seen = Seen::ZERO;
    seen.now_ns = observe::now(task);
    if task.on_cpu() {
        seen.kind = SEEN_RUNNING;
    } else {
        // In a run queue and runnable: a task that sleeps but is still queued (6.12+'s delayed
        // dequeue) or is stopped keeps a state other than TASK_RUNNING.
        if task.on_rq() == 0 || task.state() != TASK_RUNNING {
            return 0;
        }
        let (element, i) = stamp_slot(tid);
        let Some(stamp) = STAMPS.get(element).map(|pair| pair.stamp[i & 1]) else { return 0 };
        if stamp == 0 {
            return 0;
        }
        let (at, reason, _) = stamp_unpack(stamp);
        let Some(age) = stamp_age(at, seen.now_ns) else { return 0 };
        seen.since_ns = seen.now_ns.wrapping_sub(age);
        seen.kind = reason as u32;
        seen.queue_depth =
            if knobs::attribute_ns() != 0 { DEPTHS.get(tid).copied().unwrap_or(DEPTH_UNKNOWN) } else { DEPTH_UNKNOWN };
    }
    seen.tid = tid;
    seen.tgid = task.tgid();
    seen.cpu = task.cpu();
    seen.prio = task.prio();
    seen.comm = task.comm();
    seen.cgroup = if knobs::cgroups() { task.cgroup_id() } else { 0 };
    // SAFETY: `seq` is the iterator's seq_file; the record is on this stack, its size exact.
    unsafe {
        let seq = core::ptr::read_volatile(&raw const (*meta).seq);
        bpf_seq_write(seq.cast(), (&raw const seen).cast(), core::mem::size_of::<Seen>() as u32);
    }
    0
}
