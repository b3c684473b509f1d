//! Plain data and pure functions: snapshots of the kernel maps, windows, reports, attributions,
//! cgroup series, the exposition a scrape reads and the timeline the live view draws. No I/O, no
//! aya, no prometheus-client, so every stage is tested without root; the one clock read is the
//! daemon's wall clock (`wall::now_unix_ns`), kept here so that every layer reads the same one.
pub mod attribution;
pub mod capture;
pub mod causes;
pub mod cgroup_series;
pub mod container;
pub mod distribution;
pub mod exposition;
pub mod logfmt;
pub mod perfetto;
pub mod report;
pub mod sink_url;
pub mod snapshot;
pub mod timeline;
pub mod units;
pub mod waits;
pub mod wall;
pub mod window;

use latency_common::{Reason, knobs::Clock};
use serde::Serializer;

/// The clock's name in reports and labels: `monotonic` or `run_queue`.
pub fn clock_name(clock: Clock) -> &'static str {
    match clock {
        Clock::Monotonic => "monotonic",
        Clock::RunQueue => "run_queue",
    }
}

/// A reason as JSON writes it: `"wakeup"` or `"preempt"`.
pub fn ser_reason<S: Serializer>(reason: &Reason, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(reason.name())
}

/// An optional reason: its name, or `null`.
pub fn ser_opt_reason<S: Serializer>(reason: &Option<Reason>, s: S) -> Result<S::Ok, S::Error> {
    match reason {
        Some(r) => s.serialize_str(r.name()),
        None => s.serialize_none(),
    }
}

/// A kernel `comm`: up to 16 bytes, NUL-padded, any bytes a thread chose (prctl). Invalid UTF-8
/// becomes U+FFFD; escaping for a given output is the renderer's job.
pub fn comm_string(comm: &[u8; 16]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}
