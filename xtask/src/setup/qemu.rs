//! What `cargo xtask vmtest` boots guests with: QEMU from bookworm-backports (bookworm's 7.2
//! would remove the image's newer qemu-utils: `Breaks: qemu-system-common (<< 8.0)`), x86 and
//! arm (the arm64 kernels; 10.0's `virt` board makes a second PL011 of a second `-serial`),
//! busybox-static for the guest, and the decompressors of Debian's kernel images. In:
//! `dpkg-query`; out: the missing ones installed through a private apt configuration in the
//! vmtest cache, so /etc/apt stays as it is.
use std::process::Command;

use anyhow::Context as _;
use latency_lab::apt::{Apt, Mirrors, cache_dir, source_line};

use super::Check;
use crate::cmd;

const PACKAGES: &[&str] = &["qemu-system-x86", "qemu-system-arm", "busybox-static", "xz-utils", "zstd", "lz4"];
const BACKPORTS: &str = "bookworm-backports";

#[derive(Debug)]
pub struct Qemu;

impl Check for Qemu {
    fn name(&self) -> &'static str {
        "QEMU x86 and arm (backports), busybox-static"
    }
    fn doing(&self) -> &'static str {
        "installing"
    }
    fn is_done(&self) -> anyhow::Result<bool> {
        let out = Command::new("dpkg-query")
            .args(["-W", "-f=${Package} ${Version} ${Status}\\n"])
            .args(PACKAGES)
            .output()
            .context("could not run dpkg-query (setup expects Debian 12)")?;
        Ok(ready(&String::from_utf8_lossy(&out.stdout)))
    }
    fn do_it(&self) -> anyhow::Result<()> {
        let mirrors = Mirrors::of_host()?;
        let lines: Vec<String> = ["bookworm", "bookworm-updates", BACKPORTS]
            .iter()
            .map(|suite| source_line(&mirrors.archive, suite))
            .chain(std::iter::once(source_line(&mirrors.security, "bookworm-security")))
            .collect();
        let apt = Apt::new(&cache_dir().join("apt-install"), &lines)?;
        apt.update(true)?;
        let mut install = apt.command("apt-get");
        install
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "--no-install-recommends", "-t", BACKPORTS])
            .args(PACKAGES);
        println!("  $ {}", cmd::show(&install));
        cmd::run(&mut install)
    }
}

/// Every package installed, and QEMU at 8 or newer (dpkg-query lines `name version status`).
fn ready(dpkg_query: &str) -> bool {
    PACKAGES.iter().all(|pkg| {
        dpkg_query.lines().any(|line| {
            let mut words = line.splitn(3, ' ');
            let (name, version, status) = (words.next(), words.next().unwrap_or(""), words.next());
            let new_enough = !pkg.starts_with("qemu-system-") || qemu_major(version).is_some_and(|major| major >= 8);
            name == Some(*pkg) && status == Some("install ok installed") && new_enough
        })
    })
}

/// `1:10.0.2+ds-2+deb13u1~bpo12+1` → 10.
fn qemu_major(version: &str) -> Option<u32> {
    let upstream = version.split_once(':').map_or(version, |(_, v)| v);
    upstream.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &str = "qemu-system-x86 1:10.0.2+ds-2+deb13u1~bpo12+1 install ok installed\n\
                       qemu-system-arm 1:10.0.2+ds-2+deb13u1~bpo12+1 install ok installed\n\
                       busybox-static 1:1.35.0-4+b3 install ok installed\nxz-utils 5.4.1-1 install ok installed\n\
                       zstd 1.5.4+dfsg2-5 install ok installed\nlz4 1.9.4-1 install ok installed\n";

    #[test]
    fn backports_qemu_and_the_rest() {
        assert!(ready(ALL));
        assert!(!ready(&ALL.replace("1:10.0.2+ds-2+deb13u1~bpo12+1", "1:7.2+dfsg-7+deb12u18")));
        assert!(!ready(&ALL.replace("qemu-system-arm", "qemu-system-mips")));
        assert!(!ready(&ALL.replace("lz4 1.9.4-1 install ok installed", "lz4 1.9.4-1 deinstall ok config-files")));
        assert_eq!(qemu_major("8.2"), Some(8));
    }
}
