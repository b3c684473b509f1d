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
