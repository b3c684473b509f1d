//! `cargo xtask setup`: a list of checks, each cheap to test and able to fix itself. In: this
//! machine; out: a line per check and a ready machine, or the first problem that cannot be fixed.
//! Every other subcommand runs the same list first (`build` and `run` only the part they need),
//! so keep each `is_done` fast (a few ms).
pub mod actionlint;
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

/// A part of the list; a command names the parts it needs (`RUN`, `DIST`, `ALL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// What building needs before bpf-linker: a kernel with BTF, nightly with rust-src, a C
    /// compiler.
    Toolchain,
    /// bpf-linker on nightly's LLVM (on a fresh machine, a minute or two of compiling).
    Linker,
    /// What the release artifacts add: the cross compilers and musl's files.
    Dist,
    /// What the tests, the demo and the bench call as well.
    Lab,
}

/// Building and running the daemon (`build`, `run`).
pub const RUN: &[Part] = &[Part::Toolchain, Part::Linker];
/// The release artifacts (`dist`).
pub const DIST: &[Part] = &[Part::Toolchain, Part::Linker, Part::Dist];
/// Everything (`setup`, `test`, `demo`, `bench`, `vmtest`…).
pub const ALL: &[Part] = &[Part::Toolchain, Part::Linker, Part::Dist, Part::Lab];

/// In order: things we cannot fix first, so the user learns about them before a long build;
/// then the parts in the order `ALL` names them.
fn checks(parts: &[Part]) -> Vec<Box<dyn Check>> {
    let part = |part: Part| -> Vec<Box<dyn Check>> {
        match part {
            Part::Toolchain => vec![
                Box::new(kernel::Btf),
                Box::new(toolchain::Nightly),
                Box::new(toolchain::RustSrc),
                Box::new(toolchain::CCompiler),
            ],
            Part::Linker => vec![Box::new(bpf_linker::BpfLinker)],
            Part::Dist => vec![
                Box::new(cross::CrossTools),
                Box::new(cross::Musl(Arch::X86_64)),
                Box::new(cross::Musl(Arch::Aarch64)),
            ],
            Part::Lab => vec![
                Box::new(packages::DebPackages),
                Box::new(qemu::Qemu),
                Box::new(trixie::PROMETHEUS),
                Box::new(python::KUBERNETES_VALIDATE),
                Box::new(python::PROMETHEUS_CLIENT),
                Box::new(python::OPENTELEMETRY_PROTO),
                Box::new(python::PERFETTO),
                Box::new(trixie::KUSTOMIZE),
                Box::new(trixie::VICTORIA_METRICS),
                Box::new(python::CHECKOV),
                Box::new(python::CYCLONEDX),
                Box::new(python::ZIZMOR),
                Box::new(actionlint::Actionlint),
                Box::new(kernel::Tracefs),
                Box::new(kernel::Debugfs),
            ],
        }
    };
    ALL.iter().filter(|p| parts.contains(p)).flat_map(|&p| part(p)).collect()
}

/// Whether every check of `parts` is done now (no fixing): for `cargo xtask test`, which waits
/// for a setup running beside it.
pub fn done(parts: &[Part]) -> anyhow::Result<bool> {
    for check in checks(parts) {
        if !check.is_done().with_context(|| format!("checking `{}`", check.name()))? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// How much `ensure` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// A line per check (the `setup` command).
    EveryStep,
    /// Only checks that need work, then one summary line (before build, run, test).
    ChangesOnly,
}

/// Runs every check of `parts` and fixes what is missing; stops at the first failure.
pub fn ensure(report: Report, parts: &[Part]) -> anyhow::Result<()> {
    let start = Instant::now();
    let root = kernel::is_root();
    if !root || report == Report::EveryStep {
        line("running as root", if root { "ok" } else { kernel::NOT_ROOT });
    }
    let checks = checks(parts);
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
        0 if checks.len() == 1 => println!("setup: the check is ok ({took:.2} s)"),
        0 => println!("setup: all {} checks ok ({took:.2} s)", checks.len()),
        n => println!("setup: done, {n} of {} checks fixed ({took:.2} s)", checks.len()),
    }
    Ok(())
}

fn line(name: &str, state: &str) {
    println!("setup: {name:.<34} {state}");
}
