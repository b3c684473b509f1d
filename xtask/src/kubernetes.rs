//! `cargo xtask kubernetes`: the same as `cargo xtask mixin`, which generates the
//! prometheus-operator component's PrometheusRule. The tests below validate every manifest offline
//! against Kubernetes' own schemas (kubernetes-validate --strict, oldest and newest version it has).
/// The PrometheusRule is generated from the mixin now: `cargo xtask mixin`.
pub fn run() -> anyhow::Result<()> {
    crate::dashboard::run()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::process::Command;

    use latency_lab::guard::Scratch;

    use crate::setup::python;
    use crate::workspace_root;

    fn path(rel: &str) -> PathBuf {
        workspace_root().join(rel)
    }

    fn read(rel: &str) -> String {
        std::fs::read_to_string(path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    #[test]
    fn every_manifest_is_valid_kubernetes() {
        let dir = path("deploy/kubernetes");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{e:#}"))
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        assert!(files.len() >= 5, "{files:?}");
        let tool = python::kubernetes_validate();
        for version in ["1.25.0", "1.37.0"] {
            let out = Command::new(&tool)
                .args(["--strict", "--kubernetes-version", version])
                .args(&files)
                .output()
                .unwrap_or_else(|e| panic!("{}: {e} (cargo xtask setup installs it)", tool.display()));
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success() && !text.contains("ERROR"), "Kubernetes {version}:\n{text}");
            // The built-in kinds must really have been checked (CRDs only warn: no schema).
            for kind in ["daemonset/latency-daemon", "service/latency-daemon", "namespace/latency-daemon"] {
                assert!(text.contains(&format!("passed for resource {kind}")), "Kubernetes {version}:\n{text}");
            }
        }
    }

    #[test]
    fn a_broken_manifest_is_caught() {
        let scratch = Scratch::new("runqlat-kube").unwrap_or_else(|e| panic!("{e:#}"));
        let bad = scratch.join("bad.yaml");
        let daemonset = read("deploy/kubernetes/daemonset.yaml").replace("add: [\"BPF\", \"PERFMON\"]", "add: BPF");
        std::fs::write(&bad, daemonset).unwrap_or_else(|e| panic!("{e:#}"));
        let out = Command::new(python::kubernetes_validate())
            .arg("--strict")
            .arg(&bad)
            .output()
            .unwrap_or_else(|e| panic!("{e:#}"));
        assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    }
}
