//! The cargo test step of the whole suite, in lanes: `cargo test` runs its test binaries one
//! after another, and most of their time is waiting (on a daemon's windows, a Prometheus
//! scrape, an Alertmanager, a flood's seconds), not computing. In: cargo's list of the test
//! binaries it built; out: each run once, with `--test-threads=1`, in one of three lanes:
//! - `LIGHT`: tests of the daemon's serving, configuration and hardening, and the unit tests,
//!   which use little CPU (xtask's, a core for 20 s) and assert nothing about the machine's
//!   timing or scheduling; they run one after another, beside
//! - `ROBUST`: heavier tests whose checks do not depend on a quiet machine (cgroup churn counts
//!   losses, the package tests build and install packages, the operator's scrape reads labels
//!   and alerts);
//! - and then, alone, every other binary: the measurements against oracles, the timing tests,
//!   and any binary not named here (new tests are alone until someone says otherwise).
//!
//! The light lane's output goes to a log per binary under target/test-lanes/, shown when one
//! fails; the others print as `cargo test` does.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::{build, cmd, workspace_root};

/// Binaries (cargo's target names) that run beside the robust lane: each starts its own
/// daemons, servers and clients on ports it chooses and asserts on what they answer, with
/// limits of a second or more, using a few seconds of CPU in all.
const LIGHT: &[&str] = &[
    "otlp",
    "connection_flood",
    "hardening",
    "reload_in_place",
    "auth_flood",
    "web_config",
    "systemd_unit",
    "secrets",
    "host_paths",
    "reload_files",
    "layering",
    "metrics_golden",
    "version",
    "config_reference",
    "latency_daemon",
    "latency_common",
    "latency_lab",
    // xtask's own unit tests: generated files, manifests, parsers (jsonnet and kubectl run, so
    // a core for 20 s, but nothing they check depends on time).
    "xtask",
];

/// Binaries that run with the light lane beside them, one after another: their checks hold on
/// a busy machine (counts of losses and retirements, packages built and installed, a
/// Prometheus's view of two daemons beside a hog pod).
const ROBUST: &[&str] = &["cgroup_churn", "package", "operator_scrape"];

/// One test executable cargo built.
#[derive(Debug, Clone)]
struct Binary {
    /// cargo's target name (`otlp`, `latency_daemon` for a library's unit tests).
    name: String,
    /// How `cargo test` would name it: `tests/otlp.rs (…/otlp-0123abcd)`.
    shown: String,
    path: PathBuf,
    /// Its package's folder: `cargo test` runs a test binary there.
    dir: PathBuf,
}

/// How one binary went.
#[derive(Debug)]
struct Outcome {
    shown: String,
    took: Duration,
    ok: bool,
    /// The light lane's log of it.
    log: Option<PathBuf>,
}

/// Lists the test binaries of `cargo test <cargo_args>` (built beside dist, so this only checks
/// they are fresh), then runs them in lanes; fails if any binary failed, naming them all.
pub fn run(cargo_args: &[String]) -> anyhow::Result<()> {
    let binaries = list(cargo_args)?;
    let lane = |names: &[&str]| -> Vec<Binary> {
        binaries.iter().filter(|b| names.contains(&b.name.as_str())).cloned().collect()
    };
    let (light, robust) = (lane(LIGHT), lane(ROBUST));
    let alone: Vec<Binary> = binaries
        .iter()
        .filter(|b| !LIGHT.contains(&b.name.as_str()) && !ROBUST.contains(&b.name.as_str()))
        .cloned()
        .collect();
    println!(
        "test: {} test binaries: {} light ones beside {} robust ones, then {} alone (lanes in xtask/src/test/lanes.rs)",
        binaries.len(),
        light.len(),
        robust.len(),
        alone.len()
    );
    let logs = build::target_dir().join("test-lanes");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;

    let began = Instant::now();
    let beside = std::thread::spawn(move || {
        light.iter().map(|b| run_logged(b, &logs.join(format!("{}.log", b.name)))).collect::<Vec<_>>()
    });
    let mut outcomes: Vec<Outcome> = robust.iter().map(run_shown).collect();
    let robust_took = began.elapsed();
    let light_outcomes = beside.join().unwrap_or_default();
    let light_took: Duration = light_outcomes.iter().map(|o| o.took).sum();
    let parallel_took = began.elapsed();
    outcomes.extend(light_outcomes);
    let alone_began = Instant::now();
    outcomes.extend(alone.iter().map(run_shown));
    println!(
        "test: lanes: light {:.0} s beside robust {:.0} s (together {:.0} s), then alone {:.0} s",
        light_took.as_secs_f64(),
        robust_took.as_secs_f64(),
        parallel_took.as_secs_f64(),
        alone_began.elapsed().as_secs_f64()
    );

    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.ok).collect();
    for outcome in &failed {
        if let Some(log) = &outcome.log {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(80)..];
            eprintln!("\ntest: {} failed; the end of {}:\n{}", outcome.shown, log.display(), tail.join("\n"));
        }
    }
    if !failed.is_empty() {
        let names: Vec<&str> = failed.iter().map(|o| o.shown.as_str()).collect();
        anyhow::bail!("{} of {} test binaries failed: {}", failed.len(), outcomes.len(), names.join(", "));
    }
    Ok(())
}

/// The test binaries `cargo test <cargo_args> --no-run` builds, from its JSON messages.
fn list(cargo_args: &[String]) -> anyhow::Result<Vec<Binary>> {
    let mut command = cmd::cargo()?;
    command
        .current_dir(workspace_root())
        .args(cargo_args)
        .args(["--no-run", "--message-format=json-render-diagnostics"])
        .stderr(Stdio::inherit());
    println!("test: $ {}", cmd::show(&command));
    let out = command.output().context("running cargo test --no-run")?;
    if !out.status.success() {
        anyhow::bail!("cargo test --no-run failed ({})", out.status);
    }
    let mut binaries = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if let Some(binary) = binary_of(&message) {
            binaries.push(binary);
        }
    }
    if binaries.is_empty() {
        anyhow::bail!("cargo test --no-run listed no test binary");
    }
    Ok(binaries)
}

/// The test binary a `compiler-artifact` message announces, if it is one.
fn binary_of(message: &serde_json::Value) -> Option<Binary> {
    if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
        return None;
    }
    let path = PathBuf::from(message["executable"].as_str()?);
    let target = &message["target"];
    let name = target["name"].as_str()?.to_owned();
    let dir = Path::new(message["manifest_path"].as_str()?).parent()?.to_path_buf();
    let source = Path::new(target["src_path"].as_str()?);
    let source = source.strip_prefix(workspace_root()).unwrap_or(source);
    let shown = format!("{} ({})", source.display(), path.display());
    Some(Binary { name, shown, path, dir })
}

fn command_of(binary: &Binary) -> Command {
    let mut command = Command::new(&binary.path);
    command.current_dir(&binary.dir).arg("--test-threads=1").stdin(Stdio::null());
    command
}

/// Runs `binary` with its output on ours, headed as `cargo test` heads it.
fn run_shown(binary: &Binary) -> Outcome {
    println!("     Running {}", binary.shown);
    let began = Instant::now();
    let ok = command_of(binary).status().is_ok_and(|s| s.success());
    Outcome { shown: binary.shown.clone(), took: began.elapsed(), ok, log: None }
}

/// Runs `binary` with its output in `log`; one line when it ends.
fn run_logged(binary: &Binary, log: &Path) -> Outcome {
    let began = Instant::now();
    let ok = (|| -> anyhow::Result<bool> {
        let out = std::fs::File::create(log)?;
        let mut command = command_of(binary);
        command.stdout(out.try_clone()?).stderr(out);
        Ok(command.status()?.success())
    })()
    .unwrap_or(false);
    let took = began.elapsed();
    let verdict = if ok { "ok" } else { "FAILED" };
    println!("test: [light lane] {} {verdict} in {:.1} s ({})", binary.name, took.as_secs_f64(), log.display());
    Outcome { shown: binary.shown.clone(), took, ok, log: Some(log.to_path_buf()) }
}
