//! A sink's address: `http[s]://[user:password@]host[:port][/path][?query]` text in, [`HttpUrl`]
//! out (or a one-line reason). Shown anywhere (log, landing page, errors) only through
//! [`HttpUrl`]'s `Display` or [`redact`], which hide the user information and the query: both
//! commonly carry credentials (`?token=…`). In `model` because both sides need the one parser:
//! `config` checks the URLs it is given, `alert::notify` sends to them.
use std::fmt;

/// Stands in for what is hidden.
const HIDDEN: &str = "xxxxx";

/// Where a sink POSTs. Host and path never contain whitespace or control characters, so they
/// can be written into a request head as they are.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HttpUrl {
    /// `https://`: TLS (see `post.rs`).
    pub tls: bool,
    /// A name or an IP address; an IPv6 address without its brackets.
    pub host: String,
    pub port: u16,
    /// Starts with '/'; may carry a query. Never shown: it may hold a token.
    pub path: String,
    /// `user:password` from the URL, sent as HTTP basic auth. Never shown.
    pub userinfo: Option<String>,
}

/// Why a URL cannot be a sink's address: the URL as given (redacted) and one line of reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadUrl {
    /// Redacted by [`redact`].
    pub url: String,
    pub why: String,
}

impl fmt::Display for BadUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "alert URL '{}': {}", self.url.escape_debug(), self.why)
    }
}

impl std::error::Error for BadUrl {}

impl HttpUrl {
    /// `"http://127.0.0.1:9093"` → host `127.0.0.1`, port 9093, path `/`. The port defaults to 80
    /// (443 for https). The one parser of sink URLs: the configuration's checks use it too.
    pub fn parse(s: &str) -> Result<HttpUrl, BadUrl> {
        let bad = |why: String| BadUrl { url: redact(s), why };
        let scheme = |prefix: &str| s.get(..prefix.len()).is_some_and(|p| p.eq_ignore_ascii_case(prefix));
        let (tls, rest) = if scheme("https://") {
            (true, &s["https://".len()..])
        } else if scheme("http://") {
            (false, &s["http://".len()..])
        } else {
            return Err(bad("must start with http:// or https:// (e.g. http://alertmanager:9093)".into()));
        };
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("contains whitespace or control characters".into()));
        }
        // The fragment never goes on the wire.
        let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest[i..].starts_with('?') => (&rest[..i], format!("/{}", &rest[i..])),
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        let (userinfo, authority) = match authority.rsplit_once('@') {
            Some((user, host)) => {
                if !user.contains(':') {
                    return Err(bad("user information must be user:password".into()));
                }
                (Some(user.to_string()), host)
            }
            None => (None, authority),
        };
        let (host, port) = split_host_port(authority, if tls { 443 } else { 80 }).map_err(bad)?;
        if host.is_empty() {
            return Err(bad("has no host".into()));
        }
        Ok(HttpUrl { tls, host: host.to_string(), port, path, userinfo })
    }

    fn default_port(&self) -> u16 {
        if self.tls { 443 } else { 80 }
    }

    /// The `Host` header's value: the port only when it is not the scheme's, IPv6 in brackets.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        if self.port == self.default_port() { host } else { format!("{host}:{}", self.port) }
    }

    /// This URL's path with `suffix` appended, without doubling the slash between them.
    pub fn join(&self, suffix: &str) -> String {
        let (path, query) = self.path.split_once('?').map_or((self.path.as_str(), None), |(p, q)| (p, Some(q)));
        let joined = format!("{}/{}", path.trim_end_matches('/'), suffix.trim_start_matches('/'));
        match query {
            Some(q) => format!("{joined}?{q}"),
            None => joined,
        }
    }
}

/// Redacted, like `Display`.
impl fmt::Debug for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HttpUrl({self})")
    }
}

/// `scheme://[xxxxx@]host[:port]/path[?xxxxx]`: what may be shown.
impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        let user = if self.userinfo.is_some() { format!("{HIDDEN}@") } else { String::new() };
        let (path, query) = self.path.split_once('?').map_or((self.path.as_str(), false), |(p, _)| (p, true));
        let query = if query { format!("?{HIDDEN}") } else { String::new() };
        write!(f, "{scheme}://{user}{}{path}{query}", self.authority())
    }
}

/// Any URL-like text with its user information and query hidden and its fragment dropped, for
/// showing text that may not even parse.
pub fn redact(s: &str) -> String {
    let (scheme, rest) = s.split_once("://").map_or(("", s), |(a, b)| (a, b));
    let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
    let (rest, query) = rest.split_once('?').map_or((rest, false), |(r, _)| (r, true));
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let authority = match authority.rsplit_once('@') {
        Some((_, host)) => format!("{HIDDEN}@{host}"),
        None => authority.to_string(),
    };
    let scheme = if scheme.is_empty() { String::new() } else { format!("{scheme}://") };
    let query = if query { format!("?{HIDDEN}") } else { String::new() };
    format!("{scheme}{authority}{path}{query}")
}

fn split_host_port(authority: &str, default_port: u16) -> Result<(&str, u16), String> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(bracketed) => {
            let Some((host, after)) = bracketed.split_once(']') else {
                return Err("unclosed '[' in the host".into());
            };
            match after {
                "" => (host, None),
                _ => match after.strip_prefix(':') {
                    Some(p) => (host, Some(p)),
                    None => return Err(format!("unexpected '{}' after the IPv6 address", after.escape_debug())),
                },
            }
        }
        None => match authority.split_once(':') {
            Some((_, p)) if p.contains(':') => {
                return Err("IPv6 addresses need brackets (e.g. http://[::1]:9093)".into());
            }
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    match port.map(str::parse::<u16>) {
        None => Ok((host, default_port)),
        Some(Ok(n @ 1..)) => Ok((host, n)),
        Some(_) => Err(format!("port '{}' is not a number from 1 to 65535", port.unwrap_or_default().escape_debug())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(host: &str, port: u16, path: &str) -> HttpUrl {
        HttpUrl { tls: false, host: host.into(), port, path: path.into(), userinfo: None }
    }

    #[test]
    fn parses_what_operators_write() {
        let cases = [
            ("http://127.0.0.1:9093", url("127.0.0.1", 9093, "/")),
            ("http://127.0.0.1:9093/", url("127.0.0.1", 9093, "/")),
            ("http://alertmanager", url("alertmanager", 80, "/")),
            ("HTTP://am.example:8080/prefix/", url("am.example", 8080, "/prefix/")),
            ("http://hooks.local/x?token=abc#frag", url("hooks.local", 80, "/x?token=abc")),
            ("http://hooks.local?token=abc", url("hooks.local", 80, "/?token=abc")),
            ("http://[::1]:9093/am", url("::1", 9093, "/am")),
            ("http://[::1]", url("::1", 80, "/")),
            ("https://am", HttpUrl { tls: true, ..url("am", 443, "/") }),
            ("http://u:p@w@am:1/x", HttpUrl { userinfo: Some("u:p@w".into()), ..url("am", 1, "/x") }),
        ];
        for (text, want) in cases {
            assert_eq!(HttpUrl::parse(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn refuses_with_one_line_naming_the_url() {
        let cases = [
            ("ftp://am", "must start with http://"),
            ("am:9093", "must start with http://"),
            ("http://", "has no host"),
            ("http://:9093", "has no host"),
            ("http://am:", "port '' is not a number"),
            ("http://am:99999", "port '99999' is not a number"),
            ("http://am:0", "port '0' is not a number"),
            ("http://am:x1", "port 'x1' is not a number"),
            ("http://user@am", "user information must be user:password"),
            ("http://::1:9093", "need brackets"),
            ("http://[::1", "unclosed"),
            ("http://am/a b", "whitespace"),
            ("http://am/\r\nX-Injected: 1", "control"),
        ];
        for (text, want) in cases {
            let err = HttpUrl::parse(text).expect_err(text).to_string();
            assert!(err.contains(want), "{text}: {err}");
            assert!(err.contains(&redact(text).escape_debug().to_string()), "{text}: {err}");
            assert!(!err.contains('\n'), "{text}: {err}");
        }
    }

    #[test]
    fn authority_and_joined_paths() {
        assert_eq!(url("am", 80, "/").authority(), "am");
        assert_eq!(url("::1", 9093, "/").authority(), "[::1]:9093");
        assert_eq!(url("am", 9093, "/").join("/api/v2/alerts"), "/api/v2/alerts");
        assert_eq!(url("am", 9093, "/am/").join("/api/v2/alerts"), "/am/api/v2/alerts");
        assert_eq!(url("am", 9093, "/am?x=1").join("/api/v2/alerts"), "/am/api/v2/alerts?x=1");
        assert_eq!(url("::1", 9093, "/p").to_string(), "http://[::1]:9093/p");
        assert_eq!(HttpUrl { tls: true, ..url("am", 443, "/") }.authority(), "am");
    }

    #[test]
    fn credentials_are_never_shown() {
        let parsed = HttpUrl::parse("https://alice:s3cret@hooks.local:8443/x/y?token=SECRET#frag").unwrap();
        assert_eq!(parsed.userinfo.as_deref(), Some("alice:s3cret"));
        assert_eq!(parsed.path, "/x/y?token=SECRET");
        assert_eq!(parsed.to_string(), "https://xxxxx@hooks.local:8443/x/y?xxxxx");
        assert_eq!(format!("{parsed:?}"), "HttpUrl(https://xxxxx@hooks.local:8443/x/y?xxxxx)");
        let cases = [
            ("http://a:b@h/p?t=1#f", "http://xxxxx@h/p?xxxxx"),
            ("http://h", "http://h"),
            ("ftp://u:SECRET@h?SECRET", "ftp://xxxxx@h?xxxxx"),
            ("u:SECRET@h/p", "xxxxx@h/p"),
        ];
        for (text, want) in cases {
            assert_eq!(redact(text), want, "{text}");
        }
        let e = HttpUrl::parse("http://u:SECRET@h:99999/?token=SECRET").unwrap_err().to_string();
        assert!(!e.contains("SECRET"), "{e}");
    }
}
