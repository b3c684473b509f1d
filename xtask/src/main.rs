//! `cargo xtask <command>`: prepares this machine and builds, runs and tests the workspace.
//! In: a subcommand and its arguments; out: the work done, progress on stdout, an exit code.
mod arch;
mod bench;
mod build;
mod cmd;
mod container;
mod demo;
mod dist;
#[cfg(test)]
mod kubernetes;
mod manifest;
mod mixin;
#[cfg(test)]
mod readme_layout;
#[cfg(test)]
mod release;
mod run;
mod seccomp_spo;
mod setup;
mod test;
mod vmtest;

use clap::{Parser, Subcommand};
use latency_lab::workspace_root;

#[derive(Debug, Parser)]
#[command(about = "Project tasks for the run-queue latency monitor")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Make this machine ready (toolchain parts, bpf-linker, Debian packages, kernel mounts).
    Setup(SetupArgs),
    /// Setup (what building needs), then build latency-daemon (and through it the kernel program).
    Build(build::Args),
    /// Setup (what running needs), release build, then run the daemon with ARGS (default: `run`, the service).
    Run(run::Args),
    /// Setup, then the whole test suite (needs root and a real kernel).
    Test(test::Args),
    /// Setup, then static (musl) latency-daemon binaries for x86_64 and aarch64 in target/dist/.
    Dist(dist::Args),
    /// Setup, release build, then the daemon's `FROM scratch` OCI image (podman; no registry).
    Image,
    /// Setup, release build, then deploy/seccomp/latency-daemon.json from `strace` of the daemon.
    Seccomp,
    /// Regenerate the Security Profiles Operator's SeccompProfile from deploy/seccomp/latency-daemon.json.
    SeccompSpo,
    /// Format the mixin (deploy/grafana) and regenerate what it makes: the dashboards' JSON,
    /// deploy/prometheus/rules.yml and the prometheus-operator component's PrometheusRule.
    Mixin,
    /// Setup, release build, then measure what the monitor costs (writes bench-report/).
    Bench(latency_lab::bench::Args),
    /// The experiment's loads as named threads: cpu, io, compete, stall (lat3), nice.
    Workload(latency_lab::workload::Args),
    /// Release build, then every workload mode watched by `record`, perf sched, runqlat and the
    /// kernel's run_delay at once; writes demo-report/ (report.md, report.json, delays.svg).
    Demo(latency_lab::demo::Args),
    /// Setup, release build, then boot Debian's kernels 5.10 → 6.12 (generic, cloud, PREEMPT_RT)
    /// under QEMU and run every configuration in each; writes vmtest-report/ and docs/kernels.md's table.
    Vmtest(latency_lab::vmtest::Args),
}

#[derive(Debug, clap::Args)]
struct SetupArgs {
    /// Only these parts (repeat the flag; default: all). `toolchain` and `linker` are what
    /// building and running the daemon need (nightly with rust-src, a C compiler, bpf-linker),
    /// `dist` adds the release artifacts' cross compilers and musl, `lab` the tests' tools.
    #[arg(long, value_enum)]
    part: Vec<setup::Part>,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Setup(args) => {
            let parts = if args.part.is_empty() { setup::ALL } else { &args.part };
            setup::ensure(setup::Report::EveryStep, parts)
        }
        Command::Build(args) => build::run(&args),
        Command::Run(args) => run::run(args),
        Command::Test(args) => test::run(args),
        Command::Dist(args) => dist::run(&args),
        Command::Image => container::image(),
        Command::Seccomp => container::seccomp(),
        Command::SeccompSpo => seccomp_spo::run(),
        Command::Mixin => mixin::run(),
        Command::Bench(args) => bench::run(&args),
        Command::Workload(args) => latency_lab::workload::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Vmtest(args) => vmtest::run(&args),
    }
}
