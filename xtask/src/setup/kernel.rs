//! What the kernel must offer: BTF for offsets, tracefs for tracepoints, debugfs for perf.
//! In: /sys and /proc/mounts; out: mounts made, or a clear error when BTF is missing.
use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, bail};

use super::Check;
use crate::cmd;

/// Shown instead of "ok" when not root: setup still runs, the listed steps will fail.
pub const NOT_ROOT: &str = "NO: apt-get install, mount, and loading eBPF (`run`, `test`) will fail";

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail (POSIX).
    (unsafe { libc::geteuid() }) == 0
}

const BTF: &str = "/sys/kernel/btf/vmlinux";

#[derive(Debug)]
pub struct Btf;

impl Check for Btf {
    fn name(&self) -> &'static str {
        "kernel BTF"
    }
    fn doing(&self) -> &'static str {
        "missing"
    }
    fn is_done(&self) -> anyhow::Result<bool> {
        Ok(Path::new(BTF).exists())
    }
    fn do_it(&self) -> anyhow::Result<()> {
        let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        bail!(
            "this kernel ({}) has no {BTF}: it was built without CONFIG_DEBUG_INFO_BTF=y. The daemon \
             reads task_struct offsets from it; boot a kernel with BTF (Debian 12's own kernels have it)",
            release.trim()
        )
    }
}

const TRACING: &str = "/sys/kernel/tracing";

#[derive(Debug)]
pub struct Tracefs;

impl Check for Tracefs {
    fn name(&self) -> &'static str {
        "tracefs at /sys/kernel/tracing"
    }
    fn doing(&self) -> &'static str {
        "mounting"
    }
    fn is_done(&self) -> anyhow::Result<bool> {
        Ok(Path::new(TRACING).join("events").is_dir())
    }
    fn do_it(&self) -> anyhow::Result<()> {
        mount("tracefs", TRACING)
    }
}

const DEBUG: &str = "/sys/kernel/debug";

#[derive(Debug)]
pub struct Debugfs;

impl Check for Debugfs {
    fn name(&self) -> &'static str {
        "debugfs at /sys/kernel/debug"
    }
    fn doing(&self) -> &'static str {
        "mounting"
    }
    fn is_done(&self) -> anyhow::Result<bool> {
        let mounts = fs::read_to_string("/proc/mounts").context("reading /proc/mounts")?;
        Ok(is_mounted(&mounts, DEBUG, "debugfs"))
    }
    fn do_it(&self) -> anyhow::Result<()> {
        mount("debugfs", DEBUG)
    }
}

fn mount(fstype: &str, target: &str) -> anyhow::Result<()> {
    let mut mount = Command::new("mount");
    mount.args(["-t", fstype, fstype, target]);
    println!("  $ {}", cmd::show(&mount));
    cmd::run(&mut mount)
}

/// Whether /proc/mounts lists a `fstype` mount at `target`.
fn is_mounted(proc_mounts: &str, target: &str, fstype: &str) -> bool {
    proc_mounts.lines().any(|line| {
        let mut fields = line.split_whitespace().skip(1);
        fields.next() == Some(target) && fields.next() == Some(fstype)
    })
}

#[cfg(test)]
mod tests {
    use super::is_mounted;

    const MOUNTS: &str = "\
sysfs /sys sysfs rw,relatime 0 0
tracefs /sys/kernel/tracing tracefs rw,relatime 0 0
none /sys/kernel/debug tmpfs rw 0 0
";

    #[test]
    fn finds_a_mount_by_target_and_type() {
        assert!(is_mounted(MOUNTS, "/sys/kernel/tracing", "tracefs"));
    }

    #[test]
    fn another_filesystem_at_the_target_does_not_count() {
        assert!(!is_mounted(MOUNTS, "/sys/kernel/debug", "debugfs"));
    }

    #[test]
    fn nothing_mounted() {
        assert!(!is_mounted("", "/sys/kernel/debug", "debugfs"));
    }
}
