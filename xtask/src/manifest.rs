//! The head of a Kubernetes object that a generator writes for the shipped manifests: its
//! comment, apiVersion and kind in; out, the YAML up to `spec:` with the name, namespace and
//! app label that every object of deploy/kubernetes carries.

/// `comment` (whole `# ` lines), then apiVersion, kind, the daemon's metadata and `spec:`.
pub fn head(comment: &str, api_version: &str, kind: &str) -> String {
    format!(
        "{comment}apiVersion: {api_version}
kind: {kind}
metadata:
  name: latency-daemon
  namespace: latency-daemon
  labels:
    app.kubernetes.io/name: latency-daemon
spec:
"
    )
}
