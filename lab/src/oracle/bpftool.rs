//! bpftool, an independent view of what the kernel has loaded: in, bpftool's JSON; out, the
//! STAMPS maps (every instance of our program has one), programs that outlived their users, and
//! the kernel's run-time statistics per program.
use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::cmd;

/// The kernel frees maps and programs a little after their last fd closes (RCU, a work queue).
const SETTLE: Duration = Duration::from_secs(5);

/// `bpftool -j ARGS`, parsed; an empty output is an empty list.
pub fn json(args: &[&str]) -> anyhow::Result<Value> {
    let text = cmd::stdout(Command::new("bpftool").arg("-j").args(args))?;
    if text.trim().is_empty() {
        return Ok(Value::Array(Vec::new()));
    }
    serde_json::from_str(&text).context("bpftool printed no JSON")
}

/// Ids of the STAMPS maps loaded now.
pub fn stamps_maps() -> anyhow::Result<BTreeSet<u64>> {
    let maps = json(&["map", "show"])?;
    Ok(maps
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["name"] == "STAMPS")
        .filter_map(|m| m["id"].as_u64())
        .collect())
}

/// Our programs that outlived a run: STAMPS maps loaded since `before` (and the programs using
/// them) that no live process holds. Every child of the run is reaped by now, so a map a live
/// process holds belongs to someone else (another user of this machine may run the daemon).
/// Waits up to 5 s for the kernel to free them.
pub fn leftovers(before: &BTreeSet<u64>) -> anyhow::Result<Vec<String>> {
    remaining(before, true)
}

/// Fails unless no STAMPS map is loaded, nor a program using one, within 5 s: the tests' check
/// after each test, where anything of ours still loaded, held or not, is a leak.
pub fn nothing_loaded() -> anyhow::Result<()> {
    let found = remaining(&BTreeSet::new(), false)?;
    if !found.is_empty() {
        bail!("still loaded {SETTLE:?} after exit: {}", found.join(", "));
    }
    Ok(())
}

/// STAMPS maps not in `before` (and not held by a live process if `skip_held`) still loaded
/// after up to `SETTLE`, and the programs using them.
fn remaining(before: &BTreeSet<u64>, skip_held: bool) -> anyhow::Result<Vec<String>> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let held = if skip_held { held_maps() } else { BTreeSet::new() };
        let new: Vec<u64> =
            stamps_maps()?.into_iter().filter(|id| !before.contains(id) && !held.contains(id)).collect();
        if new.is_empty() {
            return Ok(Vec::new());
        }
        if Instant::now() > deadline {
            let mut found: Vec<String> = new.iter().map(|id| format!("map STAMPS (id {id})")).collect();
            let progs = json(&["prog", "show"])?;
            for prog in progs.as_array().into_iter().flatten() {
                let ids = prog["map_ids"].as_array().into_iter().flatten().filter_map(Value::as_u64);
                if ids.into_iter().any(|i| new.contains(&i)) {
                    found.push(format!("program {} (id {})", prog["name"], prog["id"]));
                }
            }
            return Ok(found);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Map ids that some live process has an fd for (`map_id:` in /proc/*/fdinfo/*).
fn held_maps() -> BTreeSet<u64> {
    let mut held = BTreeSet::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return held };
    for process in procs.flatten() {
        let Ok(fds) = std::fs::read_dir(process.path().join("fdinfo")) else { continue };
        for fd in fds.flatten() {
            let text = std::fs::read_to_string(fd.path()).unwrap_or_default();
            held.extend(text.lines().filter_map(|l| l.strip_prefix("map_id:")?.trim().parse::<u64>().ok()));
        }
    }
    held
}

/// A loaded program's run time as the kernel counts it (with kernel.bpf_stats_enabled=1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgStats {
    pub id: u64,
    pub name: String,
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// Every loaded program on a scheduler tracepoint (kernel names are cut at 15 bytes:
/// `sched_wakeup_ne`, so they are matched by the `sched_` prefix).
pub fn sched_programs() -> anyhow::Result<Vec<ProgStats>> {
    let progs = json(&["prog", "show"])?;
    Ok(progs
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let name = p["name"].as_str()?;
            name.starts_with("sched_").then(|| ProgStats {
                id: p["id"].as_u64().unwrap_or(0),
                name: name.to_owned(),
                run_time_ns: p["run_time_ns"].as_u64().unwrap_or(0),
                run_cnt: p["run_cnt"].as_u64().unwrap_or(0),
            })
        })
        .collect())
}
