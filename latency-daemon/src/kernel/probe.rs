//! Loads the embedded kernel object with this kernel's offsets and our settings, attaches it, and
//! owns the aya handle: dropping a `Probe` detaches everything (no pins, nothing outlives us).
//! The core (the three scheduler tracepoints and their maps) is loaded here; every optional
//! feature comes from walking `feature::Feature::ALL`, so nothing here names one.
use std::time::Duration;

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, Map, MapData, RingBuf},
    programs::{BtfTracePoint, FExit, KProbe, fexit::FExitLinkId, kprobe::KProbeLinkId, tp_btf::BtfTracePointLinkId},
};
use latency_common::{
    Knobs,
    knobs::KNOBS_SYMBOL,
    maps::{Control, MAX_CEILING_NS, names},
};

pub use super::object::{Attached, VERIFIER_LOG_ENV, attach, possible_cpus, raise_memlock, verdict};
pub use super::options::{ProbeError, ProbeOptions};
use super::{
    btf::{Btf, TaskLayout},
    feature::{Feature, Sizes},
    object::{
        Program, attach_fexit, attach_kprobe, attach_on, attach_with, kernel_btf, load_iter, page_size, program_mut,
    },
};
use crate::host::system;

/// The kernel program, built by build.rs (aya-build) for bpfel-unknown-none.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/latency-ebpf"));

/// The loaded, attached kernel program and its maps.
#[derive(Debug)]
pub struct Probe {
    ebpf: Ebpf,
    kernel_log: Option<KernelLog>,
    links: Vec<(&'static str, BtfTracePointLinkId)>,
    fexit_links: Vec<(&'static str, FExitLinkId)>,
    kprobe_links: Vec<(&'static str, KProbeLinkId)>,
    stamps: u32,
    loads: Vec<(&'static str, Duration)>,
    /// The optional features in this load: asked for, and this kernel has what they read.
    on: Vec<Feature>,
}

/// The kernel program's aya-log ring, forwarded to the `log` facade at each drain.
struct KernelLog(aya_log::EbpfLogger<&'static dyn log::Log>);

impl std::fmt::Debug for KernelLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KernelLog")
    }
}

impl Probe {
    /// Read this kernel's BTF, load the object with offsets and options baked in, attach all
    /// three tracepoints. On error nothing stays attached (the partial handle is dropped).
    pub fn load(options: &ProbeOptions) -> Result<Probe, ProbeError> {
        Probe::load_object(options, OBJECT)
    }

    /// As `load`, with another build of the kernel program (`object`, 8-byte aligned ELF): the
    /// check that a build without diagnostics has the same hot path.
    pub fn load_object(options: &ProbeOptions, object: &[u8]) -> Result<Probe, ProbeError> {
        raise_memlock();
        let (knobs, on) = plan(options)?;
        // The stamp array is indexed by tid: no new tid reaches `kernel.pid_max`, and no running
        // one is left out where it was lowered after that task started.
        let stamps = system::stamp_slots()
            .map_err(|source| ProbeError::Proc { path: system::pid_max_path().display().to_string(), source })?;
        let sizes = Sizes { stamps, cpus: possible_cpus() as u32, page: page_size() };
        // aya's own BTF for relocations, from the same sysfs (`--path.sysfs`).
        let aya_btf = kernel_btf()?;
        let mut loader = EbpfLoader::new();
        loader
            .btf(Some(&aya_btf))
            .override_global(KNOBS_SYMBOL, &knobs, true)
            // Two tids to an element (latency-common's `StampPair`).
            .map_max_entries(names::STAMPS, stamps.div_ceil(2))
            .map_max_entries(names::TASKS, if options.per_task { options.max_tasks } else { 1 })
            .map_max_entries(names::FILTER, (options.filter.len() as u32).max(1));
        for feature in Feature::ALL {
            for (map, entries) in feature.room().maps(on.contains(&feature), options, sizes) {
                loader.map_max_entries(map, entries);
            }
        }
        let ebpf = loader.load(object).map_err(ProbeError::Load)?;
        let mut probe = Probe {
            ebpf,
            kernel_log: None,
            links: Vec::new(),
            fexit_links: Vec::new(),
            kprobe_links: Vec::new(),
            stamps,
            loads: Vec::new(),
            on,
        };
        // Taken before the programs load: they refer to its map. Without it (an object built
        // without logging) the kernel's rare-condition lines are simply not forwarded.
        probe.kernel_log = aya_log::EbpfLogger::init(&mut probe.ebpf).ok().map(KernelLog);
        probe.fill_filter(&options.filter)?;
        let programs: Vec<Program> = probe.on.iter().flat_map(|f| f.room().programs(options)).collect();
        let mut attached = attach(&mut probe.ebpf)?;
        for program in &programs {
            match *program {
                Program::Tracepoint(name) => attached.push(attach_with(&mut probe.ebpf, name, &aya_btf)?),
                Program::TracepointAs { name, tracepoint } => {
                    attached.push(attach_on(&mut probe.ebpf, name, tracepoint, &aya_btf)?);
                }
                _ => {}
            }
        }
        probe.loads = attached.iter().map(|a| (a.program, a.load)).collect();
        probe.links = attached.into_iter().map(|a| (a.program, a.link)).collect();
        for program in &programs {
            if let Program::Fexit { name, function, kprobe } = *program {
                probe.attach_hook(name, function, kprobe, &aya_btf)?;
            }
        }
        for program in &programs {
            if let Program::Iter { name, target } = *program {
                let load = load_iter(&mut probe.ebpf, name, target, &aya_btf)?;
                probe.loads.push((name, load));
            }
        }
        for feature in probe.on.clone() {
            feature.room().after_load(&mut probe.ebpf)?;
        }
        Ok(probe)
    }

    /// The fexit program `name` on `function`, or where the kernel will not run it on a trampoline
    /// (none on this architecture or kernel), the `kprobe` program at the function's entry.
    fn attach_hook(
        &mut self,
        name: &'static str,
        function: &'static str,
        kprobe: Option<&'static str>,
        btf: &aya::Btf,
    ) -> Result<(), ProbeError> {
        let fexit = match attach_fexit(&mut self.ebpf, name, function, btf) {
            Ok((load, link)) => {
                self.loads.push((name, load));
                self.fexit_links.push((name, link));
                return Ok(());
            }
            Err(e @ (ProbeError::Trampoline { .. } | ProbeError::ProgramLoad { .. } | ProbeError::Verify { .. })) => e,
            Err(e) => return Err(e),
        };
        let Some(kprobe) = kprobe else { return Err(fexit) };
        match attach_kprobe(&mut self.ebpf, kprobe, function) {
            Ok((load, link)) => {
                log::info!("{function}: a kprobe in place of the fexit program ({fexit})");
                self.loads.push((kprobe, load));
                self.kprobe_links.push((kprobe, link));
                Ok(())
            }
            Err(ProbeError::Attach { source, .. } | ProbeError::ProgramLoad { source, .. }) => Err(ProbeError::Hook {
                program: name,
                function,
                fexit: fexit.to_string(),
                kprobe,
                kprobe_error: source.to_string(),
            }),
            Err(e) => Err(e),
        }
    }

    /// Whether `feature` is in this load (asked for, and this kernel has what it reads).
    pub fn is_on(&self, feature: Feature) -> bool {
        self.on.contains(&feature)
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
            let prog: &mut BtfTracePoint = program_mut(&mut self.ebpf, program)?;
            prog.detach(link).map_err(|source| ProbeError::Attach { program, source })?;
        }
        for (program, link) in self.fexit_links.drain(..) {
            let prog: &mut FExit = program_mut(&mut self.ebpf, program)?;
            prog.detach(link).map_err(|source| ProbeError::Attach { program, source })?;
        }
        for (program, link) in self.kprobe_links.drain(..) {
            let prog: &mut KProbe = program_mut(&mut self.ebpf, program)?;
            prog.detach(link).map_err(|source| ProbeError::Attach { program, source })?;
        }
        Ok(())
    }

    /// Forward what the kernel program logged (rare conditions, rate-limited there) to the log.
    pub fn flush_kernel_log(&mut self) {
        if let Some(KernelLog(logger)) = &mut self.kernel_log {
            logger.flush();
        }
    }

    /// Move the window epoch on: the kernel starts writing the other window-maximum slot.
    pub fn set_epoch(&mut self, epoch: u64) -> Result<(), ProbeError> {
        let map = names::CONTROL;
        let mut control: Array<_, Control> =
            Array::try_from(self.map_mut(map)?).map_err(|source| ProbeError::Map { map, source })?;
        control.set(0, Control { epoch }, 0).map_err(|source| ProbeError::Map { map, source })
    }

    /// The removal ring buffer, out of the handle, for a reader of its own (`cgroups::Removals`).
    pub fn take_removals(&mut self) -> Result<RingBuf<MapData>, ProbeError> {
        let map = names::CGROUP_REMOVED;
        let taken = self.ebpf.take_map(map).ok_or(ProbeError::MissingMap { map })?;
        RingBuf::try_from(taken).map_err(|source| ProbeError::Map { map, source })
    }

    pub fn map(&self, map: &'static str) -> Result<&Map, ProbeError> {
        self.ebpf.map(map).ok_or(ProbeError::MissingMap { map })
    }

    pub(super) fn map_mut(&mut self, map: &'static str) -> Result<&mut Map, ProbeError> {
        self.ebpf.map_mut(map).ok_or(ProbeError::MissingMap { map })
    }

    /// The aya handle, for a feature's own reads of the loaded object (the wait scan's iterator).
    pub(super) fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// Entries in the stamp array (`kernel.pid_max` at load).
    pub fn stamp_capacity(&self) -> u32 {
        self.stamps
    }

    /// How long each program took in BPF_PROG_LOAD (mostly the verifier).
    pub fn load_times(&self) -> &[(&'static str, Duration)] {
        &self.loads
    }
}

/// The knobs for a load with `options` and the features in it: the core's, then each feature's
/// asked for, from this kernel's BTF.
fn plan(options: &ProbeOptions) -> Result<(Knobs, Vec<Feature>), ProbeError> {
    let btf = Btf::from_sys_fs()?;
    let mut knobs = core_knobs(&btf, &btf.task_layout()?, options);
    let mut on = Vec::new();
    for feature in Feature::ALL.into_iter().filter(|f| f.room().wanted(options)) {
        // A best-effort feature this kernel lacks leaves the knobs as they were.
        match feature.room().knobs(&btf, options, knobs) {
            Ok(with) => {
                knobs = with;
                on.push(feature);
            }
            Err(_) if feature.room().best_effort() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok((knobs, on))
}

/// The core's knobs: the task layout, the core's options, and whether a wakeup can tell a task
/// already running; every optional feature's knobs off until the table's walk writes them.
fn core_knobs(btf: &Btf, layout: &TaskLayout, options: &ProbeOptions) -> Knobs {
    // Without CONFIG_SMP there is no `on_cpu`, and every wakeup is stamped.
    let on_cpu = btf.member("task_struct", "on_cpu").ok().filter(|m| m.size == 4);
    Knobs {
        task_pid: layout.pid.offset,
        task_tgid: layout.tgid.offset,
        task_comm: layout.comm.offset,
        task_prio: layout.prio.offset,
        task_state: layout.state.offset,
        switch_has_prev_state: u32::from(layout.switch_has_prev_state),
        per_task: u32::from(options.per_task),
        filter: u32::from(!options.filter.is_empty()),
        // Stamps keep their time modulo twice this (see latency-common's `stamp_age`).
        ceiling_ns: options.ceiling_ns.min(MAX_CEILING_NS - 1),
        // The slot hash's width while per-cgroup is off: the smallest table (`cgroup_slot_bits`).
        cgroup_slot_bits: 6,
        task_on_cpu: on_cpu.map_or(0, |m| m.offset),
        wakeup_running_known: u32::from(on_cpu.is_some()),
        ..Knobs::UNSET
    }
}
