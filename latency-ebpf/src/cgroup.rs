//! `cgroup_rmdir` → the removed cgroup's id into this CPU's ring, so the daemon can retire its
//! slot at the next drain instead of when it next walks the cgroup tree.
use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use latency_common::maps::REMOVED_KEPT;

use crate::{maps::CGROUP_REMOVED, task::Task};

// TP_PROTO(struct cgroup *cgrp, const char *path)       since 4.13
#[btf_tracepoint(function = "cgroup_rmdir")]
pub fn cgroup_rmdir(ctx: BtfTracePointContext) -> i32 {
    if let Some(id) = Task::arg(&ctx, 0).v2_cgroup_id() {
        removed(id);
    }
    0
}

#[inline(always)]
fn removed(id: u64) {
    let Some(ring) = CGROUP_REMOVED.get_ptr_mut(0) else { return };
    // SAFETY: this CPU's ring; rmdir runs in process context and this program does not nest
    // with itself on one CPU.
    let ring = unsafe { &mut *ring };
    ring.ids[(ring.head % REMOVED_KEPT as u64) as usize] = id;
    ring.head += 1;
}
