//! Loads the embedded kernel object with this kernel's offsets and our settings, attaches it, and
//! owns the aya handle: dropping a `Probe` detaches everything (no pins, nothing outlives us).
use aya::{
    Ebpf, EbpfError, EbpfLoader,
    maps::{Array, HashMap, Map, MapError, PerCpuHashMap},
    programs::{BtfTracePoint, ProgramError, tp_btf::BtfTracePointLinkId},
};
use latency_common::{
    Knobs,
    knobs::{Clock, KNOBS_SYMBOL},
    maps::{CgroupHist, Control, names},
};

use super::btf::{Btf, BtfError, CgroupLayout, RqClockLayout, TaskLayout};
use crate::host::system;

/// The kernel program, built by build.rs (aya-build) for bpfel-unknown-none.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/latency-ebpf"));

/// What the caller wants measured; everything here is fixed at load time.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// Keep per-task statistics (one hash update per switch).
    pub per_task: bool,
    /// Capacity of the per-task map.
    pub max_tasks: u32,
    /// Record only these tids/tgids (empty: everything).
    pub filter: Vec<u32>,
    /// Delays above this are discarded and counted.
    pub ceiling_ns: u64,
    /// Which clock the kernel program reads.
    pub clock: Clock,
    /// Keep a coarse histogram per cgroup v2 id (one per-CPU hash update per delay).
    pub cgroups: bool,
    /// Capacity of the per-cgroup map.
    pub max_cgroups: u32,
    /// Attribute delays at or above this (runs meanwhile, queue depth); 0: off.
    pub attribute_ns: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(transparent)]
    Btf(#[from] BtfError),
    #[error("cannot read {path}: {source}")]
    Proc { path: &'static str, source: std::io::Error },
    #[error("loading the kernel object failed: {0}")]
    Load(#[source] EbpfError),
    #[error("program {program} is missing from the kernel object")]
    MissingProgram { program: &'static str },
    #[error("program {program} is not a BTF tracepoint: {source}")]
    ProgramType { program: &'static str, source: ProgramError },
    #[error("the verifier rejected {program}: {source}")]
    Verify { program: &'static str, source: ProgramError },
    #[error("attaching {program} failed: {source}")]
    Attach { program: &'static str, source: ProgramError },
    #[error("map {map} is missing from the kernel object")]
    MissingMap { map: &'static str },
    #[error("map {map}: {source}")]
    Map { map: &'static str, source: MapError },
}

/// The loaded, attached kernel program and its maps.
#[derive(Debug)]
pub struct Probe {
    ebpf: Ebpf,
    links: Vec<(&'static str, BtfTracePointLinkId)>,
    stamps: u32,
}

impl Probe {
    /// Read this kernel's BTF, load the object with offsets and options baked in, attach all
    /// three tracepoints. On error nothing stays attached (the partial handle is dropped).
    pub fn load(options: &ProbeOptions) -> Result<Probe, ProbeError> {
        raise_memlock();
        let btf = Btf::from_sys_fs()?;
        let layout = btf.task_layout()?;
        let rq = match options.clock {
            Clock::Monotonic => None,
            Clock::RunQueue => Some(btf.rq_clock_layout()?),
        };
        let cgroup = if options.cgroups { Some(btf.cgroup_layout()?) } else { None };
        // Without these fields the queue depth is reported as unknown; attribution still works.
        let depth = if options.attribute_ns != 0 { btf.depth_layout().ok() } else { None };
        drop(btf);
        let mut knobs = knobs(&layout, rq.as_ref(), cgroup.as_ref(), options);
        if let Some(d) = depth {
            knobs.depth_known = 1;
            knobs.rq_nr_running = d.rq_nr_running.offset;
            knobs.task_se_cfs_rq = d.task_se_cfs_rq.offset;
            knobs.cfs_rq_rq = d.cfs_rq_rq.offset;
        }
        // The stamp array is indexed by tid, and no tid reaches `kernel.pid_max`.
        let stamps = system::pid_max().map_err(|source| ProbeError::Proc { path: system::PID_MAX, source })?;
        let ebpf = EbpfLoader::new()
            .override_global(KNOBS_SYMBOL, &knobs, true)
            .map_max_entries(names::STAMPS, stamps)
            .map_max_entries(names::TASKS, if options.per_task { options.max_tasks } else { 1 })
            .map_max_entries(names::FILTER, (options.filter.len() as u32).max(1))
            .map_max_entries(names::CGROUPS, if options.cgroups { options.max_cgroups } else { 1 })
            .map_max_entries(names::DEPTHS, if options.attribute_ns != 0 { stamps } else { 1 })
            .load(OBJECT)
            .map_err(ProbeError::Load)?;
        let mut probe = Probe { ebpf, links: Vec::new(), stamps };
        probe.fill_filter(&options.filter)?;
        probe.links = attach(&mut probe.ebpf)?;
        Ok(probe)
    }

    fn fill_filter(&mut self, ids: &[u32]) -> Result<(), ProbeError> {
        if ids.is_empty() {
            return Ok(());
        }
        let map = names::FILTER;
        let mut filter: HashMap<_, u32, u8> =
            HashMap::try_from(self.map_mut(map)?).map_err(|source| ProbeError::Map { map, source })?;
        for id in ids {
            filter.insert(id, 1, 0).map_err(|source| ProbeError::Map { map, source })?;
        }
        Ok(())
    }

    /// Detach every program; the maps stay readable, so a final snapshot sees no moving values.
    pub fn detach(&mut self) -> Result<(), ProbeError> {
        for (program, link) in self.links.drain(..) {
            let prog: &mut BtfTracePoint = self
                .ebpf
                .program_mut(program)
                .ok_or(ProbeError::MissingProgram { program })?
                .try_into()
                .map_err(|source| ProbeError::ProgramType { program, source })?;
            prog.detach(link).map_err(|source| ProbeError::Attach { program, source })?;
        }
        Ok(())
    }

    /// Forget a removed cgroup's entry so the map keeps room for live ones.
    pub fn delete_cgroup(&mut self, id: u64) -> Result<(), ProbeError> {
        let map = names::CGROUPS;
        let mut table: PerCpuHashMap<_, u64, CgroupHist> =
            PerCpuHashMap::try_from(self.map_mut(map)?).map_err(|source| ProbeError::Map { map, source })?;
        match table.remove(&id) {
            Ok(()) | Err(MapError::KeyNotFound) => Ok(()),
            Err(source) => Err(ProbeError::Map { map, source }),
        }
    }

    /// Move the window epoch on: the kernel starts writing the other `WINDOW_MAX` slot.
    pub fn set_epoch(&mut self, epoch: u64) -> Result<(), ProbeError> {
        let map = names::CONTROL;
        let mut control: Array<_, Control> =
            Array::try_from(self.map_mut(map)?).map_err(|source| ProbeError::Map { map, source })?;
        control.set(0, Control { epoch }, 0).map_err(|source| ProbeError::Map { map, source })
    }

    pub fn map(&self, map: &'static str) -> Result<&Map, ProbeError> {
        self.ebpf.map(map).ok_or(ProbeError::MissingMap { map })
    }

    fn map_mut(&mut self, map: &'static str) -> Result<&mut Map, ProbeError> {
        self.ebpf.map_mut(map).ok_or(ProbeError::MissingMap { map })
    }

    /// Entries in the stamp array (`kernel.pid_max` at load).
    pub fn stamp_capacity(&self) -> u32 {
        self.stamps
    }
}

/// The global handed to the kernel program.
fn knobs(
    layout: &TaskLayout,
    rq: Option<&RqClockLayout>,
    cgroup: Option<&CgroupLayout>,
    options: &ProbeOptions,
) -> Knobs {
    Knobs {
        task_pid: layout.pid.offset,
        task_tgid: layout.tgid.offset,
        task_comm: layout.comm.offset,
        task_prio: layout.prio.offset,
        task_state: layout.state.offset,
        switch_has_prev_state: u32::from(layout.switch_has_prev_state),
        per_task: u32::from(options.per_task),
        filter: u32::from(!options.filter.is_empty()),
        ceiling_ns: options.ceiling_ns,
        clock_rq: u32::from(rq.is_some()),
        task_se_cfs_rq: rq.map_or(0, |r| r.task_se_cfs_rq.offset),
        cfs_rq_rq: rq.map_or(0, |r| r.cfs_rq_rq.offset),
        rq_clock: rq.map_or(0, |r| r.rq_clock.offset),
        cgroups: u32::from(cgroup.is_some()),
        task_cgroups: cgroup.map_or(0, |c| c.task_cgroups.offset),
        css_set_dfl_cgrp: cgroup.map_or(0, |c| c.css_set_dfl_cgrp.offset),
        cgroup_kn: cgroup.map_or(0, |c| c.cgroup_kn.offset),
        kernfs_node_id: cgroup.map_or(0, |c| c.kernfs_node_id.offset),
        attribute_ns: options.attribute_ns,
        depth_known: 0,
        rq_nr_running: 0,
    }
}

/// Verify and attach every program of `names::PROGRAMS` in `ebpf` (ours, or any object with the
/// same three tracepoints, such as the benchmark's floor). Dropping `ebpf` detaches them.
pub fn attach(ebpf: &mut Ebpf) -> Result<Vec<(&'static str, BtfTracePointLinkId)>, ProbeError> {
    let btf = aya::Btf::from_sys_fs().map_err(|e| ProbeError::Load(EbpfError::BtfError(e)))?;
    let mut links = Vec::with_capacity(names::PROGRAMS.len());
    for program in names::PROGRAMS {
        let prog: &mut BtfTracePoint = ebpf
            .program_mut(program)
            .ok_or(ProbeError::MissingProgram { program })?
            .try_into()
            .map_err(|source| ProbeError::ProgramType { program, source })?;
        prog.load(program, &btf).map_err(|source| ProbeError::Verify { program, source })?;
        links.push((program, prog.attach().map_err(|source| ProbeError::Attach { program, source })?));
    }
    Ok(links)
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; newer ones use memcg and ignore it.
pub fn raise_memlock() {
    let unlimited = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: setrlimit with a valid pointer; failure only matters on old kernels, where the
    // load error that follows says what went wrong.
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
}
