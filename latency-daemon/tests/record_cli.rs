//! `record` and `check` as a user meets them: bad input is one line and exit 2 with nothing
//! attached; missing privileges are named; full maps and discarded delays are counted; hostile
//! thread names cannot break either output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    process::{Command, Output},
    time::Duration,
};

use latency_lab::{
    oracle::bpftool,
    recorder::Recorder,
    workload::{Body, Crew, cpus, group, set_thread_name},
};
use serde_json::Value;

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");

/// Nothing of ours (a STAMPS map, or a program using one) is loaded within 5 s.
fn assert_nothing_attached() {
    bpftool::nothing_loaded().unwrap_or_else(|e| panic!("{e:#}"));
}

fn daemon(args: &[&str]) -> Output {
    Command::new(DAEMON).args(args).output().expect("run latency-daemon")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit 2, exactly one line on stderr that contains `needle`, and nothing left attached.
fn assert_usage_error(args: &[&str], needle: &str) {
    let out = daemon(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: not one line: {err:?}");
    assert!(err.contains(needle), "{args:?}: {err:?} does not mention {needle:?}");
    assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
    assert_nothing_attached();
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    assert_usage_error(&["record", "--bogus"], "--bogus");
    assert_usage_error(&["record", "--duration", "soon"], "soon");
    assert_usage_error(&["record", "--duration", "0s"], "greater than zero");
    assert_usage_error(&["record", "--pid", "4194305"], "no such process");
    assert_usage_error(&["record", "--pid", "12abc"], "not a process id");
    assert_usage_error(&["record", "--clock", "tsc"], "tsc");
    assert_usage_error(&["frobnicate"], "frobnicate");
    // What clap knows beyond the first line stays on it: the allowed values, the near miss, and
    // with no command at all, the commands.
    assert_usage_error(&["record", "--clock", "tsc"], "[possible values: monotonic, run-queue]");
    assert_usage_error(&["recrd"], "a similar subcommand exists: 'record'");
    assert_usage_error(&["run", "--intervl", "1s"], "a similar argument exists: '--interval'");
    assert_usage_error(&[], "a command is needed: record, check, run, seccomp-profile");
    let help = daemon(&["record", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("--duration"));
}

#[test]
fn check_validates_a_config_file() {
    let dir = latency_lab::guard::Scratch::new("runqlat-check-config").expect("a scratch directory");
    let (good, bad) = (dir.join("good.toml"), dir.join("bad.toml"));
    std::fs::write(&good, "alert_max_delay = \"5ms\"\ntop_cgroups = 50\n").unwrap();
    std::fs::write(&bad, "alert_max_delay = \"5ms\"\ntop_cgroup = 50\n").unwrap();
    // A web config file it names is checked too: basic auth with a password that is no bcrypt hash.
    let (web_cfg, bad_web) = (dir.join("web.yml"), dir.join("bad-web.toml"));
    std::fs::write(&web_cfg, "basic_auth_users:\n  prom: not-a-hash\n").unwrap();
    std::fs::write(&bad_web, format!("web_config_file = \"{}\"\n", web_cfg.display())).unwrap();
    let good_out = daemon(&["check", "--config", good.to_str().unwrap()]);
    let bad_out = daemon(&["check", "--config", bad.to_str().unwrap()]);
    let web_out = daemon(&["check", "--config", bad_web.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&web_out.stdout);
    assert_eq!(web_out.status.code(), Some(1), "{text}");
    assert!(text.contains("config:       INVALID:") && text.contains("web.yml"), "{text}");
    let text = String::from_utf8_lossy(&good_out.stdout);
    assert_eq!(good_out.status.code(), Some(0), "{text}{}", stderr(&good_out));
    assert!(text.contains(&format!("config:       {}: valid", good.display())), "{text}");
    let text = String::from_utf8_lossy(&bad_out.stdout);
    assert_eq!(bad_out.status.code(), Some(1), "{text}");
    // The file's line and column, and the key a reader must fix.
    assert!(text.contains("config:       INVALID:") && text.contains("line 2, column 1, key `top_cgroup`"), "{text}");
    assert!(text.contains("not ready"), "{text}");
    assert_nothing_attached();
}

#[test]
fn check_says_ready_here() {
    let out = daemon(&["check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    // As root on this kernel, run would keep nothing once attached.
    for line in
        ["kernel:", "BTF:", "capabilities: ok", "after attach: every capability dropped\n", "load+attach:  ok", "ready"]
    {
        assert!(text.contains(line), "check output lacks {line:?}:\n{text}");
    }
    assert_nothing_attached();
}

#[test]
fn without_capabilities_the_missing_ones_are_named() {
    // Root, but with an empty bounding set: the exec'd daemon has no effective capabilities.
    let drop_all = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--bounding-set=-all", "--inh-caps=-all", "--"])
            .arg(DAEMON)
            .args(args)
            .output()
            .expect("setpriv (util-linux)")
    };
    let out = drop_all(&["record", "--duration", "1s"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("CAP_BPF") && err.contains("CAP_PERFMON"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
    let out = drop_all(&["check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("MISSING CAP_BPF, CAP_PERFMON") && text.contains("not ready"), "{text}");
    assert_nothing_attached();
}

fn record_json(args: &[&str], work: impl FnOnce()) -> Value {
    let mut all = vec!["--duration", "10m", "--json"];
    all.extend_from_slice(args);
    let rec = Recorder::start(DAEMON, &all).expect("record attaches");
    work();
    let json = rec.stop().expect("record reports");
    assert_nothing_attached();
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("not JSON ({e}): {json}"))
}

#[test]
fn a_full_task_map_is_counted_not_hidden() {
    let mut crew = Crew::default();
    let me = std::process::id().to_string();
    let v = record_json(&["--max-tasks", "2", "--pid", &me], || {
        crew.phase(group("many", Body::Sleep1ms, 6), 0.3).expect("the workload");
    });
    let tasks = v["tasks"].as_array().unwrap();
    assert!(tasks.len() <= 2, "{} tasks in a map of 2", tasks.len());
    assert!(v["lost"]["tasks"].as_u64().unwrap() > 0, "6 threads in a map of 2 lost nothing: {}", v["lost"]);
}

#[test]
fn delays_over_the_ceiling_are_discarded_and_counted() {
    let mut crew = Crew::default();
    let me = std::process::id().to_string();
    // 4×CPUs spinners wait several ms for each turn: far above a 1 ms ceiling.
    let v = record_json(&["--ceiling", "1ms", "--pid", &me], || {
        crew.phase(group("over", Body::Spin, 4 * cpus()), 1.0).expect("the workload");
    });
    let discarded = v["discarded"]["over_ceiling"].as_u64().unwrap();
    assert!(discarded > 10, "only {discarded} delays over 1 ms discarded");
    for reason in ["wakeup", "preempt"] {
        let h = &v["histograms"][reason];
        assert!(h["max_ns"].as_u64().unwrap() <= 1_000_000, "{reason}: max {} over the ceiling", h["max_ns"]);
        for b in h["buckets"].as_array().unwrap() {
            let le = b["le_seconds"].as_f64().expect("no overflow bucket expected");
            assert!(le <= 1e-3 * 2f64.powf(1.0 / 8.0), "{reason}: bucket le {le} above the ceiling");
        }
    }
}

/// Why they waited: the run's six causes add up to its delay time, each task's to its own, in
/// JSON; the text has the machine-wide section and a column per cause.
#[test]
fn every_delay_is_split_by_cause_in_both_outputs() {
    let causes = ["throttled", "irq_steal", "same", "other", "kernel", "idle"];
    let sum = |v: &Value, what: &str| -> u64 {
        assert_eq!(v.as_object().map(|o| o.len()), Some(6), "{what}: {v}");
        causes.iter().map(|c| v[c].as_u64().unwrap_or_else(|| panic!("{what}: no {c} in {v}"))).sum()
    };
    let mut crew = Crew::default();
    let me = std::process::id().to_string();
    let v = record_json(&["--pid", &me], || {
        crew.phase(group("causes", Body::Spin, 2 * cpus()), 1.0).expect("the workload");
    });
    let delays: u64 = ["wakeup", "preempt"].iter().map(|r| v["histograms"][r]["sum_ns"].as_u64().unwrap()).sum();
    assert!(delays > 0, "oversubscribed spinners did not wait");
    assert_eq!(sum(&v["waited_by_cause_ns"], "the run"), delays);
    assert!(v["unsplit"].is_u64(), "{}", v["unsplit"]);
    let tasks = v["tasks"].as_array().unwrap();
    for t in tasks {
        assert_eq!(sum(&t["waited_by_cause_ns"], "a task"), t["delay_sum_ns"].as_u64().unwrap(), "{t}");
    }
    let per_cpu: u64 = v["cpus"].as_array().unwrap().iter().map(|c| sum(&c["waited_by_cause_ns"], "a cpu")).sum();
    assert_eq!(per_cpu, delays, "the CPUs' causes add up to the run's");

    let out = daemon(&["record", "--duration", "1s", "--top", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let section = text.split("Why they waited").nth(1).unwrap_or_else(|| panic!("no causes section:\n{text}"));
    for short in ["thr", "irq", "same", "other", "kern", "idle"] {
        assert!(section.lines().any(|l| l.trim_start().starts_with(short) && l.contains(" % |")), "{short}:\n{text}");
    }
    let header = text.lines().find(|l| l.contains("Task (comm:tid, pid)")).expect("the task table");
    assert!(header.contains("thr    irq   same  other   kern   idle"), "{header}");
    assert_nothing_attached();
}

#[test]
fn hostile_thread_names_keep_both_outputs_intact() {
    let hostile: &[u8] = b"a\"b\\c\nd\xff\xfe";
    let me = std::process::id().to_string();
    let run = || {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            set_thread_name(hostile);
            // Sleep-wake a few times so the thread has delays.
            for _ in 0..50 {
                std::thread::sleep(Duration::from_millis(2));
            }
            let _ = rx.recv();
        });
        (t, tx)
    };

    let (t, tx) = run();
    let v = {
        let rec = Recorder::start(DAEMON, &["--duration", "10m", "--json", "--pid", &me]).expect("record attaches");
        let (t2, tx2) = run();
        std::thread::sleep(Duration::from_millis(300));
        let json = rec.stop().expect("record reports");
        drop(tx2);
        t2.join().unwrap();
        serde_json::from_str::<Value>(&json).unwrap_or_else(|e| panic!("hostile name broke the JSON ({e}): {json}"))
    };
    let names: Vec<&str> = v["tasks"].as_array().unwrap().iter().filter_map(|t| t["comm"].as_str()).collect();
    assert!(names.contains(&"a\"b\\c\nd\u{fffd}\u{fffd}"), "hostile name not reported as is: {names:?}");

    // Text: the name is escaped, so it stays on one table row.
    let rec = Recorder::start(DAEMON, &["--duration", "10m", "--pid", &me, "--top", "0"]).expect("record attaches");
    let (t3, tx3) = run();
    std::thread::sleep(Duration::from_millis(300));
    let text = rec.stop().expect("record reports");
    drop(tx3);
    t3.join().unwrap();
    drop(tx);
    t.join().unwrap();
    let row =
        text.lines().find(|l| l.contains("a\"b\\\\c\\x0ad")).unwrap_or_else(|| panic!("no escaped row in:\n{text}"));
    assert!(row.contains('|'), "{row}");
    assert!(!text.lines().any(|l| l.starts_with('d') && l.contains('\u{fffd}')), "a raw newline split a row:\n{text}");
    assert_nothing_attached();
}

#[test]
fn sigterm_reports_and_detaches() {
    let rec = Recorder::start(DAEMON, &["--duration", "10m", "--json"]).expect("record attaches");
    std::thread::sleep(Duration::from_millis(500));
    // Recorder::stop sends SIGINT; SIGTERM must behave the same.
    let json = rec.stop_with(libc::SIGTERM).expect("record reports on SIGTERM");
    let v: Value = serde_json::from_str(&json).unwrap();
    assert!(v["duration_ns"].as_u64().unwrap() >= 400_000_000);
    assert!(v["cpus"].as_array().unwrap().len() >= cpus());
    assert_nothing_attached();
}

/// `record --svg FILE` writes the run as a heatmap (a column per second) beside the unchanged
/// text report, and the heatmap's cells hold every delay the report counts.
#[test]
fn record_svg_writes_the_heatmap_and_keeps_the_text() {
    let dir = latency_lab::guard::Scratch::new("runqlat-svg").expect("a scratch directory");
    let svg = dir.join("run.svg");
    let (tx, _rx) = std::sync::mpsc::channel();
    let crew = Crew::spawn(group("svg", Body::Spin, 2 * cpus()), 3.5, &tx).expect("the workload");
    let out = daemon(&["record", "--duration", "3s", "--svg", svg.to_str().unwrap()]);
    drop(crew);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("Run-queue delay over "), "the text report changed:\n{text}");
    let drawing = std::fs::read_to_string(&svg).expect("the SVG");
    assert!(drawing.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"") && drawing.ends_with("</svg>\n"));
    // Three periods of 1 s (the last one may be a sliver more).
    let columns = drawing.matches("class=\"column\"").count();
    assert!((3..=4).contains(&columns), "{columns} columns");
    let in_cells: u64 =
        drawing.split("data-n=\"").skip(1).filter_map(|s| s.split('"').next()?.parse::<u64>().ok()).sum();
    let counted: u64 = ["wakeup delays: ", "preempt delays: "]
        .iter()
        .filter_map(|p| text.split(p).nth(1)?.split([',', '\n']).next()?.trim().parse::<u64>().ok())
        .sum();
    assert!(counted > 0 && in_cells == counted, "cells hold {in_cells} delays, the report {counted}");
    assert_nothing_attached();
}
