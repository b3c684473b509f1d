//! Which of the capabilities the kernel program needs this process has (from /proc/self/status),
//! and the one gate every command that loads the program passes first.

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The effective capabilities relevant to loading tracing programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    pub bpf: bool,
    pub perfmon: bool,
    pub sys_admin: bool,
}

/// Loading would fail for want of these capabilities.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("not permitted to load the kernel program: missing {}; run as root or grant them", .missing.join(" and "))]
pub struct MissingCaps {
    pub missing: Vec<&'static str>,
}

/// Fails, naming what is missing, unless this process may load and attach the kernel program.
/// When /proc/self/status cannot be read, the load itself is left to say what is wrong.
pub fn require() -> Result<(), MissingCaps> {
    match Caps::current() {
        Ok(caps) if !caps.missing().is_empty() => Err(MissingCaps { missing: caps.missing() }),
        _ => Ok(()),
    }
}

impl Caps {
    pub fn current() -> std::io::Result<Caps> {
        let status = std::fs::read_to_string("/proc/self/status")?;
        Caps::from_status(&status)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "no CapEff line in /proc/self/status"))
    }

    pub fn from_status(status: &str) -> Option<Caps> {
        let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
        let eff = u64::from_str_radix(hex, 16).ok()?;
        let has = |cap: u32| eff & (1u64 << cap) != 0;
        Some(Caps { bpf: has(CAP_BPF), perfmon: has(CAP_PERFMON), sys_admin: has(CAP_SYS_ADMIN) })
    }

    /// The capabilities still missing to load and attach BTF tracepoints, by name. CAP_SYS_ADMIN
    /// stands in for both on kernels before 5.8.
    pub fn missing(self) -> Vec<&'static str> {
        if self.sys_admin {
            return Vec::new();
        }
        let mut missing = Vec::new();
        if !self.bpf {
            missing.push("CAP_BPF");
        }
        if !self.perfmon {
            missing.push("CAP_PERFMON");
        }
        missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cap_eff() {
        let root = "Name:\tx\nCapEff:\t000001ffffffffff\n";
        assert_eq!(Caps::from_status(root).unwrap().missing(), Vec::<&str>::new());
        let nobody = "CapEff:\t0000000000000000\n";
        assert_eq!(Caps::from_status(nobody).unwrap().missing(), vec!["CAP_BPF", "CAP_PERFMON"]);
        let bpf_only = format!("CapEff:\t{:016x}\n", 1u64 << CAP_BPF);
        assert_eq!(Caps::from_status(&bpf_only).unwrap().missing(), vec!["CAP_PERFMON"]);
        assert_eq!(Caps::from_status("nothing"), None);
    }

    #[test]
    fn the_gate_names_what_is_missing() {
        let e = MissingCaps { missing: vec!["CAP_BPF", "CAP_PERFMON"] };
        assert_eq!(
            e.to_string(),
            "not permitted to load the kernel program: missing CAP_BPF and CAP_PERFMON; run as root or grant them"
        );
    }
}
