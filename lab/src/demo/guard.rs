//! What the demo changes on the machine, and how it is undone on every exit path: in, a sysctl
//! to set; out, a guard that restores it. Ctrl-C, SIGTERM and SIGHUP only raise a flag that the
//! demo checks between steps, so it unwinds through its guards instead of dying half way.
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context as _, bail};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

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
    Signals
}

impl Drop for Signals {
    fn drop(&mut self) {
        for signal in CAUGHT {
            // SAFETY: back to the default disposition.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
    }
}

pub fn check_interrupted() -> anyhow::Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted; stopping every child and restoring the machine");
    }
    Ok(())
}

/// A sysctl set for the guard's life; the old value comes back on drop, pass or fail.
#[derive(Debug)]
pub struct Sysctl {
    path: String,
    old: String,
    restored: bool,
}

impl Sysctl {
    pub fn set(name: &str, value: &str) -> anyhow::Result<Sysctl> {
        let path = format!("/proc/sys/{}", name.replace('.', "/"));
        let old = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?.trim().to_owned();
        std::fs::write(&path, value).with_context(|| format!("writing {value} to {path}"))?;
        Ok(Sysctl { path, old, restored: false })
    }

    /// Puts the old value back and checks that it is there.
    pub fn restore(&mut self) -> anyhow::Result<()> {
        if !self.restored {
            std::fs::write(&self.path, &self.old)
                .with_context(|| format!("restoring {} to {}", self.path, self.old))?;
            self.restored = true;
        }
        let now = std::fs::read_to_string(&self.path).with_context(|| format!("reading {}", self.path))?;
        if now.trim() != self.old {
            bail!("{} is {} after restoring it to {}", self.path, now.trim(), self.old);
        }
        Ok(())
    }

    pub fn old(&self) -> &str {
        &self.old
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        if let Err(err) = self.restore() {
            eprintln!("demo: {err:#}");
        }
    }
}
