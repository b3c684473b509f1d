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

/// Fails unless every STAMPS map of this process's era is gone within 5 s, with the programs
/// using it, once no live process holds it: the tests' check after each test, once its own
/// processes have exited. A map of this era is one whose programs were loaded since this
/// process started (by id, through the programs' load times, so someone else's leftovers from
/// before are not ours). A map a live process holds is in use (another test's daemon running
/// beside this one, a daemon serving this machine); one loaded with no process holding it is
/// kept only by an attachment or a pin: a leak.
pub fn nothing_loaded() -> anyhow::Result<()> {
    let since = started_unix_s()?;
    let deadline = Instant::now() + SETTLE;
    loop {
        let held = held_maps(None);
        let unheld: BTreeSet<u64> = stamps_maps()?.difference(&held).copied().collect();
        let mut found = Vec::new();
        if !unheld.is_empty() {
            let progs = json(&["prog", "show"])?;
            for prog in progs.as_array().into_iter().flatten() {
                let recent = prog["loaded_at"].as_u64().is_some_and(|at| at >= since);
                let mut maps = prog["map_ids"].as_array().into_iter().flatten().filter_map(Value::as_u64);
                if let Some(map) = maps.find(|id| unheld.contains(id)).filter(|_| recent) {
                    found.push(format!("program {} (id {}, map STAMPS id {map})", prog["name"], prog["id"]));
                }
            }
        }
        if found.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("still loaded {SETTLE:?} after exit, held by no process: {}", found.join(", "));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// When this process started, in Unix seconds, rounded down (bpftool's `loaded_at` resolution):
/// its start in clock ticks after boot (/proc/self/stat) plus the boot time (/proc/stat).
fn started_unix_s() -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the command's closing parenthesis; starttime is field 22, the 20th of these.
    let after = stat.rsplit_once(')').context("/proc/self/stat without a command")?.1;
    let ticks: u64 = after.split_whitespace().nth(19).context("/proc/self/stat: no starttime")?.parse()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
        .context("/proc/stat: no btime")?;
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100).max(1);
    Ok(boot + ticks / hz)
}

/// STAMPS maps not in `before` (and not held by a live process if `skip_held`) still loaded
/// after up to `SETTLE`, and the programs using them.
fn remaining(before: &BTreeSet<u64>, skip_held: bool) -> anyhow::Result<Vec<String>> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let held = if skip_held { held_maps(None) } else { BTreeSet::new() };
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

/// Map ids that some live process (or only `pid`) has an fd for (`map_id:` in
/// /proc/*/fdinfo/*).
fn held_maps(pid: Option<u32>) -> BTreeSet<u64> {
    held("map_id:", pid)
}

/// Program ids `pid` holds an fd for, itself or through a link (`prog_id:` in its fdinfo): the
/// programs a process loaded, told apart from any other loaded beside them.
pub fn programs_held_by(pid: u32) -> BTreeSet<u64> {
    held("prog_id:", Some(pid))
}

/// The ids after `key` in the fdinfo of every process, or of `pid`.
fn held(key: &str, pid: Option<u32>) -> BTreeSet<u64> {
    let mut held = BTreeSet::new();
    let dirs: Vec<std::path::PathBuf> = match pid {
        Some(pid) => vec![format!("/proc/{pid}").into()],
        None => {
            let Ok(procs) = std::fs::read_dir("/proc") else { return held };
            procs.flatten().map(|p| p.path()).collect()
        }
    };
    for process in dirs {
        let Ok(fds) = std::fs::read_dir(process.join("fdinfo")) else { continue };
        for fd in fds.flatten() {
            let text = std::fs::read_to_string(fd.path()).unwrap_or_default();
            held.extend(text.lines().filter_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok()));
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
    Ok(programs()?.into_iter().filter(|p| p.name.starts_with("sched_")).collect())
}

/// Every BPF program loaded, by id, name and the kernel's run statistics.
pub fn programs() -> anyhow::Result<Vec<ProgStats>> {
    let progs = json(&["prog", "show"])?;
    Ok(progs
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let name = p["name"].as_str()?;
            Some(ProgStats {
                id: p["id"].as_u64().unwrap_or(0),
                name: name.to_owned(),
                run_time_ns: p["run_time_ns"].as_u64().unwrap_or(0),
                run_cnt: p["run_cnt"].as_u64().unwrap_or(0),
            })
        })
        .collect())
}
