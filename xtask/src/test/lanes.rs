//! The cargo test step of the whole suite, in lanes: `cargo test` runs its test binaries one
//! after another, and most of their time is waiting (on a daemon's windows, a Prometheus
//! scrape, an Alertmanager, a flood's seconds), not computing. In: cargo's list of the test
//! binaries it built; out: each run once, with `--test-threads=1`, in one of the `LANES` (run
//! side by side, each one binary after another), and then, alone, every other binary: the
//! measurements against oracles and the timing tests, and any binary no lane names (new tests
//! are alone until someone says otherwise). A lane may take one test of a binary
//! (`binary::test`, by its exact name): the binary's other tests then run alone without it.
//!
//! The first lane prints as `cargo test` does; the others' output goes to a log per binary
//! under target/test-lanes/, one line each as it ends, the log's end shown if it failed.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context as _;

use crate::{build, cmd, workspace_root};

/// A lane: binaries (cargo's target names), or single tests of one (`binary::test`), run one
/// after another in this order, beside the other lanes.
struct Lane {
    name: &'static str,
    binaries: &'static [&'static str],
}

/// The lanes, side by side; together about as long as the longest. No lane's checks depend on
/// a quiet machine, and together they fit in two CPUs: the busiest binaries (the churn, the
/// package builds, a hog pod, Chromium) are never more than two at a time.
const LANES: &[Lane] = &[
    // 1,000 cgroups a second for a minute, then again with the daemon stopped: its checks count
    // losses and retirements. It opens, alone among the heavy ones but for the package builds.
    // Then half a minute of a 1 ms sleeper under an alert threshold: every alert it may see is
    // checked against the sleeper's own clock, so a loaded machine cannot fail it, only a lie. Then
    // 300 keep-alive clients asking every 1.5 s (a tenth of a core) beside two scrapers allowed 2 s
    // each, and a thread count.
    Lane {
        name: "churn",
        binaries: &[
            "cgroup_churn",
            "alerting::a_1ms_sleeper_under_the_same_threshold_fires_nothing",
            "connection_flood::scrapers_get_in_past_served_keep_alive_clients_on_their_own_address",
        ],
    },
    // Packages built, installed and linted; a Prometheus's view of two daemons beside a hog pod;
    // then the dashboards and the live view in Chromium, the record CLI's outputs and xtask's
    // unit tests (a core for 20 s: jsonnet, kubectl): what they check is what was produced, not
    // how fast. (The official parsers' test needs its victim to be the machine's worst waiter:
    // it runs alone.)
    Lane {
        name: "robust",
        binaries: &[
            "package",
            "operator_scrape",
            "dashboard",
            "live_view",
            "record_cli",
            "exposition_parsers",
            "xtask",
        ],
    },
    // The daemon's serving, configuration and hardening, and the unit tests: each starts its own
    // daemons, servers and clients on ports it chooses and asserts on what they answer, with
    // limits of a second or more, using a few seconds of CPU in all. (The two floods, of
    // connections and of logins, hold a core or more for half a minute each and judge scrapes
    // and logins by the second, and the unit's test runs the daemon under strace, many times
    // slower, with a deadline: they run alone.)
    Lane {
        name: "light",
        binaries: &[
            "otlp",
            "hardening",
            "reload_in_place",
            "web_config",
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
        ],
    },
];

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
    /// The test harness's arguments: one test (`--exact NAME`) or all but some (`--skip NAME`…).
    filter: Vec<String>,
}

impl Binary {
    /// Only its test `test`, named `binary::test` in lines and logs.
    fn only(&self, test: &str) -> Binary {
        Binary {
            name: format!("{}::{test}", self.name),
            shown: format!("{} {test}", self.shown),
            filter: vec!["--exact".into(), test.into()],
            ..self.clone()
        }
    }

    /// Fails unless its harness lists `test` (a lane's single test that no longer exists would
    /// pass by running nothing).
    fn has(&self, test: &str) -> anyhow::Result<()> {
        let listed =
            cmd::stdout(Command::new(&self.path).current_dir(&self.dir).args(["--list", "--format", "terse"]))?;
        if !listed.lines().any(|l| l.strip_suffix(": test") == Some(test)) {
            anyhow::bail!("xtask/src/test/lanes.rs names {}::{test}, which {} does not have", self.name, self.shown);
        }
        Ok(())
    }

    /// All its tests but those of `tests`.
    fn without(&self, tests: &[&str]) -> Binary {
        let mut binary = self.clone();
        for test in tests {
            binary.filter.extend(["--skip".to_owned(), (*test).to_owned()]);
        }
        binary
    }
}

/// How one binary went.
#[derive(Debug)]
struct Outcome {
    shown: String,
    ok: bool,
    /// Its log, if its lane's output went to one.
    log: Option<PathBuf>,
}

/// Lists the test binaries of `cargo test <cargo_args>` (built beside dist, so this only checks
/// they are fresh), then runs them in lanes; fails if any binary failed, naming them all.
pub fn run(cargo_args: &[String]) -> anyhow::Result<()> {
    let binaries = list(cargo_args)?;
    let entries = || LANES.iter().flat_map(|lane| lane.binaries.iter().map(|entry| entry.split_once("::")));
    let in_lane = |b: &Binary| LANES.iter().any(|lane| lane.binaries.contains(&b.name.as_str()));
    for (name, test) in entries().flatten() {
        binaries.iter().filter(|b| b.name == name).try_for_each(|b| b.has(test))?;
    }
    let lanes: Vec<(&Lane, Vec<Binary>)> = LANES
        .iter()
        .map(|lane| {
            // In the lane's order: it puts the heavy binaries where they fit beside the others.
            let named = lane.binaries.iter().flat_map(|entry| {
                let (name, test) = entry.split_once("::").map_or((*entry, None), |(b, t)| (b, Some(t)));
                binaries
                    .iter()
                    .filter(move |b| b.name == name)
                    .map(move |b| test.map_or_else(|| b.clone(), |t| b.only(t)))
            });
            (lane, named.collect())
        })
        .collect();
    let alone: Vec<Binary> = binaries
        .iter()
        .filter(|b| !in_lane(b))
        .map(|b| {
            let taken: Vec<&str> = entries().flatten().filter(|(name, _)| *name == b.name).map(|(_, t)| t).collect();
            b.without(&taken)
        })
        .collect();
    let sizes: Vec<String> = lanes.iter().map(|(lane, b)| format!("{} {}", b.len(), lane.name)).collect();
    println!(
        "test: {} test binaries: lanes side by side ({}), then {} alone (xtask/src/test/lanes.rs)",
        binaries.len(),
        sizes.join(", "),
        alone.len()
    );
    let logs = build::target_dir().join("test-lanes");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;

    let began = Instant::now();
    let mut lanes = lanes.into_iter();
    let (first, first_binaries) = lanes.next().context("no lane")?;
    let others: Vec<_> = lanes
        .map(|(lane, binaries)| {
            let logs = logs.clone();
            let thread = std::thread::spawn(move || {
                let began = Instant::now();
                let outcomes: Vec<Outcome> =
                    binaries.iter().map(|b| run_logged(lane.name, b, &logs.join(format!("{}.log", b.name)))).collect();
                (outcomes, began.elapsed())
            });
            (lane.name, thread)
        })
        .collect();
    let mut outcomes: Vec<Outcome> = first_binaries.iter().map(run_shown).collect();
    let mut took = vec![format!("{} {:.0} s", first.name, began.elapsed().as_secs_f64())];
    for (name, thread) in others {
        let (lane_outcomes, lane_took) = thread.join().unwrap_or_default();
        outcomes.extend(lane_outcomes);
        took.push(format!("{name} {:.0} s", lane_took.as_secs_f64()));
    }
    let lanes_took = began.elapsed();
    let alone_began = Instant::now();
    outcomes.extend(alone.iter().map(run_shown));
    println!(
        "test: lanes: {} (together {:.0} s), then alone {:.0} s",
        took.join(", "),
        lanes_took.as_secs_f64(),
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
    Some(Binary { name, shown, path, dir, filter: Vec::new() })
}

fn command_of(binary: &Binary) -> Command {
    let mut command = Command::new(&binary.path);
    command.current_dir(&binary.dir).arg("--test-threads=1").args(&binary.filter).stdin(Stdio::null());
    command
}

/// Runs `binary` with its output on ours, headed as `cargo test` heads it.
fn run_shown(binary: &Binary) -> Outcome {
    println!("     Running {}", binary.shown);
    let ok = command_of(binary).status().is_ok_and(|s| s.success());
    Outcome { shown: binary.shown.clone(), ok, log: None }
}

/// Runs `binary` with its output in `log`; one line when it ends.
fn run_logged(lane: &str, binary: &Binary, log: &Path) -> Outcome {
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
    println!("test: [{lane} lane] {} {verdict} in {:.1} s ({})", binary.name, took.as_secs_f64(), log.display());
    Outcome { shown: binary.shown.clone(), ok, log: Some(log.to_path_buf()) }
}
