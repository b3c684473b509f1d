//! docs/configuration.md's settings tables and deploy/latency-daemon.toml are what the daemon's
//! one table of settings renders to (`config::reference`): a setting added, renamed, or given a
//! new default, help text or reload rule without regenerating them fails here.
//! Regenerate: `UPDATE_GOLDEN=1 cargo test -p latency-daemon --test config_reference`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use latency_daemon::config::reference;

fn workspace_file(path: &str) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().expect("the crate sits in the workspace").join(path)
}

/// Writes `expected` under UPDATE_GOLDEN; otherwise panics at the first line that differs.
fn check(path: &Path, actual: &str, expected: &str) {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(path, expected).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    if actual == expected {
        return;
    }
    let at = actual.lines().zip(expected.lines()).position(|(a, e)| a != e);
    let at = at.unwrap_or_else(|| actual.lines().count().min(expected.lines().count()));
    panic!(
        "{} is stale at line {}:\n  file:      {:?}\n  generated: {:?}\n\
         (regenerate: UPDATE_GOLDEN=1 cargo test -p latency-daemon --test config_reference)",
        path.display(),
        at + 1,
        actual.lines().nth(at).unwrap_or("<end>"),
        expected.lines().nth(at).unwrap_or("<end>"),
    );
}

#[test]
fn configuration_reference_is_generated() {
    let path = workspace_file("docs/configuration.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let expected = reference::with_block(&doc, &reference::markdown())
        .unwrap_or_else(|| panic!("{} has no `{}` … `{}` block", path.display(), reference::BEGIN, reference::END));
    check(&path, &doc, &expected);
}

#[test]
fn example_file_is_generated() {
    let path = workspace_file("deploy/latency-daemon.toml");
    let file = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let expected = reference::example_toml().expect("the defaults serialize to TOML");
    check(&path, &file, &expected);
}

/// The tables are not vacuous: every flag of `run --help` is in the reference, with its variable.
#[test]
fn every_flag_is_in_the_reference() {
    let markdown = reference::markdown();
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_latency-daemon"))
        .args(["run", "--help"])
        .output()
        .expect("latency-daemon run --help");
    let help = String::from_utf8_lossy(&help.stdout);
    let flags: Vec<&str> = help
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .map(|l| l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).next().unwrap_or_default())
        .filter(|f| *f != "help")
        .collect();
    assert!(flags.len() >= 30, "{help}");
    for flag in flags {
        let env = format!("`RUNQLAT_{}`", flag.replace('-', "_").to_uppercase());
        assert!(markdown.contains(&format!("`--{flag}`")) && markdown.contains(&env), "--{flag} / {env} missing");
    }
}
