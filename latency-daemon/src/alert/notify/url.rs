//! A sink's address: `http://host[:port][/path]` text in, [`HttpUrl`] out (or a one-line reason).
//! Only plain HTTP: the client in `post.rs` speaks HTTP/1.1 over TCP and nothing else.
use std::fmt;

/// Where a sink POSTs. Host and path never contain whitespace or control characters, so they
/// can be written into a request head as they are.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HttpUrl {
    /// A name or an IP address; an IPv6 address without its brackets.
    pub host: String,
    pub port: u16,
    /// Starts with '/'; may carry a query.
    pub path: String,
}

impl HttpUrl {
    /// `"http://127.0.0.1:9093"` → host `127.0.0.1`, port 9093, path `/`. The port defaults to 80.
    pub fn parse(s: &str) -> Result<HttpUrl, String> {
        let bad = |why: &str| format!("alert URL '{}': {why}", s.escape_debug());
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("contains whitespace or control characters"));
        }
        let Some((scheme, rest)) = s.split_once("://") else {
            return Err(bad("expected http://host[:port][/path]"));
        };
        if scheme.eq_ignore_ascii_case("https") {
            return Err(bad("https is not supported (put a TLS proxy on localhost in front of it)"));
        }
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(bad(&format!("scheme '{scheme}' is not supported, only http")));
        }
        // The fragment never goes on the wire.
        let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest[i..].starts_with('?') => (&rest[..i], format!("/{}", &rest[i..])),
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        if authority.contains('@') {
            return Err(bad("user information in the URL is not supported"));
        }
        let (host, port) = split_host_port(authority).map_err(|why| bad(&why))?;
        if host.is_empty() {
            return Err(bad("no host"));
        }
        Ok(HttpUrl { host: host.to_string(), port, path })
    }

    /// The `Host` header's value: the port only when it is not 80, IPv6 in brackets.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        if self.port == 80 { host } else { format!("{host}:{}", self.port) }
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

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority(), self.path)
    }
}

fn split_host_port(authority: &str) -> Result<(&str, u16), String> {
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return Err("unclosed '[' in the host".into());
        };
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(p) => (host, Some(p)),
                None => return Err(format!("unexpected '{after}' after the IPv6 address")),
            },
        }
    } else {
        match authority.split_once(':') {
            Some((_, p)) if p.contains(':') => return Err("IPv6 addresses need brackets: http://[::1]:9093".into()),
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        None => 80,
        Some(p) => match p.parse::<u16>() {
            Ok(0) => return Err("port 0".into()),
            Ok(n) => n,
            Err(_) => return Err(format!("bad port '{p}'")),
        },
    };
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(host: &str, port: u16, path: &str) -> HttpUrl {
        HttpUrl { host: host.into(), port, path: path.into() }
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
        ];
        for (text, want) in cases {
            assert_eq!(HttpUrl::parse(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn refuses_with_one_line_naming_the_url() {
        let cases = [
            ("https://am:9093", "https is not supported"),
            ("ftp://am", "scheme 'ftp'"),
            ("am:9093", "expected http://"),
            ("http://", "no host"),
            ("http://:9093", "no host"),
            ("http://am:", "bad port ''"),
            ("http://am:99999", "bad port '99999'"),
            ("http://am:0", "port 0"),
            ("http://am:x1", "bad port 'x1'"),
            ("http://user:pw@am", "user information"),
            ("http://::1:9093", "need brackets"),
            ("http://[::1", "unclosed"),
            ("http://am/a b", "whitespace"),
            ("http://am/\r\nX-Injected: 1", "control"),
        ];
        for (text, want) in cases {
            let err = HttpUrl::parse(text).expect_err(text);
            assert!(err.contains(want), "{text}: {err}");
            assert!(err.contains(&text.escape_debug().to_string()), "{text}: {err}");
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
    }
}
