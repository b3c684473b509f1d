//! A cgroup path → what its form says about a container: the runtime, the container id, the pod's uid
//! and QoS class. Pure: names come later from the runtime's own OCI config (`host::containers`).
//!
//! The forms recognised (cgroupfs and systemd drivers; docs/design.md lists where each comes from):
//! - Kubernetes, cgroupfs driver: `/kubepods[/burstable|/besteffort]/pod<uid>/<id>`, the id bare or with
//!   a runtime prefix (`cri-containerd-`, `crio-`, `docker-`, `libpod-`);
//! - Kubernetes, systemd driver: `/kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid with
//!   '_'>.slice/<runtime>-<id>.scope`;
//! - podman: `/libpod_parent[/<pod id>]/libpod-<id>`, `/machine.slice/libpod-<id>.scope`;
//! - docker: `/docker/<id>`, `/system.slice/docker-<id>.scope`;
//! - crun's systemd driver: any of the `.scope` forms above with a `/container` child (the container's tasks);
//! - anything else ending in a 64-hex name (e.g. `ctr run --cgroup /ns/<id>`) is a container of unknown
//!   runtime; conmon's own scopes are not containers.

/// Who created the cgroup, as far as its path tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    Containerd,
    CriO,
    Docker,
    Podman,
    /// A 64-hex leaf under a parent that names no runtime.
    Unknown,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Docker => "docker",
            Runtime::Podman => "podman",
            Runtime::Unknown => "unknown",
        }
    }
}

/// A Kubernetes QoS class, from the `kubepods` level of the path (Guaranteed pods sit directly under it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    pub fn name(self) -> &'static str {
        match self {
            Qos::Guaranteed => "guaranteed",
            Qos::Burstable => "burstable",
            Qos::BestEffort => "besteffort",
        }
    }
}

/// What a cgroup path says. A pod-level cgroup (`…/pod<uid>`) has a pod uid and no container id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathIdentity {
    pub runtime: Option<Runtime>,
    /// 64 lowercase hex digits.
    pub container_id: Option<String>,
    /// As Kubernetes writes it (dashes, not the systemd driver's underscores).
    pub pod_uid: Option<String>,
    pub qos: Option<Qos>,
}

impl PathIdentity {
    pub fn is_container(&self) -> bool {
        self.container_id.is_some()
    }
}

/// Read a cgroup path ('/'-separated, relative to the cgroup2 mount; "/" is the root).
pub fn identify(path: &str) -> PathIdentity {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let mut id = PathIdentity::default();
    let Some((&leaf, parents)) = parts.split_last() else { return id };
    // crun with the systemd driver (CRI-O's and podman's default runtime on cgroup v2) runs the container in
    // a `container` child of its scope: that child is the container.
    let (leaf, parents) = match parents.split_last() {
        Some((&scope, above))
            if leaf == "container" && scope.ends_with(".scope") && container_leaf(scope).is_some() =>
        {
            (scope, above)
        }
        _ => (leaf, parents),
    };

    if let Some(k) = parts.iter().position(|p| *p == "kubepods" || *p == "kubepods.slice") {
        id.qos = Some(Qos::Guaranteed);
        for part in &parts[k + 1..] {
            let name = part.strip_suffix(".slice").unwrap_or(part);
            match name {
                "burstable" | "kubepods-burstable" => id.qos = Some(Qos::Burstable),
                "besteffort" | "kubepods-besteffort" => id.qos = Some(Qos::BestEffort),
                _ => {
                    if let Some(uid) = pod_uid(name) {
                        id.pod_uid = Some(uid);
                    }
                }
            }
        }
    }

    if let Some((runtime, cid)) = container_leaf(leaf) {
        id.runtime = Some(runtime);
        id.container_id = Some(cid.to_owned());
    } else if is_hex64(leaf) {
        // A bare id: the parent says whose (docker's own tree; a pod under kubepods is containerd's or
        // CRI-O's, which the OCI config settles).
        id.runtime = Some(match parents.last() {
            Some(&"docker") => Runtime::Docker,
            _ => Runtime::Unknown,
        });
        id.container_id = Some(leaf.to_owned());
    }
    id
}

/// `pod<uid>` (cgroupfs) or `kubepods[-<qos>]-pod<uid_with_underscores>` (systemd, `.slice` stripped).
fn pod_uid(name: &str) -> Option<String> {
    let raw = name.rsplit_once("-pod").map(|(_, uid)| uid).or_else(|| name.strip_prefix("pod"))?;
    let uid = raw.replace('_', "-");
    let ok = !uid.is_empty() && uid.len() <= 64 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    ok.then_some(uid)
}

/// `<runtime prefix>-<64 hex>[.scope]` → the runtime and the id. conmon's scopes are not containers.
fn container_leaf(leaf: &str) -> Option<(Runtime, &str)> {
    const PREFIXES: [(&str, Runtime); 4] = [
        ("cri-containerd-", Runtime::Containerd),
        ("crio-", Runtime::CriO),
        ("docker-", Runtime::Docker),
        ("libpod-", Runtime::Podman),
    ];
    let name = leaf.strip_suffix(".scope").unwrap_or(leaf);
    PREFIXES.iter().find_map(|&(prefix, runtime)| {
        let cid = name.strip_prefix(prefix)?;
        is_hex64(cid).then_some((runtime, cid))
    })
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The labels a cgroup series carries beside `cgroup`: empty strings where the cgroup is not a
/// container or a name is unknown, so `sum by (namespace, pod)` works on every series. In JSON
/// (the snapshot, alerts) the empty ones are left out.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ContainerLabels {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pod: String,
    /// The container's name; `POD` for a pod's sandbox (pause) container, as kubelet names it; the
    /// short id for a container the runtime gave no name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub container: String,
    /// The full 64-hex id, when the path has one.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub container_id: String,
}

impl ContainerLabels {
    /// Not a container (or nothing known of it).
    pub fn is_empty(&self) -> bool {
        self.namespace.is_empty() && self.pod.is_empty() && self.container.is_empty() && self.container_id.is_empty()
    }

    /// `namespace/pod` (or just one of them) for people to read; None without a pod.
    pub fn pod_name(&self) -> Option<String> {
        match (self.namespace.as_str(), self.pod.as_str()) {
            (_, "") => None,
            ("", pod) => Some(pod.to_owned()),
            (ns, pod) => Some(format!("{ns}/{pod}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const UID: &str = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

    fn container(runtime: Runtime, pod_uid: Option<&str>, qos: Option<Qos>) -> PathIdentity {
        PathIdentity {
            runtime: Some(runtime),
            container_id: Some(ID.to_owned()),
            pod_uid: pod_uid.map(str::to_owned),
            qos,
        }
    }

    #[test]
    fn every_form_in_the_findings() {
        let under_scored = UID.replace('-', "_");
        let cases = [
            (
                format!("/kubepods/besteffort/pod{UID}/{ID}"),
                container(Runtime::Unknown, Some(UID), Some(Qos::BestEffort)),
            ),
            (
                format!("/kubepods/burstable/pod{UID}/libpod-{ID}"),
                container(Runtime::Podman, Some(UID), Some(Qos::Burstable)),
            ),
            (format!("/kubepods/pod{UID}/crio-{ID}"), container(Runtime::CriO, Some(UID), Some(Qos::Guaranteed))),
            (
                format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{under_scored}.slice/cri-containerd-{ID}.scope"
                ),
                container(Runtime::Containerd, Some(UID), Some(Qos::Burstable)),
            ),
            (
                format!("/kubepods.slice/kubepods-pod{under_scored}.slice/crio-{ID}.scope"),
                container(Runtime::CriO, Some(UID), Some(Qos::Guaranteed)),
            ),
            (format!("/libpod_parent/libpod-{ID}"), container(Runtime::Podman, None, None)),
            (format!("/libpod_parent/{}/libpod-{ID}", "f".repeat(64)), container(Runtime::Podman, None, None)),
            (format!("/machine.slice/libpod-{ID}.scope"), container(Runtime::Podman, None, None)),
            (format!("/docker/{ID}"), container(Runtime::Docker, None, None)),
            (format!("/system.slice/docker-{ID}.scope"), container(Runtime::Docker, None, None)),
            (format!("/default/{ID}"), container(Runtime::Unknown, None, None)),
            (
                format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{under_scored}.slice/crio-{ID}.scope/container"
                ),
                container(Runtime::CriO, Some(UID), Some(Qos::Burstable)),
            ),
            (format!("/machine.slice/libpod-{ID}.scope/container"), container(Runtime::Podman, None, None)),
        ];
        for (path, want) in cases {
            assert_eq!(identify(&path), want, "{path}");
        }
    }

    #[test]
    fn pod_level_and_host_cgroups_are_not_containers() {
        let pod = identify(&format!("/kubepods/besteffort/pod{UID}"));
        assert_eq!(pod.pod_uid.as_deref(), Some(UID));
        assert!(!pod.is_container());
        for path in [
            "/",
            "",
            "/system.slice/sshd.service",
            "/libpod_parent/conmon",
            &format!("/machine.slice/libpod-conmon-{ID}.scope"),
            &format!("/system.slice/crio-conmon-{ID}.scope"),
            "/kubepods/besteffort",
            "/system.slice/foo.scope/container",
            &format!("/kubepods/pod{UID}/crio-{ID}/container"),
            &format!("/machine.slice/libpod-conmon-{ID}.scope/container"),
        ] {
            assert!(!identify(path).is_container(), "{path}");
        }
    }

    #[test]
    fn hostile_names_are_not_taken_for_ids() {
        for path in [
            format!("/docker/{}", ID.to_uppercase()),
            format!("/docker/{}", &ID[..63]),
            format!("/docker/{ID}0"),
            format!("/x/libpod-{ID}/../evil"),
            format!("/kubepods/pod{}/{ID}", "z".repeat(8)),
        ] {
            let id = identify(&path);
            assert!(
                id.pod_uid.is_none()
                    || id.pod_uid.as_deref().is_some_and(|u| u.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')),
                "{path}"
            );
            if let Some(cid) = id.container_id {
                assert!(is_hex64(&cid), "{path}: {cid}");
            }
        }
        assert!(!identify(&format!("/docker/{}", ID.to_uppercase())).is_container());
        assert!(identify(&format!("/kubepods/pod{}/{ID}", "z".repeat(8))).pod_uid.is_none());
    }
}
