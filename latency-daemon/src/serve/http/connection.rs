//! One accepted socket in; a TLS handshake if the web config asks for one, then served by hyper
//! (each request authenticated when users are configured) until the client leaves, a limit ends
//! it, a newer connection evicts it (before its first head is in, or idle between requests), or
//! shutdown — or, when every slot is busy, a fixed 503 and a close.

use std::convert::Infallible;
use std::io;
use std::net::IpAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::auth::{Verdict, Verified};
use super::peers::{Eviction, PeerPermit, Promotion};
use super::respond::{TEXT, frame, respond};
use super::throttle::Refusal;
use super::web::{WebSlot, WebState};
use super::{Handler, Limits, Reply, StatusCode};
use crate::metrics::instruments::http::{HttpStats, Outcome};

/// What every connection task needs, shared rather than cloned per connection.
pub(super) struct Shared {
    pub handler: Arc<dyn Handler>,
    pub stats: Arc<HttpStats>,
    pub limits: Limits,
    pub web: Arc<WebSlot>,
    /// Requests in the handler (authentication is bounded by `verified`'s own budget); None: no limit.
    pub requests: Option<Arc<Semaphore>>,
    pub verified: Verified,
}

/// When the connection last produced a response, so the watchdog can tell idle from busy.
#[derive(Debug, Default)]
struct Progress {
    replies: AtomicU64,
    /// Milliseconds after the connection started; only meaningful when `replies > 0`.
    last_reply_ms: AtomicU64,
}

/// hyper's smallest allowed read buffer (it panics below).
const MIN_BUF_BYTES: usize = 8 * 1024;

/// How long a 429 for too many failed logins is held before it is sent.
const THROTTLED_HOLD: Duration = Duration::from_millis(500);

/// Go's answer to plain HTTP on a TLS port, so a misconfigured scraper says what is wrong.
const PLAIN_ON_TLS: &[u8] = b"HTTP/1.0 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n\
connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";
/// The first byte of every TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// Its slot, and word of its eviction while it has not sent a complete head.
pub(super) struct Slot {
    pub permit: Arc<PeerPermit>,
    pub eviction: Eviction,
}

pub(super) async fn serve(stream: TcpStream, shared: Arc<Shared>, watcher: Watcher, mut slot: Slot) {
    let _open = shared.stats.open_connection();
    // Each response is written in one piece; Nagle would only hold its tail back for an ACK.
    let _ = stream.set_nodelay(true);
    let web = shared.web.get();
    let Some(tls) = web.tls.clone() else {
        return serve_io(TokioIo::new(stream), shared, watcher, web, slot).await;
    };
    // The handshake counts against the header deadline: a client that connects and stays silent
    // is as slow as one that never finishes its head.
    let deadline = Instant::now() + shared.limits.header_read_timeout;
    let handshake = async {
        let mut first = [0u8; 1];
        let n = stream.peek(&mut first).await?;
        if n == 0 {
            return Ok(None);
        }
        if first[0] != TLS_HANDSHAKE {
            let mut stream = stream;
            let _ = stream.write_all(PLAIN_ON_TLS).await;
            let _ = stream.shutdown().await;
            return Err(io::Error::new(io::ErrorKind::InvalidData, "plain HTTP on the TLS port"));
        }
        tls.accept(stream).await.map(Some)
    };
    let handshake = tokio::select! {
        // Counted by whoever evicted it.
        () = slot.eviction.wait() => return,
        handshake = tokio::time::timeout_at(deadline, handshake) => handshake,
    };
    match handshake {
        Ok(Ok(Some(tls))) => serve_io(TokioIo::new(tls), shared, watcher, web, slot).await,
        Ok(Ok(None)) => {}
        // Not TLS, or a failed handshake (wrong CA, no client certificate, a protocol error):
        // rustls has sent its alert; nothing reached the handler.
        Ok(Err(_)) => shared.stats.record(Outcome::Malformed),
        Err(_) => shared.stats.record(Outcome::Timeout),
    }
}

async fn serve_io<I>(io: TokioIo<I>, shared: Arc<Shared>, watcher: Watcher, web: Arc<WebState>, slot: Slot)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Slot { permit, mut eviction } = slot;
    let started = Instant::now();
    let progress = Arc::new(Progress::default());

    let service = {
        let (shared, progress) = (Arc::clone(&shared), Arc::clone(&progress));
        service_fn(move |req: hyper::Request<Incoming>| {
            let (shared, progress, web) = (Arc::clone(&shared), Arc::clone(&progress), Arc::clone(&web));
            // A complete head: from now on the connection is served, and busy (not evictable)
            // until its response is handed over.
            let promotion = permit.promote();
            let permit = Arc::clone(&permit);
            async move {
                let (mut response, outcome) = match promotion {
                    Promotion::Served { evicted } => {
                        if evicted {
                            shared.stats.record(Outcome::Evicted);
                        }
                        answer(&req, &shared, &web, permit.ip()).await
                    }
                    Promotion::Full | Promotion::Evicted => busy_and_close(req.method() == hyper::Method::HEAD),
                };
                // Idle from here until its next head (hyper writes this response meanwhile).
                permit.rest();
                for (name, value) in &web.headers {
                    response.headers_mut().insert(name.clone(), value.clone());
                }
                shared.stats.record(outcome);
                let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                progress.last_reply_ms.store(ms, Ordering::Relaxed);
                progress.replies.fetch_add(1, Ordering::Relaxed);
                Ok::<_, Infallible>(response)
            }
        })
    };
    let limits = &shared.limits;
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // Checked by hyper on every read of a partial head, so the buffer never grows far past it; hyper
        // answers 431 itself and closes.
        .max_header_size(limits.max_header_bytes)
        // hyper's default lets a read buffer grow to ~400 KiB (a client pipelining requests faster than
        // it reads the answers); a head and the start of the next are all a connection needs.
        .max_buf_size(limits.max_header_bytes.saturating_mul(2).max(MIN_BUF_BYTES))
        .keep_alive(true)
        .serve_connection(io, service);
    let mut connection = pin!(watcher.watch(connection));

    // hyper bounds each wait for a head (including idle keep-alive gaps) by header_read_timeout; this
    // bounds everything else — a slow body, a client that never reads its response — by request_timeout
    // since the last response (or the start).
    loop {
        let since_start = Duration::from_millis(progress.last_reply_ms.load(Ordering::Relaxed));
        let deadline = started + since_start + limits.request_timeout;
        tokio::select! {
            // Counted by whoever evicted it; dropping the connection closes the socket.
            () = eviction.wait() => return,
            result = &mut connection => {
                if let Err(e) = result {
                    record_failure(&shared.stats, &e, progress.replies.load(Ordering::Relaxed));
                }
                return;
            }
            () = tokio::time::sleep_until(deadline) => {
                let moved = Duration::from_millis(progress.last_reply_ms.load(Ordering::Relaxed)) != since_start;
                if moved {
                    continue;
                }
                if progress.replies.load(Ordering::Relaxed) == 0 {
                    shared.stats.record(Outcome::Timeout);
                }
                // Dropping the connection closes the socket.
                return;
            }
        }
    }
}

/// One request: the credentials (or 401, or 429 when failures from `peer` or everyone are over their
/// budget), a request slot (or 503), then the handler. Authentication comes first and holds no
/// request slot: its cost is bounded by its own budget and worker, so a flood of wrong passwords
/// cannot take the slots that scrapes with good (remembered) credentials need.
async fn answer(
    req: &hyper::Request<Incoming>,
    shared: &Shared,
    web: &WebState,
    peer: IpAddr,
) -> (hyper::Response<http_body_util::Full<bytes::Bytes>>, Outcome) {
    let head = req.method() == hyper::Method::HEAD;
    let mut authenticated = true;
    if !web.users.is_empty() {
        let authorization = req.headers().get(header::AUTHORIZATION).map(HeaderValue::as_bytes);
        if authorization.is_none() && shared.handler.open(req.uri().path()) {
            // No bcrypt, no details: see Handler::open.
            authenticated = false;
        } else {
            match shared.verified.check(&web.users, authorization, peer).await {
                Verdict::Allowed => {}
                Verdict::Refused => {
                    let reply = Reply::new(StatusCode::UNAUTHORIZED, TEXT, "Unauthorized\n")
                        .with_header(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
                    return (frame(reply, head), Outcome::Unauthorized);
                }
                Verdict::NotNow(Refusal::Throttled { retry_after }) => {
                    // Held a moment before it is sent: a client retrying at once would otherwise cost
                    // more in requests than the hashes it was refused. The wait holds no request slot.
                    tokio::time::sleep(THROTTLED_HOLD).await;
                    let reply = Reply::new(StatusCode::TOO_MANY_REQUESTS, TEXT, "too many failed logins\n")
                        .with_header(header::RETRY_AFTER, HeaderValue::from(retry_after));
                    return (frame(reply, head), Outcome::Throttled);
                }
                Verdict::NotNow(Refusal::Busy) => return busy(head),
            }
        }
    }
    let _request = match &shared.requests {
        None => None,
        Some(requests) => match Arc::clone(requests).try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => return busy(head),
        },
    };
    // Handlers are synchronous (an encode, a page): on a multi-threaded runtime, tell tokio this
    // worker is busy so the tasks queued behind it (other connections, the accept loop) move to
    // another worker instead of waiting for this handler to return.
    let handle = tokio::runtime::Handle::current();
    if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
        tokio::task::block_in_place(|| respond(req, &*shared.handler, shared.limits.max_body_bytes, authenticated))
    } else {
        respond(req, &*shared.handler, shared.limits.max_body_bytes, authenticated)
    }
}

fn busy(head: bool) -> (hyper::Response<http_body_util::Full<bytes::Bytes>>, Outcome) {
    let reply = Reply::new(StatusCode::SERVICE_UNAVAILABLE, TEXT, "too many requests at once\n")
        .with_header(header::RETRY_AFTER, HeaderValue::from_static("1"));
    (frame(reply, head), Outcome::Busy)
}

/// The client's address already holds its share of served connections (or this one was evicted
/// as its head came in): 503, and hyper closes the connection after it.
fn busy_and_close(head: bool) -> (hyper::Response<http_body_util::Full<bytes::Bytes>>, Outcome) {
    let reply = Reply::new(StatusCode::SERVICE_UNAVAILABLE, TEXT, "too many connections from your address\n")
        .with_header(header::RETRY_AFTER, HeaderValue::from_static("1"))
        .with_header(header::CONNECTION, HeaderValue::from_static("close"));
    (frame(reply, head), Outcome::Busy)
}

/// Counts what hyper ended the connection for. A header timeout after at least one reply is an idle
/// keep-alive connection being reaped, which is normal and not counted; client resets are not counted.
fn record_failure(stats: &HttpStats, error: &hyper::Error, replies: u64) {
    if error.is_parse_too_large() {
        stats.record(Outcome::TooLarge);
    } else if error.is_parse() {
        stats.record(Outcome::Malformed);
    } else if error.is_timeout() && replies == 0 {
        stats.record(Outcome::Timeout);
    }
}

/// Fixed so that turning a client away costs no parsing and no allocation.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: text/plain; charset=utf-8\r\n\
content-length: 15\r\n\
retry-after: 1\r\n\
connection: close\r\n\
\r\n\
server is busy\n";

/// How long, and how much of the client's request, a turned-away socket is drained before closing.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 16 * 1024;

/// Sends the 503, then drains what the client already sent: closing a socket with unread input makes
/// the kernel send RST, and a client that receives RST may lose the 503 before it reads it.
pub(super) async fn turn_away(mut stream: TcpStream, _slot: OwnedSemaphorePermit) {
    let linger = async {
        stream.write_all(BUSY).await?;
        stream.shutdown().await?;
        let mut sink = [0_u8; 1024];
        let mut drained = 0;
        while drained < LINGER_BYTES {
            match stream.read(&mut sink).await? {
                0 => break,
                n => drained += n,
            }
        }
        Ok::<(), io::Error>(())
    };
    // Either way the socket closes here; the client has already been counted as turned away.
    let _ = tokio::time::timeout(LINGER, linger).await;
}

/// When even the lingering slots are taken: one non-blocking write (a fresh socket's send buffer is
/// empty, so it fits) and close at once, at the risk of the RST described above.
pub(super) fn turn_away_now(stream: TcpStream) {
    let _ = stream.try_write(BUSY);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_response_length_matches_its_body() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let length = head.lines().find_map(|l| l.strip_prefix("content-length: ")).unwrap();
        assert_eq!(length.parse::<usize>().unwrap(), body.len());
    }
}
