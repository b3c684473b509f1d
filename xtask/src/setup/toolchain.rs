//! The nightly toolchain that builds the kernel program, its `rust-src` (for `-Z build-std=core`)
//! and a C compiler. In: `rustup`'s listings, the compiler's path; out: nightly, rust-src and gcc added,
//! or why nightly could not be.
use std::process::Command;

use anyhow::bail;

use super::Check;
use crate::cmd;

#[derive(Debug)]
pub struct Nightly;

impl Check for Nightly {
    fn name(&self) -> &'static str {
        "nightly toolchain"
    }
    fn doing(&self) -> &'static str {
        "installing"
    }
    fn is_done(&self) -> anyhow::Result<bool> {
        let list = cmd::stdout(Command::new("rustup").args(["toolchain", "list"]))?;
        Ok(has_nightly(&list))
    }
    fn do_it(&self) -> anyhow::Result<()> {
        let mut install = Command::new("rustup");
        install.args(["toolchain", "install", "nightly", "--profile", "minimal", "--component", "rust-src"]);
        println!("  $ {}", cmd::show(&install));
        if let Err(e) = cmd::run(&mut install) {
            bail!(
                "no `nightly` toolchain, and rustup could not install it ({e:#}): where static.rust-lang.org \
                 is not reachable, install it on a machine where it is (`rustup toolchain install nightly \
                 --component rust-src`) and copy ~/.rustup here"
            )
        }
        Ok(())
    }
}

#[derive(Debug)]
pub struct RustSrc;

impl Check for RustSrc {
    fn name(&self) -> &'static str {
        "rust-src for nightly"
    }
    fn doing(&self) -> &'static str {
        "installing"
    }
    fn is_done(&self) -> anyhow::Result<bool> {
        let installed =
            cmd::stdout(Command::new("rustup").args(["component", "list", "--toolchain", "nightly", "--installed"]))?;
        Ok(installed.lines().any(|line| line.trim() == "rust-src"))
    }
    fn do_it(&self) -> anyhow::Result<()> {
        let mut add = Command::new("rustup");
        add.args(["component", "add", "rust-src", "--toolchain", "nightly"]);
        println!("  $ {}", cmd::show(&add));
        cmd::run(&mut add)
    }
}

/// A C compiler and the C library's headers: rustc links through `cc`, and `ring` (TLS) and
/// bpf-linker compile C. Debian's `gcc` and `libc6-dev`.
#[derive(Debug)]
pub struct CCompiler;

/// What `cc` and the build scripts look for.
const C_COMPILER: &[&str] = &["/usr/bin/cc", "/usr/include/stdio.h"];

impl Check for CCompiler {
    fn name(&self) -> &'static str {
        "C compiler"
    }
    fn doing(&self) -> &'static str {
        "installing"
    }
    fn is_done(&self) -> anyhow::Result<bool> {
        Ok(C_COMPILER.iter().all(|path| std::path::Path::new(path).exists()))
    }
    fn do_it(&self) -> anyhow::Result<()> {
        super::packages::apt_install(&["gcc", "libc6-dev"])
    }
}

/// Whether `rustup toolchain list` shows the toolchain `+nightly` resolves to: `nightly-<host>`,
/// not a dated `nightly-2026-05-19-<host>`.
fn has_nightly(toolchain_list: &str) -> bool {
    toolchain_list.lines().any(|line| {
        let name = line.split_whitespace().next().unwrap_or_default();
        name == "nightly"
            || name.strip_prefix("nightly-").is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit()))
    })
}

#[cfg(test)]
mod tests {
    use super::has_nightly;

    #[test]
    fn nightly_among_others() {
        let list = "stable-x86_64-unknown-linux-gnu (active, default)\n\
                    nightly-x86_64-unknown-linux-gnu\n\
                    1.95.0-x86_64-unknown-linux-gnu\n";
        assert!(has_nightly(list));
    }

    #[test]
    fn a_dated_nightly_is_not_plus_nightly() {
        let list = "stable-x86_64-unknown-linux-gnu (active, default)\n\
                    nightly-2026-05-19-x86_64-unknown-linux-gnu\n";
        assert!(!has_nightly(list));
    }

    #[test]
    fn no_toolchains() {
        assert!(!has_nightly("no installed toolchains\n"));
        assert!(!has_nightly(""));
    }
}
