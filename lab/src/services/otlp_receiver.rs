//! A scripted OTLP/HTTP receiver on loopback, to see what the daemon does when a real one
//! misbehaves: each request is answered by the next [`Answer`] of its script (200 once the script
//! is used up): a status, a status with `Retry-After` (seconds, or any text: a date, garbage), a
//! stall longer than the client waits, or a
//! closed connection; over TCP or TLS (the lab's test certificates, optionally requiring a client
//! certificate). Every request is recorded: when, its path, headers and body. Stopped when dropped.
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};

/// The longest head and body we take: far above a push at 1,000 cgroups.
const MAX_REQUEST: usize = 16 << 20;

/// How one request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Status(u16),
    /// The status with `Retry-After: <seconds>`.
    RetryAfter(u16, u64),
    /// The status with `Retry-After: <text>` (an HTTP date, or what no client can read).
    RetryAfterText(u16, &'static str),
    /// Nothing for this long, then 200.
    Stall(Duration),
    /// The connection closed without a response.
    Close,
}

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: Instant,
    pub path: String,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The status it was answered with; None when closed unanswered or stalled (the client has
    /// given up by the time the answer comes).
    pub status: Option<u16>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// TLS for the receiver: the server certificate and key of a [`crate::tls::Certs`] directory,
/// and, if `client_ca` is set, a client certificate signed by that CA required.
#[derive(Debug, Clone)]
pub struct Tls<'a> {
    pub certs: &'a Path,
    pub client_ca: Option<&'a Path>,
}

#[derive(Debug, Default)]
struct State {
    script: Mutex<VecDeque<Answer>>,
    received: Mutex<Vec<Received>>,
    stop: AtomicBool,
}

#[derive(Debug)]
pub struct OtlpReceiver {
    pub port: u16,
    tls: bool,
    state: Arc<State>,
    thread: Option<JoinHandle<()>>,
}

impl OtlpReceiver {
    /// Listening on 127.0.0.1 at a free port (`tls`: https).
    pub fn start(tls: Option<Tls<'_>>) -> anyhow::Result<OtlpReceiver> {
        OtlpReceiver::start_on(0, tls)
    }

    /// Listening on 127.0.0.1:`port` (0: any free one), e.g. where a client already tries.
    pub fn start_on(port: u16, tls: Option<Tls<'_>>) -> anyhow::Result<OtlpReceiver> {
        let listener = TcpListener::bind(("127.0.0.1", port)).context("binding the receiver")?;
        let port = listener.local_addr()?.port();
        let config = tls.as_ref().map(server_config).transpose()?;
        let state = Arc::new(State::default());
        let shared = Arc::clone(&state);
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if shared.stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let (state, config) = (Arc::clone(&shared), config.clone());
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                    match config {
                        None => serve(stream, &state),
                        Some(config) => {
                            let Ok(connection) = rustls::ServerConnection::new(config) else { return };
                            serve(rustls::StreamOwned::new(connection, stream), &state);
                        }
                    }
                });
            }
        });
        Ok(OtlpReceiver { port, tls: tls.is_some(), state, thread: Some(thread) })
    }

    /// The metrics endpoint (https names `localhost`, which the test certificate covers).
    pub fn url(&self) -> String {
        if self.tls {
            format!("https://localhost:{}/v1/metrics", self.port)
        } else {
            format!("http://127.0.0.1:{}/v1/metrics", self.port)
        }
    }

    /// The next requests are answered with these, in order; then 200 again.
    pub fn answer(&self, answers: &[Answer]) {
        self.state.script.lock().unwrap_or_else(PoisonError::into_inner).extend(answers);
    }

    /// How many requests were answered with a 2xx status.
    pub fn accepted(&self) -> usize {
        self.received().iter().filter(|r| r.status.is_some_and(|s| (200..300).contains(&s))).count()
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Waits until `n` requests arrived (or `limit` passed): all of them.
    pub fn wait_for(&self, n: usize, limit: Duration) -> anyhow::Result<Vec<Received>> {
        let deadline = Instant::now() + limit;
        loop {
            let got = self.received();
            if got.len() >= n {
                return Ok(got);
            }
            anyhow::ensure!(Instant::now() < deadline, "{} of {n} requests within {limit:?}", got.len());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn server_config(tls: &Tls<'_>) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(tls.certs.join("server.pem"))
        .context("server.pem")?
        .collect::<Result<_, _>>()
        .context("server.pem")?;
    let key = PrivateKeyDer::from_pem_file(tls.certs.join("server.key")).context("server.key")?;
    let builder = rustls::ServerConfig::builder();
    let builder = match tls.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).context("client CA")? {
                roots.add(cert.context("client CA")?)?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots)).build()?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    Ok(Arc::new(builder.with_single_cert(chain, key)?))
}

/// One request on `stream`: read it, record it, answer it as the script says.
fn serve(mut stream: impl Read + Write, state: &State) {
    let Some(mut received) = read_request(&mut stream) else { return };
    let answer = state.script.lock().unwrap_or_else(PoisonError::into_inner).pop_front().unwrap_or(Answer::Status(200));
    received.status = match answer {
        Answer::Status(code) | Answer::RetryAfter(code, _) | Answer::RetryAfterText(code, _) => Some(code),
        Answer::Stall(_) | Answer::Close => None,
    };
    state.received.lock().unwrap_or_else(PoisonError::into_inner).push(received);
    let reply = match answer {
        Answer::Close => return,
        Answer::Stall(d) => {
            std::thread::sleep(d);
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_owned()
        }
        Answer::Status(code) => format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
        Answer::RetryAfter(code, s) => {
            format!("HTTP/1.1 {code} X\r\nRetry-After: {s}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        }
        Answer::RetryAfterText(code, text) => {
            format!("HTTP/1.1 {code} X\r\nRetry-After: {text}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        }
    };
    let _ = stream.write_all(reply.as_bytes());
    let _ = stream.flush();
}

fn read_request(stream: &mut impl Read) -> Option<Received> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 || buf.len() > MAX_REQUEST {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let at = Instant::now();
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers.iter().find(|(n, _)| n == "content-length")?.1.parse().ok()?;
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length.min(MAX_REQUEST) {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Received { at, path, headers, body, status: None })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn post(port: u16, body: &[u8]) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let head =
            format!("POST /v1/metrics HTTP/1.1\r\nHost: x\r\nX-Key: k\r\nContent-Length: {}\r\n\r\n", body.len());
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(body).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    #[test]
    fn answers_as_scripted_and_records_each_request() {
        let r = OtlpReceiver::start(None).unwrap();
        r.answer(&[
            Answer::RetryAfter(429, 2),
            Answer::RetryAfterText(503, "soon"),
            Answer::Status(400),
            Answer::Close,
        ]);
        assert!(post(r.port, b"one").starts_with("HTTP/1.1 429 X\r\nRetry-After: 2\r\n"));
        assert!(post(r.port, b"one again").starts_with("HTTP/1.1 503 X\r\nRetry-After: soon\r\n"));
        assert!(post(r.port, b"two").starts_with("HTTP/1.1 400 "));
        assert_eq!(post(r.port, b"three"), "");
        assert!(post(r.port, b"four").starts_with("HTTP/1.1 200 "));
        let got = r.received();
        assert_eq!(
            got.iter().map(|g| g.body.as_slice()).collect::<Vec<_>>(),
            [&b"one"[..], b"one again", b"two", b"three", b"four"]
        );
        assert_eq!((got[0].path.as_str(), got[0].header("x-key")), ("/v1/metrics", Some("k")));
    }
}
