//! The loader's helpers, below both the probe and the features: an aya handle and a program name
//! in, a verified (and attached) program or a one-line error out; and the host facts a load sizes
//! its maps by (possible CPUs, the page size, the memlock limit).
use std::time::{Duration, Instant};

use aya::{
    Ebpf, EbpfError,
    programs::{
        BtfTracePoint, FExit, Iter, KProbe, ProgramError, fexit::FExitLinkId, kprobe::KProbeLinkId,
        tp_btf::BtfTracePointLinkId,
    },
};
use latency_common::maps::names;

use super::options::ProbeError;

/// A program a feature adds to the core's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// A BTF tracepoint (`tp_btf/<name>`), verified and attached with the core's.
    Tracepoint(&'static str),
    /// The BTF tracepoint program `name` on the tracepoint `tracepoint` (a second program on a
    /// tracepoint the core follows too), verified and attached with the core's.
    TracepointAs { name: &'static str, tracepoint: &'static str },
    /// A task or map iterator (`iter/<target>`), verified at load but not attached: its feature
    /// attaches it for each run.
    Iter { name: &'static str, target: &'static str },
    /// An fexit program `name` on the kernel function `function` (a BPF trampoline), verified
    /// and attached with the core's; where the kernel cannot attach it, the kprobe program
    /// `kprobe` at the function's entry, if there is one; a kernel that attaches neither degrades
    /// its feature.
    Fexit { name: &'static str, function: &'static str, kprobe: Option<&'static str> },
}

/// An attached program, and how long the kernel took to load it (BPF_PROG_LOAD: verification
/// and JIT).
#[derive(Debug)]
pub struct Attached {
    pub program: &'static str,
    pub link: BtfTracePointLinkId,
    pub load: Duration,
}

/// Verify and attach every program of `names::PROGRAMS` in `ebpf` (ours, or any object with the
/// same three tracepoints, such as the benchmark's floor). Dropping `ebpf` detaches them.
pub fn attach(ebpf: &mut Ebpf) -> Result<Vec<Attached>, ProbeError> {
    let btf = kernel_btf()?;
    names::PROGRAMS.into_iter().map(|program| attach_with(ebpf, program, &btf)).collect()
}

/// The running kernel's BTF as aya reads it, from the sysfs in force (`host::paths`).
pub fn kernel_btf() -> Result<aya::Btf, ProbeError> {
    aya::Btf::parse_file(super::btf::vmlinux(), aya::Endianness::default())
        .map_err(|e| ProbeError::Load(EbpfError::BtfError(e)))
}

/// The program `program` of `ebpf` as its kind `P` (a missing program or another kind is an error).
pub fn program_mut<'a, P>(ebpf: &'a mut Ebpf, program: &'static str) -> Result<&'a mut P, ProbeError>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    ebpf.program_mut(program)
        .ok_or(ProbeError::MissingProgram { program })?
        .try_into()
        .map_err(|source| ProbeError::ProgramType { program, source })
}

/// Verify and attach the BTF tracepoint `program` of `ebpf`.
pub fn attach_with(ebpf: &mut Ebpf, program: &'static str, btf: &aya::Btf) -> Result<Attached, ProbeError> {
    attach_on(ebpf, program, program, btf)
}

/// Verify and attach the BTF tracepoint program `program` of `ebpf` on `tracepoint`.
pub fn attach_on(
    ebpf: &mut Ebpf,
    program: &'static str,
    tracepoint: &'static str,
    btf: &aya::Btf,
) -> Result<Attached, ProbeError> {
    let prog: &mut BtfTracePoint = program_mut(ebpf, program)?;
    let started = Instant::now();
    prog.load(tracepoint, btf).map_err(|source| rejected(program, source))?;
    let load = started.elapsed();
    let link = prog.attach().map_err(|source| ProbeError::Attach { program, source })?;
    Ok(Attached { program, link, load })
}

/// Verify the fexit program `program` on the kernel function `function` and attach it; how long
/// the load took, and its link. An attach the kernel refuses (no trampolines on this
/// architecture or kernel) is `ProbeError::Trampoline`, which the degrade policy drops the
/// feature for.
pub fn attach_fexit(
    ebpf: &mut Ebpf,
    program: &'static str,
    function: &'static str,
    btf: &aya::Btf,
) -> Result<(Duration, FExitLinkId), ProbeError> {
    let prog: &mut FExit = program_mut(ebpf, program)?;
    let started = Instant::now();
    prog.load(function, btf).map_err(|source| rejected(program, source))?;
    let load = started.elapsed();
    let link = prog.attach().map_err(|source| ProbeError::Trampoline { program, function, source })?;
    Ok((load, link))
}

/// Load the kprobe program `program` and attach it at the entry of the kernel function
/// `function`; how long the load took, and its link.
pub fn attach_kprobe(
    ebpf: &mut Ebpf,
    program: &'static str,
    function: &'static str,
) -> Result<(Duration, KProbeLinkId), ProbeError> {
    let prog: &mut KProbe = program_mut(ebpf, program)?;
    let started = Instant::now();
    prog.load().map_err(|source| rejected(program, source))?;
    let load = started.elapsed();
    let link = prog.attach(function, 0).map_err(|source| ProbeError::Attach { program, source })?;
    Ok((load, link))
}

/// Verify the iterator `program` over `target`, loaded but not attached; how long that took.
pub fn load_iter(
    ebpf: &mut Ebpf,
    program: &'static str,
    target: &'static str,
    btf: &aya::Btf,
) -> Result<Duration, ProbeError> {
    let prog: &mut Iter = program_mut(ebpf, program)?;
    let start = Instant::now();
    prog.load(target, btf).map_err(|source| rejected(program, source))?;
    Ok(start.elapsed())
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

/// How many CPUs the per-CPU maps hold a value for, and the per-CPU-number arrays are sized to:
/// the possible CPUs.
pub fn possible_cpus() -> usize {
    aya::util::nr_cpus().unwrap_or(1)
}

/// The smallest ring buffer the kernel takes: one page.
pub fn page_size() -> u32 {
    // SAFETY: sysconf reads a constant of the running system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(size).unwrap_or(4096)
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
