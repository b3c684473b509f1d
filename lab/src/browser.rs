//! A real browser for the live view's test: in, a URL; out, the DOM headless Chromium (Debian's
//! `chromium`) rendered, or a PNG screenshot of the page. Each run has a fresh profile in a scratch
//! directory, no network but what the URL names, and is killed with every process it started
//! (its zygotes, renderers, GPU process) when it finishes or times out, pass or fail.
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::guard::{Proc, Scratch, Slurp};

/// How long one page load may take.
const LIMIT: Duration = Duration::from_secs(60);

/// Width and height of the window, in CSS pixels.
pub type Size = (u32, u32);

/// Chromium's flags for a headless run as root in a container-like sandbox with no session bus:
/// nothing fetched in the background, no first-run UI, a profile of its own.
fn chromium(profile: &Path, size: Size) -> Command {
    let mut c = Command::new("chromium");
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .arg(format!("--window-size={},{}", size.0, size.1));
    c
}

/// Runs Chromium to the end (or kills it after `LIMIT`), returning its stdout; then kills, by
/// pid, any process still running with this run's profile on its command line (a helper the
/// browser started and that outlived it, reparented away from our guard).
fn run(mut command: Command, profile: &Path) -> anyhow::Result<String> {
    let result = run_to_end(&mut command);
    kill_leftovers(profile);
    result
}

fn run_to_end(command: &mut Command) -> anyhow::Result<String> {
    let mut proc = Proc::spawn(command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()), "chromium")
        .context("cargo xtask setup installs chromium")?;
    let stdout = Slurp::read(proc.take_stdout().context("chromium's stdout")?);
    let stderr = Slurp::read(proc.take_stderr().context("chromium's stderr")?);
    // Signal 0: only wait. On timeout `proc` is dropped, which kills the whole tree.
    let status = proc.stop(0, LIMIT)?;
    drop(proc);
    let (out, err) = (stdout.text(), stderr.text());
    if !status.success() {
        bail!("chromium exited with {status}: {}", err.lines().rev().take(5).collect::<Vec<_>>().join(" | "));
    }
    Ok(out)
}

/// Pids whose command line names `profile` (unique to one run: a scratch directory of ours).
fn kill_leftovers(profile: &Path) {
    let marker = profile.as_os_str().as_encoded_bytes();
    let Ok(procs) = std::fs::read_dir("/proc") else { return };
    for pid in procs.flatten().filter_map(|p| p.file_name().to_str()?.parse::<i32>().ok()) {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmdline.windows(marker.len()).any(|w| w == marker) {
            eprintln!("browser: killing pid {pid}, left running by chromium");
            // SAFETY: kill(2) on a process whose command line holds our own scratch directory.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// The page's DOM after it loaded (scripts, if any, run; none on our pages).
pub fn dump_dom(url: &str, size: Size) -> anyhow::Result<String> {
    let profile = Scratch::new("runqlat-chromium")?;
    let mut c = chromium(profile.path(), size);
    c.arg("--dump-dom").arg(url);
    let dom = run(c, profile.path())?;
    if dom.trim().is_empty() {
        bail!("chromium rendered nothing for {url}");
    }
    Ok(dom)
}

/// A PNG of the page's first `size` pixels, written to `png`.
pub fn screenshot(url: &str, png: &Path, size: Size) -> anyhow::Result<()> {
    let profile = Scratch::new("runqlat-chromium")?;
    let mut c = chromium(profile.path(), size);
    c.arg(format!("--screenshot={}", png.display())).arg(url);
    run(c, profile.path())?;
    let bytes = std::fs::read(png).with_context(|| format!("chromium wrote no {}", png.display()))?;
    if !bytes.starts_with(b"\x89PNG") {
        bail!("{} is not a PNG", png.display());
    }
    Ok(())
}
