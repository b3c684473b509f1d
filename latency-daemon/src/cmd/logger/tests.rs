use std::path::{Path, PathBuf};

use latency_lab::logs;

use super::*;

const TIME: &str = "2026-12-03T11:55:00.123Z";

fn line(
    format: LogFormat,
    target: &str,
    level: log::Level,
    msg: std::fmt::Arguments<'_>,
    kvs: &[(&str, kv::Value<'_>)],
) -> String {
    let record = log::Record::builder().args(msg).level(level).target(target).key_values(&kvs).build();
    format_line(format, TIME, &record)
}

#[test]
fn logfmt_lines_read_back() {
    let l = line(
        LogFormat::Logfmt,
        "latency_daemon::cmd::run",
        log::Level::Info,
        format_args!("attached; serving on {}", "127.0.0.1:9954"),
        &[("cgroups", kv::Value::from(12u64)), ("mount", kv::Value::from("/sys/fs/cgroup/unified"))],
    );
    assert_eq!(
        l,
        "time=2026-12-03T11:55:00.123Z level=info target=latency_daemon::cmd::run \
         msg=\"attached; serving on 127.0.0.1:9954\" cgroups=12 mount=/sys/fs/cgroup/unified"
    );
    let pairs = logs::logfmt(&l).unwrap();
    assert_eq!(logs::get(&pairs, "msg"), Some("attached; serving on 127.0.0.1:9954"));
}

#[test]
fn hostile_text_stays_one_event() {
    let evil = "x\" level=error\nforged=1 \u{1b}]0;t\u{7}\\";
    let l = line(
        LogFormat::Logfmt,
        "latency_ebpf",
        log::Level::Warn,
        format_args!("{evil}"),
        &[("comm key", kv::Value::from(evil))],
    );
    assert!(!l.contains('\n') && !l.contains('\u{1b}'), "{l}");
    let pairs = logs::logfmt(&l).unwrap();
    assert_eq!(logs::get(&pairs, "level"), Some("warn"));
    assert!(logs::get(&pairs, "msg").unwrap().starts_with("x\" level=error\nforged=1 "), "{l}");
    assert!(logs::get(&pairs, "comm_key").is_some(), "{l}");
    assert!(logs::get(&pairs, "forged").is_none(), "{l}");

    let j = line(
        LogFormat::Json,
        "latency_ebpf",
        log::Level::Warn,
        format_args!("{evil}"),
        &[("time", kv::Value::from(1u64))],
    );
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!((v["msg"].as_str(), v["level"].as_str(), v["time"].as_str()), (Some(evil), Some("warn"), Some(TIME)));
    assert_eq!(v["field_time"], 1, "a record's own key does not overwrite the timestamp: {j}");
}

#[test]
fn json_lines_have_time_level_target_msg_and_typed_fields() {
    let j = line(
        LogFormat::Json,
        "aya_log",
        log::Level::Debug,
        format_args!("first lost stamp on cpu {}", 1),
        &[("cpu", kv::Value::from(1u32)), ("ok", kv::Value::from(true)), ("ratio", kv::Value::from(0.5f64))],
    );
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["time"], TIME);
    assert_eq!(v["level"], "debug");
    assert_eq!(v["target"], "aya_log");
    assert_eq!(v["msg"], "first lost stamp on cpu 1");
    assert_eq!((v["cpu"].as_u64(), v["ok"].as_bool(), v["ratio"].as_f64()), (Some(1), Some(true), Some(0.5)));
}

#[test]
fn levels_filter() {
    init(LogLevel::Warn, LogFormat::Logfmt);
    assert!(!log::log_enabled!(log::Level::Info));
    assert!(log::log_enabled!(log::Level::Warn));
    set(LogLevel::Debug, LogFormat::Json);
    assert!(log::log_enabled!(log::Level::Debug));
    assert!(!log::log_enabled!(log::Level::Trace));
    set(LogLevel::Info, LogFormat::Logfmt);
}

/// Files that print on purpose: the reports of `check` and `record` (stdout, and record's progress
/// line on a terminal), clap's help and usage errors, which come before any logger exists, the
/// logger itself, and `seccomp-profile` (the profile on stdout is its output).
const MAY_PRINT: [&str; 5] = ["cmd/check.rs", "cmd/record/", "cmd/mod.rs", "cmd/logger.rs", "cmd/seccomp.rs"];

/// The serving path writes only through the logger: a stray `eprintln!` (from another branch, say)
/// would be a line in no format, at no level, that `--log.level` cannot silence.
#[test]
fn no_stray_prints_outside_the_reports() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for file in rust_files(&src) {
        let rel = file.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        if MAY_PRINT.iter().any(|p| rel.starts_with(p)) || rel.ends_with("tests.rs") || rel.contains("/tests/") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        // Unit tests sit at the end of a file, behind #[cfg(test)].
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
        for (n, l) in code.lines().enumerate() {
            let l = l.trim_start();
            if l.starts_with("//") {
                continue;
            }
            for bad in ["println!(", "print!(", "dbg!(", "std::io::stdout()", "std::io::stderr()"] {
                if l.contains(bad) {
                    found.push(format!("src/{rel}:{}: {l}", n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "write through log::{{info,warn,error}}! instead:\n{}", found.join("\n"));
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}
