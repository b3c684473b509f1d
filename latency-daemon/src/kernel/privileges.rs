//! Least privilege after attach: this process's capability sets in (from /proc), all of them
//! emptied out — ambient, bounding (while CAP_SETPCAP is still held), keep-caps off, no new
//! privileges, then effective, permitted and inheritable — and what stayed, with why. The maps and
//! links are file descriptors: reading and closing them needs no capability, except where a
//! kernel's `bpf()` gates every command (older kernels with `kernel.unprivileged_bpf_disabled` set:
//! Debian's 5.10 in the vmtest matrix, not its 6.1); there CAP_BPF alone is kept, found by asking
//! the kernel, not by its version.
use std::io;

/// The capability numbers named in our messages (linux/capability.h).
const CAP_SETPCAP: u32 = 8;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// A thread's five capability sets as /proc/<pid>/status shows them (bit n = capability n).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sets {
    pub effective: u64,
    pub permitted: u64,
    pub inheritable: u64,
    pub bounding: u64,
    pub ambient: u64,
}

impl Sets {
    /// The calling thread's sets (capabilities are per thread).
    pub fn current() -> io::Result<Sets> {
        let status = std::fs::read_to_string("/proc/thread-self/status")?;
        Sets::from_status(&status).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no Cap* lines in status"))
    }

    pub fn from_status(status: &str) -> Option<Sets> {
        let get = |key: &str| {
            let hex = status.lines().find_map(|l| l.strip_prefix(key))?.trim();
            u64::from_str_radix(hex, 16).ok()
        };
        Some(Sets {
            effective: get("CapEff:")?,
            permitted: get("CapPrm:")?,
            inheritable: get("CapInh:")?,
            bounding: get("CapBnd:")?,
            ambient: get("CapAmb:")?,
        })
    }

    pub fn is_empty(&self) -> bool {
        *self == Sets::default()
    }
}

/// What the drop will keep, decided before anything is dropped (`check` prints it too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Kept in effective and permitted: CAP_BPF where this kernel's `bpf()` needs it for map reads
    /// (CAP_SYS_ADMIN on a kernel that has no CAP_BPF), else nothing.
    pub keep: u64,
    /// The bounding set cannot be emptied without CAP_SETPCAP (a container granted only BPF and
    /// PERFMON): it stays as the runtime limited it.
    pub bounding_stays: bool,
}

impl Plan {
    pub fn new(before: Sets, bpf_needs_cap: bool) -> Plan {
        let keep = if !bpf_needs_cap {
            0
        } else if before.permitted & (1 << CAP_BPF) != 0 {
            1 << CAP_BPF
        } else {
            before.permitted & (1 << CAP_SYS_ADMIN)
        };
        Plan { keep, bounding_stays: before.bounding != 0 && before.effective & (1 << CAP_SETPCAP) == 0 }
    }

    /// One line for `check` and the log.
    pub fn describe(&self, before: Sets) -> String {
        let mut s = match self.keep {
            0 => "every capability dropped".to_owned(),
            keep => {
                format!("every capability dropped but {} (this kernel's bpf() needs it for each map read)", names(keep))
            }
        };
        if self.bounding_stays {
            s.push_str(&format!(
                "; the bounding set stays {} (emptying it needs CAP_SETPCAP; the runtime already limited it)",
                names(before.bounding)
            ));
        }
        s
    }
}

/// The drop's result: the sets after it, and each step the kernel refused.
#[derive(Debug)]
pub struct Dropped {
    pub after: Sets,
    pub refused: Vec<String>,
    /// Threads of this process other than the caller that still hold capabilities (should be 0:
    /// capabilities are per thread).
    pub other_threads: usize,
}

/// Asks the kernel whether `bpf()` itself needs a capability: a thread of our own drops its
/// capabilities (for itself only) and looks up an element in fd -1. EBADF: the call got past the
/// gate, so reads on the maps we hold need nothing; EPERM: every command is gated.
pub fn bpf_needs_capability() -> bool {
    let probe = std::thread::spawn(|| {
        if capset(0, 0).is_err() {
            return true;
        }
        // union bpf_attr for BPF_MAP_LOOKUP_ELEM: map_fd first; the rest zero.
        let mut attr = [0u64; 16];
        attr[0] = u64::from(u32::MAX);
        // SAFETY: bpf(2) reads at most `size` bytes of `attr`, which lives for the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                1, /* BPF_MAP_LOOKUP_ELEM */
                attr.as_mut_ptr(),
                std::mem::size_of_val(&attr),
            )
        };
        rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    });
    // A probe that panicked answers the careful way.
    probe.join().unwrap_or(true)
}

/// Drops every capability of the calling thread but `plan.keep`. Call it while this is the only
/// thread: threads started later inherit the emptied sets. Never fails: what the kernel refuses is
/// listed in `refused` and the rest still happens.
pub fn drop_all(plan: Plan) -> Dropped {
    let mut refused = Vec::new();
    let before = Sets::current().unwrap_or_default();
    // SAFETY (each prctl below): integer arguments only; no memory is passed.
    if unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) } != 0 {
        refused.push(format!("ambient set: {}", io::Error::last_os_error()));
    }
    if !plan.bounding_stays {
        let last = last_cap();
        let mut failed = 0u64;
        for cap in (0..=last).filter(|&c| before.bounding & (1 << c) != 0) {
            // SAFETY: as above.
            if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) } != 0 {
                failed |= 1 << cap;
            }
        }
        if failed != 0 {
            refused.push(format!("bounding set kept {}: {}", names(failed), io::Error::last_os_error()));
        }
    }
    // SAFETY: as above.
    if unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0) } != 0 {
        refused.push(format!("keep-caps: {}", io::Error::last_os_error()));
    }
    // SAFETY: as above.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        refused.push(format!("no_new_privs: {}", io::Error::last_os_error()));
    }
    if let Err(e) = capset(plan.keep & before.permitted, plan.keep & before.permitted) {
        refused.push(format!("effective/permitted/inheritable: {e}"));
    }
    Dropped { after: Sets::current().unwrap_or(before), refused, other_threads: privileged_threads() }
}

/// Other threads of this process whose effective or permitted set is not empty (one that exited
/// meanwhile, such as `bpf_needs_capability`'s, is not counted).
fn privileged_threads() -> usize {
    // SAFETY: gettid has no arguments and cannot fail.
    let me = unsafe { libc::gettid() }.to_string();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    tasks
        .filter_map(Result::ok)
        .filter(|t| t.file_name().to_string_lossy() != me)
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .filter_map(|status| Sets::from_status(&status))
        .filter(|s| s.effective != 0 || s.permitted != 0)
        .count()
}

/// The whole drop as `run` and `record` do it once attached: decide, drop, and log what stayed
/// (a warning for each step the kernel refused; the process carries on with what it has).
pub fn drop_after_attach() -> Dropped {
    let before = Sets::current().unwrap_or_default();
    let plan = Plan::new(before, bpf_needs_capability());
    let dropped = drop_all(plan);
    for step in &dropped.refused {
        log::warn!("capabilities: the kernel refused a step of the drop ({step}); carrying on with what stayed");
    }
    if dropped.other_threads > 0 {
        log::warn!("capabilities: {} other threads keep theirs (dropped on this one only)", dropped.other_threads);
    }
    let a = dropped.after;
    log::info!(
        effective:% = format_args!("{:016x}", a.effective),
        permitted:% = format_args!("{:016x}", a.permitted),
        inheritable:% = format_args!("{:016x}", a.inheritable),
        bounding:% = format_args!("{:016x}", a.bounding),
        ambient:% = format_args!("{:016x}", a.ambient);
        "after attach: {}", plan.describe(before)
    );
    dropped
}

/// For a runtime's threads (`on_thread_start`): capabilities are per thread, and a worker or
/// blocking thread started before the attach would otherwise keep the process's. They never need
/// one (the attach and the drain thread are elsewhere), so each empties its own sets at start.
pub fn drop_this_thread() {
    let before = Sets::current().unwrap_or_default();
    if before.effective == 0 && before.permitted == 0 && before.ambient == 0 {
        return;
    }
    let dropped = drop_all(Plan::new(before, false));
    for step in &dropped.refused {
        log::warn!("capabilities: a runtime thread could not drop its own ({step})");
    }
}

/// capset(2) on the calling thread: these effective and permitted sets, inheritable empty.
fn capset(effective: u64, permitted: u64) -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let half = |set: u64, i: u32| (set >> (32 * i)) as u32;
    let mut header = Header { version: VERSION_3, pid: 0 };
    let data = [0, 1].map(|i| Data { effective: half(effective, i), permitted: half(permitted, i), inheritable: 0 });
    // SAFETY: version 3 takes two `Data`, which live for the call; pid 0 is this thread.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The highest capability this kernel knows.
fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
        .min(63)
}

/// `CAP_BPF, CAP_PERFMON` for a set; numbers for capabilities we do not name.
pub fn names(set: u64) -> String {
    let name = |cap: u32| match cap {
        CAP_SETPCAP => "CAP_SETPCAP".to_owned(),
        CAP_SYS_ADMIN => "CAP_SYS_ADMIN".to_owned(),
        CAP_PERFMON => "CAP_PERFMON".to_owned(),
        CAP_BPF => "CAP_BPF".to_owned(),
        n => format!("cap {n}"),
    };
    let all: Vec<String> = (0..64).filter(|&c| set & (1 << c) != 0).map(name).collect();
    if all.is_empty() { "none".to_owned() } else { all.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "CapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n\
                        CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n";

    fn pod() -> Sets {
        let two = (1 << CAP_BPF) | (1 << CAP_PERFMON);
        Sets { effective: two, permitted: two, inheritable: two, bounding: two, ambient: two }
    }

    #[test]
    fn reads_the_five_sets() {
        let s = Sets::from_status(ROOT).unwrap();
        assert_eq!((s.effective, s.bounding, s.ambient), (0x1ff_ffff_ffff, 0x1ff_ffff_ffff, 0));
        assert_eq!(Sets::from_status("CapEff:\t0\n"), None);
    }

    #[test]
    fn root_drops_everything() {
        let root = Sets::from_status(ROOT).unwrap();
        let plan = Plan::new(root, false);
        assert_eq!(plan, Plan { keep: 0, bounding_stays: false });
        assert_eq!(plan.describe(root), "every capability dropped");
        assert_eq!(Plan::new(root, true).keep, 1 << CAP_BPF);
    }

    #[test]
    fn without_setpcap_the_bounding_set_stays_and_says_so() {
        let plan = Plan::new(pod(), false);
        assert!(plan.bounding_stays);
        assert_eq!(
            plan.describe(pod()),
            "every capability dropped; the bounding set stays CAP_PERFMON, CAP_BPF \
             (emptying it needs CAP_SETPCAP; the runtime already limited it)"
        );
        let admin = Sets { permitted: 1 << CAP_SYS_ADMIN, ..Sets::default() };
        assert_eq!(Plan::new(admin, true).keep, 1 << CAP_SYS_ADMIN, "kernels without CAP_BPF");
    }

    /// Threads a runtime starts hold nothing, whatever the thread that built it holds (as root
    /// this drops something; otherwise there is nothing to drop and the check still holds).
    #[test]
    fn runtime_threads_start_without_capabilities() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .on_thread_start(drop_this_thread)
            .build()
            .unwrap();
        let (worker, blocking) = runtime.block_on(async {
            let worker = tokio::spawn(async { Sets::current().unwrap() }).await.unwrap();
            let blocking = tokio::task::spawn_blocking(|| Sets::current().unwrap()).await.unwrap();
            (worker, blocking)
        });
        for sets in [worker, blocking] {
            assert_eq!((sets.effective, sets.permitted, sets.inheritable, sets.ambient), (0, 0, 0, 0), "{sets:?}");
        }
    }

    #[test]
    fn names_of_sets() {
        assert_eq!(names(0), "none");
        assert_eq!(names((1 << CAP_BPF) | 1), "cap 0, CAP_BPF");
    }
}
