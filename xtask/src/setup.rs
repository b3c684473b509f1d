//! `cargo xtask setup`: a list of checks, each cheap to test and able to fix itself. In: this
//! machine; out: a line per check and a ready machine, or the first problem that cannot be fixed.
//! Every other subcommand runs the same list first (`build` and `run` only the part they need),
//! so keep each `is_done` fast (a few ms).
mod bpf_linker;
pub mod cross;
mod kernel;
mod packages;
pub mod python;
mod qemu;
mod toolchain;
pub mod trixie;

use std::time::Instant;

use anyhow::{Context as _, bail};

use crate::arch::Arch;

/// One thing this machine needs.
pub trait Check {
    /// What is checked, as shown to the user.
    fn name(&self) -> &'static str;
    /// What `do_it` does, shown while it runs ("installing", "mounting"…).
    fn doing(&self) -> &'static str;
    /// Whether it is already in place. Cheap: runs on every `cargo xtask` command.
    fn is_done(&self) -> anyhow::Result<bool>;
    /// Puts it in place (prints the commands it runs), or explains why it cannot.
    fn do_it(&self) -> anyhow::Result<()>;
}

/// How much of the list a command needs; each scope holds the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// What building and running the daemon needs: a kernel with BTF, nightly with rust-src, a C
    /// compiler and bpf-linker (`build`, `run`).
    Run,
    /// And what the release artifacts need: the cross compilers and musl's files (`dist`).
    Dist,
    /// Everything the tests, the demo and the bench call as well.
    Lab,
}

/// In order: things we cannot fix first, so the user learns about them before a long build;
/// then each scope's own checks after the smaller scope's.
fn checks(scope: Scope) -> Vec<Box<dyn Check>> {
    let run: Vec<Box<dyn Check>> = vec![
        Box::new(kernel::Btf),
        Box::new(toolchain::Nightly),
        Box::new(toolchain::RustSrc),
        Box::new(toolchain::CCompiler),
        Box::new(bpf_linker::BpfLinker),
    ];
    let dist: Vec<Box<dyn Check>> =
        vec![Box::new(cross::CrossTools), Box::new(cross::Musl(Arch::X86_64)), Box::new(cross::Musl(Arch::Aarch64))];
    let lab: Vec<Box<dyn Check>> = vec![
        Box::new(packages::DebPackages),
        Box::new(qemu::Qemu),
        Box::new(trixie::PROMETHEUS),
        Box::new(python::KUBERNETES_VALIDATE),
        Box::new(python::PROMETHEUS_CLIENT),
        Box::new(python::OPENTELEMETRY_PROTO),
        Box::new(trixie::KUSTOMIZE),
        Box::new(trixie::VICTORIA_METRICS),
        Box::new(python::CHECKOV),
        Box::new(python::CYCLONEDX),
        Box::new(kernel::Tracefs),
        Box::new(kernel::Debugfs),
    ];
    let mut list = run;
    if scope >= Scope::Dist {
        list.extend(dist);
    }
    if scope >= Scope::Lab {
        list.extend(lab);
    }
    list
}

/// How much `ensure` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// A line per check (the `setup` command).
    EveryStep,
    /// Only checks that need work, then one summary line (before build, run, test).
    ChangesOnly,
}

/// Runs every check of `scope` and fixes what is missing; stops at the first failure.
pub fn ensure(report: Report, scope: Scope) -> anyhow::Result<()> {
    let start = Instant::now();
    let root = kernel::is_root();
    if !root || report == Report::EveryStep {
        line("running as root", if root { "ok" } else { kernel::NOT_ROOT });
    }
    let checks = checks(scope);
    let mut fixed = 0;
    for check in &checks {
        let name = check.name();
        if check.is_done().with_context(|| format!("checking `{name}`"))? {
            if report == Report::EveryStep {
                line(name, "ok");
            }
            continue;
        }
        line(name, check.doing());
        check.do_it().with_context(|| format!("setup step `{name}` failed"))?;
        // Re-check so a fix that "succeeded" without the intended effect cannot slip through.
        if !check.is_done().with_context(|| format!("re-checking `{name}`"))? {
            bail!("setup step `{name}` ran but is still not done; see the output above");
        }
        line(name, "ok");
        fixed += 1;
    }
    let took = start.elapsed().as_secs_f64();
    match fixed {
        0 => println!("setup: all {} checks ok ({took:.2} s)", checks.len()),
        n => println!("setup: done, {n} of {} checks fixed ({took:.2} s)", checks.len()),
    }
    Ok(())
}

fn line(name: &str, state: &str) {
    println!("setup: {name:.<34} {state}");
}
