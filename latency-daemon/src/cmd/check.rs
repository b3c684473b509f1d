//! The `check` command: can this machine run the monitor? Prints one line per requirement and
//! returns whether all hold; a failing line names the missing piece.
use std::io::Write as _;
use std::{process::ExitCode, time::Instant};

/// A line of the report; a reader that left (`check | head`) ends nothing but the report (println!
/// would panic on EPIPE while the programs are attached).
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

use latency_common::knobs::Clock;

use crate::{
    cli::{CheckArgs, RunArgs},
    config::{Config, ConfigError},
    host::system,
    kernel::{
        btf::{Btf, VMLINUX},
        caps::{self, Caps},
        feature::Feature,
        load, privileges,
        probe::ProbeOptions,
    },
};

/// `latency-daemon check`: exit 0 when ready, 1 when not.
pub fn main(args: CheckArgs) -> ExitCode {
    if check(&args) { ExitCode::SUCCESS } else { ExitCode::from(super::FAILED) }
}

/// The configuration `run --config path` would start with: one line if valid, else a line per
/// problem; whether it is valid.
fn config_file(path: &std::path::Path) -> bool {
    let run = RunArgs { config: Some(path.to_path_buf()), ..RunArgs::default() };
    match Config::load(&run) {
        Ok(config) => {
            let web =
                config.web_config_file.map_or_else(String::new, |w| format!("; its web config {}: valid", w.display()));
            say!("config:       {}: valid (with the RUNQLAT_* environment over it){web}", path.display());
            true
        }
        Err(ConfigError::Invalid { problems }) => {
            for p in problems {
                say!("config:       INVALID: {p}");
            }
            false
        }
        Err(e) => {
            say!("config:       INVALID: {e}");
            false
        }
    }
}

/// Runs every check, prints the results, and returns true when the monitor can run here.
fn check(args: &CheckArgs) -> bool {
    let mut ready = true;
    say!("kernel:       {} ({})", system::kernel_release(), std::env::consts::ARCH);
    if let Some(path) = &args.config {
        ready &= config_file(path);
    }

    match Btf::from_sys_fs().and_then(|btf| btf.task_layout()) {
        Ok(l) => {
            say!(
                "BTF:          {VMLINUX}: task_struct pid@{} tgid@{} comm@{} prio@{} {}@{}; sched_switch {} prev_state",
                l.pid.offset,
                l.tgid.offset,
                l.comm.offset,
                l.prio.offset,
                l.state_name,
                l.state.offset,
                if l.switch_has_prev_state { "passes" } else { "lacks (read from the task)" }
            );
            say!("prev_state:   {}", prev_state_source(l.switch_has_prev_state, l.state_name));
        }
        Err(e) => {
            say!("BTF:          MISSING: {e}");
            ready = false;
        }
    }

    // The same gate `record` and `run` pass; here it also says which capabilities were found.
    match (caps::require(), Caps::current()) {
        (Err(e), _) => {
            say!("capabilities: MISSING {}", e.missing.join(", "));
            ready = false;
        }
        (Ok(()), Ok(caps)) => {
            let how = if caps.sys_admin { "CAP_SYS_ADMIN" } else { "CAP_BPF, CAP_PERFMON" };
            say!("capabilities: ok ({how})");
            // What `run` and `record` keep once attached (the same decision, nothing dropped here).
            if let Ok(before) = privileges::Sets::current() {
                let plan = privileges::Plan::new(before, privileges::bpf_needs_capability());
                say!("after attach: {}", plan.describe(before));
            }
        }
        (Ok(()), Err(e)) => {
            say!("capabilities: unknown ({e})");
            ready = false;
        }
    }

    if ready {
        let started = Instant::now();
        let options = ProbeOptions {
            per_task: true,
            max_tasks: 1024,
            ceiling_ns: u64::MAX,
            // Every optional feature on, so the verifier checks all of the program.
            clock: Clock::RunQueue,
            cgroups: true,
            max_cgroups: 16,
            cgroup_removals: true,
            attribute_ns: 1,
            wait_scan: true,
            split_throttle: true,
            throttle_hooks: true,
            throttle_unknown: true,
            split_stolen: true,
            split_irq: true,
            // The smallest ring: whether `record --capture` can keep one here.
            capture_events: 2,
            ..ProbeOptions::default()
        };
        match load::load(&options) {
            Ok((probe, degraded)) => {
                say!(
                    "load+attach:  ok (sched_wakeup, sched_wakeup_new, sched_switch; {} stamp slots; {:.0} ms)",
                    probe.stamp_capacity(),
                    started.elapsed().as_secs_f64() * 1e3
                );
                say!("stamps:       {}", system::stamp_slots_reason(probe.stamp_capacity()));
                let loads = probe.load_times();
                let total: f64 = loads.iter().map(|(_, d)| d.as_secs_f64() * 1e3).sum();
                let each: Vec<String> =
                    loads.iter().map(|(p, d)| format!("{p} {:.0} ms", d.as_secs_f64() * 1e3)).collect();
                say!("verifier:     {total:.0} ms in BPF_PROG_LOAD; {}", each.join(", "));
                let on: Vec<&str> = Feature::ALL.into_iter().filter(|&f| probe.is_on(f)).map(Feature::name).collect();
                drop(probe);
                if degraded.is_empty() {
                    say!("optional:     all available ({})", on.join(", "));
                }
                for d in &degraded {
                    say!("optional:     {} unavailable (runs without it): {}", d.feature.name(), d.reason());
                }
                // A stand-in says whether this kernel needs it (`Room::stands_in_for`).
                let states = load::states(&options, &degraded);
                let is_on = |f: Feature| states.iter().any(|&(g, s)| g == f && s == "on");
                for &(f, state) in &states {
                    let Some(other) = f.room().stands_in_for() else { continue };
                    // What gives the part instead: the first one up the chain that is on.
                    let mut by = other;
                    while !is_on(by) {
                        match by.room().stands_in_for() {
                            Some(up) => by = up,
                            None => break,
                        }
                    }
                    match state {
                        "on" => say!("optional:     {} on in place of {}", f.name(), other.name()),
                        "off" if is_on(by) => say!("optional:     {} not needed: {} is on", f.name(), by.name()),
                        _ => {}
                    }
                }
            }
            Err(e) => {
                say!("load+attach:  FAILED: {e}");
                ready = false;
            }
        }
    } else {
        say!("load+attach:  skipped (fix the lines above first)");
    }
    say!("{}", if ready { "ready" } else { "not ready" });
    ready
}

/// Where the kernel program takes a switched-out task's state from.
fn prev_state_source(from_tracepoint: bool, state_name: &str) -> String {
    if from_tracepoint {
        "sched_switch's prev_state argument (5.18+)".to_owned()
    } else {
        format!("task_struct.{state_name} (this sched_switch has no prev_state argument: kernels before 5.18)")
    }
}
