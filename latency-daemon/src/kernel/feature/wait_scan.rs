//! Waits in progress: this kernel's BTF in; the task fields the scan reads and its iterator out,
//! and, on the loaded object, one scan: every task waiting in a run queue with a stamp and every
//! task on a CPU, as plain records.
use aya::{Ebpf, programs::Iter};
use latency_common::{
    Knobs,
    maps::{Seen, names},
};

use super::Room;
use crate::kernel::{
    btf::{Btf, BtfError, Member},
    object::Program,
    options::{ProbeError, ProbeOptions},
};

/// What the wait scan reads to tell a task waiting in a run queue: `task_struct.on_rq`, `.on_cpu`
/// (CONFIG_SMP) and its CPU, `thread_info.cpu` (5.16+ with the thread info in the task) or `cpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitLayout {
    pub on_rq: Member,
    pub on_cpu: Member,
    pub cpu: Member,
}

/// Offsets for the wait scan; an error names what this kernel's BTF lacks.
pub fn layout(btf: &Btf) -> Result<WaitLayout, BtfError> {
    const TASK: &str = "task_struct";
    let cpu = match btf.sized(TASK, "thread_info.cpu", &[4]) {
        Err(BtfError::MemberNotFound { .. }) => btf.sized(TASK, "cpu", &[4])?,
        other => other?,
    };
    Ok(WaitLayout { on_rq: btf.sized(TASK, "on_rq", &[4])?, on_cpu: btf.sized(TASK, "on_cpu", &[4])?, cpu })
}

/// The task iterator: verified at load, attached for each scan, and run once at load so a kernel
/// that cannot run it is found then (and the feature degrades).
pub const ROOM: Room = Room {
    programs: |_| vec![Program::Iter { name: names::WAIT_SCAN, target: "task" }],
    after_load: |ebpf| scan(ebpf).map(drop),
    ..Room::new("wait_scan", flag!(wait_scan), |btf| layout(btf).map(drop), knobs)
};

fn knobs(btf: &Btf, _o: &ProbeOptions, knobs: Knobs) -> Result<Knobs, BtfError> {
    let w = layout(btf)?;
    Ok(Knobs { task_on_rq: w.on_rq.offset, task_on_cpu: w.on_cpu.offset, task_cpu: w.cpu.offset, ..knobs })
}

/// Run the scan once. A fresh iterator each time: an `iter/task` link and a read of its
/// seq_file; nothing stays attached in between.
pub fn scan(ebpf: &mut Ebpf) -> Result<Vec<Seen>, ProbeError> {
    let program = names::WAIT_SCAN;
    let prog: &mut Iter = ebpf
        .program_mut(program)
        .ok_or(ProbeError::MissingProgram { program })?
        .try_into()
        .map_err(|source| ProbeError::ProgramType { program, source })?;
    let id = prog.attach().map_err(|e| ProbeError::WaitScan(e.to_string()))?;
    let link = prog.take_link(id).map_err(|e| ProbeError::WaitScan(e.to_string()))?;
    let mut file = link.into_file().map_err(|e| ProbeError::WaitScan(e.to_string()))?;
    let mut bytes = Vec::with_capacity(16 * 1024);
    std::io::Read::read_to_end(&mut file, &mut bytes).map_err(|e| ProbeError::WaitScan(e.to_string()))?;
    Ok(seen_records(&bytes))
}

/// The scan's records in the bytes its seq_file gave (whole records only).
fn seen_records(bytes: &[u8]) -> Vec<Seen> {
    bytes
        .chunks_exact(std::mem::size_of::<Seen>())
        // SAFETY: `Seen` is #[repr(C)] plain integers (aya::Pod), any bit pattern is valid, and the
        // chunk has exactly its size; read_unaligned needs no alignment.
        .map(|chunk| unsafe { std::ptr::read_unaligned(chunk.as_ptr().cast::<Seen>()) })
        .collect()
}
