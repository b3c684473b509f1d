//! A parser's error message in, the same message with every quoted value hidden out: a
//! configuration may hold a password, a token or a bcrypt hash, and a path symlinked by mistake
//! may name another file (`/etc/shadow`), so messages name the line, the column and the key but
//! never echo what the file says there.

/// What a hidden value becomes, between its own quotes.
pub const HIDDEN: &str = "…";

/// Quoted words parsers use for the grammar rather than for a value.
const GRAMMAR: [&str; 4] = ["true", "false", "inf", "nan"];

/// `message` with the text between each pair of quotes (`"…"`, `'…'` or `` `…` ``) replaced by
/// [`HIDDEN`], unless `keep` names it (a key of the file) or it is grammar: punctuation such as
/// `` `=` `` or a word in [`GRAMMAR`]. Backslash escapes inside `"` and `'` are skipped over; a
/// quote without a partner (an apostrophe) is kept as it is. The result is one line.
pub fn hide_values(message: &str, keep: impl Fn(&str) -> bool) -> String {
    let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::with_capacity(message.len());
    let mut rest = message.as_str();
    while let Some(open) = rest.find(['"', '\'', '`']) {
        let quote = rest[open..].chars().next().unwrap_or('"');
        out.push_str(&rest[..open + 1]);
        let inner = &rest[open + 1..];
        let Some(close) = closing(inner, quote) else {
            rest = inner;
            continue;
        };
        let value = &inner[..close];
        let grammar = !value.chars().any(char::is_alphanumeric) || GRAMMAR.contains(&value);
        out.push_str(if grammar || keep(value) { value } else { HIDDEN });
        out.push(quote);
        rest = &inner[close + 1..];
    }
    out.push_str(rest);
    out
}

/// The byte offset of the quote closing a value that started just before `inner`.
fn closing(inner: &str, quote: char) -> Option<usize> {
    let mut chars = inner.char_indices();
    while let Some((i, c)) = chars.next() {
        if c == quote {
            return Some(i);
        }
        if c == '\\' && quote != '`' {
            chars.next();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(s: &str) -> bool {
        ["listen", "alert_webhook"].contains(&s)
    }

    #[test]
    fn values_are_hidden_and_keys_kept() {
        let cases = [
            (
                "invalid type: string \"http://a:PW@h/?token=T\", expected usize",
                "invalid type: string \"…\", expected usize",
            ),
            ("'soon' is not a duration", "'…' is not a duration"),
            (
                "unknown field `bogus`, expected one of `listen`, `alert_webhook`",
                "unknown field `…`, expected one of `listen`, `alert_webhook`",
            ),
            ("invalid type: integer `7`, expected a string", "invalid type: integer `…`, expected a string"),
            (
                "missing comma between array elements, expected `,`",
                "missing comma between array elements, expected `,`",
            ),
            ("expected `true`", "expected `true`"),
            ("escaped \"a\\\"PW\" here", "escaped \"…\" here"),
            ("'it\\'s PW' bad", "'…' bad"),
            ("user's password is wrong", "user's password is wrong"),
            ("two\n  lines", "two lines"),
            ("", ""),
            ("\"\"", "\"\""),
            ("`ünïcode` and 'ж'", "`…` and '…'"),
        ];
        for (message, want) in cases {
            assert_eq!(hide_values(message, keys), want, "{message:?}");
        }
    }

    #[test]
    fn a_secret_never_survives() {
        for message in ["bad \"PW\"", "bad 'x PW y'", "bad `PW`", "bad \"PW", "a \"b\" 'PW' `c`"] {
            let out = hide_values(message, keys);
            // An unpaired quote keeps its text: parsers close what they open, and prose has
            // apostrophes; the paired cases must hide it.
            if message.matches(['"', '\'', '`']).count() % 2 == 0 {
                assert!(!out.contains("PW"), "{message:?} -> {out:?}");
            }
        }
    }
}
