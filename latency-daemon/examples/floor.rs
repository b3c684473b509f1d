//! The overhead benchmark's floor (`cargo xtask bench`): attaches the cheapest program that can sit
//! on our three tracepoints (it only counts events) and keeps it attached until SIGTERM or SIGINT.
//! What our program costs beyond this is what our logic costs. In: nothing; out: "floor attached"
//! on stderr once attached, exit 0 after detaching.
use std::process::ExitCode;

use latency_daemon::kernel::probe::{self, ProbeError};

/// The floor program, built by latency-daemon's build.rs (aya-build) beside ours.
static FLOOR: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/latency-floor"));

fn main() -> ExitCode {
    match attach_until_signal() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floor: {e}");
            ExitCode::FAILURE
        }
    }
}

fn attach_until_signal() -> Result<(), Box<dyn std::error::Error>> {
    probe::raise_memlock();
    let mut ebpf = aya::EbpfLoader::new().load(FLOOR).map_err(ProbeError::Load)?;
    let links = probe::attach(&mut ebpf)?;
    eprintln!("latency-daemon: floor attached");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let (mut term, mut int) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        Ok::<(), std::io::Error>(())
    })?;
    // Dropping the object detaches every program.
    drop(links);
    drop(ebpf);
    Ok(())
}
