//! One kernel's guest, end to end: in, a booted guest's console and data port; out, a
//! `GuestResult` — timings, what `check` said, and every configuration judged (`checks`), with
//! each `run` scrape linted by the host's `promtool`; a smoke boot only by whether init ran and
//! its data port came back. A guest that panicked or never reached init is booted once more
//! (TCG now and then trips a guest kernel).
use std::io::Write as _;
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use super::checks::{self, Check, Load};
use super::kernels::Kernel;
use super::qemu::{self, Boot, Guest};
use super::sections::Sections;
use crate::recording::Recording;

/// A configuration every guest attaches, as init.sh starts it.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub name: &'static str,
    /// The command line (without the guest's ports and intervals).
    pub command: &'static str,
    /// The kernel program's optional paths it switches on.
    pub knobs: &'static str,
}

pub const CONFIGS: [Config; 6] = [
    Config { name: "run", command: "run", knobs: "per-cgroup (the service's default)" },
    Config { name: "run-core", command: "run --per-cgroup=false", knobs: "none: the core histogram only" },
    Config {
        name: "run-per-task",
        command: "run --per-task --irq-tracepoints",
        knobs: "per-task, per-cgroup, the irq tracepoints",
    },
    Config {
        name: "run-alerting",
        command: "run --alert-max-delay 5ms --throttle-hooks=false",
        knobs: "attribution (run ring, queue depth), per-cgroup; no throttle hooks (before 6.8 a throttled wait is `unknown`)",
    },
    Config { name: "record", command: "record", knobs: "per-task, per-cgroup, attribution" },
    Config { name: "record-rq", command: "record --clock run-queue", knobs: "record's + the run queue's clock" },
];

/// The cgroup init.sh puts the sleepers in.
const SLEEPERS_CGROUP: &str = "/vmt-sleepers";
/// The cgroup init.sh runs the stall in, the one the stall's own service alerts on.
const STALL_CGROUP: &str = "/vmt-stall";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConfigResult {
    pub name: String,
    pub command: String,
    pub attached: bool,
    /// From start to `attached`, all configurations loading at once (guest clock).
    pub attach_s: Option<f64>,
    pub exit: Option<i32>,
    pub checks: Vec<Check>,
    pub ok: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GuestResult {
    pub kernel: Kernel,
    pub cpus: u32,
    pub accel: String,
    pub attempts: u32,
    /// Why the first boot was not the last, if it was not.
    pub retried: Option<String>,
    /// QEMU start → init (host clock).
    pub boot_s: Option<f64>,
    /// `check`, alone (host clock).
    pub check_s: Option<f64>,
    /// `check`'s own load+attach figure, and the time its programs spent in BPF_PROG_LOAD.
    pub load_attach_ms: Option<f64>,
    pub verifier_ms: Option<f64>,
    /// Where the kernel program takes `prev_state` from, as `check` says.
    pub prev_state: Option<String>,
    pub btf: Option<String>,
    /// Every configuration loading at once until the last says `attached` (host clock).
    pub attach_all_s: Option<f64>,
    /// The load, start to last thread done (host clock).
    pub load_s: Option<f64>,
    /// QEMU start → exit.
    pub guest_s: f64,
    pub configs: Vec<ConfigResult>,
    /// Guest-wide: check, nothing left attached, run_delay agreement.
    pub checks: Vec<Check>,
    pub ok: bool,
    /// The console's last lines when the guest did not finish.
    #[serde(default)]
    pub console_tail: Vec<String>,
    /// What ran `xtask workload` (arm64: an aarch64 build, or the host's under qemu-x86_64).
    #[serde(default)]
    pub load: String,
    /// The daemon the guest ran: its file on the host, and whether it is a static build.
    #[serde(default)]
    pub daemon: String,
    /// The wait scan as `run` reported it: `on`, or `unavailable: <the log's reason>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_scan: Option<String>,
    /// The cause split's two parts as `run` reported them, like `wait_scan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_split: Option<String>,
    /// The throttle hooks, in the throttle split's place before 6.8: `on`, `not needed`, or
    /// `unavailable: <the log's reason>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_hooks: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irq_steal_split: Option<String>,
    /// `--irq-tracepoints` as the configuration that asks for it reported it, like `wait_scan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irq_tracepoints: Option<String>,
    /// The stall (`vmt.stall=1` guests): what the daemon showed while the victim waited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall: Option<crate::watch::Watched>,
    /// The throttle scenes (`vmt.throttle=1` guests): each limited cgroup's wait by cause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throttles: Vec<super::throttle::Throttled>,
}

/// Boots `guest` (twice at most) and judges what it produced.
/// `smoke`: judge the boot only; `emulated_load`: the load runs under user-mode emulation.
pub fn run(
    guest: &Guest<'_>,
    smoke: bool,
    emulated_load: bool,
    progress: &mut dyn FnMut(f64, &str),
) -> anyhow::Result<GuestResult> {
    let mut boot = qemu::boot(guest, progress)?;
    let mut attempts = 1;
    let mut retried = None;
    if !boot.finished && (boot.panicked || boot.at("@@ init").is_none()) {
        let why = boot.console.iter().rev().find(|(_, l)| l.contains("panic") || l.contains("KVM internal"));
        let why = why.map_or_else(|| "it never reached init".to_owned(), |(_, l)| l.clone());
        progress(boot.wall_s, &format!("booting again: {why}"));
        retried = Some(why);
        attempts = 2;
        boot = qemu::boot(guest, progress)?;
    }
    std::fs::write(guest.dir.join("console.txt"), console_text(&boot))?;
    // The data port's sections decoded (it carries them gzipped), for whoever reads the report.
    std::fs::write(guest.dir.join("data.txt"), Sections::parse(&boot.data).render())?;
    Ok(if smoke {
        judge_smoke(guest, &boot, attempts, retried)
    } else {
        judge(guest, &boot, attempts, retried, emulated_load)
    })
}

/// A smoke boot: init ran, and the data port brought back this kernel's release, its machine
/// and its vCPUs.
fn judge_smoke(guest: &Guest<'_>, boot: &Boot, attempts: u32, retried: Option<String>) -> GuestResult {
    let data = Sections::parse(&boot.data);
    let meta = data.text("meta");
    let value = |key: &str| meta.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')).unwrap_or("");
    let machine = match guest.kernel.arch {
        super::arch::Arch::X86_64 => "x86_64",
        super::arch::Arch::Arm64 => "aarch64",
    };
    let ok = value("release") == guest.kernel.release
        && value("machine") == machine
        && value("cpus") == guest.cpus.to_string()
        && value("btf").parse::<u64>().is_ok_and(|n| n > 0);
    let detail = format!(
        "release `{}`, machine `{}`, cpus `{}`, /sys/kernel/btf/vmlinux `{}` bytes",
        value("release"),
        value("machine"),
        value("cpus"),
        value("btf")
    );
    let mut list = vec![
        Check::new("reached init", boot.at("@@ init").is_some(), format!("{} console lines", boot.console.len())),
        Check::new("data port", ok, detail),
    ];
    if !boot.finished {
        let why = if boot.timed_out { "the host's deadline passed" } else { "the guest stopped early" };
        list.push(Check::new("finished", false, format!("{why} after {:.0} s", boot.wall_s)));
    }
    let ok = list.iter().all(|c| c.ok);
    GuestResult {
        kernel: guest.kernel.clone(),
        cpus: guest.cpus,
        accel: guest.accel.to_owned(),
        attempts,
        retried,
        boot_s: boot.at("@@ init"),
        check_s: None,
        load_attach_ms: None,
        verifier_ms: None,
        prev_state: None,
        btf: None,
        attach_all_s: None,
        load_s: None,
        guest_s: boot.wall_s,
        configs: Vec::new(),
        checks: list,
        ok,
        console_tail: if ok { Vec::new() } else { tail(boot) },
        load: String::new(),
        daemon: String::new(),
        wait_scan: None,
        throttle_split: None,
        throttle_hooks: None,
        irq_steal_split: None,
        irq_tracepoints: None,
        stall: None,
        throttles: Vec::new(),
    }
}

/// The console's last lines.
fn tail(boot: &Boot) -> Vec<String> {
    boot.console.iter().rev().take(15).rev().map(|(_, l)| l.clone()).collect()
}

fn console_text(boot: &Boot) -> String {
    boot.console.iter().map(|(t, l)| format!("[{t:7.2}] {l}\n")).collect()
}

/// What every configuration is judged against.
struct Context<'a> {
    data: &'a Sections,
    load: Load,
    cpus: usize,
    record: Option<Recording>,
    record_rq: Option<Recording>,
    /// What `record` saw for the sleepers' process: the figure their cgroup must show.
    sleepers_seen: Option<u64>,
}

fn configuration(config: &Config, cx: &Context<'_>) -> ConfigResult {
    let name = config.name;
    let section = |suffix: &str| format!("{name}.{suffix}");
    let times: Vec<f64> = cx.data.text(&section("times")).split_whitespace().filter_map(|t| t.parse().ok()).collect();
    let exit = cx.data.rc(&section("out"));
    let log = cx.data.text(&section("err"));
    let attached = log.contains("attached");
    let mut list =
        vec![Check::new("attached, exit 0", attached && exit == Some(0), format!("exit {exit:?}; {}", last_line(log)))];
    if let Some(recorded) = name.strip_prefix("record") {
        let parsed = if recorded.is_empty() { cx.record.as_ref() } else { cx.record_rq.as_ref() };
        match parsed {
            Some(rec) => list.extend(checks::recording(rec, &cx.load, cx.cpus)),
            None => list.push(Check::new("JSON", false, "record printed no readable document".into())),
        }
        let apart = |l: &str| checks::JUDGED_APART.iter().any(|f| l.contains(&format!("{f} unavailable")));
        let degraded: Vec<&str> =
            log.lines().filter(|l| l.contains("unavailable on this kernel") && !apart(l)).collect();
        list.push(Check::new("every path given", degraded.is_empty(), format!("{degraded:?}")));
    } else {
        let prom = cx.data.text(&section("prom"));
        list.push(promtool(prom, cx.data.rc(&section("prom"))));
        let per_cgroup = !config.command.contains("--per-cgroup=false");
        let cgroup = cx.sleepers_seen.filter(|_| per_cgroup).map(|n| (SLEEPERS_CGROUP, n));
        list.extend(checks::scrape(prom, cx.cpus, cgroup));
        // A feature the configuration switched off (`--throttle-hooks=false`) must say `off`.
        let off = |f: &str| config.command.contains(&format!("--{}=false", f.replace('_', "-")));
        list.extend(checks::JUDGED_APART.iter().map(|f| checks::feature(prom, log, f, off(f))));
        if config.command.contains("--irq-tracepoints") {
            list.push(checks::feature(prom, log, checks::IRQ_TRACEPOINTS, false));
        }
        list.extend(checks::causes(prom));
        list.push(checks::unknown_warning(prom, log));
    }
    ConfigResult {
        name: name.to_owned(),
        command: config.command.to_owned(),
        attached,
        attach_s: (times.len() == 2).then(|| times[1] - times[0]),
        exit,
        ok: list.iter().all(|c| c.ok),
        checks: list,
    }
}

fn judge(guest: &Guest<'_>, boot: &Boot, attempts: u32, retried: Option<String>, emulated_load: bool) -> GuestResult {
    let data = Sections::parse(&boot.data);
    let text = |name: &str| data.text(name);
    let rc = |name: &str| data.rc(name);
    let span = |from: &str, to: &str| Some(boot.at(to)? - boot.at(from)?);
    let check_out = text("check");
    let field = |prefix: &str| check_out.lines().find_map(|l| l.strip_prefix(prefix)).map(|v| v.trim().to_owned());
    let mut load = Load::parse(text("workload-io"), text("workload-spin"), text("schedstat"));
    load.sleeps_unjudged = if guest.cpus as usize > crate::workload::cpus() {
        Some("vCPUs outnumber host CPUs")
    } else if emulated_load {
        Some("the load runs under qemu-x86_64, whose own locks block its threads too")
    } else {
        None
    };
    load.blocks_elsewhere = emulated_load;
    let record = Recording::parse(text("record.out"), "monotonic").ok();
    let sleepers_seen = record.as_ref().map(|r| {
        r.tasks.iter().filter(|t| t.pid == load.sleepers_pid && t.pid != 0).map(|t| t.delay_count).sum::<u64>()
    });
    let cx = Context {
        data: &data,
        load,
        cpus: guest.cpus as usize,
        record,
        record_rq: Recording::parse(text("record-rq.out"), "run_queue").ok(),
        sleepers_seen,
    };
    let configs: Vec<ConfigResult> = CONFIGS.iter().map(|c| configuration(c, &cx)).collect();

    let prev_state = field("prev_state:");
    // Every optional path, or all but those a kernel may lack (judged in `run`'s columns); a
    // stand-in says whether it is on in its feature's place or not needed.
    let optional: Vec<&str> = check_out.lines().filter_map(|l| l.strip_prefix("optional:")).map(str::trim).collect();
    let apart = |o: &str| {
        checks::JUDGED_APART.iter().any(|f| {
            ["unavailable", "on in place of", "not needed"].iter().any(|said| o.starts_with(&format!("{f} {said}")))
        })
    };
    let given = optional.first().is_some_and(|o| o.starts_with("all available"))
        && optional.iter().skip(1).all(|o| apart(o))
        || (!optional.is_empty() && optional.iter().all(|o| apart(o)));
    let mut list = vec![Check::new(
        "check",
        rc("check") == Some(0) && prev_state.is_some() && given,
        format!(
            "exit {:?}; {}; optional: {}",
            rc("check"),
            last_line(check_out),
            if optional.is_empty() { "—".to_owned() } else { optional.join("; ") }
        ),
    )];
    let number = |name: &str| text(name).trim().parse::<u64>().ok();
    let (during, after, fds) = (number("progs.attached"), number("progs.after"), number("fds.after"));
    list.push(Check::new(
        "nothing left attached",
        during.is_some_and(|n| n > 0) && after == Some(0) && fds == Some(0),
        format!(
            "our programs in /proc/kallsyms: {during:?} while attached, {after:?} after exit; \
             bpf-prog fds open after exit: {fds:?}"
        ),
    ));
    list.push(no_btf(text("nobtf-check"), rc("nobtf-check"), text("nobtf-run"), rc("nobtf-run")));
    if let Some(agreement) = cx.record_rq.as_ref().and_then(|r| checks::run_delay(r, &cx.load)) {
        list.push(agreement);
    }
    let stall = guest.append.contains("vmt.stall=1").then(|| {
        let watched = serde_json::from_str::<crate::watch::Watched>(text("stall").trim()).ok();
        list.extend(checks::stall(watched.as_ref(), rc("stall"), text("stall.err")));
        let alerted = stall_capture(
            &guest.dir.join("stall-capture.pftrace"),
            (data.bytes("stall.capture"), text("stall.capture")),
            &format!(
                "the stall's service kept no capture of its alert (exit {:?}; its log: run-stall.err)",
                rc("run-stall.err")
            ),
        );
        list.push(checks::alert_capture(alerted.as_ref(), watched.as_ref(), text("run-stall.err"), STALL_CGROUP));
        let asked = stall_capture(
            &guest.dir.join("stall-demand.pftrace"),
            (data.bytes("stall.demand"), text("stall.demand")),
            &format!(
                "the stall's service kept no capture on demand; `latency-daemon capture`: {}",
                text("stall.demand.err").trim()
            ),
        );
        list.push(checks::stall_capture("capture on demand", asked.as_ref(), watched.as_ref()));
        watched
    });
    let mut throttles = Vec::new();
    if guest.append.contains("vmt.throttle=1") {
        let beside = guest.append.contains("vmt.beside=1");
        for scene in super::throttle::SCENES.iter().filter(|s| beside || !s.beside) {
            let throttled = super::throttle::Throttled::parse(&data, scene);
            list.extend(checks::throttle(&throttled));
            throttles.push(throttled);
        }
    }
    let state = |what: &str| {
        configs
            .iter()
            .find(|c| c.name == "run")
            .and_then(|c| c.checks.iter().find(|k| k.what == what))
            .map(|k| k.detail.clone())
    };
    let (wait_scan, throttle_split, throttle_hooks, irq_steal_split) =
        (state("wait scan"), state("throttle split"), state("throttle hooks"), state("irq steal split"));
    let irq_tracepoints = configs
        .iter()
        .flat_map(|c| &c.checks)
        .find(|k| k.what == checks::IRQ_TRACEPOINTS.replace('_', " "))
        .map(|k| k.detail.clone());
    if !boot.finished {
        let why = if boot.timed_out { "the host's deadline passed" } else { "the guest stopped early" };
        list.push(Check::new("finished", false, format!("{why} after {:.0} s", boot.wall_s)));
    }
    let ok = list.iter().all(|c| c.ok) && configs.iter().all(|c| c.ok);
    let tail = if boot.finished { Vec::new() } else { tail(boot) };
    GuestResult {
        kernel: guest.kernel.clone(),
        cpus: guest.cpus,
        accel: guest.accel.to_owned(),
        attempts,
        retried,
        boot_s: boot.at("@@ init"),
        check_s: span("@@ check uptime", "@@ checked"),
        load_attach_ms: field("load+attach:").and_then(|v| ms_in(&v)),
        verifier_ms: field("verifier:").and_then(|v| v.split(';').next().and_then(ms_in)),
        prev_state,
        btf: field("BTF:"),
        attach_all_s: span("@@ attach uptime", "@@ attached"),
        load_s: span("@@ load uptime", "@@ loaded"),
        guest_s: boot.wall_s,
        configs,
        checks: list,
        ok,
        console_tail: tail,
        load: String::new(),
        daemon: String::new(),
        wait_scan,
        throttle_split,
        throttle_hooks,
        irq_steal_split,
        irq_tracepoints,
        stall: stall.flatten(),
        throttles,
    }
}

/// A capture of the stall as the guest sent it (the trace itself in a gzipped section, or in
/// base64 where the guest has no gzip), written to `path` beside the guest's report and read with
/// Perfetto's classes; `missing` says why there is none.
fn stall_capture(
    path: &std::path::Path,
    sent: (Option<&[u8]>, &str),
    missing: &str,
) -> Result<crate::oracle::perfetto::Capture, String> {
    use base64::Engine as _;
    let bytes = match sent {
        (Some(bytes), _) if !bytes.is_empty() => bytes.to_vec(),
        (_, text) if !text.trim().is_empty() => {
            let text: String = text.split_whitespace().collect();
            base64::engine::general_purpose::STANDARD.decode(text).map_err(|e| format!("base64: {e}"))?
        }
        _ => return Err(missing.to_owned()),
    };
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    crate::oracle::perfetto::read(path).map_err(|e| format!("{e:#}"))
}

/// With /sys/kernel/btf hidden, `check` and `run` exit 1 and say why in one line.
fn no_btf(check: &str, check_rc: Option<i32>, run: &str, run_rc: Option<i32>) -> Check {
    let check_says = check.lines().find(|l| l.starts_with("BTF:")).unwrap_or("").trim();
    // The error is the last line; `run` may log what it found before it (cgroup2, …).
    let run_says = last_line(run);
    let ok = check_rc == Some(1)
        && check_says.contains("CONFIG_DEBUG_INFO_BTF")
        && run_rc == Some(1)
        && run_says.contains("CONFIG_DEBUG_INFO_BTF");
    let detail = format!("check exit {check_rc:?}: `{check_says}`; run exit {run_rc:?}: `{run_says}`");
    Check::new("without BTF", ok, detail)
}

fn last_line(text: &str) -> &str {
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim()
}

/// The first `N ms` figure in a line.
fn ms_in(text: &str) -> Option<f64> {
    let words: Vec<&str> = text.split(|c: char| c.is_whitespace() || c == '(' || c == ';').collect();
    words.windows(2).find(|w| w[1].starts_with("ms")).and_then(|w| w[0].parse().ok())
}

/// `promtool check metrics` on the host, the scrape on its stdin.
fn promtool(prom: &str, wget_rc: Option<i32>) -> Check {
    if prom.is_empty() || wget_rc != Some(0) {
        return Check::new("scrape + promtool", false, format!("no scrape came back (wget exit {wget_rc:?})"));
    }
    let lint = || -> anyhow::Result<std::process::Output> {
        let mut child = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child.stdin.take().map(|mut stdin| stdin.write_all(prom.as_bytes())).transpose()?;
        Ok(child.wait_with_output()?)
    };
    match lint() {
        Ok(out) => {
            let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
            let detail = format!(
                "{} bytes; promtool: {}",
                prom.len(),
                if said.trim().is_empty() { "clean" } else { said.trim() }
            );
            Check::new("scrape + promtool", out.status.success() && said.trim().is_empty(), detail)
        }
        Err(e) => Check::new("scrape + promtool", false, format!("could not run promtool: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_with_their_exit_codes() {
        let data = "noise\n@@begin check\nkernel: 5.10\nready\n@@end check 0\n@@begin meta\ncpus 2\n@@end meta \n";
        let s = Sections::parse(data);
        assert_eq!((s.text("check"), s.rc("check")), ("kernel: 5.10\nready\n", Some(0)));
        assert_eq!((s.text("meta"), s.rc("meta")), ("cpus 2\n", None));
        assert_eq!((s.text("absent"), s.rc("absent")), ("", None));
    }

    #[test]
    fn milliseconds_in_checks_lines() {
        assert_eq!(ms_in("ok (sched_wakeup, sched_switch; 32768 stamp slots; 4697 ms)"), Some(4697.0));
        assert_eq!(ms_in("2210 ms in BPF_PROG_LOAD"), Some(2210.0));
        assert_eq!(ms_in("no figure"), None);
    }

    /// init.sh starts exactly these configurations, with these flags.
    #[test]
    fn init_starts_every_configuration() {
        let init = include_str!("init.sh");
        for c in CONFIGS {
            let flags = c.command.split_once(' ').map_or("", |(_, f)| f);
            let started = init.lines().any(|l| l.starts_with(&format!("start {} ", c.name)) && l.ends_with(flags));
            assert!(started, "init.sh does not start {} as `{}`", c.name, c.command);
            assert!(init.contains(&format!(" {}", c.name)), "{} missing from CONFIGS in init.sh", c.name);
        }
    }
}
