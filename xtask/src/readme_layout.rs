//! docs/design.md's "Layout" section against the tree: every top-level folder of the workspace and every
//! folder of the daemon's and the lab's sources is named there, so the map cannot silently go stale.
use std::path::Path;

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
