//! A process id → its cgroup v2 path, from the `0::<path>` line of `/proc/<pid>/cgroup`: where a
//! culprit (who ran while a victim waited) lived, so alerts can name its pod. Read when the window
//! closes, seconds after the run; a process gone by then is counted, not guessed. Cached for a
//! while (a process rarely changes cgroup) and bounded.

use std::{
    collections::HashMap,
    fs,
    io::Read as _,
    path::PathBuf,
    time::{Duration, Instant},
};

/// A few culprits per incident, two incidents per CPU and window: far fewer processes than this.
pub const DEFAULT_MAX_ENTRIES: usize = 4096;

/// How long a process's cgroup is trusted without reading it again (it may move, or its pid be
/// reused after it exits).
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// /proc/<pid>/cgroup has one line per hierarchy; a few hundred bytes.
const MAX_READ: u64 = 64 * 1024;

#[derive(Debug)]
pub struct ProcessCgroups {
    /// The proc file system (`/proc`, or the host's when running in a container).
    proc_root: PathBuf,
    cache: HashMap<u32, (String, Instant)>,
    max_entries: usize,
    ttl: Duration,
    gone: u64,
}

impl ProcessCgroups {
    pub fn new(proc_root: PathBuf) -> ProcessCgroups {
        ProcessCgroups { proc_root, cache: HashMap::new(), max_entries: DEFAULT_MAX_ENTRIES, ttl: DEFAULT_TTL, gone: 0 }
    }

    pub fn with_limits(mut self, max_entries: usize, ttl: Duration) -> ProcessCgroups {
        self.max_entries = max_entries.max(1);
        self.ttl = ttl;
        self
    }

    /// The cgroup v2 path of process `pid`; None when it is gone (or has no cgroup2 line), which
    /// counts in `gone_total`.
    pub fn cgroup(&mut self, pid: u32, now: Instant) -> Option<String> {
        if let Some((path, read_at)) = self.cache.get(&pid)
            && now.saturating_duration_since(*read_at) < self.ttl
        {
            return Some(path.clone());
        }
        let Some(path) = self.read(pid) else {
            self.cache.remove(&pid);
            self.gone += 1;
            return None;
        };
        if !self.cache.contains_key(&pid) && self.cache.len() >= self.max_entries {
            let ttl = self.ttl;
            self.cache.retain(|_, (_, at)| now.saturating_duration_since(*at) < ttl);
            if self.cache.len() >= self.max_entries
                && let Some(oldest) = self.cache.iter().min_by_key(|(_, (_, at))| *at).map(|(pid, _)| *pid)
            {
                self.cache.remove(&oldest);
            }
        }
        self.cache.insert(pid, (path.clone(), now));
        Some(path)
    }

    /// Lookups of processes that were gone (for `runqlat_culprit_cgroups_unknown_total`).
    pub fn gone_total(&self) -> u64 {
        self.gone
    }

    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    fn read(&self, pid: u32) -> Option<String> {
        let mut text = String::new();
        let file = fs::File::open(self.proc_root.join(pid.to_string()).join("cgroup")).ok()?;
        file.take(MAX_READ).read_to_string(&mut text).ok()?;
        cgroup2_path(&text).map(str::to_owned)
    }
}

/// The path of the `0::` line (the unified hierarchy; hybrid hosts list the v1 controllers too).
/// Relative to the reader's cgroup namespace: in a container without the host's, `/../..` leads.
/// The kernel writes the path unescaped and a cgroup's name may end in a space, tab or `\r` (only
/// `/` and a newline are refused), so the line is split at `\n` alone and nothing is trimmed.
pub fn cgroup2_path(text: &str) -> Option<&str> {
    text.split('\n').find_map(|l| l.strip_prefix("0::")).filter(|p| p.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unified_line_of_a_hybrid_host() {
        let hybrid = "12:pids:/libpod_parent/libpod-x\n1:name=systemd:/x\n0::/libpod_parent/libpod-x\n";
        assert_eq!(cgroup2_path(hybrid), Some("/libpod_parent/libpod-x"));
        assert_eq!(cgroup2_path("0::/\n"), Some("/"));
        assert_eq!(cgroup2_path("3:cpu:/a\n"), None, "v1 only");
        assert_eq!(cgroup2_path(""), None);
        assert_eq!(cgroup2_path("0::/e\"vil =x\u{1b}[0m\t \r\n"), Some("/e\"vil =x\u{1b}[0m\t \r"));
    }

    #[test]
    fn this_process_is_found_and_a_gone_one_counted() {
        let mut p = ProcessCgroups::new("/proc".into());
        let now = Instant::now();
        let mine = p.cgroup(std::process::id(), now).expect("our own cgroup");
        assert!(mine.starts_with('/'), "{mine}");
        // pid_max is at most 2^22: this pid never exists.
        assert_eq!(p.cgroup(u32::MAX, now), None);
        assert_eq!(p.gone_total(), 1);
        assert_eq!(p.cached(), 1);
    }

    #[test]
    fn bounded_and_refreshed() {
        let dir = std::env::temp_dir().join(format!("latency-daemon-proc-{}", std::process::id()));
        for pid in 1..=3 {
            fs::create_dir_all(dir.join(pid.to_string())).unwrap();
            fs::write(dir.join(pid.to_string()).join("cgroup"), format!("0::/cg{pid}\n")).unwrap();
        }
        let mut p = ProcessCgroups::new(dir.clone()).with_limits(2, Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(p.cgroup(1, t0).as_deref(), Some("/cg1"));
        assert_eq!(p.cgroup(2, t0 + Duration::from_secs(1)).as_deref(), Some("/cg2"));
        assert_eq!(p.cgroup(3, t0 + Duration::from_secs(2)).as_deref(), Some("/cg3"));
        assert_eq!(p.cached(), 2, "the oldest went");
        // Moved: the cache answers until its entry is older than the TTL.
        fs::write(dir.join("2").join("cgroup"), "0::/moved\n").unwrap();
        assert_eq!(p.cgroup(2, t0 + Duration::from_secs(5)).as_deref(), Some("/cg2"));
        assert_eq!(p.cgroup(2, t0 + Duration::from_secs(12)).as_deref(), Some("/moved"));
        // Exited: forgotten and counted.
        fs::remove_dir_all(dir.join("3")).unwrap();
        assert_eq!(p.cgroup(3, t0 + Duration::from_secs(13)), None);
        assert_eq!((p.gone_total(), p.cached()), (1, 1));
        let _ = fs::remove_dir_all(&dir);
    }
}
