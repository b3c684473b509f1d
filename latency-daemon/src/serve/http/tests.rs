//! `serve` over real loopback sockets: raw requests in, bytes on the wire and counters out.

use std::time::Instant;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::*;
use crate::metrics::instruments::http::HttpStatsSnapshot;

/// "/" → a fixed page, "/panic" → panics, "/slow" → blocks 300 ms (counting in `slow_entered` that
/// it started), "/hold" → blocks until `released` (at most PATIENCE, counting in `slow_entered`
/// too), anything else → 404.
#[derive(Default)]
struct Fixture {
    slow_entered: Arc<std::sync::atomic::AtomicUsize>,
    released: Arc<std::sync::atomic::AtomicBool>,
}

impl Handler for Fixture {
    fn handle(&self, req: &Request<'_>) -> Reply {
        match req.path {
            "/" => Reply::new(StatusCode::OK, "text/plain; charset=utf-8", "hello\n"),
            "/panic" => panic!("fixture panics on purpose"),
            "/slow" => {
                self.slow_entered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(300));
                Reply::new(StatusCode::OK, "text/plain", "slow\n")
            }
            "/hold" => {
                self.slow_entered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let until = Instant::now() + PATIENCE;
                while !self.released.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Reply::new(StatusCode::OK, "text/plain", "held\n")
            }
            _ => Reply::new(StatusCode::NOT_FOUND, "text/plain", "no such page\n"),
        }
    }
}

/// Every network step in these tests is bounded by this, so a bug fails a test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(5);

struct Server {
    addr: SocketAddr,
    stats: Arc<HttpStats>,
    slow_entered: Arc<std::sync::atomic::AtomicUsize>,
    released: Arc<std::sync::atomic::AtomicBool>,
    stop: oneshot::Sender<()>,
    done: JoinHandle<Result<(), HttpError>>,
}

async fn start(limits: Limits) -> Server {
    let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stats = Arc::new(HttpStats::default());
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async move {
        let _ = stopped.await;
    };
    let slow_entered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fixture = Fixture { slow_entered: Arc::clone(&slow_entered), released: Arc::clone(&released) };
    let done = tokio::spawn(serve(listener, Arc::new(fixture), limits, Arc::clone(&stats), shutdown));
    Server { addr, stats, slow_entered, released, stop, done }
}

impl Server {
    /// Waits (at most PATIENCE) until a `/slow` request is inside the handler: a sleep instead
    /// would race the server on a loaded machine.
    async fn slow_in_handler(&self) {
        let deadline = Instant::now() + PATIENCE;
        while self.slow_entered.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "/slow never reached the handler");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// `count` connections, each with a `/hold` request inside the handler: busy until
    /// [`Server::release`].
    async fn busy(&self, count: usize) -> Vec<TcpStream> {
        let mut held = Vec::new();
        // One after another: a connection is incomplete until its head is in, and a newcomer may
        // evict an incomplete one.
        for i in 1..=count {
            let mut stream = self.connect().await;
            stream.write_all(b"GET /hold HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
            held.push(stream);
            let deadline = Instant::now() + PATIENCE;
            while self.slow_entered.load(std::sync::atomic::Ordering::SeqCst) < i {
                assert!(Instant::now() < deadline, "/hold never reached the handler");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        held
    }

    fn release(&self) {
        self.released.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.addr).await.unwrap()
    }

    /// A new connection and the response to its first request.
    async fn ask(&self, request: &str) -> (TcpStream, Response) {
        let mut stream = self.connect().await;
        let response = exchange(&mut stream, request).await;
        (stream, response)
    }

    /// A new connection that has been served one GET (200).
    async fn served(&self) -> TcpStream {
        let (stream, response) = self.ask(GET).await;
        assert_eq!(response.status, 200);
        stream
    }

    /// Asks for shutdown and returns how long `serve` took to return.
    async fn stop(self) -> Duration {
        let asked = Instant::now();
        self.stop.send(()).unwrap();
        tokio::time::timeout(PATIENCE, self.done).await.unwrap().unwrap().unwrap();
        asked.elapsed()
    }

    /// Counters are bumped on the server's tasks, possibly just after the client saw the effect.
    async fn wait_for(&self, what: &str, check: impl Fn(&HttpStatsSnapshot) -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !check(&self.stats.snapshot()) {
            assert!(Instant::now() < deadline, "{what}: stats stayed {:?}", self.stats.snapshot());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Reads one response: the head, then exactly Content-Length body bytes (none after HEAD).
async fn read_response(stream: &mut TcpStream, head_request: bool) -> Response {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0_u8; 4096];
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk)).await.unwrap().unwrap();
        assert!(n > 0, "connection closed mid-head after {:?}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).unwrap().to_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(": ")).map(|(n, v)| (n.to_owned(), v.to_owned())).collect();
    let mut response = Response { status, headers, body: buf[head_end..].to_vec() };
    let length: usize = response.header("content-length").expect("content-length").parse().unwrap();
    let want = if head_request { 0 } else { length };
    while response.body.len() < want {
        let mut chunk = [0_u8; 4096];
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk)).await.unwrap().unwrap();
        assert!(n > 0, "connection closed mid-body");
        response.body.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(response.body.len(), want, "bytes beyond the announced body");
    response
}

async fn exchange(stream: &mut TcpStream, request: &str) -> Response {
    stream.write_all(request.as_bytes()).await.unwrap();
    read_response(stream, request.starts_with("HEAD ")).await
}

/// The server closes the connection after its 300 ms timeout (give or take a loaded machine).
async fn closes_after_about_300ms(stream: &mut TcpStream) {
    let closed_after = time_to_close(stream).await;
    let expected = Duration::from_millis(250)..Duration::from_millis(1500);
    assert!(expected.contains(&closed_after), "closed after {closed_after:?}");
}

/// How long until the server closes the connection (EOF or reset), reading and discarding anything sent.
async fn time_to_close(stream: &mut TcpStream) -> Duration {
    let started = Instant::now();
    let mut sink = [0_u8; 4096];
    loop {
        match tokio::time::timeout(PATIENCE, stream.read(&mut sink)).await.expect("server kept the connection open") {
            Ok(0) | Err(_) => return started.elapsed(),
            Ok(_) => {}
        }
    }
}

const GET: &str = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";

#[tokio::test]
async fn get_returns_the_handler_body_with_framing_headers() {
    let server = start(Limits::default()).await;
    let (mut stream, response) = server.ask(GET).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.body, b"hello\n");
    assert_eq!(response.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(response.header("content-length"), Some("6"));
    assert_eq!(response.header("server"), None);
    // Keep-alive: a second request on the same connection.
    assert_eq!(exchange(&mut stream, GET).await.status, 200);
    server.wait_for("two ok", |s| s.ok == 2).await;
    server.stop().await;
}

#[tokio::test]
async fn handler_404_passes_through() {
    let server = start(Limits::default()).await;
    let (_stream, response) = server.ask("GET /missing?x=1 HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert_eq!(response.status, 404);
    assert_eq!(response.body, b"no such page\n");
    server.wait_for("one not_found", |s| s.not_found == 1).await;
    server.stop().await;
}

#[tokio::test]
async fn head_sends_get_headers_without_a_body() {
    let server = start(Limits::default()).await;
    let (mut stream, response) = server.ask("HEAD / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-length"), Some("6"));
    assert_eq!(response.header("content-type"), Some("text/plain; charset=utf-8"));
    // Had any body bytes followed the HEAD response, this GET's response would start with them.
    let response = exchange(&mut stream, GET).await;
    assert_eq!((response.status, response.body.as_slice()), (200, b"hello\n".as_slice()));
    server.stop().await;
}

#[tokio::test]
async fn post_is_405_with_allow() {
    let server = start(Limits::default()).await;
    let (_stream, response) = server.ask("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n").await;
    assert_eq!(response.status, 405);
    assert_eq!(response.header("allow"), Some("GET, HEAD"));
    assert!(response.header("content-type").is_some());
    server.wait_for("one bad_method, no handler call", |s| s.bad_method == 1 && s.ok == 0).await;
    server.stop().await;
}

#[tokio::test]
async fn a_request_body_is_413_and_closes() {
    let server = start(Limits::default()).await;
    for request in [
        "GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
        "GET / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    ] {
        let (mut stream, response) = server.ask(request).await;
        assert_eq!(response.status, 413, "{request:?}");
        assert!(response.header("content-type").is_some());
        time_to_close(&mut stream).await;
    }
    server.wait_for("two too large", |s| s.rejected_too_large == 2 && s.ok == 0).await;
    server.stop().await;
}

#[tokio::test]
async fn an_oversized_head_is_431_and_closes() {
    let server = start(Limits::default()).await;
    let mut stream = server.connect().await;
    let big = "a".repeat(20 * 1024);
    let request = format!("GET / HTTP/1.1\r\nHost: t\r\nX-Big: {big}\r\n\r\n");
    // The server may stop reading (and close) before all of it is written; that is fine.
    let _ = stream.write_all(request.as_bytes()).await;
    let response = read_response(&mut stream, false).await;
    assert_eq!(response.status, 431);
    assert_eq!(response.header("content-length"), Some("0"));
    time_to_close(&mut stream).await;
    server.wait_for("one too large", |s| s.rejected_too_large == 1).await;
    server.stop().await;
}

#[tokio::test]
async fn a_slow_head_is_cut_off_at_header_read_timeout() {
    let limits = Limits { header_read_timeout: Duration::from_millis(300), ..Limits::default() };
    let server = start(limits).await;
    let mut stream = server.connect().await;
    stream.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    closes_after_about_300ms(&mut stream).await;
    server.wait_for("one timeout", |s| s.rejected_timeout == 1).await;
    server.stop().await;
}

#[tokio::test]
async fn an_idle_connection_is_closed_at_request_timeout() {
    // header_read_timeout is long here, so only request_timeout can close the connection.
    let limits = Limits { request_timeout: Duration::from_millis(300), ..Limits::default() };
    let server = start(limits).await;
    let mut stream = server.served().await;
    closes_after_about_300ms(&mut stream).await;
    // A connection that never sent anything is closed too, and counted as a timeout.
    let mut silent = server.connect().await;
    time_to_close(&mut silent).await;
    server.wait_for("one timeout (the silent one)", |s| s.rejected_timeout == 1).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_slot_is_busy_a_new_connection_gets_503_at_once() {
    let limits = Limits { max_connections: 2, ..Limits::default() };
    let server = start(limits).await;
    let mut held = server.busy(2).await;
    server.wait_for("two open", |s| s.connections == 2).await;

    let asked = Instant::now();
    let (mut third, response) = server.ask(GET).await;
    assert_eq!(response.status, 503);
    assert_eq!(response.header("retry-after"), Some("1"));
    assert!(response.header("content-type").is_some());
    time_to_close(&mut third).await;
    assert!(asked.elapsed() < Duration::from_millis(500), "took {:?}", asked.elapsed());
    server.wait_for("one busy", |s| s.rejected_busy == 1).await;
    server.release();
    for stream in &mut held {
        assert_eq!(read_response(stream, false).await.status, 200, "the busy ones are answered");
    }
    // A freed slot is usable again.
    drop(held.pop());
    server.wait_for("one open", |s| s.connections == 1).await;
    let _fourth = server.served().await;
    server.stop().await;
}

/// Every slot holds a keep-alive connection between requests: a newcomer is served in the place of
/// the one idle the longest, which is closed (and counted).
#[tokio::test]
async fn when_every_slot_is_idle_a_newcomer_takes_the_place_of_the_longest_idle() {
    let limits = Limits { max_connections: 2, ..Limits::default() };
    let server = start(limits).await;
    let mut first = server.served().await;
    let mut second = server.served().await;
    // The first asks again: now the second is idle the longest.
    assert_eq!(exchange(&mut first, GET).await.status, 200);
    server.wait_for("two open", |s| s.connections == 2).await;
    let (_third, response) = server.ask(GET).await;
    assert_eq!(response.status, 200);
    time_to_close(&mut second).await;
    server.wait_for("one evicted, none refused", |s| s.evicted == 1 && s.rejected_busy == 0).await;
    assert_eq!(exchange(&mut first, GET).await.status, 200, "the other keeps its connection");
    server.stop().await;
}

#[tokio::test]
async fn a_handler_panic_is_500_and_the_connection_goes_on() {
    let server = start(Limits::default()).await;
    let (mut stream, response) = server.ask("GET /panic HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert_eq!(response.status, 500);
    assert!(response.header("content-type").is_some());
    assert_eq!(exchange(&mut stream, GET).await.status, 200);
    server.wait_for("one panic, one ok", |s| s.panicked == 1 && s.ok == 1).await;
    server.stop().await;
}

#[tokio::test]
async fn shutdown_returns_promptly_and_closes_idle_connections() {
    let server = start(Limits::default()).await;
    let addr = server.addr;
    let mut idle = server.served().await;
    let took = server.stop().await;
    assert!(took < Duration::from_millis(500), "took {took:?}");
    time_to_close(&mut idle).await;
    assert!(TcpStream::connect(addr).await.is_err(), "still accepting after shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_an_in_flight_request_finish() {
    let server = start(Limits::default()).await;
    let mut stream = server.connect().await;
    stream.write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
    // The request is in the handler, which blocks for 300 ms.
    server.slow_in_handler().await;
    let stopping = tokio::spawn(server.stop());
    let response = read_response(&mut stream, false).await;
    assert_eq!((response.status, response.body.as_slice()), (200, b"slow\n".as_slice()));
    let took = stopping.await.unwrap();
    assert!(took < Duration::from_millis(1500), "took {took:?}");
}

#[tokio::test]
async fn bind_errors_name_the_address() {
    let first = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
    let addr = first.local_addr().unwrap();
    let error = bind(addr).await.unwrap_err();
    assert_eq!(error.to_string(), format!("cannot listen on {addr}: address in use"));
}

#[tokio::test]
async fn invalid_limits_are_refused() {
    let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
    let limits = Limits { max_connections: 0, ..Limits::default() };
    let stats = Arc::new(HttpStats::default());
    let error = serve(listener, Arc::new(Fixture::default()), limits, stats, async {}).await.unwrap_err();
    assert_eq!(error.to_string(), "HTTP limit max_connections must be at least 1");
}

/// One address's share of served connections is busy: its next connection's request gets 503 and
/// a close; another address's is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_cannot_take_every_slot() {
    let limits = Limits { max_connections: 8, max_connections_per_peer: 2, ..Limits::default() };
    let server = start(limits).await;
    let _held = server.busy(2).await;
    let (mut third, response) = server.ask(GET).await;
    assert_eq!((response.status, response.header("connection")), (503, Some("close")));
    time_to_close(&mut third).await;

    let other = tokio::net::TcpSocket::new_v4().unwrap();
    other.bind(SocketAddr::from(([127, 0, 0, 2], 0))).unwrap();
    let mut other = other.connect(server.addr).await.unwrap();
    assert_eq!(exchange(&mut other, GET).await.status, 200, "another address has its own share");
    server.release();
    server.stop().await;
}

/// Keep-alive clients holding their address's share between requests cannot keep out a scraper
/// that shares the address: its fresh connection is served in the place of the one idle the
/// longest.
#[tokio::test]
async fn an_address_s_idle_keep_alive_connections_give_way_to_its_newcomer() {
    let limits = Limits { max_connections: 8, max_connections_per_peer: 2, ..Limits::default() };
    let server = start(limits).await;
    let mut oldest = server.served().await;
    let _younger = server.served().await;
    let (_scraper, response) = server.ask(GET).await;
    assert_eq!(response.status, 200);
    time_to_close(&mut oldest).await;
    server.wait_for("one evicted", |s| s.evicted == 1 && s.rejected_busy == 0).await;
    server.stop().await;
}

/// `max_requests` in progress: the next request gets 503 at once, and its connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_max_requests_get_503_and_the_connection_goes_on() {
    let limits = Limits { max_requests: 1, ..Limits::default() };
    let server = start(limits).await;
    let mut slow = server.connect().await;
    slow.write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
    server.slow_in_handler().await;
    let mut other = server.connect().await;
    let asked = Instant::now();
    let response = exchange(&mut other, GET).await;
    assert_eq!(response.status, 503);
    assert_eq!(response.header("retry-after"), Some("1"));
    // Not queued behind the slow one (that would be a 200 once it ends): refused at once.
    assert!(asked.elapsed() < Duration::from_millis(250), "{:?}", asked.elapsed());
    assert_eq!(read_response(&mut slow, false).await.status, 200);
    assert_eq!(exchange(&mut other, GET).await.status, 200, "same connection, slot free again");
    server.stop().await;
}

/// Connections that have not sent a head fill their address's share: a newcomer from the same
/// address evicts the oldest of them and is served; a connection past its first head is kept.
#[tokio::test]
async fn a_newcomer_evicts_the_oldest_incomplete_connection_of_its_address() {
    let limits = Limits { max_connections: 8, max_connections_per_peer: 2, ..Limits::default() };
    let server = start(limits).await;
    let mut kept = server.served().await;
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut stream = server.connect().await;
        stream.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        slow.push(stream);
    }
    server.wait_for("three open", |s| s.connections == 3).await;

    let _scraper = server.served().await;
    time_to_close(&mut slow[0]).await;
    server.wait_for("one evicted", |s| s.evicted == 1 && s.rejected_busy == 0).await;
    let mut sink = [0_u8; 16];
    let younger = tokio::time::timeout(Duration::from_millis(200), slow[1].read(&mut sink)).await;
    assert!(younger.is_err(), "the younger slow connection is still open: {younger:?}");
    assert_eq!(exchange(&mut kept, GET).await.status, 200, "the served connection is kept");
    server.stop().await;
}
