//! The smallest HTTP/1.1 client that will do: a URL, a [`Request`] (path, content type, headers,
//! body) and the [`Client`] (CAs, client certificate, credentials) in; the status and any
//! `Retry-After` out ([`send`]), or `Ok` for a 2xx status ([`post`], JSON), or a [`PostError`] —
//! over TCP or TLS, always within the given time, whatever the server does.
use std::io;
use std::time::Duration;

use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::client::Client;
use crate::model::sink_url::HttpUrl;

/// A status line longer than this is not HTTP; stop reading rather than buffer what a broken
/// server sends.
const MAX_STATUS_LINE: usize = 1024;
/// The response head (status line and headers) is read up to this; a longer head is cut here,
/// and only a `Retry-After` in the part read counts.
const MAX_HEAD: usize = 16 * 1024;
/// A `Retry-After` beyond this is taken as this: a receiver cannot park us for a day.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// One request: the path, its body's content type, extra headers (e.g. `Content-Encoding`, a
/// receiver's API key) and the body.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub path: &'a str,
    pub content_type: &'a str,
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

/// What the server answered: its status, and how long it asked us to wait (`Retry-After`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub retry_after: Option<Duration>,
}

#[derive(Debug, thiserror::Error)]
pub enum PostError {
    #[error("connect: {source}")]
    Connect { source: io::Error },
    #[error("TLS: {source}")]
    Tls { source: io::Error },
    #[error("TLS: '{host}' is not a valid server name")]
    ServerName { host: String },
    #[error("{step}: {source}")]
    Io { step: &'static str, source: io::Error },
    #[error("no response within {}", humantime::format_duration(*after))]
    Timeout { after: Duration },
    #[error("connection closed before a status line")]
    NoResponse,
    #[error("not an HTTP status line: {line:?}")]
    BadStatusLine { line: String },
    #[error("status {code}")]
    Status { code: u16 },
}

/// POSTs the JSON `body` to `url`'s host at `path` with `Connection: close`; connecting, writing
/// and reading the status line all count against `timeout`. The rest of the response is not read.
pub async fn post(url: &HttpUrl, path: &str, body: &[u8], timeout: Duration, client: &Client) -> Result<(), PostError> {
    let request = Request { path, content_type: "application/json", headers: &[], body };
    match send(url, &request, timeout, client).await?.status {
        200..=299 => Ok(()),
        code => Err(PostError::Status { code }),
    }
}

/// POSTs `request` to `url`'s host with `Connection: close`: whatever the status, the response's
/// status and `Retry-After`. Connecting, writing and reading the head count against `timeout`;
/// the body is not read.
pub async fn send(
    url: &HttpUrl,
    request: &Request<'_>,
    timeout: Duration,
    client: &Client,
) -> Result<Response, PostError> {
    match tokio::time::timeout(timeout, attempt(url, request, client)).await {
        Ok(result) => result,
        Err(_) => Err(PostError::Timeout { after: timeout }),
    }
}

async fn attempt(url: &HttpUrl, request: &Request<'_>, client: &Client) -> Result<Response, PostError> {
    let stream =
        TcpStream::connect((url.host.as_str(), url.port)).await.map_err(|source| PostError::Connect { source })?;
    let authorization = client.authorization(url);
    if !url.tls {
        return exchange(stream, url, request, authorization.as_deref()).await;
    }
    let name = ServerName::try_from(url.host.clone()).map_err(|_| PostError::ServerName { host: url.host.clone() })?;
    let tls = tokio_rustls::TlsConnector::from(client.tls())
        .connect(name, stream)
        .await
        .map_err(|source| PostError::Tls { source })?;
    exchange(tls, url, request, authorization.as_deref()).await
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    url: &HttpUrl,
    request: &Request<'_>,
    authorization: Option<&str>,
) -> Result<Response, PostError> {
    // One buffer, one write: a head and a body in separate segments can wait on Nagle and the
    // server's delayed ACK (tens of ms) for nothing.
    let mut head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: runqlat-monitor\r\nContent-Type: {}\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        request.path,
        url.authority(),
        request.content_type,
        request.body.len(),
    );
    if let Some(a) = authorization {
        head.push_str(&format!("Authorization: {a}\r\n"));
    }
    for (name, value) in request.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(request.body);
    stream.write_all(&bytes).await.map_err(|source| PostError::Io { step: "send", source })?;
    let (line, rest) = read_status_line(&mut stream).await?;
    let Some(status) = parse_status(&line) else {
        return Err(PostError::BadStatusLine { line: String::from_utf8_lossy(&line).into_owned() });
    };
    // The headers matter only when the server may have asked us to wait.
    let retry_after = if matches!(status, 429 | 503) {
        read_head(&mut stream, rest).await.and_then(|head| retry_after(&head, std::time::SystemTime::now()))
    } else {
        None
    };
    Ok(Response { status, retry_after })
}

/// The rest of the response head after the status line (`rest`: what was read past it), up to
/// [`MAX_HEAD`]; None when the connection fails first.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S, mut buf: Vec<u8>) -> Option<String> {
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.starts_with(b"\r\n") && buf.len() < MAX_HEAD {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    buf.truncate(MAX_HEAD);
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// A `Retry-After` header's wait (delta-seconds or an IMF-fixdate HTTP date, as of `now`), at
/// most [`MAX_RETRY_AFTER`]; None without one or when it does not parse.
pub fn retry_after(head: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = head.split("\r\n").find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim().eq_ignore_ascii_case("retry-after").then(|| value.trim())
    })?;
    let wait = match value.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => http_date(value)?.duration_since(now).unwrap_or(Duration::ZERO),
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the form HTTP servers must send.
fn http_date(value: &str) -> Option<std::time::SystemTime> {
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let mut parts = value.split_ascii_whitespace().skip(1);
    let day: i64 = parts.next()?.parse().ok()?;
    let month_name = parts.next()?;
    let month = MONTHS.iter().position(|m| *m == month_name)? as i64 + 1;
    let year: i64 = parts.next()?.parse().ok()?;
    let mut hms = parts.next()?.split(':').map(|p| p.parse::<i64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if parts.next() != Some("GMT") || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let days = crate::model::wall::days_from_civil(year, month, day);
    let secs = u64::try_from(days * 86_400 + h * 3600 + m * 60 + s).ok()?;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(secs))
}

/// The status line, and what was read past it.
async fn read_status_line<S: AsyncRead + Unpin>(stream: &mut S) -> Result<(Vec<u8>, Vec<u8>), PostError> {
    let mut buf = Vec::with_capacity(128);
    let mut chunk = [0u8; 256];
    loop {
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            let rest = buf.split_off(end + 2);
            buf.truncate(end);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_STATUS_LINE {
            buf.truncate(MAX_STATUS_LINE);
            return Err(PostError::BadStatusLine { line: String::from_utf8_lossy(&buf).into_owned() });
        }
        let n = stream.read(&mut chunk).await.map_err(|source| PostError::Io { step: "receive", source })?;
        if n == 0 {
            return if buf.is_empty() {
                Err(PostError::NoResponse)
            } else {
                Err(PostError::BadStatusLine { line: String::from_utf8_lossy(&buf).into_owned() })
            };
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// `HTTP/1.1 204 No Content` → 204.
fn parse_status(line: &[u8]) -> Option<u16> {
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.splitn(3, ' ');
    let version = parts.next()?;
    let code = parts.next()?;
    if !version.starts_with("HTTP/1.") || code.len() != 3 {
        return None;
    }
    code.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::net::TcpListener;

    use super::*;

    #[test]
    fn retry_after_in_seconds_or_as_a_date_and_bounded() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        let head = |v: &str| format!("Content-Length: 0\r\nretry-after: {v}\r\n\r\n");
        assert_eq!(retry_after(&head("2"), now), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(&head("Sun, 06 Nov 1994 08:49:47 GMT"), now), Some(Duration::from_secs(10)));
        assert_eq!(retry_after(&head("Sun, 06 Nov 1994 08:49:30 GMT"), now), Some(Duration::ZERO));
        assert_eq!(retry_after(&head("999999"), now), Some(MAX_RETRY_AFTER));
        assert_eq!(retry_after(&head("soon"), now), None);
        assert_eq!(retry_after("Content-Length: 0\r\n\r\n", now), None);
        assert_eq!(http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(std::time::UNIX_EPOCH));
        assert_eq!(
            http_date("Tue, 29 Feb 2000 12:00:00 GMT"),
            Some(std::time::UNIX_EPOCH + Duration::from_secs(951_825_600))
        );
    }

    #[test]
    fn status_lines() {
        assert_eq!(parse_status(b"HTTP/1.1 200 OK"), Some(200));
        assert_eq!(parse_status(b"HTTP/1.0 204"), Some(204));
        assert_eq!(parse_status(b"HTTP/1.1 500 Internal Server Error"), Some(500));
        assert_eq!(parse_status(b"HTTP/2 200"), None);
        assert_eq!(parse_status(b"HTTP/1.1 20 OK"), None);
        assert_eq!(parse_status(b"SSH-2.0-OpenSSH"), None);
        assert_eq!(parse_status(b"\xff\xfe"), None);
    }

    /// The request a test client sent. Connection: close, but the client waits for our status line,
    /// so read until the body is in: the test bodies are tiny and end with '}'.
    pub(super) async fn read_request(s: &mut (impl tokio::io::AsyncRead + Unpin)) -> Vec<u8> {
        let mut req = Vec::new();
        let mut chunk = [0u8; 4096];
        while !req.ends_with(b"}") {
            let n = s.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            req.extend_from_slice(&chunk[..n]);
        }
        req
    }

    /// A server that answers one connection with `reply` after reading the request, and hands
    /// back the request it read.
    async fn answer_once(reply: &'static [u8]) -> (HttpUrl, tokio::task::JoinHandle<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let req = read_request(&mut s).await;
            s.write_all(reply).await.unwrap();
            req
        });
        (HttpUrl { tls: false, host: "127.0.0.1".into(), port, path: "/".into(), userinfo: None }, task)
    }

    #[tokio::test]
    async fn writes_a_complete_request_and_reads_the_status() {
        let (url, server) = answer_once(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n").await;
        post(&url, "/api/v2/alerts", br#"{"a":1}"#, Duration::from_secs(5), &Client::default()).await.unwrap();
        let req = String::from_utf8(server.await.unwrap()).unwrap();
        let want_host = format!("Host: 127.0.0.1:{}\r\n", url.port);
        assert!(req.starts_with("POST /api/v2/alerts HTTP/1.1\r\n"), "{req}");
        for header in
            [want_host.as_str(), "Content-Type: application/json\r\n", "Content-Length: 7\r\n", "Connection: close\r\n"]
        {
            assert!(req.contains(header), "{header:?} missing in {req}");
        }
        assert!(req.ends_with("\r\n\r\n{\"a\":1}"), "{req}");
    }

    #[tokio::test]
    async fn non_2xx_and_garbage_are_errors() {
        let (url, _server) = answer_once(b"HTTP/1.1 503 Service Unavailable\r\n\r\n").await;
        let err = post(&url, "/", b"{}", Duration::from_secs(5), &Client::default()).await.unwrap_err();
        assert!(matches!(err, PostError::Status { code: 503 }), "{err}");

        let (url, _server) = answer_once(b"hello\r\n").await;
        let err = post(&url, "/", b"{}", Duration::from_secs(5), &Client::default()).await.unwrap_err();
        assert!(matches!(err, PostError::BadStatusLine { .. }), "{err}");

        let (url, _server) = answer_once(b"").await;
        let err = post(&url, "/", b"{}", Duration::from_secs(5), &Client::default()).await.unwrap_err();
        assert!(matches!(err, PostError::NoResponse), "{err}");
    }

    #[tokio::test]
    async fn a_silent_server_times_out_and_a_closed_port_refuses() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = HttpUrl {
            tls: false,
            host: "127.0.0.1".into(),
            port: listener.local_addr().unwrap().port(),
            path: "/".into(),
            userinfo: None,
        };
        // Accepts (the kernel's backlog does) and never answers.
        let started = Instant::now();
        let err = post(&url, "/", b"{}", Duration::from_millis(200), &Client::default()).await.unwrap_err();
        assert!(matches!(err, PostError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        assert_eq!(err.to_string(), "no response within 200ms");

        drop(listener);
        let err = post(&url, "/", b"{}", Duration::from_secs(5), &Client::default()).await.unwrap_err();
        assert!(matches!(err, PostError::Connect { .. }), "{err}");
    }
}

/// `https://` against a real TLS endpoint (rustls with latency-lab's test certificates): trusted
/// through the CA file, with the bearer token; refused without the CA.
#[cfg(test)]
mod tls_tests {
    use std::sync::Arc;

    use latency_lab::tls::Certs;
    use rustls_pki_types::pem::PemObject as _;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::net::TcpListener;

    use super::*;
    use crate::net::credentials::{Auth, Secret};

    async fn tls_receiver(certs: &Certs) -> (HttpUrl, tokio::task::JoinHandle<Vec<u8>>) {
        super::super::client::install_ring();
        let chain = CertificateDer::pem_file_iter(certs.path("server.pem")).unwrap().map(Result::unwrap).collect();
        let key = PrivateKeyDer::from_pem_file(certs.path("server.key")).unwrap();
        let config = rustls::ServerConfig::builder().with_no_client_auth().with_single_cert(chain, key).unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            // The first connection may be the one without the CA, failing its handshake.
            loop {
                let (s, _) = listener.accept().await.unwrap();
                let Ok(mut s) = acceptor.accept(s).await else { continue };
                let req = super::tests::read_request(&mut s).await;
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").await.unwrap();
                let _ = s.shutdown().await;
                return req;
            }
        });
        (HttpUrl::parse(&format!("https://localhost:{port}/hook")).unwrap(), task)
    }

    #[tokio::test]
    async fn https_with_a_ca_file_and_a_bearer_token() {
        let certs = Certs::new().unwrap();
        let (url, server) = tls_receiver(&certs).await;
        let untrusted = Client::new(None, None).unwrap();
        let err = post(&url, "/hook", b"{}", Duration::from_secs(5), &untrusted).await.unwrap_err();
        assert!(matches!(err, PostError::Tls { .. }), "{err}");

        let ca = std::fs::read_to_string(certs.path("ca.pem")).unwrap();
        let client = Client::new(Some(&ca), Some(Auth::Bearer(Secret("T0KEN".into())))).unwrap();
        post(&url, "/hook", br#"{"a":1}"#, Duration::from_secs(5), &client).await.unwrap();
        let req = String::from_utf8(server.await.unwrap()).unwrap();
        assert!(req.starts_with("POST /hook HTTP/1.1\r\n"), "{req}");
        assert!(req.contains("Authorization: Bearer T0KEN\r\n"), "{req}");
    }
}
