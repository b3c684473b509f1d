//! A rare condition in the kernel program reaches the daemon's log through aya-log: a per-task
//! map of one entry is full at once, and the kernel says so (once per CPU, then rate-limited),
//! while the count stays in `runqlat_lost_total{map="tasks"}`. And those diagnostics add nothing
//! to the scheduler handlers' common path (a build without them, compared by translated code).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    process::Command,
    time::{Duration, Instant},
};

use latency_daemon::kernel::probe::{Probe, ProbeOptions};
use latency_lab::{daemon::Daemon, oracle::bpftool, web::sample};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");

/// One test at a time: `load_and_dump` takes every scheduler program that appeared while it
/// loaded as its own, so the other test's daemon attaching meanwhile would be counted in.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_full_map_in_the_kernel_is_one_rate_limited_log_line_per_cpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let daemon =
        Daemon::start(DAEMON, &["--interval", "1s", "--per-task", "--max-tasks", "1"]).expect("the daemon starts");
    let line = "kernel: the per-task map is full";
    let deadline = Instant::now() + Duration::from_secs(10);
    while !daemon.log().iter().any(|l| l.contains(line)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    let log = daemon.log();
    let lines = log.iter().filter(|l| l.contains(line)).count();
    let lost = sample(&daemon.metrics().unwrap(), "runqlat_lost_total{map=\"tasks\"}").unwrap();
    println!("kernel diagnostics: {lines} line(s) for {lost} tasks lost:\n{}", log.join("\n"));
    assert!(lines >= 1, "no kernel line {line:?} in the log:\n{}", log.join("\n"));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(lines <= cpus, "{lines} lines on {cpus} CPUs within 10 s: not rate-limited");
    assert!(lost > lines as f64, "{lost} lost, {lines} lines: every loss logged?");
    daemon.stop().unwrap();
}

/// The hot programs' translated (post-verifier) code, by function: the handler's own body, then
/// each BPF-to-BPF subprogram (`rare`, `memset`), as `bpftool prog dump xlated` delimits them.
#[derive(Debug)]
struct Xlated {
    /// (function name, instruction slots, its lines).
    functions: Vec<(String, u64, Vec<String>)>,
}

impl Xlated {
    fn of(id: u64) -> Xlated {
        let out = Command::new("bpftool").args(["prog", "dump", "xlated", "id", &id.to_string()]).output().unwrap();
        assert!(out.status.success(), "bpftool prog dump xlated id {id}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        // (name, first pc, lines); a function header is an unindented "type name(args):" line.
        let mut parts: Vec<(String, u64, Vec<String>)> = Vec::new();
        let mut last_pc = 0;
        for line in text.lines() {
            if !line.starts_with([' ', ';']) && line.ends_with("):") {
                let name = line.split('(').next().unwrap().rsplit(' ').next().unwrap().to_string();
                parts.push((name, u64::MAX, Vec::new()));
                continue;
            }
            let Some((pc, insn)) = line.trim_start().split_once(": (") else { continue };
            let Ok(pc) = pc.parse::<u64>() else { continue };
            let part = parts.last_mut().expect("an instruction before any function header");
            part.1 = part.1.min(pc);
            part.2.push(format!("({insn}"));
            // A 16-byte load (opcode 0x18) takes two slots.
            last_pc = pc + if insn.starts_with("18)") { 2 } else { 1 };
        }
        let starts: Vec<u64> = parts.iter().map(|p| p.1).skip(1).chain([last_pc]).collect();
        let functions =
            parts.into_iter().zip(starts).map(|((name, start, lines), end)| (name, end - start, lines)).collect();
        Xlated { functions }
    }

    /// The handler's own body (the first function).
    fn body(&self) -> &(String, u64, Vec<String>) {
        &self.functions[0]
    }

    /// The body's slots less its register copies and stack spills and fills: where the compiler
    /// keeps values across a call is register allocation, not work the diagnostics add.
    fn body_work(&self) -> u64 {
        let shuffles = self.body().2.iter().filter(|l| is_shuffle(l)).count() as u64;
        self.body().1 - shuffles
    }

    fn has(&self, function: &str) -> bool {
        self.functions.iter().any(|f| f.0 == function)
    }
}

/// A register copy (`(bf) r4 = r0`) or an 8-byte spill to or fill from the stack
/// (`(7b) *(u64 *)(r10 -200) = r0`, `(79) r1 = *(u64 *)(r10 -200)`).
fn is_shuffle(insn: &str) -> bool {
    let copy = insn.starts_with("(bf) ")
        && insn[5..]
            .split_once(" = ")
            .is_some_and(|(_, from)| from.starts_with('r') && from[1..].parse::<u8>().is_ok());
    copy || ((insn.starts_with("(7b) ") || insn.starts_with("(79) ")) && insn.contains("*(u64 *)(r10 -"))
}

/// The kernel program built without diagnostics (`latency_lab::ebpf::no_diag_object`).
fn no_diag_object() -> Vec<u8> {
    let path = latency_lab::ebpf::no_diag_object().unwrap_or_else(|e| panic!("{e:#}"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Loads `object` (None: the daemon's own) with the daemon's default options and returns the
/// translated code of its three scheduler programs; detaches before returning.
fn load_and_dump(object: Option<&[u8]>) -> Vec<(String, Xlated)> {
    let options = ProbeOptions { max_tasks: 1, cgroups: true, cgroup_removals: true, ..ProbeOptions::default() };
    let mut probe = match object {
        None => Probe::load(&options),
        Some(bytes) => Probe::load_object(&options, bytes),
    }
    .unwrap_or_else(|e| panic!("loading the kernel program: {e}"));
    // Ours by id: what this process holds, not whatever else was loaded meanwhile.
    let mine = bpftool::programs_held_by(std::process::id());
    let ours: Vec<bpftool::ProgStats> =
        bpftool::sched_programs().unwrap().into_iter().filter(|p| mine.contains(&p.id)).collect();
    let mut dumps: Vec<(String, Xlated)> = ours.iter().map(|p| (p.name.clone(), Xlated::of(p.id))).collect();
    if object.is_none() {
        // The common path never enters `rare`: after 20,000 wakeups and switches, its per-CPU
        // state (when each kind was last logged, how often) is still all zero.
        ping_pong(10_000);
        let entered = diag_bytes_set(ours[0].id);
        assert_eq!(entered, 0, "diag::rare was entered on a plain ping-pong: diagnostics on the common path?");
    }
    probe.detach().unwrap();
    dumps.sort_by(|a, b| a.0.cmp(&b.0));
    dumps
}

/// Two threads handing a token back and forth `rounds` times: a wakeup and a switch each way.
fn ping_pong(rounds: usize) {
    let (to_b, from_a) = std::sync::mpsc::channel::<usize>();
    let (to_a, from_b) = std::sync::mpsc::channel::<usize>();
    let b = std::thread::spawn(move || {
        while let Ok(n) = from_a.recv() {
            if to_a.send(n).is_err() {
                break;
            }
        }
    });
    for n in 0..rounds {
        to_b.send(n).unwrap();
        from_b.recv().unwrap();
    }
    drop(to_b);
    b.join().unwrap();
}

/// Non-zero bytes in the `DIAG` map (`diag::DiagState` per CPU) of program `id`.
fn diag_bytes_set(id: u64) -> usize {
    let prog = bpftool::json(&["prog", "show", "id", &id.to_string()]).unwrap();
    let maps: Vec<u64> = prog["map_ids"].as_array().unwrap().iter().filter_map(|m| m.as_u64()).collect();
    let diag = maps
        .into_iter()
        .find(|m| bpftool::json(&["map", "show", "id", &m.to_string()]).unwrap()["name"] == "DIAG")
        .expect("the program uses a DIAG map");
    let dump = bpftool::json(&["map", "dump", "id", &diag.to_string()]).unwrap();
    let bytes = dump.as_array().unwrap().iter().flat_map(|e| e["values"].as_array().unwrap().iter());
    bytes.flat_map(|v| v["value"].as_array().unwrap().iter()).filter(|b| b.as_str() != Some("0x00")).count()
}

/// Structural proof that the aya-log diagnostics cost the common path nothing: the same program
/// built without them (`--features no-diag`) has, in each scheduler handler's own body, the same
/// code but for the call sites of `diag::rare` (a call and its argument set-up, at most
/// `PER_CALL` slots each); all logging (ring buffer reservation and output) is inside `rare`,
/// which only rare branches call, and a plain workload never enters it. Fails when diagnostics
/// work moves into a handler's body or `rare` is called on the common path.
#[test]
fn diagnostics_add_nothing_but_their_calls_to_the_hot_programs() {
    /// A call and its three arguments (ctx, what, id).
    const PER_CALL: u64 = 4;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let with = load_and_dump(None);
    let without = load_and_dump(Some(&no_diag_object()));
    assert_eq!(with.iter().map(|w| &w.0).collect::<Vec<_>>(), without.iter().map(|w| &w.0).collect::<Vec<_>>());
    assert_eq!(with.len(), 3, "three scheduler programs: {:?}", with.iter().map(|w| &w.0).collect::<Vec<_>>());
    for ((name, on), (_, off)) in with.iter().zip(&without) {
        let (body_on, body_off) = (on.body(), off.body());
        let calls = body_on.2.iter().filter(|l| l.contains("call pc") && l.ends_with("_rare")).count() as u64;
        let logging = |lines: &[String]| {
            lines.iter().filter(|l| l.contains("ringbuf") || l.contains("perf_event_output")).count()
        };
        println!(
            "{name}: body {} slots with diagnostics ({calls} calls to rare), {} without ({} and {} less copies, spills and \
             fills); rare {} slots; whole program {} vs {}",
            body_on.1,
            body_off.1,
            on.body_work(),
            off.body_work(),
            on.functions.iter().find(|f| f.0 == "rare").map_or(0, |f| f.1),
            on.functions.iter().map(|f| f.1).sum::<u64>(),
            off.functions.iter().map(|f| f.1).sum::<u64>(),
        );
        assert_eq!(logging(&body_on.2), 0, "{name}: aya-log output in the handler's own body");
        assert!(!off.has("rare"), "{name}: the no-diag build still calls rare");
        assert!(off.functions.iter().all(|f| logging(&f.2) == 0), "{name}: logging left in the no-diag build");
        assert!(
            on.body_work() <= off.body_work() + PER_CALL * calls,
            "{name}: the handler's body is {} slots with diagnostics and {} without, less copies, spills and fills: \
             more than {PER_CALL} per call site ({calls}) — diagnostics work on the common path?",
            on.body_work(),
            off.body_work()
        );
    }
}

/// `kernel.pid_max` bounds new tids only: lowered below a running task's tid (here a sleeper's,
/// woken every millisecond), the stamp array still reaches that task — no stamp lost, no warning —
/// and the log says where its size came from. pid_max is restored, pass or fail.
#[test]
fn a_task_above_a_lowered_pid_max_is_still_measured() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let flag = std::sync::Arc::clone(&stop);
    let sleeper = std::thread::spawn(move || {
        // SAFETY: gettid has no arguments and cannot fail.
        tx.send(unsafe { libc::gettid() } as u32).unwrap();
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let tid = rx.recv().unwrap();
    // pid_max cannot go below 301 (RESERVED_PIDS + 1).
    if tid < 400 {
        eprintln!("skipped: the sleeper's tid {tid} is too low to put pid_max under it");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        sleeper.join().unwrap();
        return;
    }
    let lowered = (tid - 50).to_string();
    let mut guard = latency_lab::guard::Sysctl::set("kernel.pid_max", &lowered).expect("lowering kernel.pid_max");
    let daemon = Daemon::start(DAEMON, &["--interval", "500ms"]).expect("the daemon starts");
    std::thread::sleep(Duration::from_secs(2));
    let metrics = daemon.metrics().unwrap();
    let log = daemon.log();
    daemon.stop().unwrap();
    guard.restore().expect("kernel.pid_max restored");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sleeper.join().unwrap();
    let lost = sample(&metrics, "runqlat_lost_total{map=\"stamps\"}").unwrap();
    println!("pid_max {lowered} under tid {tid}: {lost} stamps lost\n{}", log.join("\n"));
    assert!(log.iter().any(|l| l.contains("one past the highest tid running")), "{}", log.join("\n"));
    assert!(!log.iter().any(|l| l.contains("beyond the stamp array")), "{}", log.join("\n"));
    assert_eq!(lost, 0.0, "stamps lost with pid_max {lowered} under tid {tid}");
}
