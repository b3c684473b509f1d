use std::{fs, path::PathBuf, time::Instant};

use super::*;

const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const UID: &str = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

/// A fake host root in the temp dir, removed on drop.
struct Root(PathBuf);

impl Root {
    fn new(tag: &str) -> Root {
        let dir = std::env::temp_dir().join(format!("latency-daemon-containers-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Root(dir)
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.0.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn config(annotations: &[(&str, &str)]) -> String {
    let map: serde_json::Map<String, serde_json::Value> =
        annotations.iter().map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v))).collect();
    serde_json::json!({ "ociVersion": "1.0.2", "process": { "args": ["/spin"] }, "annotations": map }).to_string()
}

#[test]
fn containerd_cri_pod_from_its_bundle() {
    let root = Root::new("cri");
    root.write(
        &format!("run/containerd/io.containerd.runtime.v2.task/k8s.io/{ID}/config.json"),
        &config(&[
            ("io.kubernetes.cri.container-type", "container"),
            ("io.kubernetes.cri.container-name", "victim"),
            ("io.kubernetes.cri.sandbox-name", "cripod"),
            ("io.kubernetes.cri.sandbox-namespace", "crins"),
        ]),
    );
    let mut names = ContainerNames::new(root.0.clone());
    let got = names.resolve(&format!("/kubepods/besteffort/pod{UID}/{ID}"), Instant::now());
    assert_eq!(
        got,
        ContainerLabels {
            namespace: "crins".into(),
            pod: "cripod".into(),
            container: "victim".into(),
            container_id: ID.into()
        }
    );
    assert_eq!(names.unresolved_total(), 0);
}

#[test]
fn sandbox_is_pod_and_podman_annotations_are_read() {
    let root = Root::new("podman");
    root.write(
        &format!("run/containerd/io.containerd.runtime.v2.task/k8s.io/{ID}/config.json"),
        &config(&[
            ("io.kubernetes.cri.container-type", "sandbox"),
            ("io.kubernetes.cri.sandbox-name", "p"),
            ("io.kubernetes.cri.sandbox-namespace", "n"),
        ]),
    );
    let other = ID.replace('0', "f");
    root.write(
        &format!("var/lib/containers/storage/overlay-containers/{other}/userdata/config.json"),
        &config(&[
            ("io.kubernetes.pod.name", "victim-pod"),
            ("io.kubernetes.pod.namespace", "testns"),
            ("io.kubernetes.container.name", "victim"),
        ]),
    );
    let mut names = ContainerNames::new(root.0.clone());
    let now = Instant::now();
    assert_eq!(names.resolve(&format!("/kubepods/pod{UID}/{ID}"), now).container, "POD");
    let podman = names.resolve(&format!("/libpod_parent/libpod-{other}"), now);
    assert_eq!(
        (podman.namespace.as_str(), podman.pod.as_str(), podman.container.as_str()),
        ("testns", "victim-pod", "victim")
    );
}

#[test]
fn runc_state_labels_are_a_fallback_and_unnamed_containers_get_their_short_id() {
    let root = Root::new("runc");
    root.write(
        &format!("run/runc/{ID}/state.json"),
        &serde_json::json!({ "id": ID, "config": { "labels": ["io.kubernetes.pod.name=web-0", "bundle=/x", "novalue"] } })
            .to_string(),
    );
    let mut names = ContainerNames::new(root.0.clone());
    let got = names.resolve(&format!("/docker/{ID}"), Instant::now());
    assert_eq!((got.pod.as_str(), got.container.as_str()), ("web-0", &ID[..12]));
}

#[test]
fn misses_are_counted_retried_later_and_not_containers_cost_nothing() {
    let root = Root::new("miss");
    let mut names = ContainerNames::new(root.0.clone()).with_limits(16, Duration::from_secs(2));
    let t0 = Instant::now();
    let path = format!("/libpod_parent/libpod-{ID}");

    assert_eq!(names.resolve("/system.slice/sshd.service", t0), ContainerLabels::default());
    assert_eq!(names.unresolved_total(), 0);

    let first = names.resolve(&path, t0);
    assert_eq!((first.container.as_str(), first.container_id.as_str(), first.pod.as_str()), (&ID[..12], ID, ""));
    assert_eq!(names.unresolved_total(), 1);
    // Before the retry time: served from the cache, not counted again.
    names.resolve(&path, t0 + Duration::from_secs(1));
    assert_eq!(names.unresolved_total(), 1);

    // The config appears; the next lookup after the retry time finds it.
    root.write(
        &format!("var/lib/containers/storage/overlay-containers/{ID}/userdata/config.json"),
        &config(&[("io.kubernetes.pod.name", "late")]),
    );
    assert_eq!(names.resolve(&path, t0 + Duration::from_secs(3)).pod, "late");
    assert_eq!(names.unresolved_total(), 1);

    names.forget(&path);
    assert_eq!(names.cached(), 0);
}

#[test]
fn the_cache_is_bounded() {
    let root = Root::new("bound");
    let mut names = ContainerNames::new(root.0.clone()).with_limits(8, Duration::from_secs(60));
    let t0 = Instant::now();
    for i in 0..100u32 {
        let id = format!("{:064x}", u128::from(i) + 1);
        names.resolve(&format!("/docker/{id}"), t0 + Duration::from_millis(u64::from(i)));
        assert!(names.cached() <= 8);
    }
}

#[test]
fn hostile_configs_are_skipped_not_trusted() {
    let root = Root::new("hostile");
    let dir = root.0.join(format!("var/lib/containers/storage/overlay-containers/{ID}/userdata"));
    fs::create_dir_all(&dir).unwrap();
    // A FIFO where the config should be: must not block.
    let fifo = dir.join("config.json");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // An oversized config for another id.
    let big = ID.replace('1', "e");
    root.write(
        &format!("var/lib/containers/storage/overlay-containers/{big}/userdata/config.json"),
        &format!("{{\"annotations\":{{\"io.kubernetes.pod.name\":\"{}\"}}}}", "x".repeat(2 << 20)),
    );
    // Malformed JSON for a third.
    let bad = ID.replace('2', "d");
    root.write(&format!("var/lib/containers/storage/overlay-containers/{bad}/userdata/config.json"), "{not json");

    let mut names = ContainerNames::new(root.0.clone());
    for id in [ID.to_owned(), big, bad] {
        let got = names.resolve(&format!("/libpod_parent/libpod-{id}"), Instant::now());
        assert_eq!(got.pod, "", "{id}");
        assert_eq!(got.container_id, id);
    }
    assert_eq!(names.unresolved_total(), 3);
}

#[test]
fn hostile_annotations_are_bounded_and_lose_control_characters() {
    let root = Root::new("names");
    let long = "p".repeat(10_000);
    root.write(
        &format!("var/lib/containers/storage/overlay-containers/{ID}/userdata/config.json"),
        &config(&[("io.kubernetes.pod.name", &long), ("io.kubernetes.pod.namespace", "ns\n\u{1b}[31m\"x")]),
    );
    let mut names = ContainerNames::new(root.0.clone());
    let got = names.resolve(&format!("/libpod_parent/libpod-{ID}"), Instant::now());
    assert_eq!(got.pod.len(), 253);
    assert_eq!(got.namespace, "ns[31m\"x", "quotes stay: each output escapes its own way");
    // A removed container's names are forgotten.
    names.forget(&format!("/libpod_parent/libpod-{ID}"));
    assert_eq!(names.cached(), 0);
}

// One test per runtime layout: the files as each runtime writes them (names, nesting, keys), and the cgroup
// paths its cgroup drivers give the container.

const UID_SYSTEMD: &str = "aaaaaaaa_bbbb_cccc_dddd_eeeeeeeeeeee";

fn names_of(got: &ContainerLabels) -> (&str, &str, &str) {
    (got.namespace.as_str(), got.pod.as_str(), got.container.as_str())
}

/// containerd's CRI plugin: the bundle of the `k8s.io` namespace, as `ctr`/`crictl inspect` show its spec.
fn containerd_config(kind: &str, container: &str, passthrough: &[(&str, &str)]) -> String {
    let mut annotations = vec![
        ("io.kubernetes.cri.container-type", kind),
        ("io.kubernetes.cri.sandbox-id", "f00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeed"),
        ("io.kubernetes.cri.sandbox-name", "web-0"),
        ("io.kubernetes.cri.sandbox-namespace", "shop"),
        ("io.kubernetes.cri.sandbox-uid", UID),
        ("io.kubernetes.cri.image-name", "registry.k8s.io/pause:3.9"),
    ];
    if kind == "container" {
        annotations.push(("io.kubernetes.cri.container-name", container));
    } else {
        annotations.push(("io.kubernetes.cri.sandbox-log-directory", "/var/log/pods/shop_web-0_x"));
    }
    annotations.extend_from_slice(passthrough);
    config(&annotations)
}

#[test]
fn containerd_systemd_driver_and_its_sandbox() {
    let root = Root::new("containerd-systemd");
    let sandbox = ID.replace('a', "0");
    root.write(
        &format!("run/containerd/io.containerd.runtime.v2.task/k8s.io/{ID}/config.json"),
        &containerd_config("container", "app", &[]),
    );
    root.write(
        &format!("run/containerd/io.containerd.runtime.v2.task/k8s.io/{sandbox}/config.json"),
        &containerd_config("sandbox", "", &[]),
    );
    // Another containerd namespace beside it (docker's `moby`, `ctr`'s `default`) is looked in too.
    let other = ID.replace('b', "0");
    root.write(
        &format!("run/containerd/io.containerd.runtime.v2.task/default/{other}/config.json"),
        &config(&[("io.kubernetes.pod.name", "by-hand")]),
    );
    let pod = format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice");
    let mut names = ContainerNames::new(root.0.clone());
    let now = Instant::now();
    let app = names.resolve(&format!("{pod}/cri-containerd-{ID}.scope"), now);
    assert_eq!(names_of(&app), ("shop", "web-0", "app"));
    assert_eq!(app.container_id, ID);
    assert_eq!(
        names_of(&names.resolve(&format!("{pod}/cri-containerd-{sandbox}.scope"), now)),
        ("shop", "web-0", "POD")
    );
    assert_eq!(names.resolve(&format!("/default/{other}"), now).pod, "by-hand");
    assert_eq!(names.unresolved_total(), 0);
}

#[test]
fn containerd_keys_win_over_a_pods_passed_through_annotations() {
    // With `pod_annotations = ["*"]` a pod's own annotations reach the spec, but containerd writes its
    // io.kubernetes.cri.* keys after them: those name the pod.
    let root = Root::new("containerd-passthrough");
    root.write(
        &format!("run/containerd/io.containerd.runtime.v2.task/k8s.io/{ID}/config.json"),
        &containerd_config(
            "container",
            "app",
            &[("io.kubernetes.pod.namespace", "kube-system"), ("io.kubernetes.pod.name", "kube-apiserver")],
        ),
    );
    let mut names = ContainerNames::new(root.0.clone());
    assert_eq!(names_of(&names.resolve(&format!("/kubepods/pod{UID}/{ID}"), Instant::now())), ("shop", "web-0", "app"));
}

#[test]
fn k3s_and_rke2_state_under_run_k3s_containerd() {
    // Both embed k3s's agent, whose containerd has `state = "/run/k3s/containerd"` whatever the data dir.
    let root = Root::new("k3s");
    root.write(
        &format!("run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/{ID}/config.json"),
        &containerd_config("container", "app", &[]),
    );
    let sandbox = ID.replace('c', "0");
    root.write(
        &format!("run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/{sandbox}/config.json"),
        &containerd_config("sandbox", "", &[]),
    );
    let mut names = ContainerNames::new(root.0.clone());
    let now = Instant::now();
    // k3s's default cgroupfs driver: the bare id under the pod; and the systemd driver.
    for path in [
        format!("/kubepods/burstable/pod{UID}/{ID}"),
        format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice/cri-containerd-{ID}.scope"
        ),
    ] {
        names.forget(&path);
        assert_eq!(names_of(&names.resolve(&path, now)), ("shop", "web-0", "app"), "{path}");
    }
    assert_eq!(names_of(&names.resolve(&format!("/kubepods/burstable/pod{UID}/{sandbox}"), now)).2, "POD");
    assert_eq!(names.unresolved_total(), 0);
}

/// CRI-O's spec: its own io.kubernetes.cri-o.* annotations, the pod's annotations copied in, then the
/// kubelet's CRI labels as annotations (added last, so a pod annotation of the same key loses).
fn crio_config(kind: &str, container: &str) -> String {
    let labels = serde_json::json!({
        "io.kubernetes.container.name": container,
        "io.kubernetes.pod.name": "web-0",
        "io.kubernetes.pod.namespace": "shop",
        "io.kubernetes.pod.uid": UID,
    })
    .to_string();
    let mut annotations = vec![
        ("io.kubernetes.cri-o.ContainerType", kind),
        ("io.kubernetes.cri-o.ContainerID", ID),
        ("io.kubernetes.cri-o.Labels", labels.as_str()),
        ("io.kubernetes.cri-o.SandboxName", "k8s_web-0_shop_aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee_0"),
        ("io.kubernetes.cri-o.LogPath", "/var/log/pods/shop_web-0_x/app/0.log"),
        // A pod annotation, copied in by CRI-O: another runtime's key must not name the pod here.
        ("io.kubernetes.cri.sandbox-namespace", "kube-system"),
        ("io.kubernetes.pod.namespace", "shop"),
        ("io.kubernetes.pod.name", "web-0"),
        ("io.kubernetes.pod.uid", UID),
        ("io.kubernetes.container.name", container),
    ];
    if kind == "sandbox" {
        annotations.extend([("io.kubernetes.cri-o.Namespace", "shop"), ("io.kubernetes.cri-o.KubeName", "web-0")]);
    }
    config(&annotations)
}

#[test]
fn crio_run_root_every_storage_driver_and_cgroup_form() {
    let root = Root::new("crio");
    root.write(
        &format!("run/containers/storage/overlay-containers/{ID}/userdata/config.json"),
        &crio_config("container", "app"),
    );
    let sandbox = ID.replace('d', "0");
    root.write(
        &format!("run/containers/storage/overlay-containers/{sandbox}/userdata/config.json"),
        &crio_config("sandbox", "POD"),
    );
    // Storage's other directories are not containers' (`overlay-images` holds image ids).
    let image = ID.replace('e', "0");
    root.write(
        &format!("run/containers/storage/overlay-images/{image}/userdata/config.json"),
        &crio_config("container", "no"),
    );
    // Another storage driver: `<driver>-containers`.
    let vfs = ID.replace('f', "0");
    root.write(
        &format!("run/containers/storage/vfs-containers/{vfs}/userdata/config.json"),
        &crio_config("container", "vfs"),
    );

    let pod = format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice");
    let mut names = ContainerNames::new(root.0.clone());
    let now = Instant::now();
    // CRI-O's default systemd driver with runc, then with crun (its default runtime: a `container` child),
    // then the cgroupfs driver.
    for path in [
        format!("{pod}/crio-{ID}.scope"),
        format!("{pod}/crio-{ID}.scope/container"),
        format!("/kubepods/burstable/pod{UID}/crio-{ID}"),
    ] {
        names.forget(&path);
        assert_eq!(names_of(&names.resolve(&path, now)), ("shop", "web-0", "app"), "{path}");
    }
    assert_eq!(names_of(&names.resolve(&format!("{pod}/crio-{sandbox}.scope"), now)), ("shop", "web-0", "POD"));
    assert_eq!(names.resolve(&format!("{pod}/crio-{vfs}.scope"), now).container, "vfs");
    assert_eq!(names.resolve(&format!("{pod}/crio-{image}.scope"), now).pod, "");
    assert_eq!(names.unresolved_total(), 1);
    // conmon's scope beside each container is not one.
    assert_eq!(names.resolve(&format!("{pod}/crio-conmon-{ID}.scope"), now), ContainerLabels::default());
}

#[test]
fn crio_graph_root_copy_is_read_when_the_run_root_is_not_mounted() {
    let root = Root::new("crio-graph");
    root.write(
        &format!("var/lib/containers/storage/overlay-containers/{ID}/userdata/config.json"),
        &crio_config("container", "app"),
    );
    let mut names = ContainerNames::new(root.0.clone());
    let got =
        names.resolve(&format!("/kubepods.slice/kubepods-pod{UID_SYSTEMD}.slice/crio-{ID}.scope"), Instant::now());
    assert_eq!(names_of(&got), ("shop", "web-0", "app"));
}

/// dockerd's record of a container cri-dockerd created: the kubelet's CRI labels in `Config.Labels`, the pod's
/// annotations there too under `annotation.`.
fn docker_config(id: &str, kind: &str, container: &str) -> String {
    serde_json::json!({
        "StreamConfig": {},
        "State": { "Running": true, "Pid": 4242, "StartedAt": "2026-12-04T06:00:00Z" },
        "ID": id,
        "Created": "2026-12-04T06:00:00Z",
        "Path": "/spin",
        "Args": [],
        "Config": {
            "Hostname": "web-0",
            "Env": ["PATH=/usr/bin"],
            "Image": "sha256:feed",
            "Labels": {
                "annotation.io.kubernetes.container.hash": "1d2f3a4b",
                "annotation.io.kubernetes.pod.namespace": "kube-system",
                "io.kubernetes.container.logpath": "/var/log/pods/shop_web-0_x/app/0.log",
                "io.kubernetes.container.name": container,
                "io.kubernetes.docker.type": kind,
                "io.kubernetes.pod.name": "web-0",
                "io.kubernetes.pod.namespace": "shop",
                "io.kubernetes.pod.uid": UID,
                "io.kubernetes.sandbox.id": "f00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeed"
            }
        },
        "Name": format!("/k8s_{container}_web-0_shop_{UID}_0"),
        "Driver": "overlay2",
        "HostnamePath": format!("/var/lib/docker/containers/{id}/hostname"),
    })
    .to_string()
}

#[test]
fn docker_with_cri_dockerd_named_from_config_v2_json() {
    let root = Root::new("docker");
    root.write(&format!("var/lib/docker/containers/{ID}/config.v2.json"), &docker_config(ID, "container", "app"));
    // dockerd's own OCI bundle for the same container: annotations only, no pod names.
    root.write(
        &format!("run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/{ID}/config.json"),
        &config(&[]),
    );
    let sandbox = ID.replace('1', "0");
    root.write(
        &format!("var/lib/docker/containers/{sandbox}/config.v2.json"),
        &docker_config(&sandbox, "podsandbox", "POD"),
    );
    // A plain docker container (no kubelet): known, by its short id.
    let plain = ID.replace('2', "0");
    root.write(
        &format!("run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/{plain}/config.json"),
        &config(&[]),
    );
    root.write(
        &format!("var/lib/docker/containers/{plain}/config.v2.json"),
        &serde_json::json!({ "ID": plain, "Config": { "Labels": null }, "Name": "/web" }).to_string(),
    );

    let mut names = ContainerNames::new(root.0.clone());
    let now = Instant::now();
    // cri-dockerd with the cgroupfs driver (the bare id under the pod), and with the systemd driver.
    for path in [
        format!("/kubepods/besteffort/pod{UID}/{ID}"),
        format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_SYSTEMD}.slice/docker-{ID}.scope"
        ),
    ] {
        names.forget(&path);
        assert_eq!(names_of(&names.resolve(&path, now)), ("shop", "web-0", "app"), "{path}");
    }
    assert_eq!(names_of(&names.resolve(&format!("/kubepods/besteffort/pod{UID}/{sandbox}"), now)).2, "POD");
    let got = names.resolve(&format!("/system.slice/docker-{plain}.scope"), now);
    assert_eq!(names_of(&got), ("", "", &plain[..12]));
    assert_eq!(names.unresolved_total(), 0);
}

#[test]
fn the_host_root_prefixes_every_runtime_path() {
    // --path.rootfs=/host/root: the runtimes' state is read below it, never at the daemon's own /run.
    let root = Root::new("rootfs");
    root.write(
        &format!("host/root/run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/{ID}/config.json"),
        &containerd_config("container", "app", &[]),
    );
    let path = format!("/kubepods/pod{UID}/{ID}");
    assert_eq!(ContainerNames::new(root.0.clone()).resolve(&path, Instant::now()).pod, "");
    assert_eq!(ContainerNames::new(root.0.join("host/root")).resolve(&path, Instant::now()).pod, "web-0");
}

#[test]
fn the_runtimes_seen_are_those_with_a_listable_container_directory() {
    let root = Root::new("seen");
    assert!(runtimes_seen(&root.0).is_empty(), "nothing mounted");
    // The DaemonSet's DirectoryOrCreate mounts leave empty state directories where a runtime is absent.
    fs::create_dir_all(root.0.join("run/containerd")).unwrap();
    fs::create_dir_all(root.0.join("run/containers/storage")).unwrap();
    assert!(runtimes_seen(&root.0).is_empty(), "empty state directories");
    root.write(
        &format!("run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/{ID}/config.json"),
        &containerd_config("container", "app", &[]),
    );
    root.write(
        &format!("run/containers/storage/overlay-containers/{ID}/userdata/config.json"),
        &crio_config("container", "app"),
    );
    root.write(&format!("var/lib/docker/containers/{ID}/config.v2.json"), &docker_config(ID, "container", "app"));
    let seen: Vec<(&str, PathBuf)> = runtimes_seen(&root.0);
    assert_eq!(
        seen,
        [
            ("k3s/RKE2 containerd", root.0.join("run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io")),
            ("CRI-O/podman", root.0.join("run/containers/storage/overlay-containers")),
            ("dockerd", root.0.join("var/lib/docker/containers")),
        ]
    );
}
