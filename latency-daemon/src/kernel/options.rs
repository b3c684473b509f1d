//! What a load asks the kernel program for (`ProbeOptions`, fixed at load) and every way a load
//! or a read of its maps can fail (`ProbeError`).
use aya::{EbpfError, maps::MapError, programs::ProgramError};
use latency_common::knobs::{Clock, DEFAULT_CEILING_NS};

use super::btf::BtfError;

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
    /// Where the kernel keeps no group throttle clock (before 6.8), keep one with the throttle
    /// hooks (fexit on `tg_throttle_down` / `tg_unthrottle_up`) for the throttled part.
    pub throttle_hooks: bool,
    /// Where neither gives the throttled part, count a wait a throttle overlapped as `unknown`
    /// (the kernel's own throttled total moved) instead of by who held the CPU.
    pub throttle_unknown: bool,
    /// Split each wait's irq+steal part off (`rq->clock - rq->clock_task`).
    pub split_stolen: bool,
    /// Time device IRQ handlers and softirqs with the irq tracepoints and add that to each wait's
    /// irq+steal part (for kernels that do not account IRQ time).
    pub split_irq: bool,
    /// The capture recorder's ring, in events per CPU (a power of two); 0: off.
    pub capture_events: u32,
}

impl Default for ProbeOptions {
    /// The core histogram alone, the kernel program's cheapest state: every optional feature off
    /// (monotonic clock, no per-task or per-cgroup maps, no attribution, no wait scan, no cause
    /// split), no filter, and the daemon's default capacities and ceiling (`max_tasks` 32768,
    /// `max_cgroups` 1024, ten minutes), so switching one feature on is one field.
    fn default() -> ProbeOptions {
        ProbeOptions {
            per_task: false,
            max_tasks: 32_768,
            filter: Vec::new(),
            ceiling_ns: DEFAULT_CEILING_NS,
            clock: Clock::Monotonic,
            cgroups: false,
            max_cgroups: 1024,
            cgroup_removals: false,
            attribute_ns: 0,
            wait_scan: false,
            split_throttle: false,
            throttle_hooks: false,
            throttle_unknown: false,
            split_stolen: false,
            split_irq: false,
            capture_events: 0,
        }
    }
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
    /// A program on a BPF trampoline (fexit) the kernel would not attach: one a kernel may lack
    /// (no ftrace direct calls on its architecture), so its feature degrades.
    #[error("attaching {program} to {function} (fexit) failed: {source}")]
    Trampoline { program: &'static str, function: &'static str, source: ProgramError },
    /// Neither the fexit program nor the kprobe that stands in for it would attach (a kernel
    /// without BPF trampolines and without kprobes): its feature degrades.
    #[error("attaching {program} to {function} failed: fexit: {fexit}; kprobe {kprobe}: {kprobe_error}")]
    Hook { program: &'static str, function: &'static str, fexit: String, kprobe: &'static str, kprobe_error: String },
    #[error("map {map} is missing from the kernel object")]
    MissingMap { map: &'static str },
    #[error("map {map}: {source}")]
    Map { map: &'static str, source: MapError },
    #[error("the wait scan failed: {0}")]
    WaitScan(String),
}
