//! The `capture` command: a daemon's pid (given, or the one `latency-daemon run` found in
//! /proc) in; SIGUSR1 sent to it, which asks for a capture on demand, and one line saying so out.
//! It talks to the daemon by signal, not HTTP, so asking changes nothing through a GET and needs
//! the right to signal the daemon (root, or its user), not its web credentials.
use std::process::ExitCode;

use crate::cli::CaptureArgs;

/// Processes named `latency-daemon` whose second argument is `run`, this one left out.
fn running_daemons() -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
            let mut args = cmdline.split(|&b| b == 0);
            let program = args.next().unwrap_or_default();
            let named = program.rsplit(|&b| b == b'/').next() == Some(&b"latency-daemon"[..]);
            named && args.next() == Some(&b"run"[..])
        })
        .collect();
    found.sort_unstable();
    found
}

/// `latency-daemon capture [--pid PID]`: exit 0 when the signal was sent, 1 with one line saying
/// why not.
pub fn main(args: &CaptureArgs) -> ExitCode {
    let pid = match args.pid {
        Some(pid) => pid,
        None => match running_daemons().as_slice() {
            [pid] => *pid,
            [] => return super::fail("no running `latency-daemon run` found in /proc: give its --pid"),
            many => {
                let pids: Vec<String> = many.iter().map(u32::to_string).collect();
                return super::fail(&format!("{} daemons run (pids {}): give one --pid", many.len(), pids.join(", ")));
            }
        },
    };
    let Ok(target) = libc::pid_t::try_from(pid) else {
        return super::fail(&format!("pid {pid} is out of range"));
    };
    // SAFETY: kill takes plain integers; no memory is passed.
    if unsafe { libc::kill(target, libc::SIGUSR1) } != 0 {
        let e = std::io::Error::last_os_error();
        return super::fail(&format!("cannot signal pid {pid}: {e}"));
    }
    ::log::info!(
        "asked latency-daemon (pid {pid}) for a capture: it reads every CPU's events for capture_demand, logs \
         its address and lists it at /api/v1/captures (nothing happens with capture_dir unset: its log says so)"
    );
    ExitCode::SUCCESS
}
