//! Loads the embedded kernel object with this kernel's offsets and our settings, attaches it, and
//! owns the aya handle: dropping a `Probe` detaches everything (no pins, nothing outlives us).
use std::time::{Duration, Instant};

use aya::{
    Ebpf, EbpfError, EbpfLoader,
    maps::{Array, HashMap, Map, MapData, MapError, RingBuf},
    programs::{BtfTracePoint, Iter, ProgramError, tp_btf::BtfTracePointLinkId},
};
use latency_common::{
    Knobs,
    knobs::{Clock, KNOBS_SYMBOL},
    maps::{Control, MAX_CEILING_NS, REMOVED_BYTES, Seen, cgroup_slot_bits, names},
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
    /// Keep a coarse histogram per cgroup v2 id (an array store per delay, see `cgroups`).
    pub cgroups: bool,
    /// Capacity of the per-cgroup maps: the slot table has the power of two at or above it, its
    /// overflow hash map this many entries.
    pub max_cgroups: u32,
    /// With `cgroups`, report removed cgroups through the removal ring (`cgroup_rmdir`), for a
    /// caller that reads it (`run`'s `kernel::removals`). Without a reader the ring would fill and
    /// count removals as lost, so a one-shot `record` leaves it off.
    pub cgroup_removals: bool,
    /// Attribute delays at or above this (runs meanwhile, queue depth); 0: off.
    pub attribute_ns: u64,
    /// Load the wait scan (`wait_scan`, a task iterator run once per drain: waits in progress).
    pub wait_scan: bool,
    /// Split each wait's throttled part off (the task's group throttle clock, 6.8+).
    pub split_throttle: bool,
    /// Split each wait's irq+steal part off (`rq->clock - rq->clock_task`).
    pub split_stolen: bool,
    /// Time device IRQ handlers and softirqs with the irq tracepoints and add that to each wait's
    /// irq+steal part (for kernels that do not account IRQ time).
    pub split_irq: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(transparent)]
    Btf(#[from] BtfError),
    #[error("cannot read {path}: {source}")]
    Proc { path: String, source: std::io::Error },
    #[error("loading the kernel object failed: {0}")]
    Load(#[source] EbpfError),
    #[error("program {program} is missing from the kernel object")]
    MissingProgram { program: &'static str },
    #[error("program {program} is not a BTF tracepoint: {source}")]
    ProgramType { program: &'static str, source: ProgramError },
    /// One line: the verifier's own verdict (its log's last statement), never the whole log.
    #[error("the verifier rejected {program} ({errno}): {verdict}{kept}")]
    Verify { program: &'static str, errno: String, verdict: String, kept: String },
    #[error("loading {program} failed: {source}")]
    ProgramLoad { program: &'static str, source: ProgramError },
    #[error("attaching {program} failed: {source}")]
    Attach { program: &'static str, source: ProgramError },
    #[error("map {map} is missing from the kernel object")]
    MissingMap { map: &'static str },
    #[error("map {map}: {source}")]
    Map { map: &'static str, source: MapError },
    #[error("the wait scan failed: {0}")]
    WaitScan(String),
}

/// The loaded, attached kernel program and its maps.
#[derive(Debug)]
pub struct Probe {
    ebpf: Ebpf,
    kernel_log: Option<KernelLog>,
    links: Vec<(&'static str, BtfTracePointLinkId)>,
    stamps: u32,
    loads: Vec<(&'static str, Duration)>,
    /// The wait scan is loaded (asked for, and this kernel has what it needs).
    wait_scan: bool,
    /// The irq tracepoints are attached: `IRQ_CLOCKS` holds each CPU's IRQ time.
    irq: bool,
}

/// The kernel program's aya-log ring, forwarded to the `log` facade at each drain.
struct KernelLog(aya_log::EbpfLogger<&'static dyn log::Log>);

impl std::fmt::Debug for KernelLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KernelLog")
    }
}

/// An attached program, and how long the kernel took to load it (BPF_PROG_LOAD: verification
/// and JIT).
#[derive(Debug)]
pub struct Attached {
    pub program: &'static str,
    pub link: BtfTracePointLinkId,
    pub load: Duration,
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
        let btf = Btf::from_sys_fs()?;
        let layout = btf.task_layout()?;
        let rq = match options.clock {
            Clock::Monotonic => None,
            Clock::RunQueue => Some(btf.rq_clock_layout()?),
        };
        let cgroup = if options.cgroups { Some(btf.cgroup_layout()?) } else { None };
        // Without these fields the queue depth is reported as unknown; attribution still works.
        let depth = if options.attribute_ns != 0 { btf.depth_layout().ok() } else { None };
        let wait = if options.wait_scan { Some(btf.wait_layout()?) } else { None };
        // Without CONFIG_SMP there is no `on_cpu`, and every wakeup is stamped.
        let on_cpu = btf.member("task_struct", "on_cpu").ok().filter(|m| m.size == 4);
        let throttle = if options.split_throttle { Some(btf.throttle_layout()?) } else { None };
        let stolen = if options.split_stolen { Some(btf.stolen_layout()?) } else { None };
        let irq = if options.split_irq { Some(btf.irq_layout()?) } else { None };
        drop(btf);
        let mut knobs = knobs(&layout, rq.as_ref(), cgroup.as_ref(), options);
        if let Some(w) = wait {
            knobs.task_on_rq = w.on_rq.offset;
            knobs.task_on_cpu = w.on_cpu.offset;
            knobs.task_cpu = w.cpu.offset;
        }
        if let Some(on_cpu) = on_cpu {
            knobs.task_on_cpu = on_cpu.offset;
            knobs.wakeup_running_known = 1;
        }
        let split = throttle.map(|t| (t.rq, t.nr_migrations)).or(stolen.map(|s| (s.rq, s.nr_migrations)));
        if let Some(i) = &irq {
            knobs.split_irq = 1;
            knobs.task_cpu = i.task_cpu.offset;
            knobs.task_se_nr_migrations = i.nr_migrations.offset;
        }
        if let Some((rq, migrations)) = split {
            knobs.task_se_cfs_rq = rq.task_se_cfs_rq.offset;
            knobs.cfs_rq_rq = rq.cfs_rq_rq.offset;
            knobs.rq_clock = rq.rq_clock.offset;
            knobs.task_se_nr_migrations = migrations.offset;
        }
        if let Some(t) = throttle {
            knobs.split_throttle = 1;
            knobs.cfs_rq_throttled_clock_self = t.throttled_clock_self.offset;
            knobs.cfs_rq_throttled_clock_self_time = t.throttled_clock_self_time.offset;
        }
        if let Some(s) = stolen {
            log::info!("the irq_steal part of each wait holds {}", s.holds());
            knobs.split_stolen = 1;
            knobs.rq_clock_task = s.clock_task.offset;
        }
        if let Some(d) = depth {
            knobs.depth_known = 1;
            knobs.rq_nr_running = d.rq_nr_running.offset;
            knobs.task_se_cfs_rq = d.task_se_cfs_rq.offset;
            knobs.cfs_rq_rq = d.cfs_rq_rq.offset;
        }
        // The stamp array is indexed by tid: no new tid reaches `kernel.pid_max`, and no running
        // one is left out where it was lowered after that task started.
        let stamps = system::stamp_slots()
            .map_err(|source| ProbeError::Proc { path: system::pid_max_path().display().to_string(), source })?;
        let slots = 1u32 << knobs.cgroup_slot_bits;
        // aya's own BTF for relocations, from the same sysfs (`--path.sysfs`).
        let aya_btf = kernel_btf()?;
        let ebpf = EbpfLoader::new()
            .btf(Some(&aya_btf))
            .override_global(KNOBS_SYMBOL, &knobs, true)
            // Two tids to an element (latency-common's `StampPair`).
            .map_max_entries(names::STAMPS, stamps.div_ceil(2))
            .map_max_entries(names::TASKS, if options.per_task { options.max_tasks } else { 1 })
            .map_max_entries(names::FILTER, (options.filter.len() as u32).max(1))
            .map_max_entries(names::CGROUPS, if options.cgroups { options.max_cgroups } else { 1 })
            .map_max_entries(names::CGROUP_SLOTS, if options.cgroups { slots } else { 1 })
            .map_max_entries(names::CGROUP_RETIRED, if options.cgroups { slots } else { 1 })
            .map_max_entries(names::CGROUP_USED, if options.cgroups { slots / 64 } else { 1 })
            .map_max_entries(
                names::CGROUP_REMOVED,
                if options.cgroups && options.cgroup_removals { REMOVED_BYTES } else { page_size() },
            )
            .map_max_entries(names::DEPTHS, if options.attribute_ns != 0 { stamps } else { 1 })
            .map_max_entries(names::IRQ_CLOCKS, if irq.is_some() { possible_cpus() as u32 } else { 1 })
            .load(object)
            .map_err(ProbeError::Load)?;
        let mut probe = Probe {
            ebpf,
            kernel_log: None,
            links: Vec::new(),
            stamps,
            loads: Vec::new(),
            wait_scan: false,
            irq: irq.is_some(),
        };
        // Taken before the programs load: they refer to its map. Without it (an object built
        // without logging) the kernel's rare-condition lines are simply not forwarded.
        probe.kernel_log = aya_log::EbpfLogger::init(&mut probe.ebpf).ok().map(KernelLog);
        probe.fill_filter(&options.filter)?;
        let mut attached = attach(&mut probe.ebpf)?;
        if options.cgroups && options.cgroup_removals {
            attached.push(attach_one(&mut probe.ebpf, names::CGROUP_RMDIR)?);
        }
        if probe.irq {
            for program in names::IRQ_PROGRAMS {
                attached.push(attach_one(&mut probe.ebpf, program)?);
            }
        }
        probe.loads = attached.iter().map(|a| (a.program, a.load)).collect();
        probe.links = attached.into_iter().map(|a| (a.program, a.link)).collect();
        if options.wait_scan {
            let load = load_wait_scan(&mut probe.ebpf)?;
            probe.loads.push((names::WAIT_SCAN, load));
            probe.wait_scan = true;
            // Once now, so a kernel that cannot run it is found at load (and the feature degrades).
            probe.scan_waits()?;
        }
        Ok(probe)
    }

    /// Run the wait scan once (None: not loaded): every task waiting in a run queue with a stamp,
    /// and every task on a CPU, as the kernel saw them during this call. A fresh iterator each
    /// time: an `iter/task` link and a read of its seq_file; nothing stays attached in between.
    pub fn scan_waits(&mut self) -> Result<Option<Vec<Seen>>, ProbeError> {
        if !self.wait_scan {
            return Ok(None);
        }
        let program = names::WAIT_SCAN;
        let prog: &mut Iter = self
            .ebpf
            .program_mut(program)
            .ok_or(ProbeError::MissingProgram { program })?
            .try_into()
            .map_err(|source| ProbeError::ProgramType { program, source })?;
        let id = prog.attach().map_err(|e| ProbeError::WaitScan(e.to_string()))?;
        let link = prog.take_link(id).map_err(|e| ProbeError::WaitScan(e.to_string()))?;
        let mut file = link.into_file().map_err(|e| ProbeError::WaitScan(e.to_string()))?;
        let mut bytes = Vec::with_capacity(16 * 1024);
        std::io::Read::read_to_end(&mut file, &mut bytes).map_err(|e| ProbeError::WaitScan(e.to_string()))?;
        Ok(Some(seen_records(&bytes)))
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

    /// Whether the irq tracepoints are attached (`IRQ_CLOCKS` holds each CPU's IRQ time).
    pub fn irq_timed(&self) -> bool {
        self.irq
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

/// How many CPUs the per-CPU maps hold a value for, and the per-CPU-number arrays are sized to:
/// the possible CPUs.
pub fn possible_cpus() -> usize {
    aya::util::nr_cpus().unwrap_or(1)
}

/// The smallest ring buffer the kernel takes: one page.
fn page_size() -> u32 {
    // SAFETY: sysconf reads a constant of the running system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(size).unwrap_or(4096)
}

/// The wait scan's records in the bytes its seq_file gave (whole records only).
fn seen_records(bytes: &[u8]) -> Vec<Seen> {
    bytes
        .chunks_exact(std::mem::size_of::<Seen>())
        // SAFETY: `Seen` is #[repr(C)] plain integers (aya::Pod), any bit pattern is valid, and the
        // chunk has exactly its size; read_unaligned needs no alignment.
        .map(|chunk| unsafe { std::ptr::read_unaligned(chunk.as_ptr().cast::<Seen>()) })
        .collect()
}

/// Verify the wait scan (`iter/task`), loaded but not attached: the daemon attaches it for each scan.
fn load_wait_scan(ebpf: &mut Ebpf) -> Result<Duration, ProbeError> {
    let program = names::WAIT_SCAN;
    let btf = kernel_btf()?;
    let prog: &mut Iter = ebpf
        .program_mut(program)
        .ok_or(ProbeError::MissingProgram { program })?
        .try_into()
        .map_err(|source| ProbeError::ProgramType { program, source })?;
    let start = Instant::now();
    prog.load("task", &btf).map_err(|source| rejected(program, source))?;
    Ok(start.elapsed())
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
        // Stamps keep their time modulo twice this (see latency-common's `stamp_age`).
        ceiling_ns: options.ceiling_ns.min(MAX_CEILING_NS - 1),
        clock_rq: u32::from(rq.is_some()),
        task_se_cfs_rq: rq.map_or(0, |r| r.task_se_cfs_rq.offset),
        cfs_rq_rq: rq.map_or(0, |r| r.cfs_rq_rq.offset),
        rq_clock: rq.map_or(0, |r| r.rq_clock.offset),
        cgroups: u32::from(cgroup.is_some()),
        task_cgroups: cgroup.map_or(0, |c| c.task_cgroups.offset),
        css_set_dfl_cgrp: cgroup.map_or(0, |c| c.css_set_dfl_cgrp.offset),
        cgroup_kn: cgroup.map_or(0, |c| c.cgroup_kn.offset),
        kernfs_node_id: cgroup.map_or(0, |c| c.kernfs_node_id.offset),
        cgroup_slot_bits: if cgroup.is_some() { cgroup_slot_bits(options.max_cgroups) } else { 6 },
        attribute_ns: options.attribute_ns,
        depth_known: 0,
        rq_nr_running: 0,
        cgroup_root: cgroup.map_or(0, |c| c.cgroup_root.offset),
        cgroup_root_hierarchy_id: cgroup.map_or(0, |c| c.cgroup_root_hierarchy_id.offset),
        task_flags: cgroup.map_or(0, |c| c.task_flags.offset),
        task_on_rq: 0,
        task_on_cpu: 0,
        task_cpu: 0,
        split_throttle: 0,
        cfs_rq_throttled_clock_self: 0,
        cfs_rq_throttled_clock_self_time: 0,
        task_se_nr_migrations: 0,
        split_stolen: 0,
        rq_clock_task: 0,
        wakeup_running_known: 0,
        split_irq: 0,
    }
}

/// Verify and attach every program of `names::PROGRAMS` in `ebpf` (ours, or any object with the
/// same three tracepoints, such as the benchmark's floor). Dropping `ebpf` detaches them.
pub fn attach(ebpf: &mut Ebpf) -> Result<Vec<Attached>, ProbeError> {
    let btf = kernel_btf()?;
    names::PROGRAMS.into_iter().map(|program| attach_with(ebpf, program, &btf)).collect()
}

/// Verify and attach one more program of ours (`names::CGROUP_RMDIR`).
fn attach_one(ebpf: &mut Ebpf, program: &'static str) -> Result<Attached, ProbeError> {
    let btf = kernel_btf()?;
    attach_with(ebpf, program, &btf)
}

/// The running kernel's BTF as aya reads it, from the sysfs in force (`host::paths`).
fn kernel_btf() -> Result<aya::Btf, ProbeError> {
    aya::Btf::parse_file(super::btf::vmlinux(), aya::Endianness::default())
        .map_err(|e| ProbeError::Load(EbpfError::BtfError(e)))
}

fn attach_with(ebpf: &mut Ebpf, program: &'static str, btf: &aya::Btf) -> Result<Attached, ProbeError> {
    let prog: &mut BtfTracePoint = ebpf
        .program_mut(program)
        .ok_or(ProbeError::MissingProgram { program })?
        .try_into()
        .map_err(|source| ProbeError::ProgramType { program, source })?;
    let started = Instant::now();
    prog.load(program, btf).map_err(|source| rejected(program, source))?;
    let load = started.elapsed();
    let link = prog.attach().map_err(|source| ProbeError::Attach { program, source })?;
    Ok(Attached { program, link, load })
}

/// Where a rejected program's whole verifier log goes, if set (the error itself is one line).
pub const VERIFIER_LOG_ENV: &str = "RUNQLAT_VERIFIER_LOG";

/// A load error as one line: the verifier's verdict, and where its whole log was kept.
fn rejected(program: &'static str, source: ProgramError) -> ProbeError {
    let ProgramError::LoadError { io_error, verifier_log } = source else {
        return ProbeError::ProgramLoad { program, source };
    };
    let log = verifier_log.to_string();
    let kept = match std::env::var_os(VERIFIER_LOG_ENV) {
        Some(path) => match std::fs::write(&path, &log) {
            Ok(()) => format!("; whole log in {}", std::path::Path::new(&path).display()),
            Err(e) => format!("; could not write the whole log to {}: {e}", std::path::Path::new(&path).display()),
        },
        None => format!("; set {VERIFIER_LOG_ENV}=FILE to keep the whole log"),
    };
    ProbeError::Verify { program, errno: io_error.to_string(), verdict: verdict(&log), kept }
}

/// The verifier's last statement: its log ends with the reason, then statistics lines.
pub fn verdict(log: &str) -> String {
    let statistics = ["processed ", "verification time", "stack depth", "max_states_per_insn"];
    log.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && !statistics.iter().any(|s| l.starts_with(s)))
        .map_or_else(|| "the verifier gave no reason".to_owned(), str::to_owned)
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; newer ones use memcg and ignore it.
pub fn raise_memlock() {
    let unlimited = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: setrlimit with a valid pointer; failure only matters on old kernels, where the
    // load error that follows says what went wrong.
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
}

#[cfg(test)]
mod tests {
    use super::verdict;

    #[test]
    fn the_verdict_is_the_logs_last_statement() {
        let log = "func#0 @0\n0: R1=ctx() R10=fp0\n; let x = ...\n12: (61) r2 = *(u32 *)(r1 +2232)\n\
                   R1 invalid mem access 'scalar'\nprocessed 13 insns (limit 1000000) max_states_per_insn 0\n\
                   verification time 5 usec\nstack depth 0\n";
        assert_eq!(verdict(log), "R1 invalid mem access 'scalar'");
        assert_eq!(verdict(""), "the verifier gave no reason");
    }
}
