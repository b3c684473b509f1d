//! The layering rule (docs/layering.toml), checked: every crate's sources in, every `crate::…`,
//! `super::…` and `self::…` path they name (and every path into another workspace crate, from any
//! of its files), and out, the arrows the rule forbids, the import cycles between files, and
//! whether docs/design.md shows the rule as the file writes it. No root needed.
//! Regenerate design.md's block: `UPDATE_GOLDEN=1 cargo test -p latency-daemon --test layering`.
#[path = "layering/parser.rs"]
mod parser;
#[path = "layering/rule.rs"]
mod rule;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use parser::{Reference, references};
use rule::{Crate, Rule};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn the_rule() -> Rule {
    let path = workspace().join("docs/layering.toml");
    rule::load(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// A source file: its module path (segments after `crate`) and what it names.
#[derive(Debug)]
struct Source {
    file: String,
    module: Vec<String>,
    references: Vec<Reference>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap_or_else(|e| panic!("{}: {e}", dir.display())).path();
        if path.is_dir() && path.file_name().is_some_and(|n| n != "target") {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// `kernel/btf/mod.rs` → `[kernel, btf]`, `kernel/probe.rs` → `[kernel, probe]`, `lib.rs` → `[]`.
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_owned());
    }
    parts
}

/// The crate's sources but its roots, each with what it names (in its own crate and in `externs`).
fn sources(c: &Crate, externs: &[&str]) -> Vec<Source> {
    let root = workspace().join(&c.src);
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let relative = path.strip_prefix(&root).ok()?.to_path_buf();
            if c.roots.iter().any(|s| relative.starts_with(s)) {
                return None;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let module = module_of(&relative);
            let references = references(&text, &module, externs);
            Some(Source { file: format!("{}/{}", c.src, relative.display()), module, references })
        })
        .collect()
}

/// Every Rust file of the workspace's crates (sources, tests, benches, examples), for the paths
/// one crate names into another.
fn workspace_sources(rule: &Rule, externs: &[&str]) -> Vec<Source> {
    let mut out = Vec::new();
    for c in &rule.crates {
        let dir = c.src.trim_end_matches("/src");
        let mut files = Vec::new();
        rust_files(&workspace().join(dir), &mut files);
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let file = path.strip_prefix(workspace()).unwrap_or(&path).display().to_string();
            let file = file.trim_start_matches("/").to_owned();
            let references = references(&text, &[], externs);
            out.push(Source { file, module: Vec::new(), references });
        }
    }
    out
}

/// Arrows inside crate `c` that its layers do not allow, or into one of its drivers; one line each.
fn forbidden_arrows(c: &Crate, sources: &[Source]) -> Vec<String> {
    let modules: BTreeSet<&str> = sources.iter().filter_map(|s| s.module.first()).map(String::as_str).collect();
    let mut out = Vec::new();
    for s in sources {
        let Some(from) = s.module.first() else { continue };
        let layer = c.layer(from);
        if layer.is_none() && c.complete {
            out.push(format!("{}: layer `{from}` is not in the rule's table", s.file));
            continue;
        }
        for r in s.references.iter().filter(|r| r.krate.is_none()) {
            let Some(target) = r.path.first() else { continue };
            if target == from || !modules.contains(target.as_str()) {
                continue;
            }
            if c.drivers.contains(target) {
                out.push(format!(
                    "{}:{}: {from} → {} (a driver: nothing imports it)",
                    s.file,
                    r.line,
                    r.path.join("::")
                ));
            } else if let Some(layer) = layer.filter(|l| !l.allows(&r.path)) {
                out.push(format!(
                    "{}:{}: {from} → {} (`{from}` may use: {})",
                    s.file,
                    r.line,
                    r.path.join("::"),
                    layer.may_text()
                ));
            }
        }
    }
    out
}

/// Paths from other crates' files into `c`'s drivers, but from the files the rule names.
fn arrows_into_drivers(c: &Crate, workspace: &[Source]) -> Vec<String> {
    let ident = c.ident();
    let mut out = Vec::new();
    for s in workspace.iter().filter(|s| !c.drivers_named_by.contains(&s.file)) {
        for r in &s.references {
            if r.krate.as_deref() == Some(ident.as_str()) && r.path.first().is_some_and(|m| c.drivers.contains(m)) {
                out.push(format!(
                    "{}:{}: → {ident}::{} (a driver: nothing imports it)",
                    s.file,
                    r.line,
                    r.path.join("::")
                ));
            }
        }
    }
    out
}

/// Cycles between files: each group of files that import one another, with the imports that close
/// it. A file's imports of its own ancestors (`super::*` of a child, a parent's `mod` re-exports)
/// do not count: a parent and its children are one unit.
fn cycles(sources: &[Source]) -> Vec<String> {
    let files: BTreeMap<&[String], &str> = sources.iter().map(|s| (s.module.as_slice(), s.file.as_str())).collect();
    // The file holding an item: the longest prefix of its path that is a file's module.
    let file_of = |path: &[String]| -> Option<&[String]> {
        (1..=path.len()).rev().find_map(|n| files.get_key_value(&path[..n]).map(|(k, _)| *k))
    };
    let mut edges: BTreeMap<&[String], BTreeMap<&[String], Vec<usize>>> = BTreeMap::new();
    for s in sources {
        let from = s.module.as_slice();
        for r in &s.references {
            let Some(to) = file_of(&r.path) else { continue };
            if to.is_empty() || from.starts_with(to) || to.starts_with(from) {
                continue;
            }
            let lines = edges.entry(from).or_default().entry(to).or_default();
            if !lines.contains(&r.line) {
                lines.push(r.line);
            }
        }
    }
    let reach = |start: &[String]| -> BTreeSet<Vec<String>> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start.to_vec()];
        while let Some(at) = stack.pop() {
            for next in edges.get(at.as_slice()).into_iter().flat_map(|e| e.keys()) {
                if seen.insert(next.to_vec()) {
                    stack.push(next.to_vec());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&[String], BTreeSet<Vec<String>>> = files.keys().map(|m| (*m, reach(m))).collect();
    let mut groups: BTreeSet<Vec<Vec<String>>> = BTreeSet::new();
    for (m, r) in &reachable {
        if !r.contains(*m) {
            continue;
        }
        let group: Vec<Vec<String>> =
            r.iter().filter(|o| reachable.get(o.as_slice()).is_some_and(|b| b.contains(*m))).cloned().collect();
        groups.insert(group);
    }
    groups
        .iter()
        .map(|group| {
            let names: Vec<&str> = group.iter().map(|m| files[m.as_slice()]).collect();
            let mut arrows = Vec::new();
            for from in group {
                for (to, lines) in edges.get(from.as_slice()).into_iter().flatten() {
                    if group.iter().any(|g| g.as_slice() == *to) {
                        for line in lines {
                            arrows.push(format!("    {}:{line} → {}", files[from.as_slice()], files[to]));
                        }
                    }
                }
            }
            format!("cycle between {}:\n{}", names.join(", "), arrows.join("\n"))
        })
        .collect()
}

#[test]
fn every_crate_imports_only_what_the_rule_allows() {
    let rule = the_rule();
    let idents: Vec<String> = rule.crates.iter().map(Crate::ident).collect();
    let externs: Vec<&str> = idents.iter().map(String::as_str).collect();
    let everywhere = workspace_sources(&rule, &externs);
    let mut forbidden = Vec::new();
    for c in &rule.crates {
        let sources = sources(c, &externs);
        assert!(sources.len() > 10, "{}: found only {} files", c.src, sources.len());
        forbidden.extend(forbidden_arrows(c, &sources));
        forbidden.extend(arrows_into_drivers(c, &everywhere));
    }
    assert!(forbidden.is_empty(), "imports the layering rule (docs/layering.toml) forbids:\n{}", forbidden.join("\n"));
}

#[test]
fn no_crate_has_an_import_cycle() {
    let rule = the_rule();
    let mut found = Vec::new();
    for c in &rule.crates {
        found.extend(cycles(&sources(c, &[])).into_iter().map(|cycle| format!("{}: {cycle}", c.name)));
    }
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn design_md_shows_the_rule() {
    let path = workspace().join("docs/design.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let expected = rule::with_block(&doc, &rule::markdown(&the_rule()))
        .unwrap_or_else(|| panic!("{} has no `{}` … `{}` block", path.display(), rule::BEGIN, rule::END));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &expected).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let at = doc.lines().zip(expected.lines()).position(|(a, e)| a != e);
    assert!(
        doc == expected,
        "docs/design.md's layering block is stale at line {}: {:?}, rendered {:?}\n\
         (regenerate: UPDATE_GOLDEN=1 cargo test -p latency-daemon --test layering)",
        at.map_or(0, |a| a + 1),
        at.and_then(|a| doc.lines().nth(a)),
        at.and_then(|a| expected.lines().nth(a)),
    );
}

/// The most lines a source file holds before its unit tests (`#[cfg(test)]`): past it, a file is
/// two concerns, and the house has a room for the second.
const MOST_LINES: usize = 600;

#[test]
fn no_source_file_is_longer_than_a_room() {
    let rule = the_rule();
    let mut long = Vec::new();
    for c in &rule.crates {
        let root = workspace().join(&c.src);
        let mut files = Vec::new();
        rust_files(&root, &mut files);
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let lines = text.lines().take_while(|l| l.trim() != "#[cfg(test)]").count();
            // A file of unit tests alone (`tests.rs`) is tests.
            if lines > MOST_LINES && path.file_name().is_some_and(|n| n != "tests.rs") {
                long.push(format!("{}: {lines} lines", path.strip_prefix(workspace()).unwrap_or(&path).display()));
            }
        }
    }
    assert!(long.is_empty(), "files over {MOST_LINES} lines before their tests:\n{}", long.join("\n"));
}
