//! docs/design.md's "Layout" section against the tree: every top-level folder of the workspace and every
//! folder of the daemon's and the lab's sources is named there, and every file or folder it names
//! exists where it says, so the map cannot silently go stale.
use std::path::{Path, PathBuf};

use crate::workspace_root;

/// The fenced block under `## Layout`.
fn layout_block(readme: &str) -> &str {
    let section = readme.split_once("## Layout\n").map_or("", |(_, rest)| rest);
    section.split("```").nth(1).unwrap_or("")
}

/// Names of the folders directly in `dir`, skipping hidden ones and build output.
fn folders(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != "target" && !n.ends_with("-report"))
        .collect();
    names.sort();
    names
}

/// One entry of the block: the path it describes (`latency-daemon/src/cmd/`) and its description
/// (the rest of its line and its continuation lines).
#[derive(Debug)]
struct Entry {
    path: String,
    text: String,
}

/// The block's entries: a path at column 0 (top level) or 2 (inside the last top-level one),
/// followed by its description; deeper lines continue the entry above.
fn entries(block: &str) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    let mut top = String::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let indent = line.len() - line.trim_start().len();
        let (head, rest) = line.trim_start().split_once("  ").unwrap_or((line.trim_start(), ""));
        if indent == 0 {
            top = head.trim().to_owned();
            out.push(Entry { path: top.clone(), text: rest.to_owned() });
        } else if indent == 2 {
            out.push(Entry { path: format!("{top}{}", head.trim()), text: rest.to_owned() });
        } else if let Some(last) = out.last_mut() {
            last.text.push(' ');
            last.text.push_str(line.trim());
        }
    }
    out
}

/// The file and folder names in a description: words ending in `/` or in a file extension of
/// ours (`drain.rs`, `golden/`, `docs/kernels.md`); flags, crates and prose are not names.
fn names(text: &str) -> Vec<String> {
    const EXTENSIONS: [&str; 9] = [".rs", ".sh", ".md", ".toml", ".yml", ".yaml", ".json", ".svg", ".png"];
    text.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/')))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.ends_with('/') || EXTENSIONS.iter().any(|x| w.ends_with(x)))
        .map(str::to_owned)
        .collect()
}

/// Every path under `dir` (files and folders, relative, `/`-separated), skipping hidden ones
/// and build output.
fn tree(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        let relative = format!("{prefix}{name}");
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            tree(&e.path(), &format!("{relative}/"), out);
        }
        out.push(relative);
    }
}

/// Whether `name` (a description's word) is a path under `base` (at any depth) or from the root.
fn exists(root: &Path, base: &Path, paths: &[String], name: &str) -> bool {
    let name = name.trim_end_matches('/');
    root.join(name).exists()
        || base.join(name).exists()
        || paths.iter().any(|p| p == name || p.ends_with(&format!("/{name}")))
}

#[test]
fn readme_layout_names_every_folder() {
    let root = workspace_root();
    let readme = std::fs::read_to_string(root.join("docs/design.md")).unwrap_or_else(|e| panic!("docs/design.md: {e}"));
    let block = layout_block(&readme);
    assert!(!block.is_empty(), "docs/design.md has no fenced block under ## Layout");
    let mut missing = Vec::new();
    for dir in ["", "latency-daemon/src", "lab/src", "xtask/src"] {
        for name in folders(&root.join(dir)) {
            if !block.contains(&format!("{name}/")) {
                missing.push(format!("{dir}/{name}"));
            }
        }
    }
    assert!(missing.is_empty(), "docs/design.md's Layout does not name {missing:?}");
}

#[test]
fn every_file_the_layout_names_exists() {
    let root = workspace_root();
    let readme = std::fs::read_to_string(root.join("docs/design.md")).unwrap_or_else(|e| panic!("docs/design.md: {e}"));
    let entries = entries(layout_block(&readme));
    assert!(entries.len() > 20, "found only {} entries in docs/design.md's Layout", entries.len());
    let mut stale = Vec::new();
    for entry in &entries {
        let path: PathBuf = root.join(&entry.path);
        if !path.exists() {
            stale.push(entry.path.clone());
            continue;
        }
        // A file's description names what stands beside it.
        let base = if path.is_file() { path.parent().unwrap_or(&root).to_path_buf() } else { path };
        let mut paths = Vec::new();
        tree(&base, "", &mut paths);
        for name in names(&entry.text) {
            if !exists(&root, &base, &paths, &name) {
                stale.push(format!("{} (under {})", name, entry.path));
            }
        }
    }
    assert!(stale.is_empty(), "docs/design.md's Layout names what is not there: {stale:#?}");
}

#[test]
fn names_are_paths_not_prose() {
    let found = names("check.rs, record/ (+ render.rs), `--path.*`, x86_64 and docs/kernels.md's table; e.g. flags.");
    assert_eq!(found, ["check.rs", "record/", "render.rs", "docs/kernels.md"]);
    let block = "Cargo.toml   workspace\nlab/   the kit: guard/\n        oracle/\n  src/x.rs   y.rs\n";
    let got: Vec<(String, Vec<String>)> = entries(block).into_iter().map(|e| (e.path, names(&e.text))).collect();
    let want = [("Cargo.toml", vec![]), ("lab/", vec!["guard/", "oracle/"]), ("lab/src/x.rs", vec!["y.rs"])];
    let want: Vec<(String, Vec<String>)> =
        want.iter().map(|(p, n)| ((*p).to_owned(), n.iter().map(|s| (*s).to_owned()).collect())).collect();
    assert_eq!(got, want);
}
