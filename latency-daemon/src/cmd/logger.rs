//! The process's logger behind the `log` facade: records from any target (ours, aya's, aya-log's
//! kernel diagnostics) in, one line each on stderr out, as logfmt or JSON with a UTC timestamp,
//! the level, the target, the message and the record's key-values. Every layer logs with
//! `log::{debug,info,warn,error}!`; only `cmd` installs this and changes its level or format.
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::SystemTime;

use log::kv::{self, VisitSource};

use crate::config::args::{LogFormat, LogLevel};
use crate::model::logfmt;

struct Logger {
    /// `LogFormat` as a number, so a reload can switch it without a lock.
    format: AtomicU8,
}

static LOGGER: Logger = Logger { format: AtomicU8::new(0) };

/// Installs the logger (once per process; later calls only change level and format).
pub fn init(level: LogLevel, format: LogFormat) {
    // A second call finds the logger installed; the settings below still apply.
    let _ = log::set_logger(&LOGGER);
    set(level, format);
}

/// `--log.level` and `--log.format`, at start and on reload.
pub fn set(level: LogLevel, format: LogFormat) {
    log::set_max_level(filter(level));
    LOGGER.format.store(format as u8, Ordering::Relaxed);
}

fn filter(level: LogLevel) -> log::LevelFilter {
    match level {
        LogLevel::Debug => log::LevelFilter::Debug,
        LogLevel::Info => log::LevelFilter::Info,
        LogLevel::Warn => log::LevelFilter::Warn,
        LogLevel::Error => log::LevelFilter::Error,
    }
}

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let format = if self.format.load(Ordering::Relaxed) == LogFormat::Json as u8 {
            LogFormat::Json
        } else {
            LogFormat::Logfmt
        };
        let time = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let mut line = format_line(format, &time, record);
        line.push('\n');
        // One write per line, so lines from several threads never interleave; a log that cannot be
        // written has nowhere else to go.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// One event, without the newline.
fn format_line(format: LogFormat, time: &str, record: &log::Record<'_>) -> String {
    let level = level_name(record.level());
    let msg = record.args().to_string();
    let mut fields = Fields(Vec::new());
    // Our visitor never fails.
    let _ = record.key_values().visit(&mut fields);
    let mut out = String::with_capacity(96 + msg.len());
    match format {
        LogFormat::Logfmt => {
            let _ = write!(
                out,
                "time={time} level={level} target={} msg={}",
                logfmt::value(record.target()),
                logfmt::value(&msg)
            );
            for (key, value) in &fields.0 {
                let _ = write!(out, " {}={}", logfmt::key(key), logfmt::value(&value.to_string()));
            }
        }
        LogFormat::Json => {
            let _ = write!(out, "{{\"time\":{},\"level\":{}", json(time), json(level));
            let _ = write!(out, ",\"target\":{},\"msg\":{}", json(record.target()), json(&msg));
            for (key, value) in &fields.0 {
                let key = if RESERVED.contains(&key.as_str()) { format!("field_{key}") } else { key.clone() };
                let _ = write!(out, ",{}:{}", json(&key), value.json());
            }
            out.push('}');
        }
    }
    out
}

/// Keys every line has; a record's own key of the same name is renamed, not dropped.
const RESERVED: [&str; 4] = ["time", "level", "target", "msg"];

fn level_name(level: log::Level) -> &'static str {
    match level {
        log::Level::Error => "error",
        log::Level::Warn => "warn",
        log::Level::Info => "info",
        log::Level::Debug => "debug",
        log::Level::Trace => "trace",
    }
}

/// A record's key-values, numbers and booleans kept as such for JSON.
struct Fields(Vec<(String, Field)>);

enum Field {
    Number(serde_json::Number),
    Bool(bool),
    Text(String),
}

impl Field {
    fn json(&self) -> String {
        match self {
            Field::Number(n) => n.to_string(),
            Field::Bool(b) => b.to_string(),
            Field::Text(s) => json(s),
        }
    }
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Field::Number(n) => write!(f, "{n}"),
            Field::Bool(b) => write!(f, "{b}"),
            Field::Text(s) => f.write_str(s),
        }
    }
}

impl<'kvs> VisitSource<'kvs> for Fields {
    fn visit_pair(&mut self, key: kv::Key<'kvs>, value: kv::Value<'kvs>) -> Result<(), kv::Error> {
        let field = if let Some(b) = value.to_bool() {
            Field::Bool(b)
        } else if let Some(n) = value.to_u64() {
            Field::Number(n.into())
        } else if let Some(n) = value.to_i64() {
            Field::Number(n.into())
        } else if let Some(n) = value.to_f64().and_then(serde_json::Number::from_f64) {
            Field::Number(n)
        } else {
            Field::Text(value.to_string())
        };
        self.0.push((key.as_str().to_owned(), field));
        Ok(())
    }
}

/// A JSON string literal (serde_json escapes control characters and quotes).
fn json(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

#[cfg(test)]
mod tests;
