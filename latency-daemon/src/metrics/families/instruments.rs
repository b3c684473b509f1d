//! The instruments the daemon keeps about itself (`Instruments`) in; registered in a registry
//! as families out: the drain and encode durations, the HTTP server's requests, the alert
//! sinks' deliveries, the OTLP exporter's pushes and the captures.
use std::{fmt, sync::Arc};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, NoLabelSet},
    metrics::MetricType,
    registry::Registry,
};

use super::{counter, gauge};
use crate::metrics::instruments::{
    Instruments,
    capture::CaptureStats,
    http::HttpStats,
    notify::NotifyStats,
    push::{FAILURES, PushStats},
};

/// Adds every instrument to `registry`.
pub fn register(registry: &mut Registry, instruments: &Instruments) {
    registry.register(
        "runqlat_drain_duration_seconds",
        "Time to read the kernel maps and publish the result, per drain",
        instruments.drain.clone(),
    );
    registry.register(
        "runqlat_scrape_encode_duration_seconds",
        "Time to encode /metrics (all formats), per scrape; the current scrape shows in the next",
        instruments.encode.clone(),
    );
    registry.register_collector(Box::new(HttpCollector(instruments.http.clone())));
    registry.register_collector(Box::new(NotifyCollector(instruments.notify.clone())));
    registry.register_collector(Box::new(PushCollector(instruments.push.clone())));
    registry.register_collector(Box::new(CaptureCollector(instruments.capture.clone())));
}

/// The capture trigger's counters as metrics, once the recorder runs.
#[derive(Debug)]
struct CaptureCollector(Arc<CaptureStats>);

impl Collector for CaptureCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(s) = self.0.snapshot() else { return Ok(()) };
        let mut family = encoder.encode_descriptor(
            "runqlat_captures",
            "Captures of the CPUs' last scheduler events when an alert fired or one was asked for, by result: \
             written (to the capture directory), suppressed (within capture_interval of the last one or \
             capture_cpu_interval of the last on that CPU, or the writer still busy), failed (not read or not \
             written: the log says why).",
            None,
            MetricType::Counter,
        )?;
        for (result, n) in [("written", s.written), ("suppressed", s.suppressed), ("failed", s.failed)] {
            family.encode_family(&[("result", result)])?.encode_counter::<NoLabelSet, _, f64>(&n, None)?;
        }
        counter(
            &mut encoder,
            "runqlat_captures_removed",
            "Older captures removed from the capture directory to keep it within capture_max_files and \
             capture_max_mib.",
            s.removed,
        )?;
        counter(
            &mut encoder,
            "runqlat_capture_torn_records",
            "Scheduler events left out of a capture because they were being rewritten as they were read \
             (dropped, never guessed).",
            s.torn,
        )?;
        counter(
            &mut encoder,
            "runqlat_capture_overwritten_records",
            "Scheduler events missing from inside a capture: the ring wrapped between two readings of a long \
             wait (a larger capture_events keeps more).",
            s.overwritten,
        )?;
        counter(
            &mut encoder,
            "runqlat_capture_given_up_records",
            "Scheduler events the capture recorder gave up: no free slot in its CPU's ring after eight tries, \
             every one taken by the records of interrupts that came in between (as of the last reading of the \
             rings; expected 0).",
            s.given_up,
        )?;
        Ok(())
    }
}

/// The HTTP server's own counters as metrics.
#[derive(Debug)]
struct HttpCollector(Arc<HttpStats>);

impl Collector for HttpCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let s = self.0.snapshot();
        let mut family = encoder.encode_descriptor(
            "runqlat_http_requests",
            "HTTP requests by outcome, including those turned away (unauthorized, busy, throttled, too large, timeout, malformed, evicted).",
            None,
            MetricType::Counter,
        )?;
        for (outcome, n) in [
            ("ok", s.ok),
            ("not_found", s.not_found),
            ("handler_error", s.handler_error),
            ("unauthorized", s.unauthorized),
            ("panicked", s.panicked),
            ("bad_method", s.bad_method),
            ("too_large", s.rejected_too_large),
            ("malformed", s.rejected_malformed),
            ("timeout", s.rejected_timeout),
            ("busy", s.rejected_busy),
            ("throttled", s.rejected_throttled),
            ("evicted", s.evicted),
            ("accept_error", s.accept_errors),
        ] {
            family.encode_family(&[("outcome", outcome)])?.encode_counter::<NoLabelSet, _, f64>(&n, None)?;
        }
        gauge(&mut encoder, "runqlat_http_connections", "HTTP connections being served now.", s.connections)
    }
}

/// The alert sinks' delivery counters as metrics.
#[derive(Debug)]
struct NotifyCollector(Arc<NotifyStats>);

impl Collector for NotifyCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let rows = self.0.snapshot();
        for (name, help, pick) in [
            ("runqlat_alert_notifications_sent", "Alert notifications delivered, by sink.", 0usize),
            (
                "runqlat_alert_notifications_failed",
                "Alert notifications that failed (refused, timed out, or non-2xx after retries), by sink.",
                1,
            ),
            ("runqlat_alert_notifications_dropped", "Alert notifications dropped because a sink's queue was full.", 2),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (sink, sent, failed, dropped) in &rows {
                let n = [*sent, *failed, *dropped][pick];
                family.encode_family(&[("sink", *sink)])?.encode_counter::<NoLabelSet, _, f64>(&n, None)?;
            }
        }
        Ok(())
    }
}

/// The OTLP exporter's counters as metrics, once it runs.
#[derive(Debug)]
struct PushCollector(Arc<PushStats>);

impl Collector for PushCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(s) = self.0.snapshot() else { return Ok(()) };
        let mut family = encoder.encode_descriptor(
            "runqlat_otlp_exports",
            "OTLP batches by result: sent (the receiver took them), rejected (refused with a status retrying \
             cannot change), dropped (unsent: the queue was full while the receiver was unreachable).",
            None,
            MetricType::Counter,
        )?;
        for (result, n) in [("sent", s.sent), ("rejected", s.rejected), ("dropped", s.dropped)] {
            family.encode_family(&[("result", result)])?.encode_counter::<NoLabelSet, _, f64>(&n, None)?;
        }
        let mut family = encoder.encode_descriptor(
            "runqlat_otlp_failed_attempts",
            "OTLP send attempts that failed and were retried with backoff, by why: connect, tls, timeout, \
             status (429, 502, 503, 504), io.",
            None,
            MetricType::Counter,
        )?;
        for (why, n) in FAILURES.iter().zip(s.failed) {
            family.encode_family(&[("why", *why)])?.encode_counter::<NoLabelSet, _, f64>(&n, None)?;
        }
        gauge(&mut encoder, "runqlat_otlp_queued_batches", "OTLP batches waiting to be sent.", s.queued)?;
        counter(
            &mut encoder,
            "runqlat_otlp_sent_bytes",
            "Bytes of OTLP request bodies the receiver took, as sent (compressed).",
            s.bytes,
        )?;
        gauge(
            &mut encoder,
            "runqlat_otlp_last_sent_timestamp_seconds",
            "When the receiver last took a batch (Unix time; 0: never).",
            s.last_sent_unix_ms as f64 / 1e3,
        )
    }
}
