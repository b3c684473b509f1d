//! `cargo xtask test [-- ARGS…]`: setup, then the whole suite as steps (the release artifacts,
//! `cargo test` — its binaries in lanes, see `lanes` —, then the checks that run built
//! programs), each run even if an earlier one failed. Out: a summary with timings; non-zero
//! exit if any step failed.
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::{build, cmd, setup, workspace_root};

mod lanes;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// After `--`: arguments for `cargo test` (e.g. `-p latency-common`, a filter); a second
    /// `--` starts arguments for the test binaries.
    #[arg(last = true)]
    cargo_test_args: Vec<String>,
}

/// One part of the suite, reported on its own line.
struct Step {
    name: &'static str,
    run: Box<dyn FnOnce() -> anyhow::Result<()>>,
}

/// The kernels vmtest boots: every one of both architectures.
const VMTEST_KERNELS: &str = "all";

/// The step before `cargo test`: the release artifacts of both architectures (whose package
/// tests then check the real binaries, not stand-ins) and, beside their packaging, the arm64
/// guests' load. Beside the
/// build run the rest of `cargo test`'s own build (`cargo test --no-run`, started once building
/// was possible) and the rest of the lab's setup followed by vmtest's downloads (both started
/// before bpf-linker; on a fresh machine minutes of network and unpacking that leave the CPU
/// idle): dist builds in target/dist-build with
/// nightly, `cargo test` in target/debug with stable, so they share no cargo lock, and each fills
/// the CPU the other's serial stretches (linking, the kernel object) leave idle. The step ends
/// when all have, and with the lab's setup checked in the foreground (instant when the job did
/// it; its error shown when not), so nothing of them runs under `cargo test`'s timed tests.
fn dist_step(fetch: Option<Beside>, test_build: Option<Beside>) -> Step {
    Step {
        name: "dist",
        run: Box::new(move || {
            let built = xtask(["dist", "--with-guest-tools"])();
            for job in [fetch, test_build].into_iter().flatten() {
                job.finish();
            }
            match setup::ensure(setup::Report::ChangesOnly, setup::ALL) {
                Ok(()) => LAB_READY.store(true, std::sync::atomic::Ordering::Relaxed),
                Err(err) => eprintln!("test: the lab's setup failed: {err:#}"),
            }
            built
        }),
    }
}

/// Waits until the cross compilers and musl's files are in place (the lab's setup beside does
/// them first), or sets them up here if that job is gone.
fn wait_for_dist(lab: Option<&Beside>) -> anyhow::Result<()> {
    let mut said = false;
    while !setup::done(&[setup::Part::Dist])? {
        let Some(lab) = lab.filter(|job| job.running()) else {
            return setup::ensure(setup::Report::ChangesOnly, &[setup::Part::Dist]);
        };
        if !said {
            println!(
                "test: waiting for the cross compilers and musl's files from {} ({})",
                lab.job.name,
                lab.log.display()
            );
            said = true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok(())
}

/// Whether the lab's setup, finished in the dist step, holds: without it no later step can run.
static LAB_READY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Starts `cargo test --no-run` in the background: it needs only what building needs, so it
/// runs while the setup beside installs what dist needs, and then beside dist.
fn start_test_build(cargo_test: &[String]) -> Option<Beside> {
    let test_build = no_run(cargo_test);
    Beside::start(&TEST_BUILD, move || {
        let mut command = cmd::cargo()?;
        command.current_dir(workspace_root()).args(&test_build);
        Ok(command)
    })
}

/// What runs beside dist: how to name it, where its output goes, what a failure means.
struct Job {
    name: &'static str,
    log: &'static str,
    on_failure: &'static str,
    /// How long it took and whether it succeeded, for the summary (it is no step of its own).
    took: OnceLock<(Duration, bool)>,
}

/// The rest of the setup (the dist and lab parts), then vmtest's downloads: kernels, busybox and
/// the .deb's Debian root into vmtest's cache (on a fresh machine minutes of network and
/// unpacking, which would otherwise open the test or the vmtest step).
static FETCH: Job = Job {
    name: "the lab's setup, then vmtest's fetch",
    log: "vmtest-fetch.log",
    on_failure: "setup runs again after dist, vmtest fetches itself",
    took: OnceLock::new(),
};

/// `cargo test --no-run`: the test binaries, which the cargo test step then only runs.
static TEST_BUILD: Job = Job {
    name: "cargo test's build (from setup on)",
    log: "cargo-test-build.log",
    on_failure: "the cargo test step builds (and reports) it again",
    took: OnceLock::new(),
};

/// In the order of the summary's rows under dist.
static BESIDE_DIST: [&Job; 2] = [&FETCH, &TEST_BUILD];

/// `xtask setup` of the dist and lab parts, then `xtask vmtest --fetch-only`, in one shell.
fn vmtest_fetch() -> anyhow::Result<std::process::Command> {
    let mut command = std::process::Command::new("sh");
    command
        .current_dir(workspace_root())
        .arg("-c")
        .arg(format!(
            "\"$0\" setup --part dist --part lab && exec \"$0\" vmtest --fetch-only --deb --kernels {VMTEST_KERNELS}"
        ))
        .arg(std::env::current_exe()?);
    Ok(command)
}

/// A `Job` running in the background, its output in a log file under target/. The later step
/// redoes whatever it did not, so its failure is reported, never fatal.
struct Beside {
    job: &'static Job,
    /// Waits for the child and says when it ended: the dist step may end much later.
    waiter: std::thread::JoinHandle<(Duration, std::io::Result<std::process::ExitStatus>)>,
    log: std::path::PathBuf,
    /// The child's pid. It stays in our process group, so a Ctrl-C reaches it and what it started.
    pid: i32,
}

impl Beside {
    fn start(job: &'static Job, command: impl FnOnce() -> anyhow::Result<std::process::Command>) -> Option<Beside> {
        let log = build::target_dir().join(job.log);
        let started = (|| -> anyhow::Result<std::process::Child> {
            std::fs::create_dir_all(build::target_dir())?;
            let out = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
            let mut command = command()?;
            command.stdin(std::process::Stdio::null()).stderr(out.try_clone()?).stdout(out);
            println!("test: $ {} > {} 2>&1 &", cmd::show(&command), log.display());
            Ok(command.spawn()?)
        })();
        match started {
            Ok(mut child) => {
                let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
                let began = Instant::now();
                let waiter = std::thread::spawn(move || {
                    let status = child.wait();
                    (began.elapsed(), status)
                });
                Some(Beside { job, waiter, log, pid })
            }
            Err(err) => {
                eprintln!("test: {} did not start ({err:#}); {}", job.name, job.on_failure);
                None
            }
        }
    }

    /// Whether it is still running.
    fn running(&self) -> bool {
        !self.waiter.is_finished()
    }

    /// Ends it early (setup failed before the step it serves): SIGTERM to the child (cargo, whose
    /// compilers then finish their one crate), then waits for it.
    fn stop(self) {
        // SAFETY: kill(2) on our own child, not yet reaped (the waiter thread reaps it).
        unsafe { libc::kill(self.pid, libc::SIGTERM) };
        let _ = self.waiter.join();
        println!("test: {} stopped", self.job.name);
    }

    /// Waits for it and says how it went.
    fn finish(self) {
        let (took, status) = self
            .waiter
            .join()
            .unwrap_or_else(|_| (Duration::ZERO, Err(std::io::Error::other("its waiting thread panicked"))));
        let ok = status.as_ref().is_ok_and(std::process::ExitStatus::success);
        let _ = self.job.took.set((took, ok));
        let took = took.as_secs_f64();
        let name = self.job.name;
        match status {
            Ok(status) if status.success() => {
                println!("test: {name}, in the background: done in {took:.0} s ({})", self.log.display());
            }
            other => {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                eprintln!(
                    "test: {name} failed after {took:.0} s ({other:?}); {}. The end of {}:\n{}",
                    self.job.on_failure,
                    self.log.display(),
                    tail.join("\n")
                );
            }
        }
    }
}

/// This very xtask with `args`, as a step's body.
fn xtask<'a>(args: impl IntoIterator<Item = &'a str>) -> Box<dyn FnOnce() -> anyhow::Result<()>> {
    let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
    Box::new(move || {
        let mut command = std::process::Command::new(std::env::current_exe()?);
        command.current_dir(workspace_root()).args(&args);
        println!("test: $ {}", cmd::show(&command));
        cmd::run(&mut command)
    })
}

/// Steps after `cargo test`, in order: promtool (rules, their tests, the metrics schema), the demo's
/// short form, the bench guard, the kernel matrix.
fn extra_steps() -> Vec<Step> {
    let mut steps = vec![Step {
        name: "promtool",
        // The fleet's rules must load without a lint warning (`--lint-fatal`: exit 3 on one), and
        // their unit tests must pass; the golden metrics schema (what `cargo test` pins) must pass
        // promtool's exposition lint. All run even if one fails, so one run shows every problem.
        run: Box::new(|| {
            let commands: [(&[&str], Option<&str>); 3] = [
                // deploy/web-config.yml names certificate files a user provides, so promtool checks
                // it beside test certificates in latency-daemon's web_config test.
                (&["check", "rules", "--lint=all", "--lint-fatal", "deploy/prometheus/rules.yml"], None),
                (&["test", "rules", "deploy/prometheus/rules_test.yml"], None),
                (&["check", "metrics"], Some("latency-daemon/tests/golden/metrics.prom")),
            ];
            let mut failed = Vec::new();
            for (args, stdin) in commands {
                let mut promtool = std::process::Command::new("promtool");
                promtool.current_dir(workspace_root()).args(args);
                let mut shown = cmd::show(&promtool);
                if let Some(file) = stdin {
                    let path = workspace_root().join(file);
                    let input = std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
                    promtool.stdin(input);
                    shown = format!("{shown} < {file}");
                }
                println!("test: $ {shown}");
                if let Err(err) = cmd::run(&mut promtool) {
                    eprintln!("test: {err:#}");
                    failed.push(shown);
                }
            }
            if !failed.is_empty() {
                bail!("failed: {}", failed.join("; "));
            }
            Ok(())
        }),
    }];
    steps.push(Step {
        name: "demo (short form)",
        // Every workload mode for 2 s against perf sched, runqlat and run_delay; fails when an
        // agreement figure leaves its tolerance, compete ≫ cpu, io no longer holds, the full demo
        // would exceed 90 s, or anything stays attached or running. The shipped binary runs.
        run: xtask(latency_lab::demo::SHORT_FORM.iter().copied().chain(["--static"])),
    });
    steps.push(Step {
        name: "bench guard",
        // Not a timed test: the kernel's own accounting of time inside the programs, ours against
        // runqlat's, failing only on a gross regression (ours costing more than runqlat).
        run: xtask(["bench", "--guard", "--static"]),
    });
    steps.push(Step {
        name: "vmtest",
        // Every kernel of both architectures booted under QEMU with every configuration attached,
        // running the shipped static binaries, then under a booted systemd on 5.10 the amd64 .deb
        // and the bare binary installed by docs/install.md's block.
        // The report goes under target/: README's table is published by a plain `cargo xtask vmtest`.
        // A failure names its failed checks, read back from the report, for the summary.
        run: {
            let out = build::target_dir().join("vmtest-report");
            let run =
                xtask(["vmtest", "--static", "--deb", "--kernels", VMTEST_KERNELS, "--out", &out.to_string_lossy()]);
            Box::new(move || {
                // An earlier run's report must not speak for this one (vmtest may fail before writing).
                let _ = std::fs::remove_file(out.join("report.json"));
                run().map_err(|err| match failed_checks(&out.join("report.json")) {
                    Some(checks) if !checks.is_empty() => err.context(format!("failed checks: {}", checks.join("; "))),
                    _ => err,
                })
            })
        },
    });
    steps
}

/// The checks vmtest's report (report.json) marks failed, each as `kernel: configuration: check:
/// figures` (figures cut at 300 characters), or None where there is no report to read.
fn failed_checks(report: &std::path::Path) -> Option<Vec<String>> {
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(report).ok()?).ok()?;
    let mut guests: Vec<&serde_json::Value> = report["guests"].as_array()?.iter().collect();
    guests.extend([&report["deb"], &report["bare"]].into_iter().filter(|g| g.is_object()));
    let mut failed = Vec::new();
    for guest in guests {
        // The matrix's guests name their kernel by its id; the systemd guests' by a string.
        let label = guest["kernel"].as_str().or(guest["kernel"]["id"].as_str()).unwrap_or("?");
        let route = guest["route"].as_str().map(|r| format!(" ({r} under systemd)")).unwrap_or_default();
        // The guest's own checks, then each configuration's, named by its command.
        let configs = guest["configs"].as_array().into_iter().flatten();
        let lists = std::iter::once((String::new(), &guest["checks"]))
            .chain(configs.map(|c| (format!("`{}`: ", c["command"].as_str().unwrap_or("?")), &c["checks"])));
        for (config, checks) in lists {
            for check in checks.as_array().into_iter().flatten().filter(|c| c["ok"] == false) {
                let field = |name: &str| check[name].as_str().unwrap_or("").to_owned();
                let mut figures = field("detail");
                if let Some((at, _)) = figures.char_indices().nth(300) {
                    figures.truncate(at);
                    figures.push('…');
                }
                failed.push(format!("{label}{route}: {config}{}: {figures}", field("what")));
            }
        }
    }
    Some(failed)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let start = Instant::now();
    // The toolchain first (a problem here is one we cannot fix: the user hears of it at once),
    // then the rest of the setup beside the build: bpf-linker here (a CPU-bound compile on a
    // fresh machine), the cross compilers, musl and the lab's tools (downloads and unpacking)
    // in the background, followed by vmtest's fetch.
    setup::ensure(setup::Report::ChangesOnly, &[setup::Part::Toolchain])?;
    let fetch = Beside::start(&FETCH, vmtest_fetch);
    let stop = |jobs: [Option<Beside>; 2]| jobs.into_iter().flatten().for_each(Beside::stop);
    if let Err(err) = setup::ensure(setup::Report::ChangesOnly, &[setup::Part::Linker]) {
        stop([fetch, None]);
        return Err(err);
    }
    let cargo_test = cargo_test_args(&args.cargo_test_args);
    let test_build = start_test_build(&cargo_test);
    if let Err(err) = wait_for_dist(fetch.as_ref()) {
        stop([fetch, test_build]);
        return Err(err);
    }
    let setup_took = start.elapsed();

    let whole_suite = args.cargo_test_args.is_empty();
    let mut steps = vec![dist_step(fetch, test_build)];
    steps.push(Step {
        name: "cargo test",
        run: Box::new(move || {
            // The whole suite runs its binaries in lanes; a user's pick runs as `cargo test`.
            if whole_suite {
                let at = cargo_test.iter().position(|arg| arg == "--").unwrap_or(cargo_test.len());
                return lanes::run(&cargo_test[..at]);
            }
            let mut test = cmd::cargo()?;
            test.current_dir(workspace_root()).args(&cargo_test);
            println!("test: $ {}", cmd::show(&test));
            cmd::run(&mut test)
        }),
    });
    steps.extend(extra_steps());

    let mut results = Vec::new();
    for step in steps {
        let began = Instant::now();
        let result = (step.run)();
        if let Err(err) = &result {
            eprintln!("test: step `{}` failed: {err:#}", step.name);
        }
        results.push((step.name, began.elapsed(), result.as_ref().err().map(|err| format!("{err:#}"))));
        if step.name == "dist" && !LAB_READY.load(std::sync::atomic::Ordering::Relaxed) {
            bail!("the lab's setup failed (above): the tests cannot run without it");
        }
    }

    println!("\ntest summary ({:.1} s in all):", start.elapsed().as_secs_f64());
    print_row("setup", setup_took, true);
    for (name, took, failure) in &results {
        print_row(name, *took, failure.is_none());
        if *name == "dist" {
            // Inside dist's time, not after it; a failure only moved the work into a later step.
            for job in BESIDE_DIST {
                if let Some((took, ok)) = job.took.get() {
                    let verdict = if *ok { "" } else { ", failed: redone later" };
                    println!("         (beside setup and dist: {} {:.1} s{verdict})", job.name, took.as_secs_f64());
                }
            }
        }
    }
    // Why each step failed, again at the end, where a CI log's tail shows it.
    for (name, _, failure) in &results {
        if let Some(why) = failure {
            println!("  why {name}: {why}");
        }
    }
    let failed = results.iter().filter(|(_, _, failure)| failure.is_some()).count();
    if failed > 0 {
        bail!("{failed} of {} test steps failed", results.len());
    }
    Ok(())
}

fn print_row(name: &str, took: Duration, ok: bool) {
    let verdict = if ok { "ok" } else { "FAILED" };
    println!("  {verdict:<7}{name:<20}{:>8.1} s", took.as_secs_f64());
}

/// `cargo test` arguments: the whole workspace unless the user picked packages (cargo would let
/// `--workspace` win silently), and one test at a time, because integration tests attach to the
/// same kernel tracepoints and would count each other's events.
fn cargo_test_args(user: &[String]) -> Vec<String> {
    let (for_cargo, for_tests) = match user.iter().position(|arg| arg == "--") {
        Some(at) => (&user[..at], &user[at + 1..]),
        None => (user, &[][..]),
    };
    let picks_packages =
        for_cargo.iter().any(|arg| arg == "--package" || arg.starts_with("--package=") || arg.starts_with("-p"));
    let sets_threads = for_tests.iter().any(|arg| arg.starts_with("--test-threads"));

    // Report every failing test binary, not just the first: CI runs are long.
    let mut args = vec!["test".to_owned(), "--no-fail-fast".to_owned()];
    if !picks_packages {
        args.push("--workspace".to_owned());
    }
    args.extend(for_cargo.iter().cloned());
    args.push("--".to_owned());
    if !sets_threads {
        args.push("--test-threads=1".to_owned());
    }
    args.extend(for_tests.iter().cloned());
    args
}

/// The `cargo test` arguments that only build the test binaries: `--no-run` among cargo's own
/// arguments, before the `--` that starts the test binaries' (which then go unused), so the
/// build is the very one the cargo test step then finds fresh.
fn no_run(cargo_test: &[String]) -> Vec<String> {
    let at = cargo_test.iter().position(|arg| arg == "--").unwrap_or(cargo_test.len());
    let mut args = cargo_test.to_vec();
    args.insert(at, "--no-run".to_owned());
    args
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{cargo_test_args, failed_checks, no_run};

    #[test]
    fn a_failed_vmtest_names_its_failed_checks() {
        let report = serde_json::json!({
            "guests": [{
                "kernel": {"id": "6.1.0-57-rt-amd64", "arch": "x86_64"}, "ok": false,
                "checks": [{"what": "run_delay", "ok": true, "detail": "fine"},
                           {"what": "pod: split", "ok": false, "detail": format!("0.9 s {}", "x".repeat(400))}],
                "configs": [{"command": "record", "checks": [{"what": "scrape", "ok": false, "detail": "empty"}]}],
            }],
            "deb": {"kernel": "5.10", "route": ".deb", "checks": [{"what": "served", "ok": false, "detail": "no"}]},
            "bare": null,
        });
        let path = std::env::temp_dir().join(format!("xtask-failed-checks-{}.json", std::process::id()));
        std::fs::write(&path, report.to_string()).unwrap();
        let failed = failed_checks(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(failed.len(), 3, "{failed:?}");
        assert!(
            failed[0].starts_with("6.1.0-57-rt-amd64: pod: split: 0.9 s x") && failed[0].ends_with('…'),
            "{failed:?}"
        );
        assert_eq!(failed[0].chars().count(), "6.1.0-57-rt-amd64: pod: split: ".len() + 301);
        assert_eq!(failed[1], "6.1.0-57-rt-amd64: `record`: scrape: empty");
        assert_eq!(failed[2], "5.10 (.deb under systemd): served: no");
        assert_eq!(failed_checks(std::path::Path::new("/nonexistent/report.json")), None);
    }

    fn args(user: &[&str]) -> Vec<String> {
        let user: Vec<String> = user.iter().map(|s| s.to_string()).collect();
        cargo_test_args(&user)
    }

    #[test]
    fn default_is_the_workspace_one_thread() {
        assert_eq!(args(&[]), ["test", "--no-fail-fast", "--workspace", "--", "--test-threads=1"]);
    }

    #[test]
    fn cargo_args_and_test_args_are_kept_apart() {
        assert_eq!(
            args(&["--release", "bucket", "--", "--nocapture"]),
            ["test", "--no-fail-fast", "--workspace", "--release", "bucket", "--", "--test-threads=1", "--nocapture"]
        );
    }

    #[test]
    fn picking_a_package_drops_workspace() {
        assert_eq!(
            args(&["-p", "latency-common"]),
            ["test", "--no-fail-fast", "-p", "latency-common", "--", "--test-threads=1"]
        );
        assert_eq!(args(&["--package=latency-daemon"])[2], "--package=latency-daemon");
    }

    #[test]
    fn the_users_thread_count_wins() {
        assert_eq!(
            args(&["--", "--test-threads=4"]),
            ["test", "--no-fail-fast", "--workspace", "--", "--test-threads=4"]
        );
    }

    #[test]
    fn the_background_build_is_the_same_build_without_running() {
        assert_eq!(
            no_run(&args(&["--release", "-p", "latency-common", "--", "--nocapture"])),
            [
                "test",
                "--no-fail-fast",
                "--release",
                "-p",
                "latency-common",
                "--no-run",
                "--",
                "--test-threads=1",
                "--nocapture"
            ]
        );
        assert_eq!(no_run(&["test".to_owned()]), ["test", "--no-run"]);
    }
}
