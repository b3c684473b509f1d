//! Parsed [`Btf`] in; the core's `task_struct` offsets out, each member checked against the size
//! of the load the kernel program does (the optional features' layouts are in `kernel::feature`).

use super::{Btf, BtfError, Member};

/// Offsets of what the kernel program reads from `struct task_struct`, and tracepoint shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskLayout {
    pub pid: Member,
    pub tgid: Member,
    pub comm: Member,
    pub prio: Member,
    /// `__state` (5.14+) or `state` (older kernels)
    pub state: Member,
    /// Which of the two this kernel has.
    pub state_name: &'static str,
    /// true when the sched_switch tracepoint passes `prev_state` (4 args: preempt, prev, next,
    /// prev_state; since 5.18)
    pub switch_has_prev_state: bool,
}

impl Btf {
    /// `struct_name.member`, its size one of `allowed` (the first is what an error reports as
    /// expected): what every layout reads.
    pub fn sized(&self, struct_name: &str, member: &str, allowed: &[u32]) -> Result<Member, BtfError> {
        check_size(struct_name, member, self.member(struct_name, member)?, allowed)
    }

    /// Everything the kernel program needs from `task_struct`, with sizes checked against the
    /// loads it does: 4-byte pid/tgid/prio/state and the 16-byte comm (TASK_COMM_LEN).
    pub fn task_layout(&self) -> Result<TaskLayout, BtfError> {
        const TASK: &str = "task_struct";
        let sized = |member: &str, expected: u32| -> Result<Member, BtfError> {
            let m = self.member(TASK, member)?;
            check_size(TASK, member, m, &[expected])
        };
        let (state_name, state) = match self.member(TASK, "__state") {
            Ok(m) => ("__state", check_size(TASK, "__state", m, &[4])?),
            // Before 5.14 it was `volatile long state`. Every state bit is in its low 4 bytes, and
            // on a little-endian kernel (the only BTF we accept) those come first, so the kernel
            // program's 4-byte load at this offset still reads the state.
            Err(BtfError::MemberNotFound { .. }) => {
                ("state", check_size(TASK, "state", self.member(TASK, "state")?, &[4, 8])?)
            }
            Err(e) => return Err(e),
        };
        Ok(TaskLayout {
            pid: sized("pid", 4)?,
            tgid: sized("tgid", 4)?,
            comm: sized("comm", 16)?,
            prio: sized("prio", 4)?,
            state,
            state_name,
            switch_has_prev_state: self.tracepoint_arity("sched_switch")? >= 4,
        })
    }
}

/// `allowed[0]` is the size current kernels use and the one an error reports as expected.
fn check_size(struct_name: &str, member: &str, m: Member, allowed: &[u32]) -> Result<Member, BtfError> {
    if allowed.contains(&m.size) {
        return Ok(m);
    }
    Err(BtfError::SizeMismatch {
        struct_name: struct_name.to_owned(),
        member: member.to_owned(),
        expected: allowed.first().copied().unwrap_or_default(),
        found: m.size,
    })
}
