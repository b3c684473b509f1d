//! Facts about the running system: kernel release and host name (for reports and alerts),
//! `kernel.pid_max` (to size the kernel's per-tid arrays) and whether it is the host's.

/// `uname -r`, or "unknown".
pub fn kernel_release() -> String {
    std::fs::read_to_string(super::paths::proc("sys/kernel/osrelease"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// This machine's name, for the `instance` label of alerts; "unknown" if unreadable.
pub fn hostname() -> String {
    std::fs::read_to_string(super::paths::proc("sys/kernel/hostname"))
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

/// Where `pid_max` is read (under `--path.procfs`).
pub fn pid_max_path() -> std::path::PathBuf {
    super::paths::proc("sys/kernel/pid_max")
}

/// `kernel.pid_max`: no tid reaches it.
pub fn pid_max() -> std::io::Result<u32> {
    let text = std::fs::read_to_string(pid_max_path())?;
    text.trim()
        .parse()
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not a number: {:?}", text.trim())))
}

/// The highest thread id running now (0 if /proc cannot be read). `kernel.pid_max` bounds new
/// tids only: a task started before it was lowered keeps a larger one (a kernel worker made while
/// it was raised lives on), and the stamp array must reach it too.
pub fn highest_tid() -> u32 {
    let tids = |dir: std::path::PathBuf| -> Vec<u32> {
        std::fs::read_dir(dir)
            .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()).collect())
            .unwrap_or_default()
    };
    tids(super::paths::proc(""))
        .into_iter()
        .flat_map(|pid| tids(super::paths::proc(format!("{pid}/task"))))
        .max()
        .unwrap_or(0)
}

/// Stamp slots for this host: `kernel.pid_max`, or one past the highest tid running if that is
/// larger, never more than the kernel's PID_MAX_LIMIT (4194304).
pub fn stamp_slots() -> std::io::Result<u32> {
    const PID_MAX_LIMIT: u32 = 4 * 1024 * 1024;
    Ok(pid_max()?.max(highest_tid().saturating_add(1)).min(PID_MAX_LIMIT))
}

/// The inode of the initial PID namespace, fixed by the kernel (`PROC_PID_INIT_INO`).
const INIT_PID_NS: &str = "pid:[4026531836]";

/// Whether this process is in the host's PID namespace: `/proc/self/ns/pid` names the initial
/// one (readable by any user, also under systemd's `ProtectProc=invisible`); where that link
/// cannot be read, pid 2 is `kthreadd` (a private PID namespace shows no kernel threads). The
/// kernel program indexes its arrays by host tids, and since 6.14 `kernel.pid_max` is per
/// namespace (a container reads 4194304 where the host has 32768), so only the host's value
/// sizes them right.
pub fn in_host_pid_namespace() -> bool {
    match std::fs::read_link(super::paths::proc("self/ns/pid")) {
        Ok(link) => is_initial_pid_namespace(&link.to_string_lossy()),
        Err(_) => std::fs::read_to_string(super::paths::proc("2/comm")).is_ok_and(|c| c.trim() == "kthreadd"),
    }
}

/// Whether a `/proc/<pid>/ns/pid` link's text names the initial PID namespace.
fn is_initial_pid_namespace(link: &str) -> bool {
    link == INIT_PID_NS
}

/// One line saying where the stamp array's size came from, for the log and `check`.
pub fn stamp_slots_reason(slots: u32) -> String {
    if pid_max().is_ok_and(|max| slots > max) {
        format!(
            "{slots} stamp slots = one past the highest tid running, above kernel.pid_max (lowered after that \
             task started)"
        )
    } else if in_host_pid_namespace() {
        format!("{slots} stamp slots = kernel.pid_max of the host PID namespace")
    } else {
        format!(
            "{slots} stamp slots = kernel.pid_max of a private PID namespace, not the host's: run with the host's \
             PID namespace (hostPID: true, --pid=host) to size it from the host's pid_max"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_initial_pid_namespace_by_its_fixed_inode() {
        assert!(is_initial_pid_namespace("pid:[4026531836]"));
        assert!(!is_initial_pid_namespace("pid:[4026532301]"));
        assert!(!is_initial_pid_namespace("net:[4026531836]"));
        // This test runs as root in the host's namespace in CI.
        if std::fs::read_to_string("/proc/2/comm").is_ok_and(|c| c.trim() == "kthreadd") {
            assert!(in_host_pid_namespace());
        }
    }
}
