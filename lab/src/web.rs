//! Just enough HTTP for the lab, over std: in, a loopback address and a path; out, the status,
//! headers and (dechunked) body of a GET; URL encoding, a free loopback port, and samples looked
//! up in Prometheus text.
use std::{
    io::{Read as _, Write as _},
    net::{IpAddr, SocketAddr, TcpListener, TcpStream},
    time::Duration,
};

use anyhow::Context as _;

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// GET `path` from `addr` with extra request headers (HTTP/1.1, one request per connection).
pub fn get(addr: &str, path: &str, headers: &[(&str, &str)]) -> anyhow::Result<Response> {
    request(None, addr, path, headers)
}

/// [`get`] from the source address `from` (Linux routes all of 127.0.0.0/8 to `lo`, so a test can
/// be many clients to a daemon listening on 127.0.0.1).
pub fn get_from(from: IpAddr, addr: &str, path: &str, headers: &[(&str, &str)]) -> anyhow::Result<Response> {
    request(Some(from), addr, path, headers)
}

fn connect(from: Option<IpAddr>, addr: &str) -> anyhow::Result<TcpStream> {
    let Some(from) = from else { return Ok(TcpStream::connect(addr)?) };
    let to: SocketAddr = addr.parse().with_context(|| format!("{addr} is not an IP address and port"))?;
    let socket = socket2::Socket::new(socket2::Domain::for_address(to), socket2::Type::STREAM, None)?;
    socket.bind(&SocketAddr::new(from, 0).into()).with_context(|| format!("binding {from}"))?;
    socket.connect(&to.into())?;
    Ok(socket.into())
}

fn request(from: Option<IpAddr>, addr: &str, path: &str, headers: &[(&str, &str)]) -> anyhow::Result<Response> {
    let fetch = || -> anyhow::Result<Response> {
        let mut s = connect(from, addr)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes())?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)?;
        parse(&raw)
    };
    fetch().with_context(|| format!("GET http://{addr}{path}"))
}

fn parse(raw: &[u8]) -> anyhow::Result<Response> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").context("no end of the header")?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut body = raw[split + 4..].to_vec();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("bad status line in {head:?}"))?;
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))).collect();
    if headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked")) {
        body = dechunk(&body);
    }
    Ok(Response { status, headers, body })
}

/// The chunks' data, up to the last chunk or to what arrived.
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap_or(0);
        let Some(chunk) = b.get(eol + 2..eol + 2 + size).filter(|_| size > 0) else { break };
        out.extend_from_slice(chunk);
        b = b.get(eol + 2 + size + 2..).unwrap_or_default();
    }
    out
}

pub fn urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding a loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// One sample's value from Prometheus text: the line starting with `series` (name and labels
/// exactly as printed).
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
}

/// The sum of every sample whose line starts with `prefix` (a name: all its series).
pub fn total(text: &str, prefix: &str) -> f64 {
    text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_are_joined() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n\
                    5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n";
        let r = parse(raw).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!((r.status, r.text().as_str()), (200, "hello, world"));
        assert_eq!(r.header("content-type"), Some("text/plain"));
        // A body cut short keeps what arrived whole.
        assert_eq!(dechunk(b"5\r\nhello\r\n9\r\nwor"), b"hello");
        assert!(parse(b"HTTP/1.1 200 OK\r\n").is_err());
    }

    #[test]
    fn samples_by_series_and_by_name() {
        let text = "# TYPE runqlat_drains_total counter\nrunqlat_drains_total 12\n\
                    runqlat_delay_seconds_count{reason=\"wakeup\"} 40\nrunqlat_delay_seconds_count{reason=\"preempt\"} 2\n";
        assert_eq!(sample(text, "runqlat_drains_total"), Some(12.0));
        assert_eq!(sample(text, "runqlat_delay_seconds_count{reason=\"preempt\"}"), Some(2.0));
        assert_eq!(sample(text, "runqlat_delay_seconds"), None);
        assert_eq!(total(text, "runqlat_delay_seconds_count"), 42.0);
    }

    #[test]
    fn urlencode_keeps_only_unreserved() {
        assert_eq!(urlencode("sum(rate(x{a=\"b c\"}[8s]))"), "sum%28rate%28x%7Ba%3D%22b%20c%22%7D%5B8s%5D%29%29");
    }
}
