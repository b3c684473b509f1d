//! A cgroup path → Kubernetes namespace, pod and container names, from the container runtime's own OCI
//! config on this node (no API server): the path's form gives the container id (`model::container`),
//! the runtime's state directory gives its `config.json`, whose annotations give the names.
//! Cached and bounded; ids that cannot be resolved are counted and retried at most once per `retry`.

use std::{
    collections::HashMap,
    fs,
    io::Read as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use crate::model::container::{self, ContainerLabels, PathIdentity};

/// A config.json is a few tens of KiB; anything larger (or not a regular file) is not read.
const MAX_CONFIG: u64 = 1 << 20;

/// Far above the containers one node runs; past it the oldest-resolved names are dropped first.
pub const DEFAULT_MAX_ENTRIES: usize = 4096;

/// A container's config appears a moment after its cgroup; look again after this long.
pub const DEFAULT_RETRY: Duration = Duration::from_secs(2);

/// Where each runtime keeps a container's bundle, relative to the host's root. `{id}` is the container
/// id; a `*` component is any one directory (containerd's namespace: `k8s.io`, `default`, `moby`).
const BUNDLES: [&str; 6] = [
    "run/containerd/io.containerd.runtime.v2.task/*/{id}/config.json",
    "run/docker/containerd/daemon/io.containerd.runtime.v2.task/*/{id}/config.json",
    "var/lib/containers/storage/overlay-containers/{id}/userdata/config.json",
    "run/containers/storage/overlay-containers/{id}/userdata/config.json",
    "var/run/containerd/io.containerd.runtime.v2.task/*/{id}/config.json",
    "run/runc/{id}/state.json",
];

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
        let id = identity.container_id.as_deref()?;
        BUNDLES.iter().find_map(|pattern| {
            let rel = pattern.replace("{id}", id);
            expand(&self.root, &rel).into_iter().find_map(|file| {
                let annotations = if rel.ends_with("state.json") { runc_state(&file)? } else { oci_config(&file)? };
                Some(names(id, &annotations))
            })
        })
    }
}

/// What a container gets before (or without) its config: its id and short id.
fn bare(identity: &PathIdentity) -> ContainerLabels {
    let id = identity.container_id.clone().unwrap_or_default();
    ContainerLabels { container: short(&id), container_id: id, ..ContainerLabels::default() }
}

fn short(id: &str) -> String {
    id.get(..12).unwrap_or(id).to_owned()
}

/// Annotations → names, for the keys the CRI plugins (containerd, CRI-O) and kubelet-style labels write.
fn names(id: &str, annotations: &HashMap<String, String>) -> ContainerLabels {
    let get = |keys: &[&str]| keys.iter().find_map(|k| annotations.get(*k)).map(|v| clean(v)).unwrap_or_default();
    let sandbox = ["io.kubernetes.cri.container-type", "io.kubernetes.cri-o.ContainerType"]
        .iter()
        .any(|k| annotations.get(*k).is_some_and(|v| v == "sandbox"));
    let mut container = if sandbox {
        "POD".to_owned()
    } else {
        get(&["io.kubernetes.container.name", "io.kubernetes.cri.container-name"])
    };
    if container.is_empty() {
        container = short(id);
    }
    ContainerLabels {
        namespace: get(&["io.kubernetes.pod.namespace", "io.kubernetes.cri.sandbox-namespace"]),
        pod: get(&["io.kubernetes.pod.name", "io.kubernetes.cri.sandbox-name"]),
        container,
        container_id: id.to_owned(),
    }
}

/// Whoever can create a pod writes these annotations: at most 253 characters (Kubernetes' longest
/// name), no control characters. Escaping for each output is the output's job.
const MAX_NAME: usize = 253;

fn clean(value: &str) -> String {
    value.chars().filter(|c| !c.is_control()).take(MAX_NAME).collect()
}

/// `root` + `rel`, where a `*` component matches every directory entry there.
fn expand(root: &Path, rel: &str) -> Vec<PathBuf> {
    let mut paths = vec![root.to_path_buf()];
    for part in rel.split('/') {
        if part == "*" {
            paths = paths
                .iter()
                .filter_map(|dir| fs::read_dir(dir).ok())
                .flat_map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.path()))
                .collect();
        } else {
            for p in &mut paths {
                p.push(part);
            }
        }
    }
    paths
}

/// A regular file of at most `MAX_CONFIG` bytes, or nothing (a FIFO or a huge file must not stall us).
fn read_small(path: &Path) -> Option<Vec<u8>> {
    let meta = fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_file() || meta.len() > MAX_CONFIG {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    fs::File::open(path).ok()?.take(MAX_CONFIG).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

#[derive(serde::Deserialize)]
struct OciConfig {
    #[serde(default)]
    annotations: Option<HashMap<String, String>>,
}

fn oci_config(path: &Path) -> Option<HashMap<String, String>> {
    let config: OciConfig = serde_json::from_slice(&read_small(path)?).ok()?;
    Some(config.annotations.unwrap_or_default())
}

#[derive(serde::Deserialize)]
struct RuncState {
    config: RuncConfig,
}

#[derive(serde::Deserialize)]
struct RuncConfig {
    #[serde(default)]
    labels: Vec<String>,
}

/// runc's state.json repeats the annotations as `key=value` labels.
fn runc_state(path: &Path) -> Option<HashMap<String, String>> {
    let state: RuncState = serde_json::from_slice(&read_small(path)?).ok()?;
    Some(
        state
            .config
            .labels
            .iter()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    )
}

#[cfg(test)]
mod tests;
