//! `cgroup_rmdir` → the removed cgroup's id into the removal ring buffer, so the daemon retires
//! its slot within milliseconds instead of at its next drain or walk of the cgroup tree.
use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use latency_common::Lost;

use crate::{maps::CGROUP_REMOVED, observe::count_lost, task::Task};

// TP_PROTO(struct cgroup *cgrp, const char *path)       since 4.13
#[btf_tracepoint(function = "cgroup_rmdir")]
pub fn cgroup_rmdir(ctx: BtfTracePointContext) -> i32 {
    if let Some(id) = Task::arg(&ctx, 0).v2_cgroup_id() {
        // Flags 0: the kernel wakes the reader only when it had caught up.
        if CGROUP_REMOVED.output::<u64>(&id, 0).is_err() {
            count_lost(Lost::Removals);
        }
    }
    0
}
