//! Ctrl-C, SIGTERM and SIGHUP for a driver that must unwind through its guards: in, a guard's
//! life; out, a flag the driver checks between steps instead of dying half way.
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::bail;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// Whether a `Signals` guard lives (then children go to process groups of their own).
static CATCHING: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

const CAUGHT: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// While the guard lives, SIGINT/SIGTERM/SIGHUP set the flag instead of killing the process.
#[derive(Debug)]
pub struct Signals;

pub fn catch_signals() -> Signals {
    let handler = on_signal as extern "C" fn(libc::c_int);
    for signal in CAUGHT {
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(signal, handler as libc::sighandler_t) };
    }
    CATCHING.store(true, Ordering::SeqCst);
    Signals
}

/// Whether this process catches the signals now.
pub(super) fn catching() -> bool {
    CATCHING.load(Ordering::SeqCst)
}

impl Drop for Signals {
    fn drop(&mut self) {
        CATCHING.store(false, Ordering::SeqCst);
        for signal in CAUGHT {
            // SAFETY: back to the default disposition.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
    }
}

/// An error once a caught signal arrived (never without `catch_signals`).
pub fn check_interrupted() -> anyhow::Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted; stopping every child and restoring the machine");
    }
    Ok(())
}
