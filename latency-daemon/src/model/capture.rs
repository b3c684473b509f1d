//! Captures as the rest of the daemon sees them: a name for one (from when, where and whom it
//! was taken), what a shelf of them lists, and the port a shelf is reached through (`host` keeps
//! the files, `serve` lists and sends them). Pure: no I/O here.

/// How a capture file is named: `capture-<unix ms, 13 digits>-cpu<N>-tid<T>.pftrace`, so names
/// sort by time and say where to look.
pub fn name(unix_ns: u64, cpu: u32, tid: u32) -> String {
    format!("capture-{:013}-cpu{cpu}-tid{tid}.pftrace", unix_ns / 1_000_000)
}

/// Whether `name` can be one of ours: what [`name`] makes, nothing that could leave the
/// directory or name another file.
pub fn is_name(name: &str) -> bool {
    name.len() <= 96
        && name.starts_with("capture-")
        && name.ends_with(".pftrace")
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !name.contains("..")
}

/// One capture on the shelf.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Listed {
    pub name: String,
    pub bytes: u64,
    /// Where it is served, under the same authentication as the rest.
    pub url: String,
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
        for bad in
            ["../etc/passwd", "capture-1/../x.pftrace", "capture-1.pftrace/", "x.pftrace", "capture-A.pftrace", ""]
        {
            assert!(!is_name(bad), "{bad}");
        }
    }
}
