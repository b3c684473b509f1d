//! A slow writer rewrites the real daemon's config file in place in two writes — the first half,
//! a pause of 80 to 500 ms, the second half — again and again, while the test sends SIGHUP after
//! SIGHUP and reads back what each reload applied: no state the writer never wrote (a torn file,
//! which still parses, its later settings back at their defaults) is ever applied, every state
//! applied is a whole one, continuous rewriting is applied once it pauses, each refusal is one
//! line naming the file, and the daemon serves throughout. Then a single write and a rename, each
//! followed by SIGHUP, are applied within a second.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use latency_lab::{daemon::Daemon, guard::Scratch};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");

/// Each state as `top_cgroups` and `window`, which `/` shows. The first half of a rewrite sets
/// `top_cgroups`, the second `window`: the first half alone is a pair no state has (the default
/// window, 15s).
const STATES: [(u32, &str); 4] = [(3, "5s"), (150, "10s"), (27, "30s"), (64, "20s")];
/// The writer's pause between its two writes, drawn from this range (ms).
const PAUSE_MS: (u64, u64) = (80, 500);
/// How long the writer runs while the test sends SIGHUPs.
const WRITING: Duration = Duration::from_secs(18);
/// Every third rewrite, the writer rests this long, so that the daemon can find the file still.
const REST: Duration = Duration::from_millis(900);
/// How long a file must stand still before the daemon takes it (`config::file::SETTLE`): a
/// partial state standing that long is a whole file as far as any reader can tell.
const SETTLE: Duration = Duration::from_millis(600);
/// The longest one reload may take: the daemon's bound on waiting for a changing file
/// (`config::file::PATIENCE`, 5 s) and room for a busy machine.
const OUTCOME_LIMIT: Duration = Duration::from_secs(8);
/// A single write or a rename must be applied within this, SIGHUP included.
const APPLY_LIMIT: Duration = Duration::from_secs(1);

fn text(state: (u32, &str)) -> (String, String) {
    (format!("# rewritten in place\ntop_cgroups = {}\n", state.0), format!("window = \"{}\"\n", state.1))
}

/// A small deterministic generator (xorshift64), so that a failing run can be told apart by seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Truncates and writes the first half, pauses, writes the second; returns how long the file
/// actually stood half-written.
fn rewrite_in_place(path: &Path, state: (u32, &str), pause: Duration) -> Duration {
    let (first, second) = text(state);
    let mut f = std::fs::OpenOptions::new().write(true).truncate(true).open(path).unwrap();
    f.write_all(first.as_bytes()).unwrap();
    let half = Instant::now();
    std::thread::sleep(pause);
    f.write_all(second.as_bytes()).unwrap();
    half.elapsed()
}

/// The writer as a real-time thread (we run as root), so that the machine's other work does not
/// stretch its pauses past [`SETTLE`].
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

/// Sends SIGHUP and waits for its one outcome line.
fn reload(daemon: &mut Daemon, what: &str) -> String {
    let before = outcomes(daemon).len();
    daemon.signal(libc::SIGHUP);
    let deadline = Instant::now() + OUTCOME_LIMIT;
    loop {
        let now = outcomes(daemon);
        if now.len() > before {
            assert_eq!(now.len(), before + 1, "{what}: one outcome line each: {:?}", &now[before..]);
            return now[before].clone();
        }
        assert!(Instant::now() < deadline, "{what}: no outcome within {OUTCOME_LIMIT:?}: {:?}", daemon.log());
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Puts `state` in the file by `put`, sends SIGHUP, and returns how long until `/` shows it.
fn time_to_apply(daemon: &mut Daemon, state: (u32, &str), put: impl FnOnce(&str)) -> Duration {
    let (first, second) = text(state);
    let started = Instant::now();
    put(&(first + &second));
    daemon.signal(libc::SIGHUP);
    let want = (state.0, state.1.to_owned());
    loop {
        if applied(daemon) == want {
            return started.elapsed();
        }
        assert!(started.elapsed() < OUTCOME_LIMIT, "{state:?} not applied: {:?}", daemon.log());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Stops the writer when dropped, also when an assertion fails while it runs.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn a_slow_in_place_writer_never_gets_a_torn_state_applied_and_whole_files_apply_within_a_second() {
    let started = Instant::now();
    let dir = Scratch::new("runqlat-reload-in-place").unwrap();
    let config: PathBuf = dir.join("latency-daemon.toml");
    let (first, second) = text(STATES[0]);
    std::fs::write(&config, first + &second).unwrap();
    let mut daemon = Daemon::start(DAEMON, &["--config", config.to_str().unwrap()]).unwrap();
    assert_eq!(applied(&daemon), (3, "5s".to_owned()));

    let seed = 0x5eed_f00d_u64;
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_writer = StopOnDrop(Arc::clone(&stop));
    let writer = {
        let (config, stop) = (config.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            prefer_writer();
            let mut rng = Rng(seed);
            let (mut rewrites, mut longest) = (0usize, Duration::ZERO);
            while !stop.load(Ordering::Relaxed) {
                let pause = Duration::from_millis(PAUSE_MS.0 + rng.below(PAUSE_MS.1 - PAUSE_MS.0 + 1));
                longest = longest.max(rewrite_in_place(&config, STATES[rewrites % STATES.len()], pause));
                rewrites += 1;
                let gap = if rewrites % 3 == 0 { REST } else { Duration::from_millis(rng.below(60)) };
                std::thread::sleep(gap);
            }
            (rewrites, longest)
        })
    };

    let written: Vec<(u32, String)> = STATES.iter().map(|(t, w)| (*t, (*w).to_owned())).collect();
    let (mut polls, mut applied_states) = (0usize, Vec::new());
    while started.elapsed() < WRITING {
        let line = reload(&mut daemon, &format!("SIGHUP {polls}"));
        // Only the reload just logged can have changed it; the next waits for our next SIGHUP.
        if line.contains("reloaded the configuration") {
            applied_states.push(applied(&daemon));
        }
        polls += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let (rewrites, longest) = writer.join().unwrap();

    let refusals: Vec<String> = outcomes(&daemon).into_iter().filter(|l| l.contains("reload failed")).collect();
    let torn: Vec<&(u32, String)> = applied_states.iter().filter(|s| !written.contains(s)).collect();
    let per_state: Vec<usize> = written.iter().map(|w| applied_states.iter().filter(|s| *s == w).count()).collect();
    eprintln!(
        "seed {seed:#x}: {rewrites} rewrites in place (half-written for {}–{} ms, at most {longest:?} measured), {polls} SIGHUPs: \
         {} applied ({per_state:?} of the written states), {} torn states applied, {} refused",
        PAUSE_MS.0,
        PAUSE_MS.1,
        applied_states.len(),
        torn.len(),
        refusals.len(),
    );

    // Time to apply a whole file, by a single write and by rename, three times each.
    let mut single = Vec::new();
    let mut renamed = Vec::new();
    for i in 0..3u32 {
        single.push(time_to_apply(&mut daemon, (200 + i, "5s"), |t| std::fs::write(&config, t).unwrap()));
        let temporary = dir.join("latency-daemon.toml.new");
        renamed.push(time_to_apply(&mut daemon, (300 + i, "10s"), |t| {
            std::fs::write(&temporary, t).unwrap();
            std::fs::rename(&temporary, &config).unwrap();
        }));
    }
    eprintln!(
        "applied after a single write in {single:?}, after a rename in {renamed:?}; {:?} in all",
        started.elapsed()
    );

    // A partial state that stood for SETTLE is beyond what a reader can tell from a whole file.
    assert!(
        torn.is_empty() || longest >= SETTLE,
        "{} applied states never written, the first {:?} (the writer's pauses stayed under {longest:?}); refusals: {:?}",
        torn.len(),
        torn.first(),
        refusals.first()
    );
    let name = config.display().to_string();
    for line in &refusals {
        assert!(line.contains(&name), "a refusal names the file: {line}");
    }
    assert!(applied_states.len() >= 5, "a rewritten file is applied once it pauses: {} applied", applied_states.len());
    assert!(per_state.iter().filter(|&&n| n > 0).count() >= 2, "reloads follow the file: {per_state:?}");
    for took in single.iter().chain(&renamed) {
        assert!(*took < APPLY_LIMIT, "a single write {single:?} and a rename {renamed:?} apply within {APPLY_LIMIT:?}");
    }

    let health = daemon.get("/healthz").unwrap();
    assert_eq!(health.status, 200, "{}", health.text());
    assert!(daemon.metrics().unwrap().contains("runqlat_"), "/metrics after the reloads");
    let took = daemon.stop().unwrap();
    assert!(took < Duration::from_secs(3), "SIGTERM took {took:?}");
}
