//! `cargo xtask kubernetes`: the same as `cargo xtask mixin`, which generates the
//! prometheus-operator component's PrometheusRule. Its tests (kubernetes/tests.rs) render every
//! kustomization of deploy/kubernetes and validate each offline (kubernetes-validate --strict on the
//! oldest and newest Kubernetes it has, and checkov).
/// The PrometheusRule is generated from the mixin now: `cargo xtask mixin`.
pub fn run() -> anyhow::Result<()> {
    crate::dashboard::run()
}

#[cfg(test)]
mod tests;
