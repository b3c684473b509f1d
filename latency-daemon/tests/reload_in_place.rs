//! 200 SIGHUPs while a writer rewrites the config file in place (truncate, then a few writes with
//! pauses between them, as an editor or `cat > file` does): every configuration the daemon applies
//! is one that was written whole — never the defaults of an empty file, never a prefix of one —
//! each refusal is one line naming the file, and the daemon serves throughout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use latency_lab::{daemon::Daemon, guard::Scratch};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");
const SIGHUPS: usize = 200;

/// Each state as the writer's chunks. They differ in `top_cgroups` and `window`, which `/` shows;
/// a prefix of any of them is either unparsable or a pair no state has (the defaults, 20 and 15s,
/// from "" or the comment alone; `top_cgroups` without `window`; 1 from "top_cgroups = 1").
const STATES: [(&[&str], (u32, &str)); 3] = [
    (&["top_cgroups = 3\n", "window = \"5s\"\n"], (3, "5s")),
    (&["# rewritten in place\n", "top_cgroups = 1", "50\nwindow = \"10s\"\n"], (150, "10s")),
    (&["top_cgroups = 27\nwin", "dow = \"30s\"\n"], (27, "30s")),
];
/// Pauses between rewrites, in turn (five, so that each state gets each): some reloads come while
/// the file stands still, some during a rewrite.
const GAPS_MS: [u64; 5] = [10, 30, 80, 5, 120];
/// Between the writer's truncate and writes: long enough for a reader to see each partial state.
const CHUNK_PAUSE: Duration = Duration::from_millis(2);
/// The daemon's pause before it reads a changing file again (`config::file::SETTLE`).
const SETTLE: Duration = Duration::from_millis(50);

/// Truncates and writes `chunks`; returns the longest a partial state stood (truncate to first
/// write, write to write).
fn rewrite_in_place(path: &Path, chunks: &[&str]) -> Duration {
    let mut f = std::fs::OpenOptions::new().write(true).truncate(true).open(path).unwrap();
    let (mut last, mut longest) = (Instant::now(), Duration::ZERO);
    for chunk in chunks {
        std::thread::sleep(CHUNK_PAUSE);
        f.write_all(chunk.as_bytes()).unwrap();
        longest = longest.max(last.elapsed());
        last = Instant::now();
    }
    longest
}

/// The writer as a real-time thread (we run as root), so that the machine's other work does not
/// hold it between two writes for as long as the daemon's pause ([`SETTLE`]): a partial state
/// standing that long is a whole file as far as any reader can tell.
fn prefer_writer() {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: a valid sched_param; pid 0 is the calling thread. Failure leaves the normal policy.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
}

/// `top_cgroups` and `window` as the landing page's configuration shows them.
fn applied(daemon: &Daemon) -> (u32, String) {
    let page = daemon.get("/").unwrap_or_else(|e| panic!("GET /: {e:#}")).text();
    let after = |key: &str| {
        let start = page.find(key).unwrap_or_else(|| panic!("no {key} on /")) + key.len();
        page[start..].to_owned()
    };
    let top = after("\"top_cgroups\": ");
    let top: u32 = top[..top.find(|c: char| !c.is_ascii_digit()).unwrap()].parse().unwrap();
    let window = after("\"window\": \"");
    (top, window[..window.find('"').unwrap()].to_owned())
}

/// The reload outcome lines so far: one per SIGHUP.
fn outcomes(daemon: &Daemon) -> Vec<String> {
    daemon
        .log()
        .into_iter()
        .filter(|l| l.contains("reloaded the configuration") || l.contains("reload failed"))
        .collect()
}

#[test]
fn only_whole_written_states_are_applied_while_the_file_is_rewritten_in_place() {
    let started = Instant::now();
    let dir = Scratch::new("runqlat-reload-in-place").unwrap();
    let config: PathBuf = dir.join("latency-daemon.toml");
    std::fs::write(&config, STATES[0].0.concat()).unwrap();
    let mut daemon = Daemon::start(DAEMON, &["--config", config.to_str().unwrap()]).unwrap();
    assert_eq!(applied(&daemon), (3, "5s".to_owned()));

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (config, stop) = (config.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            prefer_writer();
            let mut rewrites = 0usize;
            let mut longest = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                longest = longest.max(rewrite_in_place(&config, STATES[rewrites % STATES.len()].0));
                std::thread::sleep(Duration::from_millis(GAPS_MS[rewrites % GAPS_MS.len()]));
                rewrites += 1;
            }
            (rewrites, longest)
        })
    };

    let written: Vec<(u32, String)> = STATES.iter().map(|(_, (t, w))| (*t, (*w).to_owned())).collect();
    let mut applied_states: Vec<(u32, String)> = Vec::new();
    for i in 0..SIGHUPS {
        let before = outcomes(&daemon).len();
        daemon.signal(libc::SIGHUP);
        let deadline = Instant::now() + Duration::from_secs(3);
        let line = loop {
            let now = outcomes(&daemon);
            if now.len() > before {
                assert_eq!(now.len(), before + 1, "SIGHUP {i}: one outcome line each: {:?}", &now[before..]);
                break now[before].clone();
            }
            assert!(Instant::now() < deadline, "SIGHUP {i}: no outcome within 3 s: {:?}", daemon.log());
            std::thread::sleep(Duration::from_millis(2));
        };
        // Only the reload just logged can have changed it; the next waits for our next SIGHUP.
        if line.contains("reloaded the configuration") {
            applied_states.push(applied(&daemon));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let (rewrites, longest) = writer.join().unwrap();

    let refusals: Vec<String> = outcomes(&daemon).into_iter().filter(|l| l.contains("reload failed")).collect();
    let changing = refusals.iter().filter(|l| l.contains("changed while it was read")).count();
    let empty = refusals.iter().filter(|l| l.contains("is empty")).count();
    let never_written: Vec<&(u32, String)> = applied_states.iter().filter(|s| !written.contains(s)).collect();
    let defaults = never_written.iter().filter(|(t, w)| *t == 20 && w == "15s").count();
    let per_state: Vec<usize> = written.iter().map(|w| applied_states.iter().filter(|s| *s == w).count()).collect();
    eprintln!(
        "{rewrites} rewrites (a partial state stood at most {longest:?}), {SIGHUPS} SIGHUPs: {} applied ({per_state:?} of the written states, {} never written, \
         {defaults} of them the defaults), {} refused ({changing} changing, {empty} empty, {} other) in {:?}",
        applied_states.len(),
        never_written.len(),
        refusals.len(),
        refusals.len() - changing - empty,
        started.elapsed()
    );

    // A partial state that stood for SETTLE is beyond what a reader can tell from a whole file.
    assert!(
        never_written.is_empty() || longest >= SETTLE,
        "applied states never written: {never_written:?}; refusals: {refusals:?}"
    );
    let name = config.display().to_string();
    for line in &refusals {
        assert!(line.contains(&name), "a refusal names the file: {line}");
        assert!(
            line.contains("changed while it was read") || line.contains("is empty"),
            "a torn read got past the guard: {line}"
        );
    }
    assert!(applied_states.len() >= 20, "a file standing still is still reloaded: {} applied", applied_states.len());
    assert!(per_state.iter().filter(|&&n| n > 0).count() >= 2, "reloads follow the file: {per_state:?}");

    let health = daemon.get("/healthz").unwrap();
    assert_eq!(health.status, 200, "{}", health.text());
    assert!(daemon.metrics().unwrap().contains("runqlat_"), "/metrics after the reloads");
    let took = daemon.stop().unwrap();
    assert!(took < Duration::from_secs(3), "SIGTERM took {took:?}");
}
