//! A container id → its Kubernetes names, from the file each container runtime keeps for it on this node
//! (below the host's root): where containerd, k3s/RKE2, CRI-O, podman, dockerd (cri-dockerd) and runc keep
//! it, how each file is read, and which keys each runtime writes itself (trusted before any other).

use std::{
    collections::HashMap,
    fs,
    io::Read as _,
    path::{Path, PathBuf},
};

use crate::model::container::ContainerLabels;

/// A config.json is a few tens of KiB; anything larger (or not a regular file) is not read.
const MAX_CONFIG: u64 = 1 << 20;

/// A `*` component is matched against at most this many entries of its directory (containerd's
/// namespaces, containers/storage's `<driver>-containers`: a handful each), so a crowded directory
/// costs a bounded scan.
const MAX_DIR_ENTRIES: usize = 64;

/// How a file names its container, and whose keys come first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// An OCI bundle's `config.json` written by containerd's CRI plugin: its own `io.kubernetes.cri.*`
    /// annotations are set after the pod's pass-through annotations, so they win over `io.kubernetes.pod.*`
    /// (which a pod could set on itself where pass-through is configured).
    Containerd,
    /// An OCI `config.json` carrying the kubelet's CRI labels as annotations (`io.kubernetes.pod.*`,
    /// `io.kubernetes.container.name`): CRI-O adds them after the pod's own annotations, so they win;
    /// podman `kube play` and `--annotation` write the same keys.
    Labels,
    /// dockerd's `config.v2.json`: cri-dockerd puts the kubelet's CRI labels in `Config.Labels` (a pod's
    /// annotations go there too, but under an `annotation.` prefix, so they cannot collide).
    Docker,
    /// runc's `state.json`: the annotations again, as `key=value` labels.
    RuncState,
}

/// One place a runtime keeps a container's file, relative to the host's root. `{id}` is the container id (64
/// hex digits, checked by `model::container`); a component with a `*` matches the entries of its directory
/// with that prefix and suffix.
struct Source {
    /// For people: which runtime keeps it, and the directory (for the start-up log).
    runtime: &'static str,
    pattern: &'static str,
    format: Format,
}

/// In the order looked at. A file that names a pod ends the search; one that does not (dockerd's own OCI
/// bundle, a plain podman container) is kept in case no other does.
const SOURCES: [Source; 8] = [
    // containerd (kubeadm, EKS, GKE, AKS …): `state = "/run/containerd"`; the runtime v2 shim's bundle, one
    // directory per containerd namespace (`k8s.io` for the CRI plugin, `default`, `moby`).
    Source {
        runtime: "containerd",
        pattern: "run/containerd/io.containerd.runtime.v2.task/*/{id}/config.json",
        format: Format::Containerd,
    },
    // k3s and RKE2 run their own containerd with `state = "/run/k3s/containerd"`, fixed whatever their
    // `--data-dir` (which moves only containerd's root, `<data-dir>/agent/containerd`).
    Source {
        runtime: "k3s/RKE2 containerd",
        pattern: "run/k3s/containerd/io.containerd.runtime.v2.task/*/{id}/config.json",
        format: Format::Containerd,
    },
    // Where /var/run is a directory rather than the usual link to /run.
    Source {
        runtime: "containerd",
        pattern: "var/run/containerd/io.containerd.runtime.v2.task/*/{id}/config.json",
        format: Format::Containerd,
    },
    // CRI-O (and podman) through containers/storage: `<runroot>/<driver>-containers/<id>/userdata/config.json`
    // and the same file under the graph root; the driver is `overlay` almost everywhere (`vfs`, `btrfs`, `zfs`).
    Source {
        runtime: "CRI-O/podman",
        pattern: "run/containers/storage/*-containers/{id}/userdata/config.json",
        format: Format::Labels,
    },
    Source {
        runtime: "CRI-O/podman",
        pattern: "var/lib/containers/storage/*-containers/{id}/userdata/config.json",
        format: Format::Labels,
    },
    // dockerd (with cri-dockerd, or k3s --docker): the container's own record under its data root.
    Source { runtime: "dockerd", pattern: "var/lib/docker/containers/{id}/config.v2.json", format: Format::Docker },
    // dockerd's OCI bundle has the container's annotations but not its labels: no pod names.
    Source {
        runtime: "dockerd",
        pattern: "run/docker/containerd/daemon/io.containerd.runtime.v2.task/*/{id}/config.json",
        format: Format::Labels,
    },
    Source { runtime: "runc", pattern: "run/runc/{id}/state.json", format: Format::RuncState },
];

/// The names for container `id` from the first file that names it, or from the first file found at all
/// (the short id as its container name); None when no runtime has a readable file for it.
pub(super) fn lookup(root: &Path, id: &str) -> Option<ContainerLabels> {
    let mut unnamed = None;
    for source in &SOURCES {
        for file in expand(root, &source.pattern.replace("{id}", id)) {
            let Some(annotations) = read(&file, source.format) else { continue };
            let labels = names(id, &annotations, source.format);
            if !labels.namespace.is_empty() || !labels.pod.is_empty() || labels.container != short(id) {
                return Some(labels);
            }
            unnamed.get_or_insert(labels);
        }
    }
    unnamed
}

/// The runtimes whose container directories below `root` can be listed now (each named once, in `SOURCES`'
/// order), with the directory: for the start-up log, so a node whose runtime is not mounted (or not
/// readable) says so once rather than through empty labels.
pub(super) fn seen(root: &Path) -> Vec<(&'static str, PathBuf)> {
    let mut seen: Vec<(&'static str, PathBuf)> = Vec::new();
    for source in &SOURCES {
        let Some((dirs, _)) = source.pattern.split_once("/{id}") else { continue };
        if seen.iter().any(|(runtime, _)| *runtime == source.runtime) {
            continue;
        }
        if let Some(dir) = expand(root, dirs).into_iter().find(|d| fs::read_dir(d).is_ok()) {
            seen.push((source.runtime, dir));
        }
    }
    seen
}

pub(super) fn short(id: &str) -> String {
    id.get(..12).unwrap_or(id).to_owned()
}

/// Keys in the order trusted, per format.
struct Keys {
    namespace: &'static [&'static str],
    pod: &'static [&'static str],
    container: &'static [&'static str],
    /// (key, value) pairs that mark the pod's sandbox (pause) container.
    sandbox: &'static [(&'static str, &'static str)],
}

const CONTAINERD_KEYS: Keys = Keys {
    namespace: &["io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace"],
    pod: &["io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"],
    container: &["io.kubernetes.cri.container-name", "io.kubernetes.container.name"],
    sandbox: &[("io.kubernetes.cri.container-type", "sandbox")],
};

/// CRI-O's sandbox also has `io.kubernetes.cri-o.Namespace` and `KubeName` (the pod's namespace and name);
/// its containers have the labels.
const LABEL_KEYS: Keys = Keys {
    namespace: &["io.kubernetes.pod.namespace", "io.kubernetes.cri-o.Namespace"],
    pod: &["io.kubernetes.pod.name", "io.kubernetes.cri-o.KubeName"],
    container: &["io.kubernetes.container.name"],
    sandbox: &[("io.kubernetes.cri-o.ContainerType", "sandbox"), ("io.kubernetes.docker.type", "podsandbox")],
};

/// Annotations → names. A sandbox is `POD` (as kubelet names it); a container without a name its short id.
fn names(id: &str, annotations: &HashMap<String, String>, format: Format) -> ContainerLabels {
    let keys = if format == Format::Containerd { &CONTAINERD_KEYS } else { &LABEL_KEYS };
    let get = |keys: &[&str]| keys.iter().find_map(|k| annotations.get(*k)).map(|v| clean(v)).unwrap_or_default();
    let sandbox = keys.sandbox.iter().any(|(k, v)| annotations.get(*k).is_some_and(|got| got == v));
    let mut container = if sandbox { "POD".to_owned() } else { get(keys.container) };
    if container.is_empty() {
        container = short(id);
    }
    ContainerLabels { namespace: get(keys.namespace), pod: get(keys.pod), container, container_id: id.to_owned() }
}

/// Whoever can create a pod writes these values: at most 253 characters (Kubernetes' longest name), no
/// control characters. Escaping for each output is the output's job.
const MAX_NAME: usize = 253;

fn clean(value: &str) -> String {
    value.chars().filter(|c| !c.is_control()).take(MAX_NAME).collect()
}

/// `root` + `rel`, where a component with one `*` matches the entries of its directory that start with
/// what precedes the `*` and end with what follows it (at most `MAX_DIR_ENTRIES` entries looked at).
fn expand(root: &Path, rel: &str) -> Vec<PathBuf> {
    let mut paths = vec![root.to_path_buf()];
    for part in rel.split('/') {
        if let Some((prefix, suffix)) = part.split_once('*') {
            paths = paths
                .iter()
                .filter_map(|dir| fs::read_dir(dir).ok())
                .flat_map(|entries| entries.take(MAX_DIR_ENTRIES).filter_map(|e| e.ok()))
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.len() >= prefix.len() + suffix.len() && name.starts_with(prefix) && name.ends_with(suffix)
                })
                .map(|e| e.path())
                .collect();
        } else {
            for p in &mut paths {
                p.push(part);
            }
        }
    }
    paths
}

/// A regular file of at most `MAX_CONFIG` bytes, or nothing (a FIFO, a link or a huge file must not stall or
/// mislead us).
fn read_small(path: &Path) -> Option<Vec<u8>> {
    let meta = fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_file() || meta.len() > MAX_CONFIG {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    fs::File::open(path).ok()?.take(MAX_CONFIG).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

fn read(path: &Path, format: Format) -> Option<HashMap<String, String>> {
    let bytes = read_small(path)?;
    match format {
        Format::Containerd | Format::Labels => {
            let config: OciConfig = serde_json::from_slice(&bytes).ok()?;
            Some(config.annotations.unwrap_or_default())
        }
        Format::Docker => {
            let container: DockerContainer = serde_json::from_slice(&bytes).ok()?;
            Some(container.config.labels.unwrap_or_default())
        }
        Format::RuncState => {
            let state: RuncState = serde_json::from_slice(&bytes).ok()?;
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
    }
}

#[derive(serde::Deserialize)]
struct OciConfig {
    #[serde(default)]
    annotations: Option<HashMap<String, String>>,
}

#[derive(serde::Deserialize)]
struct DockerContainer {
    #[serde(rename = "Config")]
    config: DockerConfig,
}

#[derive(serde::Deserialize)]
struct DockerConfig {
    #[serde(rename = "Labels", default)]
    labels: Option<HashMap<String, String>>,
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
