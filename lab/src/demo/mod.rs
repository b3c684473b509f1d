//! `cargo xtask demo [--secs S] [--check]`: the perf-sched experiment reproduced and
//! cross-checked. In: a release build of the daemon, a program that runs the workload (xtask's
//! `workload` subcommand), perf, runqlat, bpftool, root. Out: for each
//! workload mode, our numbers beside perf sched latency's, runqlat's and the kernel's run_delay;
//! demo-report/report.md, report.json and delays.svg; with the stall mode also the stall made
//! exact and alerted on while it lasts (`stall_alert`, stall-alert.svg); why a cgroup waited, its
//! own CPU limit or a neighbour (`causes`, causes.svg); with `--check`, a
//! non-zero exit if any agreement figure is outside its tolerance (the test suite runs `--secs 2
//! --check`).
//!
//! Whatever happens — a failed step, Ctrl-C — every child is killed by its own pid and
//! kernel.task_delayacct gets its old value back (guards), and the end checks that none of our
//! programs is still loaded.
mod analysis;
mod causes;
mod figure;
mod histogram;
mod live_view;
mod report;
mod session;
mod stall_alert;
mod timeline;

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::guard::{self, Sysctl};
use crate::oracle::bpftool;
use crate::workload::Mode;
use crate::{cmd, workspace_root};
use analysis::Check;
use report::Report;

/// The budget for the full demo on a 2-CPU machine.
const FULL_BUDGET_S: f64 = 90.0;
const FULL_SECS: f64 = 6.0;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds each mode's threads work (the experiment used 6).
    #[arg(long, default_value_t = FULL_SECS)]
    pub secs: f64,
    /// Exit non-zero if any agreement figure is outside its tolerance.
    #[arg(long)]
    pub check: bool,
    /// Where report.md, report.json and delays.svg go [default: demo-report/ in the workspace].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Only these modes, in this order [default: cpu,io,compete,stall,nice].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub modes: Vec<Mode>,
    /// Run the shipped static (musl) daemon of target/dist (`cargo xtask dist`) instead of
    /// building the host's release one.
    #[arg(long = "static")]
    pub static_daemon: bool,
    /// Only the live view's picture, to this PNG (the README's docs/live-view.png): web, batch and
    /// reports services in `shop.slice`, the web one alerting, then headless Chromium's screenshot.
    #[arg(long, value_name = "PNG")]
    pub screenshot: Option<PathBuf>,
}

/// What the caller prepared: the binaries the demo runs, and how long preparing them took.
#[derive(Debug, Clone)]
pub struct Tools {
    /// A release build of latency-daemon.
    pub daemon: PathBuf,
    /// The program that runs `workload::run` with the arguments that follow these (e.g. xtask
    /// and `["workload"]`).
    pub workload: PathBuf,
    pub workload_args: Vec<String>,
    /// The caller's setup checks and build, before the first mode (the report shows it).
    pub prepared_in: Duration,
}

impl Args {
    /// The flags' own limits, checked before anything is built or changed.
    pub fn check(&self) -> anyhow::Result<()> {
        if !(self.secs >= 0.5 && self.secs <= 600.0) {
            bail!("--secs must be between 0.5 and 600");
        }
        Ok(())
    }
}

/// The demo loads eBPF programs, runs perf and sets a sysctl: only root can.
pub fn require_root() -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail (POSIX).
    if unsafe { libc::geteuid() } != 0 {
        bail!("the demo loads eBPF programs, runs perf and sets a sysctl: run it as root");
    }
    Ok(())
}

/// The test suite's short form: every mode for 2 s, checked, written under target/ so it never
/// replaces a full report.
pub const SHORT_FORM: &[&str] = &["demo", "--secs", "2", "--check", "--out", "target/demo-check"];

/// Every mode, the report, the checks. The caller has run `args.check()`, prepared the machine
/// and built the tools (xtask's `demo` does, then calls this).
pub fn run(args: &Args, tools: &Tools) -> anyhow::Result<()> {
    args.check()?;
    require_root()?;
    if let Some(png) = &args.screenshot {
        let _signals = guard::catch_signals();
        let maps_before = bpftool::stamps_maps()?;
        let shot = live_view::screenshot(&tools.daemon, png);
        let leftovers = bpftool::leftovers(&maps_before)?;
        anyhow::ensure!(leftovers.is_empty(), "still loaded after the screenshot: {}", leftovers.join(", "));
        return shot;
    }
    let prepare_s = tools.prepared_in.as_secs_f64();
    let began = Instant::now();
    let _signals = guard::catch_signals();
    let out = args.out.clone().unwrap_or_else(|| workspace_root().join("demo-report"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let modes = if args.modes.is_empty() { Mode::ALL.to_vec() } else { args.modes.clone() };
    let (hz, hz_source) = kernel_hz();
    let ctx = session::Context {
        daemon: tools.daemon.clone(),
        workload: tools.workload.clone(),
        workload_args: tools.workload_args.clone(),
        scratch: session::scratch_dir(&out)?,
        secs: args.secs,
        tty: std::io::stdout().is_terminal(),
    };
    println!(
        "demo: {} modes × {} s, each watched by record (2 clocks), perf sched, runqlat and run_delay; \
         kernel.task_delayacct=1 until the end",
        modes.len(),
        args.secs
    );

    // Someone else may run the daemon on this machine: only maps loaded after this are ours.
    let maps_before = bpftool::stamps_maps()?;
    // run_delay is only kept while delay accounting is on: on before the first thread starts.
    let mut delayacct = Sysctl::set("kernel.task_delayacct", "1")?;
    let measured = measure_all(&ctx, &modes);
    // With the stall mode, the same stall made exact and alerted on while it lasts.
    let alerted = (modes.contains(&Mode::Stall) && measured.is_ok()).then(|| {
        println!(
            "demo: [stall alert] a SCHED_FIFO hog on CPU {} for {:?} beside a 1 ms sleeper there, watched by run \
             with an alert…",
            stall_alert::PLAN.cpu,
            stall_alert::PLAN.spin
        );
        stall_alert::measure(&ctx.daemon)
    });
    // Why a cgroup waited: its own CPU limit, or a neighbour.
    let causes = measured.is_ok().then(|| {
        println!(
            "demo: [causes] on CPU {}: a busy task under a 10 % CPU limit, then a 1 ms sleeper beside a busy \
             neighbour, {:?} each, watched by run…",
            causes::CPU,
            causes::SPAN
        );
        causes::measure(&ctx.daemon)
    });
    let restored = delayacct.restore();
    let _ = std::fs::remove_dir_all(&ctx.scratch);
    let leftovers = bpftool::leftovers(&maps_before);
    if measured.is_err() {
        // The report will not be written: say here whether the machine is back as it was.
        if let Err(e) = &restored {
            eprintln!("demo: {e:#}");
        }
        match &leftovers {
            Ok(found) if found.is_empty() => {}
            Ok(found) => eprintln!("demo: still loaded: {}", found.join(", ")),
            Err(e) => eprintln!("demo: could not check for leftovers: {e:#}"),
        }
    }
    let measured = measured?;

    let summaries: Vec<_> = measured.iter().map(|m| analysis::summarize(m, 1_000_000_000 / hz.max(1))).collect();
    let mut checks = analysis::ordering_checks(&summaries);
    let stall_alert = settle(alerted, &mut checks, stall_alert::StallAlert::checks, stall_alert::failed);
    let causes = settle(causes, &mut checks, causes::Causes::checks, causes::failed);
    let took_s = began.elapsed().as_secs_f64();
    let projected_full_s = took_s + modes.len() as f64 * (FULL_SECS - args.secs);
    checks.push(Check {
        item: "time",
        subject: "full demo".to_owned(),
        detail: format!(
            "this run {took_s:.1} s after {prepare_s:.1} s of setup and build; at {FULL_SECS} s a mode: \
             {projected_full_s:.1} s (budget {FULL_BUDGET_S} s)"
        ),
        ok: projected_full_s <= FULL_BUDGET_S,
    });
    // The live view's picture of a scenario a user would recognise, in the report (outside the
    // demo's time: it measures nothing).
    let png = out.join("live-view.png");
    let shot = live_view::screenshot(&ctx.daemon, &png);
    checks.push(Check {
        item: "live view",
        subject: "the picture".to_owned(),
        detail: match &shot {
            Ok(()) => format!("{}: the web service's alert firing, each service among the top cgroups", png.display()),
            Err(e) => format!("{e:#}"),
        },
        ok: shot.is_ok(),
    });
    let leftovers = bpftool::leftovers(&maps_before);
    checks.extend(cleanup_checks(&restored, &leftovers, delayacct.old()));
    let (started, alive) = guard::children_alive();
    checks.push(Check {
        item: "clean",
        subject: "nothing running".to_owned(),
        detail: format!("{started} children started (workloads, recorders, perf, runqlat); still alive: {alive:?}"),
        ok: alive.is_empty(),
    });
    let report = Report {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned(),
        cpus: crate::workload::cpus(),
        hz,
        hz_source,
        secs: args.secs,
        prepare_s,
        took_s,
        projected_full_s,
        summaries,
        stall_alert,
        causes,
        checks,
    };
    write(&out, &report)?;
    print_outcome(&out, &report);
    let failures = report.failures();
    if args.check && !failures.is_empty() {
        bail!("{} agreement figure(s) outside tolerance; see {}", failures.len(), out.join("report.md").display());
    }
    Ok(())
}

/// An extra measurement's outcome (None: not run): its checks, or the one check its failure
/// is, added to `checks`; the measurement kept for the report when it ran.
fn settle<T>(
    outcome: Option<anyhow::Result<T>>,
    checks: &mut Vec<Check>,
    passed: impl Fn(&T) -> Vec<Check>,
    failed: impl Fn(&anyhow::Error) -> Check,
) -> Option<T> {
    match outcome? {
        Ok(measured) => {
            checks.extend(passed(&measured));
            Some(measured)
        }
        Err(e) => {
            checks.push(failed(&e));
            None
        }
    }
}

fn measure_all(ctx: &session::Context, modes: &[Mode]) -> anyhow::Result<Vec<session::Measured>> {
    let mut all = Vec::new();
    for (n, &mode) in modes.iter().enumerate() {
        let m = session::measure(ctx, mode, n + 1, modes.len())
            .with_context(|| format!("demo mode `{}` failed", mode.name()))?;
        let delays: u64 = m.threads.iter().filter_map(|d| m.ours.task(d.tid)).map(|t| t.delay_count).sum();
        let perf: u64 = m.threads.iter().filter_map(|d| m.perf.latency.get(&d.tid)).map(|p| p.delays).sum();
        println!(
            "        {} threads done; delays: ours {delays}, perf sched latency {perf}, runqlat (whole process) {}; \
             took {:.1} s",
            m.threads.len(),
            m.runqlat.iter().sum::<u64>(),
            m.took.as_secs_f64()
        );
        all.push(m);
    }
    Ok(all)
}

fn cleanup_checks(restored: &anyhow::Result<()>, leftovers: &anyhow::Result<Vec<String>>, old: &str) -> Vec<Check> {
    vec![
        Check {
            item: "clean",
            subject: "kernel.task_delayacct".to_owned(),
            detail: match restored {
                Ok(()) => format!("restored to {old}"),
                Err(e) => format!("{e:#}"),
            },
            ok: restored.is_ok(),
        },
        Check {
            item: "clean",
            subject: "nothing attached".to_owned(),
            detail: match leftovers {
                Ok(found) if found.is_empty() => {
                    "bpftool: no STAMPS map loaded since the start (nor a program using one) that no live \
                     process holds"
                        .to_owned()
                }
                Ok(found) => format!("still loaded: {}", found.join(", ")),
                Err(e) => format!("{e:#}"),
            },
            ok: leftovers.as_ref().is_ok_and(Vec::is_empty),
        },
    ]
}

fn write(out: &std::path::Path, report: &Report) -> anyhow::Result<()> {
    let md = report::markdown(report);
    let json = serde_json::to_string_pretty(report)?;
    let colors = [(Mode::Cpu, "#2ca02c"), (Mode::Io, "#1f77b4"), (Mode::Compete, "#d62728")];
    let series: Vec<figure::Series> = colors
        .iter()
        .filter_map(|(mode, color)| {
            let s = report.summaries.iter().find(|s| s.mode == *mode)?;
            let label = format!(
                "{}: {} delays, avg {}, max {}",
                s.mode.name(),
                s.delays,
                report::ns(s.avg_ns),
                report::ns(s.max_ns as f64)
            );
            Some(figure::Series { label, color, buckets: &s.buckets, max_ns: s.max_ns })
        })
        .collect();
    let mut files = vec![
        ("report.md", md.into_bytes()),
        ("report.json", (json + "\n").into_bytes()),
        ("delays.svg", figure::svg(&series).into_bytes()),
    ];
    if let Some(a) = &report.stall_alert {
        files.push(("stall-alert.svg", timeline::svg(a).into_bytes()));
        if let Some(c) = &a.capture {
            files.push(("stall-capture.svg", c.picture.clone().into_bytes()));
            files.push(("stall-capture.pftrace", c.trace.clone()));
        }
    }
    if let Some(c) = &report.causes {
        files.push(("causes.svg", causes::figure::svg(c).into_bytes()));
    }
    for (name, text) in files {
        let path = out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn print_outcome(out: &std::path::Path, report: &Report) {
    println!("\n{}", report::experiment_table(report));
    println!("{}", report::agreement_table(report));
    if let Some(line) = report::stall_alert_line(report) {
        println!("{line}\n");
    }
    if let Some(line) = report::causes_line(report) {
        println!("{line}\n");
    }
    let failures = report.failures();
    let total = report.all_checks().count();
    println!("demo: {} of {total} agreement figures inside their tolerance", total - failures.len());
    for c in &failures {
        println!("  FAIL {} {}: {}", c.item, c.subject, c.detail);
    }
    println!(
        "demo: {:.1} s after {:.1} s of setup and build (at {FULL_SECS} s a mode: {:.1} s); wrote {}",
        report.took_s,
        report.prepare_s,
        report.projected_full_s,
        out.join("report.md").display()
    );
}

/// The scheduler tick's rate: CONFIG_HZ from the kernel's config if readable, else measured
/// from /proc/timer_list's jiffies over 200 ms.
fn kernel_hz() -> (u64, String) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let boot = format!("/boot/config-{}", release.trim());
    let config = cmd::stdout(Command::new("zcat").arg("/proc/config.gz"))
        .map(|c| (c, "/proc/config.gz".to_owned()))
        .or_else(|_| std::fs::read_to_string(&boot).map(|c| (c, boot.clone())));
    if let Ok((text, source)) = config
        && let Some(hz) = text.lines().find_map(|l| l.strip_prefix("CONFIG_HZ=")?.trim().parse().ok())
    {
        return (hz, format!("CONFIG_HZ in {source}"));
    }
    let jiffies = || -> Option<u64> {
        let text = std::fs::read_to_string("/proc/timer_list").ok()?;
        text.lines().find_map(|l| l.strip_prefix("jiffies:")?.trim().parse().ok())
    };
    if let Some(a) = jiffies() {
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(200));
        if let Some(b) = jiffies() {
            let rate = (b - a) as f64 / t.elapsed().as_secs_f64();
            let hz = [100, 250, 300, 1000].into_iter().min_by_key(|h| (rate - *h as f64).abs() as u64).unwrap_or(250);
            return (hz, "jiffies in /proc/timer_list over 200 ms".to_owned());
        }
    }
    (250, "assumed (no kernel config, no /proc/timer_list)".to_owned())
}
