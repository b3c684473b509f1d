//! Tests only: deploy/kubernetes as users apply it: every shipped kustomization (the default route, the base,
//! each overlay) and the own-kustomization example of docs/kubernetes.md in, rendered by kustomize
//! 5.6; out: each rendering checked offline against Kubernetes' own schemas (kubernetes-validate
//! --strict, the oldest and newest version it has) and by checkov, with zero failed checks.
use std::path::{Path, PathBuf};
use std::process::Command;

use latency_lab::guard::Scratch;
use serde_json::Value;

use crate::setup::{python, trixie};
use crate::workspace_root;

/// What `kubectl apply -k` is pointed at, as shipped.
const SHIPPED: &[&str] = &[
    "deploy/kubernetes",
    "deploy/kubernetes/base",
    "deploy/kubernetes/overlays/kube-prometheus-stack",
    "deploy/kubernetes/overlays/security-profiles-operator",
];

/// The docs' example of a kustomization of the user's own: the first yaml block of this section,
/// whose paths start with CLONE (a clone of this repository beside it).
const DOCS: &str = "docs/kubernetes.md";
const OWN_SECTION: &str = "\n## Your own kustomization\n";
const CLONE: &str = "../latency-daemon/";
/// Stands in for the user's web-config.yml beside it.
const WEB_CONFIG: &str = "deploy/kubernetes/components/web-auth/web-config.example.yml";

/// Kinds whose schema is not Kubernetes' (kubernetes-validate has none and warns): their CRDs
/// come with prometheus-operator and the Security Profiles Operator, not available offline here.
/// Their fields are checked where they matter: the ServiceMonitor/PodMonitor relabelings against a
/// real Prometheus in the daemon's tests, the SeccompProfile against the shipped profile
/// (seccomp_spo's drift test).
const CUSTOM: &[(&str, &str)] = &[
    ("ServiceMonitor", "monitoring.coreos.com/v1"),
    ("PodMonitor", "monitoring.coreos.com/v1"),
    ("PrometheusRule", "monitoring.coreos.com/v1"),
    ("SeccompProfile", "security-profiles-operator.x-k8s.io/v1beta1"),
];

/// The oldest and the newest Kubernetes kubernetes-validate 1.37 has schemas for.
const VERSIONS: [&str; 2] = ["1.25.0", "1.37.0"];

fn path(rel: &str) -> PathBuf {
    workspace_root().join(rel)
}

/// One kustomization's output, written to the scratch directory.
struct Rendered {
    name: String,
    file: PathBuf,
    text: String,
}

fn kustomize_build(dir: &Path) -> Result<String, String> {
    let tool = trixie::KUSTOMIZE.binary();
    let out = Command::new(&tool)
        .arg("build")
        .arg(dir)
        .output()
        .map_err(|e| format!("{}: {e} (cargo xtask setup unpacks it)", tool.display()))?;
    if !out.status.success() {
        return Err(format!("kustomize build {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The docs' own kustomization, as written.
fn own_kustomization() -> String {
    let docs = std::fs::read_to_string(path(DOCS)).unwrap_or_else(|e| panic!("{DOCS}: {e}"));
    let section = docs.split_once(OWN_SECTION).unwrap_or_else(|| panic!("{DOCS} has no {OWN_SECTION:?}")).1;
    let block = section.split_once("```yaml\n").and_then(|(_, b)| b.split_once("```")).map(|(b, _)| b);
    let block = block.unwrap_or_else(|| panic!("{DOCS}: no yaml block under {OWN_SECTION:?}"));
    assert!(block.contains(CLONE), "the example's paths start with {CLONE}");
    block.to_owned()
}

/// A kustomization of the user's own in `scratch/<name>`, beside a clone of this repository at
/// `scratch/latency-daemon` (a symbolic link to this work tree; kustomize takes no absolute paths).
fn own_dir(scratch: &Scratch, name: &str, kustomization: &str) -> PathBuf {
    let clone = scratch.join(CLONE.trim_start_matches("../").trim_end_matches('/'));
    if !clone.exists() {
        std::os::unix::fs::symlink(workspace_root(), &clone).unwrap_or_else(|e| panic!("{e:#}"));
    }
    let dir = scratch.join(name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e:#}"));
    std::fs::write(dir.join("kustomization.yaml"), kustomization).unwrap_or_else(|e| panic!("{e:#}"));
    // The user's own web configuration, which the docs' example generates its Secret from.
    std::fs::copy(path(WEB_CONFIG), dir.join("web-config.yml")).unwrap_or_else(|e| panic!("{e:#}"));
    dir
}

/// Every shipped kustomization and the docs' example, rendered into `scratch`.
fn render_all(scratch: &Scratch) -> Vec<Rendered> {
    let own = own_dir(scratch, "own", &own_kustomization());
    let mut dirs: Vec<(String, PathBuf)> = SHIPPED.iter().map(|rel| ((*rel).to_owned(), path(rel))).collect();
    dirs.push((format!("{DOCS} ({})", OWN_SECTION.trim()), own));
    dirs.into_iter()
        .enumerate()
        .map(|(i, (name, dir))| {
            let text = kustomize_build(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
            let file = scratch.join(&format!("rendered-{i}.yaml"));
            std::fs::write(&file, &text).unwrap_or_else(|e| panic!("{e:#}"));
            Rendered { name, file, text }
        })
        .collect()
}

/// (kind, apiVersion, name) of each document of a kustomize output (top-level keys, sorted and
/// unindented as kustomize writes them).
fn resources(text: &str) -> Vec<(String, String, String)> {
    text.split("\n---\n")
        .map(|doc| {
            let top = |key: &str| {
                doc.lines().find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_owned())).unwrap_or_default()
            };
            let name = doc
                .split_once("\nmetadata:\n")
                .and_then(|(_, m)| {
                    m.lines().take_while(|l| l.starts_with(' ')).find_map(|l| l.strip_prefix("  name: "))
                })
                .unwrap_or_default()
                .to_owned();
            (top("kind: "), top("apiVersion: "), name)
        })
        .collect()
}

/// kubernetes-validate --strict on one file: Ok(its report) or Err(why it failed).
fn validate(file: &Path, version: &str) -> Result<String, String> {
    let tool = python::kubernetes_validate();
    let out = Command::new(&tool)
        .args(["--strict", "--kubernetes-version", version])
        .arg(file)
        .output()
        .map_err(|e| format!("{}: {e} (cargo xtask setup installs it)", tool.display()))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() && !text.contains("ERROR") { Ok(text) } else { Err(text) }
}

/// checkov's counts over every framework it ran: (passed, failed, skipped), the failed checks
/// (id and resource) and the skipped checks that carry no reason.
#[derive(Debug, Default)]
struct Scan {
    passed: u64,
    failed: u64,
    skipped: u64,
    failures: Vec<String>,
    unexplained: Vec<String>,
}

fn checkov(file: &Path) -> Scan {
    let tool = python::checkov();
    // --skip-download: no Prisma Cloud look-ups (guidelines, severities); the checks run offline.
    let out = Command::new(&tool)
        .args(["--skip-download", "--output", "json", "--file"])
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (cargo xtask setup installs it)", tool.display()));
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("checkov printed no JSON ({e}):\n{}", String::from_utf8_lossy(&out.stderr)));
    // One report per framework: an object for one, a list for several.
    let reports = match json {
        Value::Array(reports) => reports,
        report => vec![report],
    };
    let mut scan = Scan::default();
    for report in &reports {
        let count = |key: &str| report["summary"][key].as_u64().unwrap_or(0);
        scan.passed += count("passed");
        scan.failed += count("failed");
        scan.skipped += count("skipped");
        let checks = |key: &str| report["results"][key].as_array().cloned().unwrap_or_default();
        for check in checks("failed_checks") {
            scan.failures.push(format!("{} {} ({})", check["check_id"], check["check_name"], check["resource"]));
        }
        for check in checks("skipped_checks") {
            let reason = check["check_result"]["suppress_comment"].as_str().unwrap_or("").trim().to_owned();
            if reason.len() < 20 {
                scan.unexplained.push(format!("{} on {}: {reason:?}", check["check_id"], check["resource"]));
            }
        }
    }
    scan
}

#[test]
fn every_kustomization_renders_and_is_valid_kubernetes() {
    let scratch = Scratch::new("runqlat-kube").unwrap_or_else(|e| panic!("{e:#}"));
    for r in render_all(&scratch) {
        let resources = resources(&r.text);
        assert!(resources.iter().any(|(kind, ..)| kind == "DaemonSet"), "{}: no DaemonSet", r.name);
        for version in VERSIONS {
            let report =
                validate(&r.file, version).unwrap_or_else(|e| panic!("{} on Kubernetes {version}:\n{e}", r.name));
            for (kind, api, name) in &resources {
                let custom = CUSTOM.iter().any(|(k, a)| k == kind && a == api);
                let passed = report.contains(&format!("passed for resource {}/{name} ", kind.to_lowercase()));
                assert!(
                    passed || custom,
                    "{} on Kubernetes {version}: {kind} {name} was not validated:\n{report}",
                    r.name
                );
            }
        }
        let custom =
            resources.iter().filter(|(kind, api, _)| CUSTOM.iter().any(|(k, a)| k == kind && a == api)).count();
        println!(
            "{}: {} resources validated on Kubernetes {VERSIONS:?}, {custom} custom resources without a schema here",
            r.name,
            resources.len() - custom
        );
    }
}

#[test]
fn every_kustomization_passes_checkov() {
    let scratch = Scratch::new("runqlat-kube").unwrap_or_else(|e| panic!("{e:#}"));
    for r in render_all(&scratch) {
        let scan = checkov(&r.file);
        println!("{}: checkov passed {}, failed {}, skipped {}", r.name, scan.passed, scan.failed, scan.skipped);
        assert!(scan.passed > 50, "{}: checkov ran almost no checks: {scan:?}", r.name);
        assert!(
            scan.failed == 0 && scan.failures.is_empty(),
            "{}: fix these, or skip them in the manifest with the reason the monitor needs it:\n{}",
            r.name,
            scan.failures.join("\n")
        );
        assert!(scan.unexplained.is_empty(), "{}: skipped without a reason: {:?}", r.name, scan.unexplained);
    }
}

/// The docs' example does what its comments say: each knob lands where it should, and nothing a
/// component set is lost to a patch.
#[test]
fn the_docs_own_kustomization_sets_its_knobs() {
    let scratch = Scratch::new("runqlat-kube").unwrap_or_else(|e| panic!("{e:#}"));
    let text = kustomize_build(&own_dir(&scratch, "own", &own_kustomization())).unwrap_or_else(|e| panic!("{e}"));
    let env = |name: &str| {
        text.split_once(&format!("- name: {name}\n"))
            .and_then(|(_, rest)| rest.lines().next())
            .map(|l| l.trim().to_owned())
            .unwrap_or_default()
    };
    assert_eq!(env("RUNQLAT_ALERT_BASIC_AUTH_USER"), "value: alerts");
    assert_eq!(env("RUNQLAT_ALERT_BASIC_AUTH_PASSWORD_FILE"), "value: /etc/latency-daemon-sinks/password");
    assert_eq!(env("RUNQLAT_WEB_CONFIG_FILE"), "value: /etc/latency-daemon-web/web-config.yml");
    for want in [
        "    release: prom\n",
        "kubernetes.io/metadata.name: prometheus\n",
        "top_cgroups = 50\n",
        "image: registry.example/latency-daemon:0.1.0\n",
        "priorityClassName: monitoring-critical\n",
        "tolerations: []\n",
        "kubernetes.io/os: linux\n",
        "- amd64\n                - arm64\n",
        // The installer's init container (same image) and the Localhost profile it writes.
        "- seccomp-profile\n        - --write\n",
        "localhostProfile: latency-daemon.json\n",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    assert_eq!(text.matches("release: prom\n").count(), 2, "ServiceMonitor and PrometheusRule");
    // The web Secret, generated by the user's kustomization, is the one mounted.
    assert_eq!(text.matches("kind: Secret\n").count(), 1, "{text}");
    assert!(text.contains("secretName: latency-daemon-web-") && text.contains("name: latency-daemon-scrape\n"));
    assert!(!text.contains("kube-prometheus-stack") && !text.contains("metadata.name: monitoring\n"), "{text}");
}

#[test]
fn every_component_and_overlay_is_rendered_by_a_test() {
    let own = own_kustomization();
    let named = |what: &str| {
        SHIPPED
            .iter()
            .any(|rel| std::fs::read_to_string(path(rel).join("kustomization.yaml")).is_ok_and(|k| k.contains(what)))
            || own.contains(what)
    };
    for (kind, shipped) in [("components", false), ("overlays", true)] {
        let dir = path(&format!("deploy/kubernetes/{kind}"));
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = format!("deploy/kubernetes/{kind}/{name}");
            let covered =
                if shipped { SHIPPED.contains(&rel.as_str()) } else { named(&format!("components/{name}\n")) };
            assert!(covered, "{rel} is rendered by no test: add it to SHIPPED or to a kustomization");
        }
    }
}

#[test]
fn a_broken_manifest_is_caught() {
    let scratch = Scratch::new("runqlat-kube").unwrap_or_else(|e| panic!("{e:#}"));
    let base = kustomize_build(&path("deploy/kubernetes/base")).unwrap_or_else(|e| panic!("{e}"));
    // A field Kubernetes does not have: only --strict rejects it.
    let bad = scratch.join("bad.yaml");
    std::fs::write(&bad, base.replacen("hostPID: true\n", "hostPID: true\n      hostPid: true\n", 1))
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(validate(&bad, VERSIONS[1]).is_err(), "kubernetes-validate --strict let an unknown field through");
    // A finding whose skip (and reason) is gone fails the scan.
    let unskip = format!(
        "resources:\n  - {CLONE}deploy/kubernetes/base\npatches:\n  - target: {{kind: DaemonSet}}\n    patch: |-\n      \
         - {{op: remove, path: /metadata/annotations/checkov.io~1skip1}}\n"
    );
    let unskipped = kustomize_build(&own_dir(&scratch, "unskipped", &unskip)).unwrap_or_else(|e| panic!("{e}"));
    assert!(unskipped.contains("hostPID: true") && !unskipped.contains("CKV_K8S_17"), "{unskipped}");
    let file = scratch.join("unskipped.yaml");
    std::fs::write(&file, unskipped).unwrap_or_else(|e| panic!("{e:#}"));
    let scan = checkov(&file);
    assert!(scan.failures.iter().any(|f| f.contains("CKV_K8S_17")), "{scan:?}");
}
