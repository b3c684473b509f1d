//! Debian packages the tests and demos call (perf, bpftool, the libbpf-tools oracles, load
//! generators, Prometheus, jsonnet for the Grafana mixin, Chromium for the live view's browser
//! test, podman and containerd for real containers, systemd-analyze and strace for the service
//! unit and the seccomp profile, lintian and mmdebstrap for the release packages). In:
//! `dpkg-query`; out: the missing ones installed, services not started (`apt_install`, which
//! the other setup steps that install from the host's sources use too).
use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::Context as _;

use super::Check;
use crate::cmd;

const PACKAGES: &[&str] = &[
    "linux-perf",
    "bpftool",
    "libbpf-tools",
    "rt-tests",
    "stress-ng",
    "prometheus",
    "prometheus-alertmanager",
    "jsonnet",
    "chromium",
    // Real containers (podman with runc: crun refuses hybrid cgroups) for the container-label test.
    "podman",
    "runc",
    "containerd",
    "busybox-static",
    // The init of the pause image `podman kube play` builds locally (the DaemonSet's pod template
    // test); a Recommends of podman that --no-install-recommends leaves out.
    "catatonit",
    // systemd-analyze verify/security for deploy/systemd (PID 1 need not be systemd).
    "systemd",
    // strace: the daemon's system calls, for the unit's SystemCallFilter and the container's
    // seccomp profile (`cargo xtask seccomp`).
    "strace",
    // The release artifacts' checks (`lab::package`, tests/package.rs): lintian on each .deb, a
    // scratch Debian root to install and purge it in, `file` for lintian, the kernel's syscall
    // table header for the arm64 seccomp profile.
    "lintian",
    "mmdebstrap",
    "file",
    "linux-libc-dev",
    // The shells whose completions the packages ship, to complete with them.
    "zsh",
    "fish",
];

#[derive(Debug)]
pub struct DebPackages;

impl Check for DebPackages {
    fn name(&self) -> &'static str {
        "Debian packages"
    }
    fn doing(&self) -> &'static str {
        "installing"
    }
    fn is_done(&self) -> anyhow::Result<bool> {
        Ok(missing_now()?.is_empty())
    }
    fn do_it(&self) -> anyhow::Result<()> {
        let missing = missing_now()?;
        println!("  missing: {}", missing.join(" "));
        apt_install(&missing)
    }
}

/// `apt-get update`, then `apt-get install` of `packages` from the host's sources, without
/// recommends and with no service started (what setup installs is started by the tests that
/// use it, on ports they choose). Progress streams.
pub fn apt_install(packages: &[&str]) -> anyhow::Result<()> {
    let _no_services = NoServiceStarts::install()?;
    // Without a fresh package list, installs 404 on mirrors that rotated old versions out.
    let mut update = Command::new("apt-get");
    update.args(["-q", "update"]);
    println!("  $ {}", cmd::show(&update));
    cmd::run(&mut update)?;
    let mut install = Command::new("apt-get");
    install.env("DEBIAN_FRONTEND", "noninteractive").args(["install", "-y", "--no-install-recommends"]).args(packages);
    println!("  $ {}", cmd::show(&install));
    cmd::run(&mut install)
}

fn missing_now() -> anyhow::Result<Vec<&'static str>> {
    // One call for all; exit status 1 only means some package is unknown to dpkg, which the
    // output already tells us, so it is not an error here.
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Package} ${Status}\\n"])
        .args(PACKAGES)
        .output()
        .context("could not run dpkg-query (setup expects Debian 12)")?;
    Ok(missing(PACKAGES, &String::from_utf8_lossy(&out.stdout)))
}

/// The packages of `wanted` that `dpkg-query -f='${Package} ${Status}\n'` does not show as
/// installed (unknown, removed with config files left, half-installed…).
fn missing<'a>(wanted: &[&'a str], dpkg_query: &str) -> Vec<&'a str> {
    wanted
        .iter()
        .copied()
        .filter(|pkg| {
            !dpkg_query.lines().any(|line| {
                line.split_once(' ')
                    .is_some_and(|(name, status)| name == *pkg && status.trim() == "install ok installed")
            })
        })
        .collect()
}

const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";

/// Keeps prometheus and alertmanager from starting while they are installed, where needed.
/// Without systemd as PID 1 nothing is needed: Debian 12's invoke-rc.d finds the runlevel
/// "unknown", matches no rcN.d start link and starts nothing (checked with `--query`). Under
/// systemd, deb-systemd-invoke would start both; it obeys policy-rc.d, so we put one in place
/// (exit 101 = "do not start") if there is none, and remove it again when dropped.
#[derive(Debug)]
struct NoServiceStarts {
    written: bool,
}

impl NoServiceStarts {
    fn install() -> anyhow::Result<Self> {
        let needed = Path::new("/run/systemd/system").exists() && !Path::new(POLICY_RC_D).exists();
        if needed {
            println!("  writing a temporary {POLICY_RC_D} so no service starts");
            fs::write(
                POLICY_RC_D,
                "#!/bin/sh\n# Temporary, from `cargo xtask setup`; delete if it outlived the install.\nexit 101\n",
            )
            .with_context(|| format!("writing {POLICY_RC_D}"))?;
            use std::os::unix::fs::PermissionsExt as _;
            fs::set_permissions(POLICY_RC_D, fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {POLICY_RC_D} executable"))?;
        }
        Ok(Self { written: needed })
    }
}

impl Drop for NoServiceStarts {
    fn drop(&mut self) {
        if self.written
            && let Err(err) = fs::remove_file(POLICY_RC_D)
        {
            eprintln!("setup: could not remove the temporary {POLICY_RC_D}: {err}; delete it by hand");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::missing;

    const WANTED: &[&str] = &["linux-perf", "bpftool", "stress-ng", "prometheus"];

    #[test]
    fn all_installed() {
        let out = "linux-perf install ok installed\nbpftool install ok installed\n\
                   stress-ng install ok installed\nprometheus install ok installed\n";
        assert!(missing(WANTED, out).is_empty());
    }

    #[test]
    fn unknown_and_removed_packages_are_missing() {
        // dpkg-query prints nothing for a package it never heard of.
        let out = "linux-perf install ok installed\nbpftool deinstall ok config-files\n\
                   prometheus install ok installed\n";
        assert_eq!(missing(WANTED, out), ["bpftool", "stress-ng"]);
    }

    #[test]
    fn nothing_known() {
        assert_eq!(missing(WANTED, ""), WANTED);
    }

    #[test]
    fn a_prefix_is_not_the_package() {
        let out = "prometheus-alertmanager install ok installed\n";
        assert_eq!(missing(&["prometheus"], out), ["prometheus"]);
    }
}
