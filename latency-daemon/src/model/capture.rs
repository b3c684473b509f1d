//! Captures as the rest of the daemon sees them: a name for one (from when, where and whom it
//! was taken), what a shelf of them lists, and the port a shelf is reached through (`host` keeps
//! the files, `serve` lists and sends them), and where a reading's records have gaps. Pure: no
//! I/O here.
use std::collections::BTreeMap;

use latency_common::maps::CaptureRecord;

/// Records missing from a CPU's sequence: between the one numbered before them, at `from_ns`,
/// and the one after, at `to_ns` (its ring wrapped between two readings, or the middle of a long
/// wait left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    pub cpu: u32,
    pub from_ns: u64,
    pub to_ns: u64,
    pub missing: u64,
}

/// Each CPU's gaps in `records`, by CPU and time.
pub fn gaps(records: &[CaptureRecord]) -> Vec<Gap> {
    let mut by_cpu: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for r in records {
        by_cpu.entry(r.cpu).or_default().push((r.seq, r.ts_ns));
    }
    let mut gaps = Vec::new();
    for (cpu, mut seqs) in by_cpu {
        seqs.sort_unstable();
        for p in seqs.windows(2) {
            let ((before, from_ns), (after, to_ns)) = (p[0], p[1]);
            if after > before + 1 {
                gaps.push(Gap { cpu, from_ns, to_ns: to_ns.max(from_ns), missing: after - before - 1 });
            }
        }
    }
    gaps
}

/// How a capture file is named: `capture-<unix ms, 13 digits>-cpu<N>-tid<T>.pftrace`, so names
/// sort by time and say where to look.
pub fn name(unix_ns: u64, cpu: u32, tid: u32) -> String {
    format!("capture-{:013}-cpu{cpu}-tid{tid}.pftrace", unix_ns / 1_000_000)
}

/// The name of a capture taken on demand (every CPU, no one victim).
pub fn demand_name(unix_ns: u64) -> String {
    format!("capture-{:013}-demand.pftrace", unix_ns / 1_000_000)
}

/// The picture (an SVG timeline) kept beside capture `name`.
pub fn picture(name: &str) -> String {
    format!("{}.svg", name.strip_suffix(".pftrace").unwrap_or(name))
}

/// Whether `name` can be one of ours — a capture or its picture, as [`name`], [`demand_name`] and
/// [`picture`] make them —, nothing that could leave the directory or name another file.
pub fn is_name(name: &str) -> bool {
    name.len() <= 96
        && name.starts_with("capture-")
        && (name.ends_with(".pftrace") || name.ends_with(".svg"))
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !name.contains("..")
}

/// One capture on the shelf.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Listed {
    pub name: String,
    /// The trace's and its picture's.
    pub bytes: u64,
    /// Where the trace is served, under the same authentication as the rest.
    pub url: String,
    /// Where its picture is served; None for a capture kept without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub picture_url: Option<String>,
}

/// The wait a capture was taken for, as the trace marks it on the victim's thread and the
/// picture on its CPU. Times are CLOCK_BOOTTIME ns, the records' clock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wait {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub cpu: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Still waiting when this was known (`end_ns` is when it was seen).
    pub waiting: bool,
    /// `wakeup`, `preempted`.
    pub reason: String,
    /// The cause split: (part, ns) in the order the dashboards show them, zero parts left out.
    pub parts: Vec<(&'static str, u64)>,
    pub cgroup: String,
    /// `namespace/pod/container`, where the cgroup is a container's.
    pub pod: String,
}

impl Wait {
    /// The wait of `a` (a delay's attribution), its clock moved to the records' by `boot_minus_mono_ns`.
    pub fn of(a: &super::attribution::Attribution, boot_minus_mono_ns: u64) -> Wait {
        let end_ns = a.end_ns.saturating_add(boot_minus_mono_ns);
        let parts = [
            ("throttled", a.throttled_ns),
            ("irq+steal", a.irq_steal_ns),
            ("unknown", a.unknown_ns),
            ("held", a.held_ns()),
        ];
        let n = &a.names;
        Wait {
            tid: a.victim_tid,
            pid: a.victim_pid,
            comm: a.victim_comm.clone(),
            cpu: a.cpu,
            start_ns: end_ns.saturating_sub(a.delay_ns),
            end_ns,
            waiting: a.waiting,
            reason: a.reason.name().to_owned(),
            parts: parts.into_iter().filter(|(_, ns)| *ns > 0).collect(),
            cgroup: a.cgroup.clone(),
            pod: if n.pod.is_empty() { String::new() } else { format!("{}/{}/{}", n.namespace, n.pod, n.container) },
        }
    }

    pub fn delay_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// Where captures are kept, as the HTTP routes reach it.
pub trait Shelf: Send + Sync {
    /// Newest first.
    fn list(&self) -> std::io::Result<Vec<Listed>>;
    /// The bytes of capture `name`; None when there is no such capture (or `name` cannot be one).
    fn read(&self, name: &str) -> std::io::Result<Option<Vec<u8>>>;
}

/// The path a capture is served at.
pub fn url(name: &str) -> String {
    format!("/api/v1/captures/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_time_and_only_ours_are_accepted() {
        let a = name(1_796_514_477_640_459_961, 1, 4242);
        assert_eq!(a, "capture-1796514477640-cpu1-tid4242.pftrace");
        assert!(name(999_000_000, 0, 1) < a, "fixed width");
        assert!(is_name(&a));
        assert_eq!(picture(&a), "capture-1796514477640-cpu1-tid4242.svg");
        assert!(is_name(&picture(&a)) && is_name(&demand_name(1_796_514_477_640_459_961)));
        for bad in
            ["../etc/passwd", "capture-1/../x.pftrace", "capture-1.pftrace/", "x.pftrace", "capture-A.pftrace", ""]
        {
            assert!(!is_name(bad), "{bad}");
        }
    }
}
