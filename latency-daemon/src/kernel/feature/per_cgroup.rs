//! Per-cgroup histograms: this kernel's BTF and the capacity asked for in; the pointer chain to
//! a task's cgroup v2 id, the slot table's knobs and sizes, and the removal tracepoint out.
use latency_common::{
    Knobs,
    maps::{REMOVED_BYTES, cgroup_slot_bits, names},
};

use super::{Room, Sizes};
use crate::kernel::{
    btf::{Btf, BtfError, Member},
    object::Program,
    options::ProbeOptions,
};

/// The pointer chain from a task to its cgroup v2 id: `task->cgroups->dfl_cgrp->kn->id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupLayout {
    pub task_cgroups: Member,
    pub css_set_dfl_cgrp: Member,
    pub cgroup_kn: Member,
    pub kernfs_node_id: Member,
    /// `cgroup->root->hierarchy_id`: which hierarchy a removed cgroup belonged to.
    pub cgroup_root: Member,
    pub cgroup_root_hierarchy_id: Member,
    /// `task_struct.flags` (`unsigned int` since 2.6): `PF_KTHREAD` marks a kernel thread, the
    /// holder class of a wait that ended when one gave the CPU up.
    pub task_flags: Member,
}

/// Offsets to reach a task's cgroup v2 id (the kernfs node id of its default-hierarchy
/// cgroup); three 8-byte pointers and the 8-byte id.
pub fn layout(btf: &Btf) -> Result<CgroupLayout, BtfError> {
    Ok(CgroupLayout {
        task_cgroups: btf.sized("task_struct", "cgroups", &[8])?,
        css_set_dfl_cgrp: btf.sized("css_set", "dfl_cgrp", &[8])?,
        cgroup_kn: btf.sized("cgroup", "kn", &[8])?,
        kernfs_node_id: btf.sized("kernfs_node", "id", &[8])?,
        cgroup_root: btf.sized("cgroup", "root", &[8])?,
        cgroup_root_hierarchy_id: btf.sized("cgroup_root", "hierarchy_id", &[4])?,
        task_flags: btf.sized("task_struct", "flags", &[4])?,
    })
}

/// The slot table and its overflow, and the removal ring and tracepoint when asked for.
pub const ROOM: Room = Room {
    maps,
    programs: |o| if o.cgroup_removals { vec![Program::Tracepoint(names::CGROUP_RMDIR)] } else { Vec::new() },
    ..Room::new("per_cgroup", flag!(cgroups), |btf| layout(btf).map(drop), knobs)
};

fn knobs(btf: &Btf, o: &ProbeOptions, knobs: Knobs) -> Result<Knobs, BtfError> {
    let c = layout(btf)?;
    Ok(Knobs {
        cgroups: 1,
        task_cgroups: c.task_cgroups.offset,
        css_set_dfl_cgrp: c.css_set_dfl_cgrp.offset,
        cgroup_kn: c.cgroup_kn.offset,
        kernfs_node_id: c.kernfs_node_id.offset,
        cgroup_slot_bits: cgroup_slot_bits(o.max_cgroups),
        cgroup_root: c.cgroup_root.offset,
        cgroup_root_hierarchy_id: c.cgroup_root_hierarchy_id.offset,
        task_flags: c.task_flags.offset,
        ..knobs
    })
}

fn maps(on: bool, o: &ProbeOptions, sizes: Sizes) -> Vec<(&'static str, u32)> {
    if !on {
        return vec![
            (names::CGROUPS, 1),
            (names::CGROUP_SLOTS, 1),
            (names::CGROUP_RETIRED, 1),
            (names::CGROUP_USED, 1),
            (names::CGROUP_REMOVED, sizes.page),
        ];
    }
    let slots = 1u32 << cgroup_slot_bits(o.max_cgroups);
    vec![
        (names::CGROUPS, o.max_cgroups),
        (names::CGROUP_SLOTS, slots),
        (names::CGROUP_RETIRED, slots),
        (names::CGROUP_USED, slots / 64),
        (names::CGROUP_REMOVED, if o.cgroup_removals { REMOVED_BYTES } else { sizes.page }),
    ]
}
