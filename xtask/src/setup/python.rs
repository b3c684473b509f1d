//! Python tools from PyPI, in a venv of the project's own (never the system's site-packages):
//! kubernetes-validate, which checks deploy/kubernetes offline against Kubernetes' own schemas.
//! In: python3 (with venv) and PyPI; out: /var/cache/runqlat-tools/venv with the pinned version.
use std::path::PathBuf;
use std::process::Command;

use super::Check;
use crate::cmd;

/// Where the venv lives: outside target/, so `cargo clean` does not cost a download.
pub const VENV: &str = "/var/cache/runqlat-tools/venv";

/// Its schemas cover Kubernetes 1.25 … 1.37.
const KUBERNETES_VALIDATE: &str = "kubernetes-validate==1.37.0";

/// The venv's kubernetes-validate.
pub fn kubernetes_validate() -> PathBuf {
    PathBuf::from(VENV).join("bin/kubernetes-validate")
}

#[derive(Debug)]
pub struct KubernetesValidate;

impl Check for KubernetesValidate {
    fn name(&self) -> &'static str {
        "kubernetes-validate (PyPI, in a venv)"
    }
    fn doing(&self) -> &'static str {
        "installing"
    }
    fn is_done(&self) -> anyhow::Result<bool> {
        Ok(kubernetes_validate().is_file())
    }
    fn do_it(&self) -> anyhow::Result<()> {
        let mut venv = Command::new("python3");
        venv.args(["-m", "venv", VENV]);
        println!("  $ {}", cmd::show(&venv));
        cmd::run(&mut venv)?;
        let mut pip = Command::new(PathBuf::from(VENV).join("bin/pip"));
        pip.args(["install", "--quiet", "--disable-pip-version-check", KUBERNETES_VALIDATE]);
        println!("  $ {}", cmd::show(&pip));
        cmd::run(&mut pip)
    }
}
