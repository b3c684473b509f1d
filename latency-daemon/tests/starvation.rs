//! Scrapes cannot be starved: with 200 clients trickling request heads that never end and 16
//! clients looping on /api/v1/snapshot (with --per-task, the largest body), a 1 Hz scraper still
//! gets ≥ 99 % of its /metrics within 50 ms at the 99th percentile. Prints the figures.
//!
//! `STARVATION_DAEMON=/path/to/latency-daemon` measures another build (e.g. an older main)
//! with the same load; the assertions still apply.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use latency_lab::daemon::Daemon;

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");
const SLOW_CLIENTS: usize = 200;
const LOOPERS: usize = 16;
const SCRAPES: usize = 30;

/// Keeps `SLOW_CLIENTS` connections open, each sending one more header line every 500 ms and never
/// the blank line that ends the head; reconnects whichever the server closes.
fn slow_clients(addr: String, stop: Arc<AtomicBool>, reconnects: Arc<AtomicU64>) {
    let open = |addr: &str| -> Option<TcpStream> {
        let s = TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(1)).ok()?;
        s.set_nonblocking(true).ok()?;
        let mut s = s;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").ok()?;
        Some(s)
    };
    let mut clients: Vec<Option<TcpStream>> = (0..SLOW_CLIENTS).map(|_| open(&addr)).collect();
    while !stop.load(Ordering::Relaxed) {
        for c in &mut clients {
            let alive = match c.as_mut() {
                None => false,
                Some(s) => {
                    let mut buf = [0u8; 512];
                    // Anything from the server (an answer, EOF, an error) means it let go of us.
                    let let_go = !matches!(s.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
                    !let_go && s.write_all(b"X-Slow: 1\r\n").is_ok()
                }
            };
            if !alive {
                reconnects.fetch_add(1, Ordering::Relaxed);
                *c = open(&addr);
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// One GET on a fresh connection: (status, whole response) within `limit`.
fn get(addr: &str, path: &str, limit: Duration) -> Option<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&addr.parse().ok()?, limit).ok()?;
    s.set_read_timeout(Some(limit)).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let status = std::str::from_utf8(raw.get(9..12)?).ok()?.parse().ok()?;
    Some((status, raw))
}

#[test]
fn slow_clients_and_snapshot_loopers_cannot_starve_scrapes() {
    let daemon_bin = std::env::var("STARVATION_DAEMON").unwrap_or_else(|_| DAEMON.to_owned());
    // Windows of 2 s: the snapshot is served once the first has closed, and the loopers' load is
    // each window's per-task table, whatever its length.
    let daemon = Daemon::start(&daemon_bin, &["--per-task", "--window", "2s"]).unwrap();
    // The first window must have closed for the snapshot to be served.
    let deadline = Instant::now() + Duration::from_secs(30);
    while daemon.get("/api/v1/snapshot").map(|r| r.status).ok() != Some(200) {
        assert!(Instant::now() < deadline, "no snapshot within 30 s");
        std::thread::sleep(Duration::from_millis(250));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reconnects = Arc::new(AtomicU64::new(0));
    let snapshots = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    {
        let (addr, stop, reconnects) = (daemon.addr.clone(), Arc::clone(&stop), Arc::clone(&reconnects));
        threads.push(std::thread::spawn(move || slow_clients(addr, stop, reconnects)));
    }
    for _ in 0..LOOPERS {
        let (addr, stop, snapshots) = (daemon.addr.clone(), Arc::clone(&stop), Arc::clone(&snapshots));
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if get(&addr, "/api/v1/snapshot", Duration::from_secs(5)).is_some_and(|(s, _)| s == 200) {
                    snapshots.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // Let the crowd settle in.
    std::thread::sleep(Duration::from_secs(3));

    let mut took = Vec::new();
    let mut failed = 0;
    let started = Instant::now();
    for i in 0..SCRAPES {
        let next = started + Duration::from_secs(i as u64);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let t = Instant::now();
        match get(&daemon.addr, "/metrics", Duration::from_secs(2)) {
            Some((200, body)) if body.windows(8).any(|w| w == b"runqlat_") => took.push(t.elapsed()),
            _ => failed += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let metrics = daemon.metrics().unwrap_or_default();
    daemon.stop().unwrap();

    took.sort();
    let ok = took.len();
    let success = 100.0 * ok as f64 / SCRAPES as f64;
    let p99 = took.get((ok * 99).div_ceil(100).saturating_sub(1)).copied().unwrap_or(Duration::MAX);
    let median = took.get(ok / 2).copied().unwrap_or(Duration::MAX);
    let busy =
        metrics.lines().find(|l| l.starts_with("runqlat_http_requests_total") && l.contains("busy")).unwrap_or("");
    eprintln!(
        "starvation: {ok}/{SCRAPES} scrapes ok ({success:.1} %), median {median:?}, p99 {p99:?}; \
         {} snapshots served to {LOOPERS} loopers, {} slow-client reconnects; {busy}",
        snapshots.load(Ordering::Relaxed),
        reconnects.load(Ordering::Relaxed)
    );
    assert!(failed * 100 <= SCRAPES, "{failed} of {SCRAPES} scrapes failed");
    assert!(p99 < Duration::from_millis(50), "p99 {p99:?}");
    assert!(snapshots.load(Ordering::Relaxed) > 0, "the loopers were served too");
}
