//! docs/troubleshooting.md names every warning and error the daemon can write: each
//! `warn!`/`error!` of latency-daemon/src (and the kernel program's, relayed to the log), each
//! fatal `fail(…)`, and each `#[error("…")]` Display an error shows on its one line. Read from the
//! sources (pure file reading): a message's format arguments become `…`, and the page must hold
//! that text, e.g. `OTLP: … answered …; retrying with backoff`. A message added or reworded
//! without its entry fails here, naming it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the crate sits in the workspace").to_path_buf()
}

/// Messages whose whole text is their arguments: where their words come from instead. A new one
/// fails until it is listed here, so no message hides behind a `{e}`.
const WHOLLY_ARGUMENTS: [(&str, &str, &str); 10] = [
    ("latency-daemon/src/cmd/mod.rs", "{message}", "fail(…): its callers' texts are checked"),
    ("latency-daemon/src/cmd/run/mod.rs", "{e}", "a ConfigError: its #[error] texts are checked"),
    ("latency-daemon/src/config/web/mod.rs", "{0}", "a FileError, checked"),
    ("latency-daemon/src/net/post.rs", "{step}: {source}", "an I/O error after the step's name"),
    ("latency-daemon/src/kernel/options.rs", "transparent", "BtfError, checked"),
    ("latency-daemon/src/cmd/run/mod.rs", "transparent", "MissingCaps, ProbeError, HttpError, checked"),
    ("latency-daemon/src/cmd/record/mod.rs", "transparent", "MissingCaps, ProbeError, checked"),
    ("latency-daemon/src/cmd/run/mod.rs", "(no literal)", "fail(RunError): its #[error] texts are checked"),
    ("latency-daemon/src/cmd/record/mod.rs", "(no literal)", "fail(RecordError): its #[error] texts are checked"),
    (
        "latency-daemon/src/config/web/mod.rs",
        "{}: {message}",
        "the web config file's path, then the YAML parser's words",
    ),
];

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Punct(char),
}

/// Rust source → tokens: comments dropped, string literals (plain, raw `r#"…"#`, byte, with `\`
/// line continuations and escapes) decoded, char literals and lifetimes skipped.
fn lex(src: &str) -> Vec<Tok> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some((s, next)) = raw_string(&c, i) {
            out.push(Tok::Str(s));
            i = next;
        } else if ch == '"' || (ch == 'b' && c.get(i + 1) == Some(&'"')) {
            let (s, next) = plain_string(&c, if ch == 'b' { i + 1 } else { i });
            out.push(Tok::Str(s));
            i = next;
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\u{1b}') or a lifetime ('a): skip either.
            if c.get(i + 1) == Some(&'\\') {
                // Past the quote, the backslash and the escaped character (which may be a quote).
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(c[start..i].iter().collect()));
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

/// `r"…"`, `r#"…"#`, `br"…"` at `i`: its text and the index after it.
fn raw_string(c: &[char], i: usize) -> Option<(String, usize)> {
    let mut j = i;
    if c.get(j) == Some(&'b') {
        j += 1;
    }
    if c.get(j) != Some(&'r') || (i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')) {
        return None;
    }
    j += 1;
    let hashes = c[j..].iter().take_while(|&&h| h == '#').count();
    j += hashes;
    if c.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    let start = j;
    loop {
        if j >= c.len() {
            return None;
        }
        if c[j] == '"' && c[j + 1..].iter().take(hashes).filter(|&&h| h == '#').count() == hashes {
            return Some((c[start..j].iter().collect(), j + 1 + hashes));
        }
        j += 1;
    }
}

/// `"…"` at `i` (the quote): its decoded text and the index after it.
fn plain_string(c: &[char], i: usize) -> (String, usize) {
    let mut s = String::new();
    let mut j = i + 1;
    while j < c.len() && c[j] != '"' {
        if c[j] == '\\' {
            j += 1;
            match c.get(j) {
                // A continuation: the newline and the next line's leading whitespace go.
                Some('\n') => {
                    while j + 1 < c.len() && c[j + 1].is_whitespace() {
                        j += 1;
                    }
                }
                Some('n') => s.push('\n'),
                Some('t') => s.push('\t'),
                Some('r') => s.push('\r'),
                Some('0') => s.push('\0'),
                Some('u') => {
                    let close = (j..c.len()).find(|&k| c[k] == '}').unwrap();
                    let hex: String = c[j + 2..close].iter().collect();
                    s.push(char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap());
                    j = close;
                }
                Some('x') => {
                    let hex: String = c[j + 1..j + 3].iter().collect();
                    s.push(char::from(u8::from_str_radix(&hex, 16).unwrap()));
                    j += 2;
                }
                Some(&other) => s.push(other),
                None => break,
            }
        } else {
            s.push(c[j]);
        }
        j += 1;
    }
    (s, j + 1)
}

/// The tokens without `#[cfg(test)]` items (unit tests at the end of a file).
fn without_tests(toks: Vec<Tok>) -> Vec<Tok> {
    let cfg_test = [
        Tok::Punct('#'),
        Tok::Punct('['),
        Tok::Ident("cfg".into()),
        Tok::Punct('('),
        Tok::Ident("test".into()),
        Tok::Punct(')'),
        Tok::Punct(']'),
    ];
    let mut out = Vec::with_capacity(toks.len());
    let mut i = 0;
    while i < toks.len() {
        if toks[i..].starts_with(&cfg_test) {
            i += cfg_test.len();
            // The item: up to a `;` before any brace, or through its braces.
            let mut depth = 0;
            while i < toks.len() {
                match &toks[i] {
                    Tok::Punct(';') if depth == 0 => break,
                    Tok::Punct('{') => depth += 1,
                    Tok::Punct('}') => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            i += 1;
            continue;
        }
        out.push(toks[i].clone());
        i += 1;
    }
    out
}

/// The tokens inside the parentheses (or brackets) opening at `open`, at depth 0 marked true.
fn group(toks: &[Tok], open: usize) -> Vec<(Tok, bool)> {
    let mut depth = 0;
    let mut out = Vec::new();
    for t in &toks[open..] {
        match t {
            Tok::Punct('(' | '[' | '{') => {
                depth += 1;
                if depth == 1 {
                    continue;
                }
            }
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            _ => {}
        }
        out.push((t.clone(), depth == 1));
    }
    out
}

/// A log macro's message: after the last top-level `;` (key-values come first), skipping a
/// `target: "…"`, the first top-level string literal. None: no literal (a variable).
fn macro_message(args: &[(Tok, bool)]) -> Option<String> {
    let from = args.iter().rposition(|(t, top)| *top && *t == Tok::Punct(';')).map_or(0, |p| p + 1);
    let args = &args[from..];
    let mut k = 0;
    while k < args.len() {
        let (t, top) = &args[k];
        if *top && *t == Tok::Ident("target".into()) && args.get(k + 1).is_some_and(|(t, _)| *t == Tok::Punct(':')) {
            k += 3;
            continue;
        }
        if let (Tok::Str(s), true) = (t, top) {
            return Some(s.clone());
        }
        k += 1;
    }
    None
}

/// One message the daemon can write, where it is written.
#[derive(Debug)]
struct Message {
    file: String,
    kind: &'static str,
    text: String,
}

/// Every `warn!`/`error!` (bare, `log::`, `::log::`), `fail(…)` and `#[error(…)]` in `toks`.
fn messages(file: &str, toks: &[Tok]) -> Vec<Message> {
    let mut out = Vec::new();
    for i in 0..toks.len() {
        let at = |k: usize| toks.get(i + k);
        let push = |out: &mut Vec<Message>, kind, text: Option<String>| {
            out.push(Message { file: file.to_owned(), kind, text: text.unwrap_or_else(|| "(no literal)".into()) });
        };
        match (&toks[i], at(1), at(2)) {
            (Tok::Ident(m), Some(Tok::Punct('!')), Some(Tok::Punct('('))) if m == "warn" || m == "error" => {
                push(&mut out, if m == "warn" { "warn!" } else { "error!" }, macro_message(&group(toks, i + 2)));
            }
            (Tok::Ident(f), Some(Tok::Punct('(')), _)
                if f == "fail" && !matches!(i.checked_sub(1).map(|p| &toks[p]), Some(Tok::Ident(k)) if k == "fn") =>
            {
                // `fail("…")` or `fail(&format!("…", …))`: the first literal, at any depth.
                let text =
                    group(toks, i + 1).into_iter().find_map(|(t, _)| if let Tok::Str(s) = t { Some(s) } else { None });
                push(&mut out, "fail", text);
            }
            (Tok::Punct('#'), Some(Tok::Punct('[')), Some(Tok::Ident(e))) if e == "error" => {
                let args = group(toks, i + 3);
                let text = match args.first() {
                    Some((Tok::Ident(t), _)) if t == "transparent" => Some("transparent".to_owned()),
                    _ => macro_message(&args),
                };
                push(&mut out, "#[error]", text);
            }
            _ => {}
        }
    }
    out
}

/// A format string as the user sees it: each `{…}` argument as `…` (runs of them as one),
/// `{{`/`}}` as braces.
fn shown(format: &str) -> String {
    let mut out = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                out.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                out.push('}');
            }
            '{' => {
                for c in chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                }
                if !out.ends_with('…') {
                    out.push('…');
                }
            }
            c => out.push(c),
        }
    }
    out
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                files.extend(rust_files(&path));
            }
        } else if path.extension().is_some_and(|e| e == "rs") && path.file_name().is_some_and(|n| n != "tests.rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// Every message of the daemon's sources and the kernel program's diagnostics.
fn all_messages() -> Vec<Message> {
    let root = workspace();
    let mut files = rust_files(&root.join("latency-daemon/src"));
    files.push(root.join("latency-ebpf/src/diag.rs"));
    let mut out = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
        let toks = without_tests(lex(&std::fs::read_to_string(&file).unwrap()));
        out.extend(messages(&rel, &toks));
    }
    out
}

/// Page text with runs of whitespace as one space, so a message may wrap in the Markdown.
fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn every_warning_and_error_is_on_the_troubleshooting_page() {
    let page = squeeze(&std::fs::read_to_string(workspace().join("docs/troubleshooting.md")).unwrap());
    let all = all_messages();
    let mut missing = Vec::new();
    let mut unlisted = Vec::new();
    let mut covered = 0;
    for m in &all {
        let text = shown(&m.text);
        if !text.chars().any(char::is_alphabetic) || m.text == "transparent" || m.text == "(no literal)" {
            if !WHOLLY_ARGUMENTS.iter().any(|(f, t, _)| *f == m.file && (*t == m.text || shown(t) == text)) {
                unlisted.push(format!("{} {}: {:?}", m.file, m.kind, m.text));
            }
            continue;
        }
        if page.contains(&squeeze(&text)) {
            covered += 1;
        } else {
            missing.push(format!("{} {}: {}", m.file, m.kind, text));
        }
    }
    eprintln!(
        "{covered} messages on the page, {} made of their arguments alone, of {} found",
        all.len() - covered - missing.len(),
        all.len()
    );
    assert!(
        unlisted.is_empty(),
        "messages with no words of their own, not in WHOLLY_ARGUMENTS (say where their text comes from):\n{}",
        unlisted.join("\n")
    );
    assert!(
        missing.is_empty(),
        "{} of {} messages are not on docs/troubleshooting.md (write each as shown, `…` for its arguments):\n{}",
        missing.len(),
        all.len(),
        missing.join("\n")
    );
}

/// Each optional kernel feature the daemon may run without is named on the page (the warning
/// `… unavailable on this kernel, running without it: …` names it).
#[test]
fn every_kernel_feature_is_on_the_troubleshooting_page() {
    let page = std::fs::read_to_string(workspace().join("docs/troubleshooting.md")).unwrap();
    let mut names = Vec::new();
    for file in rust_files(&workspace().join("latency-daemon/src/kernel/feature")) {
        let toks = lex(&std::fs::read_to_string(&file).unwrap());
        for (i, t) in toks.iter().enumerate() {
            if *t == Tok::Ident("Room".into())
                && toks.get(i + 3) == Some(&Tok::Ident("new".into()))
                && let Some((Tok::Str(name), _)) =
                    group(&toks, i + 4).into_iter().find(|(t, _)| matches!(t, Tok::Str(_)))
            {
                names.push(name);
            }
        }
    }
    assert!(names.len() >= 10, "the feature table's names: {names:?}");
    let missing: Vec<&String> = names.iter().filter(|n| !page.contains(&format!("`{n}`"))).collect();
    assert!(missing.is_empty(), "kernel features not named (as `name`) on docs/troubleshooting.md: {missing:?}");
}

#[test]
fn the_extraction_reads_what_the_compiler_reads() {
    let src = r####"
        // log::warn!("a comment");
        /* log::error!("a block comment") */
        fn f() {
            log::warn!(
                target: "t",
                "multi {} line \
                 continued {x:?} {{braces}}",
                a
            );
            ::log::error!(feature = d.name(), other = "kv"; "after {} kvs", d);
            warn!(ctx, "kernel: tid {}'s stamp", id);
            log::error!(r#"raw "quoted" {e}"#);
            let c = '"'; let q = '\''; let l: &'static str = ""; let e = '\u{1b}';
            super::fail(&format!("cannot {what}: {e}"));
        }
        #[derive(thiserror::Error)]
        enum E {
            #[error("no {path}: {source}")]
            A,
            #[error(transparent)]
            B,
        }
        fn fail(message: &str) {}
        #[cfg(test)]
        mod tests { fn t() { log::warn!("a test's"); } }
    "####;
    let got: Vec<String> =
        messages("x.rs", &without_tests(lex(src))).iter().map(|m| format!("{} {}", m.kind, shown(&m.text))).collect();
    assert_eq!(
        got,
        [
            "warn! multi … line continued … {braces}",
            "error! after … kvs",
            "warn! kernel: tid …'s stamp",
            "error! raw \"quoted\" …",
            "fail cannot …: …",
            "#[error] no …: …",
            "#[error] transparent",
        ]
    );
}
