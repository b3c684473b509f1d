//! A DaemonSet's pod template run for real: `podman kube play` runs Pods, not DaemonSets, so the
//! template is lifted into a Pod of the test's own name, verbatim otherwise (securityContext,
//! seccomp profile, hostPID, read-only mounts, probes, ports), with the test's image and the
//! seccomp annotation podman reads in place of `localhostProfile`. In: the
//! manifest's text; out: the running pod, removed with `podman kube down` when the guard goes, and
//! the host directories its `DirectoryOrCreate` mounts made removed too.
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use super::Podman;

/// `spec.template` of a DaemonSet (at two spaces, its body at four) → a Pod named `name` running
/// `image` in place of the manifest's.
pub fn pod_from_daemonset(daemonset: &str, name: &str, image: &str) -> anyhow::Result<String> {
    let start = daemonset.find("\n  template:\n").context("no spec.template")? + "\n  template:\n".len();
    let mut body = Vec::new();
    for line in daemonset[start..].lines() {
        if line.trim().is_empty() {
            body.push("");
        } else if let Some(inner) = line.strip_prefix("    ") {
            body.push(inner);
        } else {
            break;
        }
    }
    let mut pod = format!("apiVersion: v1\nkind: Pod\n{}\n", body.join("\n"));
    if !pod.contains("\nmetadata:\n") || !pod.contains("\nspec:\n") {
        bail!("the template has no metadata or spec");
    }
    pod = pod.replacen("\nmetadata:\n", &format!("\nmetadata:\n  name: {name}\n"), 1);
    let images: Vec<&str> = pod.lines().filter(|l| l.trim_start().starts_with("image: ")).collect();
    let [old] = images[..] else { bail!("expected one container image, found {images:?}") };
    let indent = &old[..old.len() - old.trim_start().len()];
    let pod = pod.replacen(old, &format!("{indent}image: {image}"), 1);
    Ok(with_seccomp_annotation(&with_node_name(&pod)))
}

/// A pod played by podman has no node: a variable from the downward API's `spec.nodeName`
/// (which podman 4.3 refuses) gets this host's name as a plain value instead.
fn with_node_name(pod: &str) -> String {
    const FROM: &str = "valueFrom:\n{i}  fieldRef:\n{i}    fieldPath: spec.nodeName\n";
    let mut out = pod.to_owned();
    for line in pod.lines().filter(|l| l.trim() == "valueFrom:") {
        let indent = &line[..line.len() - line.trim_start().len()];
        let block = FROM.replace("{i}", indent);
        if let Some(at) = out.find(&format!("{indent}{block}")) {
            let node = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            let value = format!("{indent}value: \"{}\"\n", node.trim());
            out.replace_range(at..at + indent.len() + block.len(), &value);
        }
    }
    out
}

/// podman kube play (4.3) reads a Localhost seccomp profile only from the deprecated annotation,
/// which the shipped manifests leave out: the container's `localhostProfile` becomes the pod's
/// `seccomp.security.alpha.kubernetes.io/pod: localhost/<profile>` here, for the test alone.
fn with_seccomp_annotation(pod: &str) -> String {
    let Some(profile) = pod.lines().find_map(|l| l.trim().strip_prefix("localhostProfile: ")) else {
        return pod.to_owned();
    };
    let line = format!("    seccomp.security.alpha.kubernetes.io/pod: localhost/{}\n", profile.trim());
    match pod.find("\nmetadata:\n").and_then(|m| pod[m..].find("\n  annotations:\n").map(|a| m + a)) {
        Some(at) => {
            let at = at + "\n  annotations:\n".len();
            format!("{}{line}{}", &pod[..at], &pod[at..])
        }
        None => pod.replacen("\nspec:\n", &format!("\n  annotations:\n{line}spec:\n"), 1),
    }
}

/// A pod run by `podman kube play`, torn down on drop.
#[derive(Debug)]
pub struct KubePod<'a> {
    podman: &'a Podman,
    yaml: PathBuf,
    /// Host directories that did not exist before (a `DirectoryOrCreate` mount makes them).
    made: Vec<PathBuf>,
}

impl<'a> KubePod<'a> {
    /// Plays `pod` (YAML text) with Localhost seccomp profiles under `seccomp_root`. `host_dirs`
    /// are the manifest's hostPath directories: those missing now are removed again on drop.
    pub fn play(podman: &'a Podman, pod: &str, seccomp_root: &Path, host_dirs: &[&str]) -> anyhow::Result<KubePod<'a>> {
        let made = host_dirs.iter().map(PathBuf::from).filter(|d| !d.exists()).collect();
        let yaml = podman.scratch_file("pod.yaml");
        std::fs::write(&yaml, pod).context("writing the pod")?;
        let guard = KubePod { podman, yaml, made };
        podman.podman(&["kube", "play", "--seccomp-profile-root", &seccomp_root.to_string_lossy(), &guard.path()])?;
        Ok(guard)
    }

    fn path(&self) -> String {
        self.yaml.to_string_lossy().into_owned()
    }
}

impl Drop for KubePod<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.podman.podman(&["kube", "down", &self.path()]) {
            eprintln!("podman kube down {}: {e:#}", self.path());
        }
        for dir in &self.made {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_name_from_the_downward_api_becomes_a_value() {
        let pod = "      env:\n        - name: K8S_NODE_NAME\n          valueFrom:\n            fieldRef:\n              fieldPath: spec.nodeName\n        - name: B\n          value: b\n";
        let out = with_node_name(pod);
        assert!(!out.contains("spec.nodeName") && out.contains("          value: \""), "{out}");
        assert!(out.ends_with("        - name: B\n          value: b\n"), "{out}");
        assert_eq!(with_node_name("a: b\n"), "a: b\n");
    }

    #[test]
    fn the_template_becomes_a_pod() {
        let ds = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: d\nspec:\n  selector:\n    matchLabels:\n      a: b\n  template:\n    metadata:\n      labels:\n        a: b\n    spec:\n      hostPID: true\n      containers:\n        - name: c\n          image: x:1\n\n          args: [\"run\"]\n";
        let pod = pod_from_daemonset(ds, "p", "y:2").unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(
            pod,
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels:\n    a: b\nspec:\n  hostPID: true\n  containers:\n    - name: c\n      image: y:2\n\n      args: [\"run\"]\n"
        );
        assert!(pod_from_daemonset("kind: Pod\n", "p", "y").is_err());
        let confined = ds.replace(
            "          image: x:1\n",
            "          image: x:1\n          securityContext:\n            seccompProfile:\n              type: Localhost\n              localhostProfile: prof.json\n",
        );
        let pod = pod_from_daemonset(&confined, "p", "y:2").unwrap_or_else(|e| panic!("{e:#}"));
        assert!(
            pod.contains("\n  labels:\n    a: b\n  annotations:\n    seccomp.security.alpha.kubernetes.io/pod: localhost/prof.json\nspec:\n"),
            "{pod}"
        );
    }
}
