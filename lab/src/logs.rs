//! The daemon's log lines read back: in, one line of stderr; out, its key-value pairs (logfmt) or
//! an error naming what is wrong, so tests can insist that every line is a well-formed event.
use anyhow::{Context as _, bail};

/// `key=value key="quoted \"value\""…` → the pairs, in order, escapes (`\"`, `\\`, `\n`, `\r`,
/// `\t`, `\u001b`) decoded. Fails on anything else: a bare word, an unterminated quote, an empty
/// key, an unknown escape, a control character left raw.
pub fn logfmt(line: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut rest = line;
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=').with_context(|| format!("no '=' in {rest:?} of {line:?}"))?;
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')) {
            bail!("bad key {key:?} in {line:?}");
        }
        let (value, after) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                match chars.next() {
                    Some((i, '"')) => break i + 1,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, 't')) => value.push('\t'),
                        Some((_, 'r')) => value.push('\r'),
                        Some((_, c @ ('"' | '\\'))) => value.push(c),
                        Some((_, 'u')) => {
                            let hex: String = (0..4).filter_map(|_| chars.next().map(|(_, c)| c)).collect();
                            let code = u32::from_str_radix(&hex, 16).ok().filter(|_| hex.len() == 4);
                            let c = code.and_then(char::from_u32);
                            value.push(c.with_context(|| format!("bad \\u escape {hex:?} in {line:?}"))?);
                        }
                        Some((_, c)) => bail!("unknown escape \\{c} in {line:?}"),
                        None => bail!("dangling escape in {line:?}"),
                    },
                    Some((_, c)) if c.is_control() => bail!("raw control character {c:?} in {line:?}"),
                    Some((_, c)) => value.push(c),
                    None => bail!("unterminated quote in {line:?}"),
                }
            };
            (value, &quoted[end..])
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            let value = &after[..end];
            if value.is_empty() || value.chars().any(|c| matches!(c, '"' | '=' | '\\') || c.is_control()) {
                bail!("bad bare value {value:?} in {line:?}");
            }
            (value.to_owned(), &after[end..])
        };
        pairs.push((key.to_owned(), value));
        rest = match after.strip_prefix(' ') {
            Some(r) => r,
            None if after.is_empty() => after,
            None => bail!("no space after {key}'s value in {line:?}"),
        };
    }
    Ok(pairs)
}

/// The value of `key` in a logfmt line's pairs.
pub fn get<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// An RFC 3339 UTC timestamp as the daemon writes it: `2026-12-03T11:55:00.123Z`.
pub fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 24
        && s.ends_with('Z')
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'.'
        && s.chars().filter(char::is_ascii_digit).count() == 17
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn pairs_bare_and_quoted() {
        let p = logfmt(r#"time=2026-12-03T11:55:00.123Z level=info msg="a \"b\"\nc" n=3"#).unwrap();
        assert_eq!(get(&p, "msg"), Some("a \"b\"\nc"));
        assert_eq!(get(&p, "n"), Some("3"));
        assert!(is_timestamp(get(&p, "time").unwrap()));
        assert!(logfmt("latency-daemon: hello").is_err());
        assert!(logfmt(r#"msg="open"#).is_err());
        assert!(logfmt("a=1  b=2").is_err());
        assert_eq!(get(&logfmt(r#"a="\u001b\\x""#).unwrap(), "a"), Some("\u{1b}\\x"));
        assert!(logfmt(r#"a="\q""#).is_err() && logfmt(r#"a="\u00""#).is_err());
        assert!(!is_timestamp("2026-12-03 11:55:00"));
    }
}
