//! Scrapers survive a connection flood from their own address, and the memory comes back after it.
//! 300 clients on 127.0.0.1 trickle request heads a byte at a time and never finish them,
//! reconnecting whenever they are cut; three bursts of 3000 connections that send half a head come
//! on top. Meanwhile two scrapers on the same address GET /metrics every 0.5 s, one on a fresh
//! connection each time, one on a connection kept alive: at least 95 % of each succeed. The
//! daemon's RSS, once the flood ends, comes back within 20 % of what it was before (plus 2 MiB).
//! Then served clients: 300 on 127.0.0.1 keep their connections alive with a GET /healthz every
//! 1.5 s, reconnecting at once whenever they are refused or cut: the same two scrapers get in every
//! time but one in a hundred, the daemon's threads stay within its workers and its capped blocking
//! pool, and are given back after. Prints the figures.
//!
//! `CONNECTION_FLOOD_DAEMON=/path/to/latency-daemon` measures another build (e.g. an older main) with
//! the same load; the assertions still apply.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use latency_lab::{
    daemon::{Daemon, status_kib},
    oracle::run_delay::process_cpu_seconds,
};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");
/// The scene: more trickling connections than one address's quarter of the slots (256).
const TRICKLERS: usize = 300;
/// Each trickler sends its next byte this often (a head of 40 bytes would take 4 s).
const TRICKLE_EVERY: Duration = Duration::from_millis(100);
const BURSTS: usize = 3;
const BURST: usize = 3000;
const FLOOD: Duration = Duration::from_secs(20);
const SCRAPE_EVERY: Duration = Duration::from_millis(500);
/// What a scrape may take, connect included (a scraper's timeout is usually longer).
const SCRAPE_LIMIT: Duration = Duration::from_secs(2);
/// The bounds.
const MIN_SCRAPES_OK: f64 = 0.95;
const MAX_RSS_GROWTH: f64 = 1.2;
/// On top of the 20 %: thread stacks and malloc arenas of the runtime's blocking threads, which
/// glibc keeps for reuse after those threads exit (a page or two of each per thread touched).
const RSS_SLACK_KIB: f64 = 2048.0;
/// How long after the flood the RSS may take to come back: the daemon trims a second after the
/// connections have subsided and at most every 10 s, and on a busy machine the flood's last
/// connections close in waves over several seconds.
const SETTLE: Duration = Duration::from_secs(15);

/// Never ends: a request line, then header bytes.
fn trickle_byte(i: usize) -> u8 {
    const HEAD: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Trickle: ";
    HEAD.get(i).copied().unwrap_or(b'a')
}

/// A connection the server has let go of: it answered, closed, or reset.
fn let_go(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 512];
    !matches!(s.read(&mut buf), Err(e) if e.kind() == ErrorKind::WouldBlock)
}

fn open(addr: SocketAddr, limit: Duration) -> Option<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, limit).ok()?;
    s.set_nonblocking(true).ok()?;
    Some(s)
}

/// Keeps `TRICKLERS` connections sending one byte each per tick; reopens whichever the server lets go.
fn tricklers(addr: SocketAddr, stop: &AtomicBool, reconnects: &AtomicU64) {
    let mut clients: Vec<(Option<TcpStream>, usize)> = (0..TRICKLERS).map(|_| (None, 0)).collect();
    while !stop.load(Ordering::Relaxed) {
        for (client, sent) in &mut clients {
            let alive = client.as_mut().is_some_and(|s| !let_go(s) && s.write_all(&[trickle_byte(*sent)]).is_ok());
            if alive {
                *sent += 1;
            } else {
                reconnects.fetch_add(1, Ordering::Relaxed);
                *client = open(addr, Duration::from_secs(1));
                *sent = 0;
            }
        }
        thread::sleep(TRICKLE_EVERY);
    }
}

/// `BURSTS` times: opens `BURST` connections as fast as it can, each sending half a head, holds
/// them a second, drops them.
fn bursts(addr: SocketAddr, stop: &AtomicBool, opened: &AtomicU64) {
    for _ in 0..BURSTS {
        thread::sleep(FLOOD / (BURSTS as u32 + 1));
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let mut held = Vec::with_capacity(BURST);
        for _ in 0..BURST {
            if let Some(mut s) = open(addr, Duration::from_millis(200)) {
                let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHo");
                held.push(s);
            }
        }
        opened.fetch_add(held.len() as u64, Ordering::Relaxed);
        thread::sleep(Duration::from_secs(1));
    }
}

/// Reads one response (head, then Content-Length bytes of body); (status, body).
fn read_response(s: &mut TcpStream) -> Option<(u16, Vec<u8>)> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut buf).ok().filter(|&n| n > 0)?;
        raw.extend_from_slice(&buf[..n]);
    };
    let head = std::str::from_utf8(&raw[..head_end]).ok()?;
    let status = head.get(9..12)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")))
        .and_then(|(_, v)| v.trim().parse().ok())?;
    while raw.len() < head_end + length {
        let n = s.read(&mut buf).ok().filter(|&n| n > 0)?;
        raw.extend_from_slice(&buf[..n]);
    }
    Some((status, raw.split_off(head_end)))
}

fn scraped(response: Option<(u16, Vec<u8>)>) -> bool {
    response.is_some_and(|(status, body)| status == 200 && body.windows(8).any(|w| w == b"runqlat_"))
}

/// One scrape on a fresh connection.
fn scrape_fresh(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, SCRAPE_LIMIT) else { return false };
    let _ = s.set_read_timeout(Some(SCRAPE_LIMIT));
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).is_ok() && scraped(read_response(&mut s))
}

/// One scrape on `kept`, opening it first if there is none; dropped after a failure. As Go's HTTP
/// client (Prometheus's) does, a GET on a reused connection that the server had closed (no
/// response at all) is sent once more on a new connection.
fn scrape_kept(addr: SocketAddr, kept: &mut Option<TcpStream>) -> bool {
    let reused = kept.is_some();
    let open = |kept: &mut Option<TcpStream>| {
        *kept = TcpStream::connect_timeout(&addr, SCRAPE_LIMIT).ok();
        if let Some(s) = kept {
            let _ = s.set_read_timeout(Some(SCRAPE_LIMIT));
        }
    };
    if kept.is_none() {
        open(kept);
    }
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    let Some(s) = kept.as_mut() else { return false };
    let response = if s.write_all(request.as_bytes()).is_ok() { read_response(s) } else { None };
    let response = match response {
        None if reused => {
            open(kept);
            let Some(s) = kept.as_mut() else { return false };
            if s.write_all(request.as_bytes()).is_ok() { read_response(s) } else { None }
        }
        response => response,
    };
    let ok = scraped(response);
    if !ok {
        *kept = None;
    }
    ok
}

/// Scrapes every `SCRAPE_EVERY` until `stop`: (how long each successful scrape took, failures).
fn scraper(addr: SocketAddr, stop: &AtomicBool, kept_alive: bool) -> (Vec<Duration>, usize) {
    let (mut took, mut failed) = (Vec::new(), 0);
    let mut kept = None;
    let started = Instant::now();
    for i in 0.. {
        let next = started + SCRAPE_EVERY * i;
        thread::sleep(next.saturating_duration_since(Instant::now()));
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let t = Instant::now();
        let ok = if kept_alive { scrape_kept(addr, &mut kept) } else { scrape_fresh(addr) };
        if ok {
            took.push(t.elapsed());
        } else {
            failed += 1;
        }
    }
    (took, failed)
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted.get((sorted.len() * p).div_ceil(100).saturating_sub(1)).copied().unwrap_or(Duration::MAX)
}

/// Each scraper's (name, successful scrapes' times, failures): a line each for the report, and
/// (name, share that succeeded, succeeded, all) for the assertions.
type Shares = Vec<(&'static str, f64, usize, usize)>;
fn scrapes(scrapers: [(&'static str, Vec<Duration>, usize); 2]) -> (Vec<String>, Shares) {
    let mut report = Vec::new();
    let mut shares = Vec::new();
    for (name, mut took, failed) in scrapers {
        took.sort();
        let (ok, all) = (took.len(), took.len() + failed);
        let share = ok as f64 / all.max(1) as f64;
        report.push(format!(
            "{name} {ok}/{all} ({:.1} %), median {:?}, p99 {:?}",
            share * 100.0,
            percentile(&took, 50),
            percentile(&took, 99)
        ));
        shares.push((name, share, ok, all));
    }
    (report, shares)
}

/// The sample of `runqlat_http_requests_total` with this outcome, 0 if there is none.
fn outcome(metrics: &str, outcome: &str) -> f64 {
    let needle = format!("runqlat_http_requests_total{{outcome=\"{outcome}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&needle)?.parse().ok()).unwrap_or(0.0)
}

fn rss_mib(pid: u32) -> f64 {
    status_kib(pid, "VmRSS:").expect("the daemon's RSS") / 1024.0
}

/// The daemon under test (`CONNECTION_FLOOD_DAEMON`, for an earlier build, or this one), its
/// address and pid, once its first window has closed.
fn started() -> (Daemon, SocketAddr, u32) {
    let daemon_bin = std::env::var("CONNECTION_FLOOD_DAEMON").unwrap_or_else(|_| DAEMON.to_owned());
    let daemon = Daemon::start(&daemon_bin, &[]).unwrap_or_else(|e| panic!("starting the daemon: {e:#}"));
    let addr: SocketAddr = daemon.addr.parse().unwrap();
    let pid = daemon.pid();
    let deadline = Instant::now() + Duration::from_secs(30);
    while daemon.get("/api/v1/snapshot").map(|r| r.status).ok() != Some(200) {
        assert!(Instant::now() < deadline, "no window closed within 30 s");
        thread::sleep(Duration::from_millis(250));
    }
    (daemon, addr, pid)
}

#[test]
fn scrapers_survive_a_flood_from_their_own_address_and_memory_comes_back() {
    let (daemon, addr, pid) = started();
    // Warm-up: both scrapers as they will run during the flood, so what they cost is in the baseline.
    let warm = AtomicBool::new(false);
    thread::scope(|s| {
        s.spawn(|| scraper(addr, &warm, false));
        s.spawn(|| scraper(addr, &warm, true));
        thread::sleep(Duration::from_secs(3));
        warm.store(true, Ordering::Relaxed);
    });
    let before = rss_mib(pid);

    let stop = AtomicBool::new(false);
    let (reconnects, burst_opened) = (AtomicU64::new(0), AtomicU64::new(0));
    let peak = Mutex::new(before);
    let ((fresh, fresh_failed), (kept, kept_failed)) = thread::scope(|s| {
        s.spawn(|| tricklers(addr, &stop, &reconnects));
        s.spawn(|| bursts(addr, &stop, &burst_opened));
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let mut peak = peak.lock().unwrap();
                *peak = peak.max(rss_mib(pid));
                drop(peak);
                thread::sleep(Duration::from_millis(100));
            }
        });
        let fresh = s.spawn(|| scraper(addr, &stop, false));
        let kept = s.spawn(|| scraper(addr, &stop, true));
        thread::sleep(FLOOD);
        stop.store(true, Ordering::Relaxed);
        (fresh.join().unwrap(), kept.join().unwrap())
    });
    let flood_ended = Instant::now();
    let bound = before * MAX_RSS_GROWTH + RSS_SLACK_KIB / 1024.0;
    let after = loop {
        let after = rss_mib(pid);
        if after <= bound || flood_ended.elapsed() >= SETTLE {
            break after;
        }
        thread::sleep(Duration::from_millis(250));
    };
    let settled = flood_ended.elapsed();
    let peak = peak.into_inner().unwrap().max(status_kib(pid, "VmHWM:").unwrap_or(0.0) / 1024.0);
    let metrics = daemon.metrics().unwrap_or_else(|e| panic!("the last scrape: {e:#}"));
    daemon.stop().unwrap_or_else(|e| panic!("stopping the daemon: {e:#}"));

    let (report, shares) = scrapes([("fresh", fresh, fresh_failed), ("kept-alive", kept, kept_failed)]);
    eprintln!(
        "connection_flood: scrapes {}; evicted {}, busy {}, timeout {}; {} trickler reconnects, {} burst \
         connections; RSS before {before:.1} MiB, peak {peak:.1} MiB, {:.1} s after the flood {after:.1} MiB",
        report.join("; "),
        outcome(&metrics, "evicted"),
        outcome(&metrics, "busy"),
        outcome(&metrics, "timeout"),
        reconnects.load(Ordering::Relaxed),
        burst_opened.load(Ordering::Relaxed),
        settled.as_secs_f64(),
    );
    for (name, share, ok, all) in shares {
        assert!(share >= MIN_SCRAPES_OK, "{name} scrapes: {ok}/{all} succeeded during the flood");
    }
    assert!(
        after <= bound,
        "RSS {after:.1} MiB {:.1} s after the flood; before {before:.1} MiB, bound {bound:.1} MiB",
        settled.as_secs_f64()
    );
}

/// Served keep-alive clients: each sends `GET /healthz` on its connection every
/// `KEEP_ALIVE_EVERY`, and reconnects at once when refused (503) or cut.
const KEEP_ALIVE_CLIENTS: usize = 300;
const KEEP_ALIVE_EVERY: Duration = Duration::from_millis(1500);
const KEEP_ALIVE_FLOOD: Duration = Duration::from_secs(12);
/// The bound for scrapes past served keep-alive clients.
const MIN_SCRAPES_PAST_KEEP_ALIVE: f64 = 0.99;

/// `clients` keep-alive clients in one thread, each asking on its own schedule (staggered over
/// the period); returns how many connections they opened.
fn keep_alive_clients(addr: SocketAddr, clients: usize, stop: &AtomicBool) -> u64 {
    let mut conns: Vec<Option<TcpStream>> = (0..clients).map(|_| None).collect();
    let started = Instant::now();
    let mut opened = 0;
    let mut round = 0u32;
    while !stop.load(Ordering::Relaxed) {
        for (i, conn) in conns.iter_mut().enumerate() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let at = started + KEEP_ALIVE_EVERY * round + KEEP_ALIVE_EVERY * i as u32 / clients as u32;
            thread::sleep(at.saturating_duration_since(Instant::now()));
            // Refused or cut: at once again, as a client with no backoff does.
            for _ in 0..3 {
                if conn.is_none() {
                    opened += 1;
                    *conn = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok();
                    if let Some(s) = conn {
                        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                    }
                }
                let Some(s) = conn.as_mut() else { continue };
                let request = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n");
                let ok = s.write_all(request.as_bytes()).is_ok() && read_response(s).is_some_and(|(st, _)| st == 200);
                if ok {
                    break;
                }
                *conn = None;
            }
        }
        round += 1;
    }
    opened
}

/// The process's threads now.
fn threads(pid: u32) -> f64 {
    status_kib(pid, "Threads:").expect("the daemon's threads")
}

#[test]
fn scrapers_get_in_past_served_keep_alive_clients_on_their_own_address() {
    let (daemon, addr, pid) = started();
    let threads_before = threads(pid);
    let stop = AtomicBool::new(false);
    let peak_threads = Mutex::new(threads_before);
    let cpu_before = process_cpu_seconds(pid).unwrap();
    let flood_started = Instant::now();
    let (opened, (fresh, fresh_failed), (kept, kept_failed)) = thread::scope(|s| {
        // Four threads of 75 clients; all of them up before the scrapers start.
        let clients: Vec<_> =
            (0..4).map(|_| s.spawn(|| keep_alive_clients(addr, KEEP_ALIVE_CLIENTS / 4, &stop))).collect();
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let mut peak = peak_threads.lock().unwrap();
                *peak = peak.max(threads(pid));
                drop(peak);
                thread::sleep(Duration::from_millis(50));
            }
        });
        thread::sleep(KEEP_ALIVE_EVERY * 2);
        let fresh = s.spawn(|| scraper(addr, &stop, false));
        let kept = s.spawn(|| scraper(addr, &stop, true));
        thread::sleep(KEEP_ALIVE_FLOOD);
        stop.store(true, Ordering::Relaxed);
        let opened: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();
        (opened, fresh.join().unwrap(), kept.join().unwrap())
    });
    let flood_took = flood_started.elapsed().as_secs_f64();
    let cpu = (process_cpu_seconds(pid).unwrap() - cpu_before) / flood_took;
    let metrics = daemon.metrics().unwrap_or_else(|e| panic!("the last scrape: {e:#}"));
    // The blocking pool lets idle threads go after a second.
    let ended = Instant::now();
    let threads_after = loop {
        let now = threads(pid);
        if now <= threads_before || ended.elapsed() > Duration::from_secs(5) {
            break now;
        }
        thread::sleep(Duration::from_millis(250));
    };
    daemon.stop().unwrap_or_else(|e| panic!("stopping the daemon: {e:#}"));

    let (report, shares) = scrapes([("fresh", fresh, fresh_failed), ("kept-alive", kept, kept_failed)]);
    let peak_threads = peak_threads.into_inner().unwrap();
    let cpus = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    // Workers (2 to 4), the blocking pool's cap, the main thread, the drain thread and one more
    // (the signal reader, a reload) — whatever the flood does.
    let thread_bound = cpus.clamp(2, 4) + latency_daemon::cmd::BLOCKING_THREADS + 3;
    eprintln!(
        "connection_flood (keep-alive): scrapes {}; {KEEP_ALIVE_CLIENTS} clients opened {opened} connections in \
         {flood_took:.1} s; evicted {}, busy {}; daemon CPU {:.1} % of a core; threads {threads_before} before, \
         peak {peak_threads} (bound {thread_bound}), {threads_after} {:.1} s after",
        report.join("; "),
        outcome(&metrics, "evicted"),
        outcome(&metrics, "busy"),
        cpu * 100.0,
        ended.elapsed().as_secs_f64(),
    );
    for (name, share, ok, all) in shares {
        assert!(share >= MIN_SCRAPES_PAST_KEEP_ALIVE, "{name} scrapes: {ok}/{all} got in past the keep-alive clients");
    }
    assert!(peak_threads <= thread_bound as f64, "{peak_threads} threads during the flood (bound {thread_bound})");
    assert!(threads_after <= threads_before + 1.0, "{threads_after} threads after the flood, {threads_before} before");
}
