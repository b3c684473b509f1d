//! The daemon's HTTP/1.1 transport: a listener, a [`Handler`] the application implements and
//! [`Limits`] in; GET/HEAD requests answered by the handler, everything else refused, until
//! shutdown. What happens at each limit (each counted in [`HttpStats`](crate::metrics::instruments::http::HttpStats)): docs/design.md.

mod auth;
mod connection;
mod peers;
mod respond;
#[cfg(test)]
mod tests;
mod throttle;
mod trim;
pub mod web;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
pub use hyper::header::{self, HeaderName, HeaderValue};
pub use hyper::{Method, StatusCode};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

pub use self::web::{WebSlot, WebState};
use crate::metrics::instruments::http::{HttpStats, Outcome};

/// What the handler sees of a request: borrowed from hyper's parsed head, valid for one call.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// GET or HEAD; answer HEAD exactly as GET; the transport drops the body.
    #[allow(dead_code, reason = "our routes answer both alike; kept for handlers that care")]
    pub method: &'a Method,
    pub path: &'a str,
    pub query: Option<&'a str>,
    /// The Accept header, if present and visible ASCII.
    pub accept: Option<&'a str>,
    /// The Accept-Encoding header, likewise.
    pub accept_encoding: Option<&'a str>,
    /// False only for a request to one of the handler's [`Handler::open`] paths that came without
    /// credentials while basic auth is on: answer it without details.
    pub authenticated: bool,
}

/// What the handler answers. Content-Type and Content-Length are always sent from `content_type` and
/// `body`; `extra_headers` naming Content-Type, Content-Length or Transfer-Encoding are dropped.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    /// Must be a valid header value; an invalid one turns the reply into a 500.
    pub content_type: &'static str,
    pub body: Bytes,
    pub extra_headers: Vec<(HeaderName, HeaderValue)>,
}

impl Reply {
    pub fn new(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Self {
        Reply { status, content_type, body: body.into(), extra_headers: Vec::new() }
    }

    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.extra_headers.push((name, value));
        self
    }
}

/// The application's routes. Synchronous on purpose: it runs on the connection's task and should only
/// encode state that is already published (e.g. the latest window); it must not wait on I/O.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, req: &Request<'_>) -> Reply;

    /// Paths answered without credentials when basic auth is on, if the request brings none (a
    /// request with wrong credentials is refused as anywhere else). For probes that cannot
    /// authenticate (a kubelet's); the handler must then reveal nothing but the status.
    fn open(&self, _path: &str) -> bool {
        false
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once, half of them at most before their first request head is in. A
    /// newcomer evicts the oldest of those when they fill their half; when every slot is held by a
    /// connection past its first head, it is answered 503 and closed.
    pub max_connections: usize,
    /// Connections one client address may hold before their first head, and again after it. A
    /// newcomer evicts its address's oldest incomplete connection; a connection whose address has
    /// its share past the first head gets 503 for that head and is closed.
    pub max_connections_per_peer: usize,
    /// Requests handled at once (after authentication, which has its own budget); more are answered
    /// 503 at once. 0: no limit.
    pub max_requests: usize,
    /// Time allowed to send a complete request head, and to start the next one on a kept-alive connection.
    pub header_read_timeout: Duration,
    /// Longest a connection may go without a response being produced, whatever it is doing.
    pub request_timeout: Duration,
    /// Request line plus headers; larger heads get 431.
    pub max_header_bytes: usize,
    /// Largest request body accepted (and ignored); every endpoint is a GET, so 0.
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 1024,
            // A quarter: one host's idle or slow connections leave three quarters to the others.
            max_connections_per_peer: 256,
            max_requests: 40,
            // Prometheus writes its request head in one segment; two seconds is generous.
            header_read_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            max_header_bytes: 8 * 1024,
            max_body_bytes: 0,
        }
    }
}

/// Below this a plain request from curl or Prometheus (request line, Host, User-Agent, Accept) may not fit.
const MIN_HEADER_BYTES: usize = 1024;

impl Limits {
    fn check(&self) -> Result<(), HttpError> {
        let problem = |field, problem| Err(HttpError::Limits { field, problem });
        if self.max_connections == 0 {
            return problem("max_connections", "must be at least 1");
        }
        if self.max_connections_per_peer == 0 {
            return problem("max_connections_per_peer", "must be at least 1");
        }
        if self.header_read_timeout.is_zero() {
            return problem("header_read_timeout", "must be longer than zero");
        }
        if self.request_timeout.is_zero() {
            return problem("request_timeout", "must be longer than zero");
        }
        if self.max_header_bytes < MIN_HEADER_BYTES {
            return problem("max_header_bytes", "must be at least 1024");
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot listen on {addr}: {}", bind_reason(.cause))]
    Bind { addr: SocketAddr, cause: io::Error },
    #[error("HTTP limit {field} {problem}")]
    Limits { field: &'static str, problem: &'static str },
}

fn bind_reason(cause: &io::Error) -> String {
    match cause.kind() {
        io::ErrorKind::AddrInUse => "address in use".to_owned(),
        io::ErrorKind::AddrNotAvailable => "no such address on this host".to_owned(),
        io::ErrorKind::PermissionDenied => "permission denied (ports below 1024 need CAP_NET_BIND_SERVICE)".to_owned(),
        _ => cause.to_string(),
    }
}

/// The listen queue: a burst of connections beyond it has its SYNs dropped, and a scraper among
/// them retries only after a second. The kernel caps it at `net.core.somaxconn` (4096 since 5.4).
const LISTEN_BACKLOG: u32 = 4096;

pub async fn bind(addr: SocketAddr) -> Result<TcpListener, HttpError> {
    let listen = || -> io::Result<TcpListener> {
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        // As std's bind does: a restart may bind while the last run's connections are in TIME_WAIT.
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(LISTEN_BACKLOG)
    };
    listen().map_err(|cause| HttpError::Bind { addr, cause })
}

/// In-flight requests get this long after shutdown is asked for; then their connections are dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// Pause after an accept error that is not about one connection (EMFILE and friends), so a full
/// descriptor table does not turn the accept loop into a busy loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `listener` until `shutdown` resolves, then stops accepting, gives in-flight requests up to
/// one second, and returns. Fails only on invalid `limits`.
pub async fn serve(
    listener: TcpListener,
    handler: Arc<dyn Handler>,
    limits: Limits,
    stats: Arc<HttpStats>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HttpError> {
    serve_with(listener, handler, limits, stats, Arc::default(), shutdown).await
}

/// [`serve`] with a web configuration (TLS, basic auth, headers) that the caller may replace.
pub async fn serve_with(
    listener: TcpListener,
    handler: Arc<dyn Handler>,
    limits: Limits,
    stats: Arc<HttpStats>,
    web: Arc<WebSlot>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HttpError> {
    limits.check()?;
    let requests = (limits.max_requests > 0).then(|| Arc::new(Semaphore::new(limits.max_requests)));
    let shared =
        Arc::new(connection::Shared { handler, stats, limits, web, requests, verified: auth::Verified::default() });
    let peers = peers::Peers::new(peers::Caps::new(limits.max_connections, limits.max_connections_per_peer));
    // Turned-away sockets linger up to a second each; bounding them keeps a flood from holding
    // descriptors the served connections need.
    let lingering = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut tasks = JoinSet::new();
    let mut trim = trim::Trim::default();
    let mut shutdown = pin!(shutdown);

    loop {
        // Reap finished tasks so the set does not grow with the server's lifetime: a finished
        // task's memory is only freed when it is joined.
        while tasks.try_join_next().is_some() {}
        trim.observe(tasks.len(), tokio::time::Instant::now());
        let trim_at = trim.due();
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            () = sleep_until_some(trim_at) => {
                trim.trim_if_due(tasks.len(), tokio::time::Instant::now());
                continue;
            }
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                shared.stats.accept_failed();
                if !is_per_connection(&e) {
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                    }
                }
                continue;
            }
        };
        if let peers::Admission::Admitted { permit, eviction, evicted } = peers.admit(peer.ip()) {
            if evicted {
                shared.stats.record(Outcome::Evicted);
            }
            let slot = connection::Slot { permit, eviction };
            tasks.spawn(connection::serve(stream, Arc::clone(&shared), graceful.watcher(), slot));
            continue;
        }
        shared.stats.record(Outcome::Busy);
        match Arc::clone(&lingering).try_acquire_owned() {
            Ok(slot) => {
                tasks.spawn(connection::turn_away(stream, slot));
            }
            Err(_) => connection::turn_away_now(stream),
        }
    }

    drop(listener);
    // Idle connections close at once; busy ones after their current response.
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await;
    tasks.shutdown().await;
    Ok(())
}

/// Resolves at `at`, or never.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Errors that concern only the connection being accepted; anything else is about the process.
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}
