//! Wrong passwords cannot cost the node its CPU or its scrapes: against a real daemon with basic
//! auth (a cost-10 hash, as in deploy/web-config.yml), 48 clients send wrong passwords as fast as
//! they can for 15 s from the scraper's own address while the scraper, whose credentials were
//! checked once before, scrapes /metrics every 0.5 s. At least 99 % of its scrapes succeed and the
//! daemon uses at most a quarter of one core (utime + stime over the flood). Before failed logins
//! had a budget, bcrypt ran inside the request slots: most scrapes got 503 and both cores burned.
//!
//! And wrong passwords from other addresses cannot keep a right one out: while 8 other loopback
//! addresses flood a freshly started daemon with wrong passwords, three credentials it has never
//! seen, each from an address of its own (right after the start, 5 s and 10 s into the flood), get
//! in on their first or second try (a 429 waited out as its Retry-After says), and the daemon uses
//! at most three quarters of a core. When every login not yet remembered drew on one budget that
//! the flood kept empty, the first was still answered 429 after 15 tries (28 s), the second needed 6.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use base64::Engine as _;
use latency_lab::{daemon::Daemon, guard::Scratch, oracle::run_delay::process_cpu_seconds, web};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");
const USER: &str = "prometheus";
const PASSWORD: &str = "correct horse";
/// deploy/web-config.yml's cost.
const COST: u32 = 10;
const CLIENTS: usize = 48;
const FLOOD: Duration = Duration::from_secs(15);
const SCRAPE_EVERY: Duration = Duration::from_millis(500);
/// The bounds.
const MIN_SCRAPES_OK: f64 = 0.99;
const MAX_CORES: f64 = 0.25;

fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

#[test]
fn a_wrong_password_flood_neither_starves_scrapes_nor_burns_the_cpu() {
    let dir = Scratch::new("runqlat-auth-flood").unwrap();
    let file = dir.join("web.yml");
    let hash = bcrypt::hash(PASSWORD, COST).unwrap();
    std::fs::write(&file, format!("basic_auth_users:\n  {USER}: '{hash}'\n")).unwrap();
    let daemon = Daemon::start(DAEMON, &["--web.config.file", file.to_str().unwrap()])
        .unwrap_or_else(|e| panic!("starting the daemon with basic auth: {e:#}"));
    let good = basic(USER, PASSWORD);
    // A scraper that was running before the flood: its credentials are already checked.
    let first = web::get(&daemon.addr, "/metrics", &[("Authorization", &good)]).unwrap();
    assert_eq!(first.status, 200, "the first scrape: {}", first.text());

    let stop = Arc::new(AtomicBool::new(false));
    let (sent, statuses) = (Arc::new(AtomicU64::new(0)), Arc::new(std::sync::Mutex::new(Vec::new())));
    let cpu0 = process_cpu_seconds(daemon.pid()).unwrap();
    let started = Instant::now();
    let flooders: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (addr, stop, sent, statuses) =
                (daemon.addr.clone(), Arc::clone(&stop), Arc::clone(&sent), Arc::clone(&statuses));
            thread::spawn(move || {
                let bad = basic(USER, &format!("wrong {i}"));
                let mut seen = std::collections::BTreeMap::<u16, u64>::new();
                while !stop.load(Ordering::Relaxed) {
                    let status = web::get(&addr, "/metrics", &[("Authorization", &bad)]).map_or(0, |r| r.status);
                    *seen.entry(status).or_default() += 1;
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                statuses.lock().unwrap().push(seen);
            })
        })
        .collect();

    let (mut ok, mut failed) = (0u32, Vec::new());
    let mut next = Instant::now();
    while started.elapsed() < FLOOD {
        next += SCRAPE_EVERY;
        match web::get(&daemon.addr, "/metrics", &[("Authorization", &good)]) {
            Ok(r) if r.status == 200 => ok += 1,
            Ok(r) => failed.push(format!("{} at {:.1} s", r.status, started.elapsed().as_secs_f64())),
            Err(e) => failed.push(format!("{e:#} at {:.1} s", started.elapsed().as_secs_f64())),
        }
        thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let (cpu1, wall) = (process_cpu_seconds(daemon.pid()).unwrap(), started.elapsed().as_secs_f64());
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.join().unwrap();
    }

    let mut flood = std::collections::BTreeMap::<u16, u64>::new();
    for seen in statuses.lock().unwrap().iter() {
        for (status, n) in seen {
            *flood.entry(*status).or_default() += n;
        }
    }
    let scrapes = ok as usize + failed.len();
    let share = f64::from(ok) / scrapes as f64;
    let cores = (cpu1 - cpu0) / wall;
    eprintln!(
        "{CLIENTS} clients sent {} wrong passwords in {wall:.1} s (status: count {flood:?}); \
         scrapes: {ok}/{scrapes} ok ({:.1} %), failed: {failed:?}; daemon CPU {:.2} s = {:.1} % of one core",
        sent.load(Ordering::Relaxed),
        share * 100.0,
        cpu1 - cpu0,
        cores * 100.0
    );
    assert!(share >= MIN_SCRAPES_OK, "{ok}/{scrapes} scrapes succeeded during the flood; failed: {failed:?}");
    assert!(cores <= MAX_CORES, "the daemon used {:.1} % of one core during the flood", cores * 100.0);
    assert!(flood.get(&401).is_some_and(|&n| n > 0), "some wrong passwords were checked: {flood:?}");
    daemon.stop().unwrap_or_else(|e| panic!("stopping the daemon: {e:#}"));
}

/// The other addresses flooding, and the connections each keeps busy.
const FLOODING_ADDRESSES: u8 = 8;
const CONNECTIONS_PER_ADDRESS: usize = 3;
/// When the new logins come, after the flood started (which is when the daemon answers).
const NEWCOMERS_AT: [Duration; 3] = [Duration::from_millis(500), Duration::from_secs(5), Duration::from_secs(10)];
/// The bound on the tries a right password needs, and where this test stops counting.
const MAX_TRIES_OK: u32 = 2;
const GIVE_UP_AFTER: u32 = 6;
/// The flood lasts at least this long (longer if a new login is still trying).
const NEWCOMER_FLOOD: Duration = Duration::from_secs(13);
/// A generous bound: what is checked is that the flood does not bring back burning cores. The
/// budgets allow about 6 s of bcrypt in the flood's first 13 s (both shared bursts, their refill,
/// the new logins' own checks): under half a core, plus serving the flood.
const MAX_CORES_NEWCOMERS: f64 = 0.75;

fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// Tries `authorization` from `from` until it gets in (waiting out 429s as told and 503s for a
/// second) or `GIVE_UP_AFTER` tries: the tries, and what each answered.
fn log_in(addr: &str, from: IpAddr, authorization: &str) -> (u32, Vec<String>) {
    let mut answers = Vec::new();
    for tries in 1..=GIVE_UP_AFTER {
        let started = Instant::now();
        let reply = web::get_from(from, addr, "/metrics", &[("Authorization", authorization)])
            .unwrap_or_else(|e| panic!("GET /metrics from {from}: {e:#}"));
        answers.push(format!("{} in {:.2} s", reply.status, started.elapsed().as_secs_f64()));
        match reply.status {
            200 => return (tries, answers),
            429 => {
                let wait: u64 = reply.header("Retry-After").and_then(|s| s.parse().ok()).unwrap_or(1);
                thread::sleep(Duration::from_secs(wait));
            }
            503 => thread::sleep(Duration::from_secs(1)),
            status => panic!("a right password from {from} was answered {status}: {}", reply.text()),
        }
    }
    (GIVE_UP_AFTER + 1, answers)
}

#[test]
fn a_new_login_gets_in_at_once_while_other_addresses_flood() {
    let dir = Scratch::new("runqlat-auth-newcomers").unwrap();
    let file = dir.join("web.yml");
    let newcomers: Vec<(String, String)> =
        (0..NEWCOMERS_AT.len()).map(|i| (format!("scraper{i}"), format!("right password {i}"))).collect();
    let mut config = format!("basic_auth_users:\n  {USER}: '{}'\n", bcrypt::hash(PASSWORD, COST).unwrap());
    for (user, password) in &newcomers {
        config.push_str(&format!("  {user}: '{}'\n", bcrypt::hash(password, COST).unwrap()));
    }
    std::fs::write(&file, config).unwrap();
    let daemon = Daemon::start(DAEMON, &["--web.config.file", file.to_str().unwrap()])
        .unwrap_or_else(|e| panic!("starting the daemon with basic auth: {e:#}"));

    // The flood starts as soon as the daemon answers: as after a restart during a flood, the
    // flooding addresses are as new to it as the logins that follow.
    let stop = Arc::new(AtomicBool::new(false));
    let statuses = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<u16, u64>::new()));
    let cpu0 = process_cpu_seconds(daemon.pid()).unwrap();
    let started = Instant::now();
    let flooders: Vec<_> = (0..FLOODING_ADDRESSES)
        .flat_map(|a| (0..CONNECTIONS_PER_ADDRESS).map(move |c| (a, c)))
        .map(|(a, c)| {
            let (addr, stop, statuses) = (daemon.addr.clone(), Arc::clone(&stop), Arc::clone(&statuses));
            thread::spawn(move || {
                let (from, bad) = (loopback(2 + a), basic(USER, &format!("wrong {a}.{c}")));
                let mut seen = std::collections::BTreeMap::<u16, u64>::new();
                while !stop.load(Ordering::Relaxed) {
                    let status =
                        web::get_from(from, &addr, "/metrics", &[("Authorization", &bad)]).map_or(0, |r| r.status);
                    *seen.entry(status).or_default() += 1;
                }
                let mut all = statuses.lock().unwrap();
                for (status, n) in seen {
                    *all.entry(status).or_default() += n;
                }
            })
        })
        .collect();

    let mut results = Vec::new();
    for (i, ((user, password), at)) in newcomers.iter().zip(NEWCOMERS_AT).enumerate() {
        thread::sleep(at.saturating_sub(started.elapsed()));
        let from = loopback(2 + FLOODING_ADDRESSES + i as u8);
        let began = started.elapsed().as_secs_f64();
        let (tries, answers) = log_in(&daemon.addr, from, &basic(user, password));
        results.push((user.clone(), from, began, tries, answers));
    }
    thread::sleep(NEWCOMER_FLOOD.saturating_sub(started.elapsed()));
    let (cpu1, wall) = (process_cpu_seconds(daemon.pid()).unwrap(), started.elapsed().as_secs_f64());
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.join().unwrap();
    }

    let cores = (cpu1 - cpu0) / wall;
    eprintln!(
        "{FLOODING_ADDRESSES} addresses × {CONNECTIONS_PER_ADDRESS} connections sent wrong passwords for {wall:.1} s \
         (status: count {:?}); daemon CPU {:.2} s = {:.1} % of one core",
        statuses.lock().unwrap(),
        cpu1 - cpu0,
        cores * 100.0
    );
    for (user, from, began, tries, answers) in &results {
        eprintln!("{user} from {from} at {began:.1} s: in after {tries} tries ({answers:?})");
    }
    for (user, from, began, tries, answers) in &results {
        assert!(
            *tries <= MAX_TRIES_OK,
            "{user}, new, from {from} at {began:.1} s into the flood was not in after {} tries: {answers:?}",
            tries.min(&GIVE_UP_AFTER)
        );
    }
    assert!(cores <= MAX_CORES_NEWCOMERS, "the daemon used {:.1} % of one core during the flood", cores * 100.0);
    daemon.stop().unwrap_or_else(|e| panic!("stopping the daemon: {e:#}"));
}
