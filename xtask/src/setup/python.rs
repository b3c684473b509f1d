//! Python tools from PyPI, in a venv of the project's own (never the system's site-packages):
//! kubernetes-validate (deploy/kubernetes against Kubernetes' own schemas, offline), the official
//! Prometheus client's parsers (our exposition as a consumer no one here wrote reads it), and
//! checkov, the policy scanner the manifest tests run on every rendered kustomization, the
//! CycloneDX library whose validator checks our SBOMs, and zizmor, the static analyser of the
//! GitHub Actions workflows.
//! In: python3 (with venv) and PyPI; out: /var/cache/runqlat-tools/venv with the pinned versions.
use std::path::Path;
use std::process::Command;

use super::Check;
use crate::cmd;

/// Where the venv lives: outside target/, so `cargo clean` does not cost a download.
pub const VENV: &str = "/var/cache/runqlat-tools/venv";

/// The venv's kubernetes-validate (the manifest tests run it).
#[cfg(test)]
pub fn kubernetes_validate() -> std::path::PathBuf {
    Path::new(VENV).join("bin/kubernetes-validate")
}

/// The venv's checkov (the manifest tests run it on every rendered overlay).
#[cfg(test)]
pub fn checkov() -> std::path::PathBuf {
    Path::new(VENV).join("bin/checkov")
}

/// The venv's zizmor (the workflow tests run it on .github/workflows).
#[cfg(test)]
pub fn zizmor() -> std::path::PathBuf {
    Path::new(VENV).join("bin/zizmor")
}

/// One pinned PyPI package in the venv.
#[derive(Debug)]
pub struct PipPackage {
    /// Shown by setup.
    pub name: &'static str,
    /// What pip installs (pinned).
    pub requirement: &'static str,
    /// Its `*.dist-info` directory, present in the venv's site-packages once this version is in.
    pub dist_info: &'static str,
}

/// Its schemas cover Kubernetes 1.25 … 1.37.
pub const KUBERNETES_VALIDATE: PipPackage = PipPackage {
    name: "kubernetes-validate (PyPI, in a venv)",
    requirement: "kubernetes-validate==1.37.0",
    dist_info: "kubernetes_validate-1.37.0.dist-info",
};

/// `prometheus_client.parser` (text 0.0.4) and `prometheus_client.openmetrics.parser` (strict
/// OpenMetrics 1.0): the reference parsers of the Prometheus project, for tests/exposition_parsers.rs.
pub const PROMETHEUS_CLIENT: PipPackage = PipPackage {
    name: "prometheus_client parsers (PyPI, in a venv)",
    requirement: "prometheus_client==0.26.0",
    dist_info: "prometheus_client-0.26.0.dist-info",
};

/// OpenTelemetry's own generated protobuf classes (opentelemetry-proto): the reference reader of
/// the OTLP requests the daemon pushes (tests/otlp_wire.rs).
pub const OPENTELEMETRY_PROTO: PipPackage = PipPackage {
    name: "opentelemetry-proto (PyPI, in a venv)",
    requirement: "opentelemetry-proto==1.45.2",
    dist_info: "opentelemetry_proto-1.45.2.dist-info",
};

/// Perfetto's own generated trace classes (`perfetto_trace_pb2`): the reference reader of the
/// captures `record --capture` writes (tests/capture.rs).
pub const PERFETTO: PipPackage = PipPackage {
    name: "perfetto trace classes (PyPI, in a venv)",
    requirement: "perfetto==0.59.1",
    dist_info: "perfetto-0.59.1.dist-info",
};

/// The policy scanner platform teams run on manifests; the tests want zero failed checks.
pub const CHECKOV: PipPackage = PipPackage {
    name: "checkov (PyPI, in a venv)",
    requirement: "checkov==3.3.30",
    dist_info: "checkov-3.3.30.dist-info",
};

/// The official CycloneDX library: its strict JSON-schema validator checks the SBOMs dist
/// writes (tests/package.rs). Pinned to the version checkov's range resolves to.
pub const CYCLONEDX: PipPackage = PipPackage {
    name: "cyclonedx-python-lib (PyPI, in a venv)",
    requirement: "cyclonedx-python-lib[json-validation]==7.6.2",
    dist_info: "cyclonedx_python_lib-7.6.2.dist-info",
};

/// GitHub Actions' security linter (template injection, credentials left in the checkout,
/// permissions, unpinned actions…); a static binary in its wheel, run with `--offline`.
pub const ZIZMOR: PipPackage = PipPackage {
    name: "zizmor (PyPI, in a venv)",
    requirement: "zizmor==1.32.0",
    dist_info: "zizmor-1.32.0.dist-info",
};

fn venv() -> &'static Path {
    Path::new(VENV)
}

impl Check for PipPackage {
    fn name(&self) -> &'static str {
        self.name
    }
    fn doing(&self) -> &'static str {
        "installing"
    }
    fn is_done(&self) -> anyhow::Result<bool> {
        // lib/python3.X/site-packages: whichever python3 made the venv.
        let Ok(libs) = std::fs::read_dir(venv().join("lib")) else { return Ok(false) };
        Ok(libs.flatten().any(|lib| lib.path().join("site-packages").join(self.dist_info).is_dir()))
    }
    fn do_it(&self) -> anyhow::Result<()> {
        if !venv().join("bin/pip").is_file() {
            let mut make = Command::new("python3");
            make.args(["-m", "venv", VENV]);
            println!("  $ {}", cmd::show(&make));
            cmd::run(&mut make)?;
        }
        let mut pip = Command::new(venv().join("bin/pip"));
        pip.args(["install", "--quiet", "--disable-pip-version-check", self.requirement]);
        println!("  $ {}", cmd::show(&pip));
        cmd::run(&mut pip)
    }
}
