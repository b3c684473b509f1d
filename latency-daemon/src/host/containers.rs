//! A cgroup path → Kubernetes namespace, pod and container names, from the container runtimes' own state
//! on this node (no API server): the path's form gives the container id (`model::container`), the runtime's
//! file for that id gives the names (`runtimes`: containerd, k3s/RKE2, CRI-O, podman, dockerd, runc).
//! Cached and bounded; ids that cannot be resolved are counted and retried at most once per `retry`.

mod runtimes;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use crate::model::container::{self, ContainerLabels, PathIdentity};

/// Far above the containers one node runs; past it the oldest-resolved names are dropped first.
pub const DEFAULT_MAX_ENTRIES: usize = 4096;

/// A container's config appears a moment after its cgroup; look again after this long.
pub const DEFAULT_RETRY: Duration = Duration::from_secs(2);

#[derive(Debug)]
struct Entry {
    names: Option<ContainerLabels>,
    /// When a miss may be looked up again.
    retry_at: Instant,
    resolved_at: Instant,
}

/// Container id → names, for one host root (`/`, or `--path.rootfs` when running in a container).
#[derive(Debug)]
pub struct ContainerNames {
    root: PathBuf,
    cache: HashMap<String, Entry>,
    max_entries: usize,
    retry: Duration,
    unresolved: u64,
}

impl ContainerNames {
    pub fn new(root: PathBuf) -> ContainerNames {
        ContainerNames {
            root,
            cache: HashMap::new(),
            max_entries: DEFAULT_MAX_ENTRIES,
            retry: DEFAULT_RETRY,
            unresolved: 0,
        }
    }

    pub fn with_limits(mut self, max_entries: usize, retry: Duration) -> ContainerNames {
        self.max_entries = max_entries.max(1);
        self.retry = retry;
        self
    }

    /// ContainerLabels for a cgroup path. A container whose config cannot be found yet still gets its id and,
    /// from the path, nothing else; it counts as unresolved once per lookup attempt.
    pub fn resolve(&mut self, path: &str, now: Instant) -> ContainerLabels {
        let identity = container::identify(path);
        let Some(id) = identity.container_id.clone() else { return ContainerLabels::default() };
        if let Some(entry) = self.cache.get(&id) {
            if let Some(names) = &entry.names {
                return names.clone();
            }
            if now < entry.retry_at {
                return bare(&identity);
            }
        }
        let found = self.lookup(&identity);
        if found.is_none() {
            self.unresolved += 1;
        }
        if !self.cache.contains_key(&id) && self.cache.len() >= self.max_entries {
            self.evict_oldest();
        }
        let names = found.clone().unwrap_or_else(|| bare(&identity));
        self.cache.insert(id, Entry { names: found, retry_at: now + self.retry, resolved_at: now });
        names
    }

    /// Drop what is known of a container (its cgroup is gone).
    pub fn forget(&mut self, path: &str) {
        if let Some(id) = container::identify(path).container_id {
            self.cache.remove(&id);
        }
    }

    /// Lookups that found no config (for `runqlat_container_unresolved_total`).
    pub fn unresolved_total(&self) -> u64 {
        self.unresolved
    }

    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    fn evict_oldest(&mut self) {
        if let Some(oldest) = self.cache.iter().min_by_key(|(_, e)| e.resolved_at).map(|(id, _)| id.clone()) {
            self.cache.remove(&oldest);
        }
    }

    fn lookup(&self, identity: &PathIdentity) -> Option<ContainerLabels> {
        runtimes::lookup(&self.root, identity.container_id.as_deref()?)
    }
}

/// Which runtimes' container directories can be listed below the host root `root` now, and where (empty: no
/// runtime's state is mounted or readable, so containers will carry their ids only): for the start-up log.
pub fn runtimes_seen(root: &Path) -> Vec<(&'static str, PathBuf)> {
    runtimes::seen(root)
}

/// What a container gets before (or without) its config: its id and short id.
fn bare(identity: &PathIdentity) -> ContainerLabels {
    let id = identity.container_id.clone().unwrap_or_default();
    ContainerLabels { container: runtimes::short(&id), container_id: id, ..ContainerLabels::default() }
}

#[cfg(test)]
mod tests;
