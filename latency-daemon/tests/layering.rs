//! The layering rule of `latency-daemon/src/lib.rs` ("# Layering"), checked: every `crate::…`,
//! `super::…` and `self::…` path in the daemon's sources (in `use` trees and inline) in, a list of
//! forbidden arrows between layers and of import cycles between files out (also for
//! latency-ebpf's sources, which have no layers but must have no cycles). No root needed.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Per layer, what it may name outside itself: a layer, or one item's path (`alert::engine`).
/// A path is allowed when it starts with one of these. Nothing names `cmd`; `cmd` names anything.
const RULE: &[(&str, &[&str])] = &[
    ("model", &[]),
    ("metrics", &["model"]),
    ("net", &["model"]),
    ("host", &["model"]),
    ("kernel", &["model", "host"]),
    // The sinks count their deliveries in `metrics`' instruments and send through `net`.
    ("alert", &["model", "net", "metrics"]),
    // The one seam: the alert engine, not its sinks (`alert::notify`). The pipeline decides and
    // `cmd` delivers; config checks the engine's `Rules` and never builds a sink.
    ("pipeline", &["model", "alert::engine"]),
    ("config", &["model", "net", "alert::engine"]),
    ("serve", &["model", "metrics", "config"]),
    ("export", &["model", "metrics", "net", "config"]),
    ("cli", &["config"]),
    ("cmd", &["model", "metrics", "net", "host", "kernel", "alert", "pipeline", "config", "serve", "export", "cli"]),
];

/// One path a file names, resolved to segments after `crate`.
#[derive(Debug)]
struct Reference {
    line: usize,
    path: Vec<String>,
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
        if path.is_dir() {
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

/// `text` with comments, string and char literals blanked out (newlines kept, so lines still count).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && raw_string_start(&chars, i) {
            // A raw string: r"…", r#"…"#, br"…".
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let closing: String = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            let rest: String = chars[j + 1..].iter().collect();
            let end = rest.find(&closing).map_or(chars.len(), |k| j + 1 + rest[..k].chars().count() + closing.len());
            for &ch in &chars[i..end] {
                out.push(blank(ch));
            }
            i = end;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A char literal ('x', '\n', '\''); a lifetime ('a) has no closing quote after one char.
            let mut j = i + 1;
            if chars.get(j) == Some(&'\\') {
                j += 2;
            } else {
                j += 1;
            }
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            for _ in i..=j.min(chars.len() - 1) {
                out.push(' ');
            }
            i = j + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// Whether the `r` at `i` begins a raw string literal (alone, or after a byte string's `b`).
fn raw_string_start(chars: &[char], i: usize) -> bool {
    let before = |n: usize| i.checked_sub(n).and_then(|k| chars.get(k));
    !ident_char(before(1)) || (before(1) == Some(&'b') && !ident_char(before(2)))
}

/// A token of the code: an identifier, `::`, or one punctuation character; with its line.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    Path,
    Punct(char),
}

fn tokens(code: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((Token::Ident(chars[start..i].iter().collect()), line));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push((Token::Path, line));
            i += 2;
        } else {
            out.push((Token::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// The paths of a `use` tree starting at `tokens[*i]`, each with `prefix` in front.
fn use_tree(tokens: &[(Token, usize)], i: &mut usize, prefix: &[String], out: &mut Vec<(Vec<String>, usize)>) {
    let mut path = prefix.to_vec();
    let line = tokens.get(*i).map_or(0, |t| t.1);
    loop {
        match tokens.get(*i).map(|t| &t.0) {
            Some(Token::Punct('{')) => {
                *i += 1;
                while !matches!(tokens.get(*i).map(|t| &t.0), Some(Token::Punct('}')) | None) {
                    use_tree(tokens, i, &path, out);
                    if tokens.get(*i).map(|t| &t.0) == Some(&Token::Punct(',')) {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            Some(Token::Punct('*')) => {
                *i += 1;
                break;
            }
            Some(Token::Ident(name)) if name == "self" && !path.is_empty() => {
                // `a::{self, b}`: `a` itself. A leading `self` is kept, and resolved later.
                *i += 1;
            }
            Some(Token::Ident(name)) => {
                path.push(name.clone());
                *i += 1;
            }
            _ => break,
        }
        match tokens.get(*i).map(|t| &t.0) {
            Some(Token::Path) => *i += 1,
            _ => break,
        }
    }
    if tokens.get(*i).map(|t| &t.0) == Some(&Token::Ident("as".into())) {
        *i += 2;
    }
    out.push((path, line));
}

/// `path` as written in `module`, resolved to segments after `crate`; None for another crate.
fn resolve(module: &[String], path: &[String]) -> Option<Vec<String>> {
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "super" | "self" => {
            let mut at = module.to_vec();
            let mut rest = path;
            while let Some(head) = rest.first() {
                match head.as_str() {
                    "super" => {
                        at.pop()?;
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
            at.extend(rest.iter().cloned());
            Some(at)
        }
        _ => None,
    }
}

/// Every `crate::`/`super::`/`self::` path in `text`, written in file module `module`.
fn references(text: &str, module: &[String]) -> Vec<Reference> {
    let toks = tokens(&code_only(text));
    let mut out = Vec::new();
    // Inline modules (`mod tests { … }`) with the brace depth they opened at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    let here = |inline: &[(String, usize)]| -> Vec<String> {
        module.iter().cloned().chain(inline.iter().map(|(m, _)| m.clone())).collect()
    };
    while i < toks.len() {
        let (token, line) = &toks[i];
        let prev = i.checked_sub(1).map(|p| &toks[p].0);
        match token {
            Token::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Token::Punct('}') => {
                depth -= 1;
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                i += 1;
            }
            Token::Ident(w) if w == "mod" => {
                if let (Some((Token::Ident(name), _)), Some((Token::Punct('{'), _))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    inline.push((name.clone(), depth));
                }
                i += 1;
            }
            Token::Ident(w) if w == "use" => {
                i += 1;
                let mut paths = Vec::new();
                use_tree(&toks, &mut i, &[], &mut paths);
                let at = here(&inline);
                out.extend(paths.into_iter().filter_map(|(p, l)| Some(Reference { line: l, path: resolve(&at, &p)? })));
            }
            Token::Ident(w)
                if matches!(w.as_str(), "crate" | "super" | "self")
                    && toks.get(i + 1).map(|t| &t.0) == Some(&Token::Path)
                    && prev != Some(&Token::Punct('$'))
                    && prev != Some(&Token::Path) =>
            {
                let mut path = vec![w.clone()];
                let mut j = i + 1;
                while toks.get(j).map(|t| &t.0) == Some(&Token::Path) {
                    match toks.get(j + 1).map(|t| &t.0) {
                        Some(Token::Ident(name)) => path.push(name.clone()),
                        _ => break,
                    }
                    j += 2;
                }
                if let Some(path) = resolve(&here(&inline), &path) {
                    out.push(Reference { line: *line, path });
                }
                i = j;
            }
            _ => i += 1,
        }
    }
    out
}

fn sources(crate_dir: &str, skip: &[&str]) -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(crate_dir).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let relative = path.strip_prefix(&root).ok()?.to_path_buf();
            if skip.iter().any(|s| relative.starts_with(s)) {
                return None;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let module = module_of(&relative);
            let references = references(&text, &module);
            Some(Source { file: format!("{crate_dir}/src/{}", relative.display()), module, references })
        })
        .collect()
}

/// Arrows from one layer into another that [`RULE`] does not allow, one line each.
fn forbidden_arrows(sources: &[Source]) -> Vec<String> {
    let rule: BTreeMap<&str, &[&str]> = RULE.iter().copied().collect();
    let mut out = Vec::new();
    for s in sources {
        let Some(layer) = s.module.first() else { continue };
        let Some(allowed) = rule.get(layer.as_str()) else {
            out.push(format!("{}: layer `{layer}` is not in the rule's table", s.file));
            continue;
        };
        for r in &s.references {
            let Some(target) = r.path.first() else { continue };
            if target == layer {
                continue;
            }
            let ok = allowed.iter().any(|a| {
                let a: Vec<&str> = a.split("::").collect();
                r.path.len() >= a.len() && r.path.iter().zip(&a).all(|(p, a)| p == a)
            });
            if !ok {
                let may = if allowed.is_empty() { "nothing".to_owned() } else { allowed.join(", ") };
                out.push(format!("{}:{}: {layer} → {} (`{layer}` may use: {may})", s.file, r.line, r.path.join("::")));
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
fn daemon_layers_import_only_what_the_rule_allows() {
    let sources = sources("latency-daemon", &["lib.rs", "main.rs"]);
    assert!(sources.len() > 50, "found only {} files", sources.len());
    let forbidden = forbidden_arrows(&sources);
    assert!(
        forbidden.is_empty(),
        "imports the layering rule (latency-daemon/src/lib.rs, \"# Layering\") forbids:\n{}",
        forbidden.join("\n")
    );
}

#[test]
fn daemon_files_import_no_cycle() {
    let found = cycles(&sources("latency-daemon", &["lib.rs", "main.rs"]));
    assert!(found.is_empty(), "import cycles in latency-daemon/src:\n{}", found.join("\n"));
}

#[test]
fn kernel_program_files_import_no_cycle() {
    // main.rs is the program's root; lib.rs (empty) and bin/ are other crates.
    let found = cycles(&sources("latency-ebpf", &["lib.rs", "main.rs", "bin"]));
    assert!(found.is_empty(), "import cycles in latency-ebpf/src:\n{}", found.join("\n"));
}

#[test]
fn the_parser_finds_grouped_nested_and_inline_paths() {
    let module: Vec<String> = vec!["config".into(), "alert".into()];
    let text = r#"
        use crate::alert::{
            Rules,
            notify::{Auth, self as n},
        };
        use super::file; // crate::cmd in a comment
        const S: &str = "crate::cmd in a string";
        fn f() { let _ = crate::model::units::ns(1); let _ = super::super::host::x; }
        mod tests { use super::*; fn g() { super::super::args::y(); } }
        macro_rules! m { () => { $crate::cmd::z } }
    "#;
    let found: Vec<(usize, String)> =
        references(text, &module).into_iter().map(|r| (r.line, r.path.join("::"))).collect();
    let want = [
        (3, "alert::Rules"),
        (4, "alert::notify::Auth"),
        (4, "alert::notify"),
        (6, "config::file"),
        (8, "model::units::ns"),
        (8, "host::x"),
        (9, "config::alert"),
        (9, "config::args::y"),
    ];
    let want: Vec<(usize, String)> = want.iter().map(|(l, p)| (*l, (*p).to_owned())).collect();
    assert_eq!(found, want);
}
