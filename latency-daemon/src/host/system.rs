//! Facts about the running system: kernel release and host name (for reports and alerts),
//! `kernel.pid_max` (to size the kernel's per-tid arrays).

/// `uname -r`, or "unknown".
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// This machine's name, for the `instance` label of alerts; "unknown" if unreadable.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

/// Where `pid_max` is read.
pub const PID_MAX: &str = "/proc/sys/kernel/pid_max";

/// `kernel.pid_max`: no tid reaches it.
pub fn pid_max() -> std::io::Result<u32> {
    let text = std::fs::read_to_string(PID_MAX)?;
    text.trim()
        .parse()
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not a number: {:?}", text.trim())))
}
