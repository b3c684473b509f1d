//! The overhead benchmark's floor (`cargo xtask bench`): attaches the cheapest program that can sit
//! on our three tracepoints (it only counts events) and keeps it attached until SIGTERM or SIGINT.
//! What our program costs beyond this is what our logic costs; `--clock` adds one
//! `bpf_ktime_get_ns` per event (what the clock alone costs). In: nothing; out: "floor attached"
//! on stderr once attached, exit 0 after detaching. With `--ours`, our own program with the
//! daemon's default options instead, and with `--object PATH` another build of it (the bench's
//! "no diagnostics" row): loaded the same way, without the daemon's drains, so two builds
//! compare like with like.
use std::process::ExitCode;

use latency_daemon::kernel::probe::{self, Probe, ProbeError, ProbeOptions};

/// The floor program, built by latency-daemon's build.rs (aya-build) beside ours.
static FLOOR: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/latency-floor"));
/// The floor plus one `bpf_ktime_get_ns` per event (`--clock`).
static FLOOR_CLOCK: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/latency-floor-clock"));

fn main() -> ExitCode {
    match attach_until_signal() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floor: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The daemon's defaults: per-cgroup histograms on, no per-task map, no attribution.
fn default_options() -> ProbeOptions {
    ProbeOptions {
        max_tasks: 1,
        cgroups: true,
        cgroup_removals: true,
        split_throttle: true,
        split_stolen: true,
        ..ProbeOptions::default()
    }
}

fn attach_until_signal() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (floor, ours) = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => (FLOOR, None),
        ["--clock"] => (FLOOR_CLOCK, None),
        ["--ours"] => (FLOOR, Some(Probe::load(&default_options())?)),
        ["--object", path] => {
            // Copied into 8-byte-aligned storage: the ELF parser reads it in place.
            let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
            let mut aligned = vec![0u64; bytes.len().div_ceil(8)];
            // SAFETY: `aligned` has at least `bytes.len()` bytes; u64 has no invalid bit patterns.
            let view = unsafe { std::slice::from_raw_parts_mut(aligned.as_mut_ptr().cast::<u8>(), bytes.len()) };
            view.copy_from_slice(&bytes);
            (FLOOR, Some(Probe::load_object(&default_options(), view)?))
        }
        _ => return Err("usage: floor [--clock | --ours | --object PATH]".into()),
    };
    if let Some(ours) = ours {
        eprintln!("latency-daemon: ours attached");
        wait_for_signal()?;
        drop(ours);
        return Ok(());
    }
    probe::raise_memlock();
    let mut ebpf = aya::EbpfLoader::new().load(floor).map_err(ProbeError::Load)?;
    let links = probe::attach(&mut ebpf)?;
    eprintln!("latency-daemon: floor attached");
    wait_for_signal()?;
    // Dropping the object detaches every program.
    drop(links);
    drop(ebpf);
    Ok(())
}

fn wait_for_signal() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let (mut term, mut int) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        Ok::<(), std::io::Error>(())
    })?;
    Ok(())
}
