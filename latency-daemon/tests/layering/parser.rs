//! The paths a Rust file names, read without a compiler: its text and module path in, every
//! `crate::`/`super::`/`self::` path and every path through a named workspace crate out, each with
//! its line (in `use` trees, grouped and nested, and inline; comments and literals skipped).

/// One path a file names: the crate (None: the file's own) and the segments after its name.
#[derive(Debug)]
pub struct Reference {
    pub line: usize,
    pub krate: Option<String>,
    pub path: Vec<String>,
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

/// `path` as written in `module`: the crate it names (None: its own) and the segments after the
/// crate's name; None for a crate not in `externs` (std, a dependency).
fn resolve(module: &[String], path: &[String], externs: &[&str]) -> Option<(Option<String>, Vec<String>)> {
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some((None, path[1..].to_vec())),
        other if externs.contains(&other) => Some((Some(other.to_owned()), path[1..].to_vec())),
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
            Some((None, at))
        }
        _ => None,
    }
}

/// Every `crate::`/`super::`/`self::` path in `text`, written in file module `module`, and every
/// path through one of the workspace's crates named in `externs` (`latency_lab`).
pub fn references(text: &str, module: &[String], externs: &[&str]) -> Vec<Reference> {
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
                out.extend(paths.into_iter().filter_map(|(p, l)| {
                    let (krate, path) = resolve(&at, &p, externs)?;
                    Some(Reference { line: l, krate, path })
                }));
            }
            Token::Ident(w)
                if (matches!(w.as_str(), "crate" | "super" | "self") || externs.contains(&w.as_str()))
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
                if let Some((krate, path)) = resolve(&here(&inline), &path, externs) {
                    out.push(Reference { line: *line, krate, path });
                }
                i = j;
            }
            _ => i += 1,
        }
    }
    out
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
        use latency_lab::{bench::Args, web}; fn h() { latency_lab::demo::run(); std::fs::read(); }
    "#;
    let found: Vec<(usize, String)> = references(text, &module, &["latency_lab"])
        .into_iter()
        .map(|r| (r.line, r.krate.map(|k| k + "::").unwrap_or_default() + &r.path.join("::")))
        .collect();
    let want = [
        (3, "alert::Rules"),
        (4, "alert::notify::Auth"),
        (4, "alert::notify"),
        (6, "config::file"),
        (8, "model::units::ns"),
        (8, "host::x"),
        (9, "config::alert"),
        (9, "config::args::y"),
        (11, "latency_lab::bench::Args"),
        (11, "latency_lab::web"),
        (11, "latency_lab::demo::run"),
    ];
    let want: Vec<(usize, String)> = want.iter().map(|(l, p)| (*l, (*p).to_owned())).collect();
    assert_eq!(found, want);
}
