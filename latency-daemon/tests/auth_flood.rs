//! Wrong passwords cannot cost the node its CPU or its scrapes: against a real daemon with basic
//! auth (a cost-10 hash, as in deploy/web-config.yml), 48 clients send wrong passwords as fast as
//! they can for 15 s from the scraper's own address while the scraper, whose credentials were
//! checked once before, scrapes /metrics every 0.5 s. At least 99 % of its scrapes succeed and the
//! daemon uses at most a quarter of one core (utime + stime over the flood). Before failed logins
//! had a budget, bcrypt ran inside the request slots: most scrapes got 503 and both cores burned.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use base64::Engine as _;
use latency_lab::{daemon::Daemon, guard::Scratch, web};

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

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command (which may hold spaces) start at the state, field 3.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ticks as f64 / hz as f64
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
    let cpu0 = cpu_seconds(daemon.pid());
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
    let (cpu1, wall) = (cpu_seconds(daemon.pid()), started.elapsed().as_secs_f64());
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
