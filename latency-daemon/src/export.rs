//! The latest published `Exposition` (plain data from the drain loop) → Prometheus metric
//! families, through prometheus-client's `Collector`. Encoding never touches the kernel maps:
//! a scrape reads what the last drain published.
use std::{fmt, sync::Arc};

use latency_common::{
    Discard, Lost, Reason,
    buckets::{BUCKETS, OVERFLOW_BUCKET, ZERO_BUCKET, ZERO_NATIVE_INDEX, native_index},
    knobs::Clock,
    maps::{CGROUP_BUCKETS, CgroupHist},
};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, NativeHistogram, NativeHistogramBuckets, NoLabelSet},
    metrics::MetricType,
};
use tokio::sync::watch;

use crate::{
    drain::Snapshot,
    procstat::{self, ProcStat},
    window::{QUANTILES, Window},
};

/// Everything a scrape shows, as published by the drain loop after each drain.
#[derive(Clone, Debug, Default)]
pub struct Exposition {
    pub version: &'static str,
    pub kernel: String,
    pub clock: Clock,
    pub window_seconds: f64,
    /// Classic `le` bounds of `runqlat_delay_seconds`, as native indices (bound = 2^(i/8) s).
    pub classic: Vec<i32>,
    /// Classic bounds of `runqlat_cgroup_delay_seconds`, as coarse buckets m (2^(−20+2m) s).
    pub cgroup_classic: Vec<u8>,
    /// The latest drain: cumulative since the program was loaded.
    pub snapshot: Option<Snapshot>,
    /// The last closed window.
    pub window: Option<Arc<Window>>,
    /// Cumulative per-cgroup series (top N and "other").
    pub cgroups: Vec<(String, CgroupHist)>,
    /// Window maxima the kernel wrote after we had read their slot (see daemon.rs).
    pub late_window_writes: u64,
    /// Cgroup entries deleted from the kernel map because the cgroup was removed.
    pub cgroups_pruned: u64,
    /// Alerts firing now: (reason, cgroup).
    pub alerts_active: Vec<(&'static str, String)>,
    /// Alerts fired since start, per reason [wakeup, preempt].
    pub alerts_total: [u64; 2],
    /// Breaches that fell in a cooldown and did not fire.
    pub alerts_suppressed: u64,
    pub drains: u64,
    pub drain_errors: u64,
    /// CPU time the drain thread spent draining (excludes waiting for a CPU).
    pub drain_cpu_seconds: f64,
    pub last_drain_unix: f64,
}

/// Adds the latest exposition to every scrape.
#[derive(Debug)]
pub struct ExpositionCollector {
    latest: watch::Receiver<Arc<Exposition>>,
}

impl ExpositionCollector {
    pub fn new(latest: watch::Receiver<Arc<Exposition>>) -> Self {
        ExpositionCollector { latest }
    }
}

impl Collector for ExpositionCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        // Clone the Arc and let go of the lock at once: encoding must not hold up the drain loop.
        let e = self.latest.borrow().clone();
        encode_all(&e, &mut encoder)
    }
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// 2^(i/8): exact for powers of two, as Prometheus computes native bucket bounds.
fn native_bound(i: i32) -> f64 {
    2f64.powf(f64::from(i) / 8.0)
}

fn encode_all(e: &Exposition, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let mut info = enc.encode_descriptor(
        "runqlat_build_info",
        "Constant 1, labelled with the monitor's version, the kernel it runs on and the clock it reads.",
        None,
        MetricType::Gauge,
    )?;
    let clock = match e.clock {
        Clock::Monotonic => "monotonic",
        Clock::RunQueue => "run_queue",
    };
    info.encode_family(&[("version", e.version), ("kernel", e.kernel.as_str()), ("clock", clock)])?
        .encode_gauge(&1i64)?;

    if let Some(s) = &e.snapshot {
        delay_histograms(e, s, enc)?;
        cpu_counters(e, s, enc)?;
        loss_counters(e, s, enc)?;
    }
    if let Some(w) = &e.window {
        window_gauges(e, w, enc)?;
    }
    if e.snapshot.is_some() {
        cgroup_histograms(e, enc)?;
    }
    alert_metrics(e, enc)?;
    self_metrics(e, enc)
}

/// Classic buckets (non-cumulative counts per `le` in `bounds`, native indices) from kernel
/// buckets. Every bound is a kernel boundary, so each kernel bucket falls in exactly one.
pub fn classic_buckets(raw: &[u64; BUCKETS], bounds: &[i32]) -> Vec<(f64, u64)> {
    let mut out: Vec<(f64, u64)> = bounds.iter().map(|&i| (native_bound(i), 0)).collect();
    for (k, &c) in raw.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let index = match k {
            ZERO_BUCKET => Some(ZERO_NATIVE_INDEX),
            OVERFLOW_BUCKET => None,
            _ => native_index(k),
        };
        // The first bound at or above the bucket's upper bound; none: only in +Inf.
        if let Some(i) = index
            && let Some(slot) = bounds.iter().position(|&b| b >= i)
        {
            out[slot].1 += c;
        }
    }
    out
}

/// The kernel buckets as native-histogram spans and delta-encoded counts (schema 3, zero
/// bucket ≤ 2^-20 s): a lossless copy. The overflow bucket (above 2^(94/8) s ≈ 57 min) has no
/// native bucket; the daemon's ceiling keeps it empty (see config).
pub fn native_buckets(raw: &[u64; BUCKETS]) -> (Vec<(i32, u32)>, Vec<i64>) {
    let mut spans: Vec<(i32, u32)> = Vec::new();
    let mut deltas: Vec<i64> = Vec::new();
    let mut previous_count = 0i64;
    let mut previous_index: Option<i32> = None;
    for (k, &c) in raw.iter().enumerate().take(OVERFLOW_BUCKET).skip(1) {
        if c == 0 {
            continue;
        }
        let Some(i) = native_index(k) else { continue };
        match previous_index {
            // Adjacent: extend the current span.
            Some(p) if i == p + 1 => {
                if let Some(last) = spans.last_mut() {
                    last.1 += 1;
                }
            }
            // A gap: a new span whose offset is the gap since the previous span's end.
            Some(p) => spans.push((i - p - 1, 1)),
            // The first span's offset is the absolute index.
            None => spans.push((i, 1)),
        }
        deltas.push(c as i64 - previous_count);
        previous_count = c as i64;
        previous_index = Some(i);
    }
    (spans, deltas)
}

fn delay_histograms(e: &Exposition, s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let mut family = enc.encode_descriptor(
        "runqlat_delay_seconds",
        "Run-queue delay (wakeup or preemption to running), cumulative since the monitor started, \
         exactly from the kernel's buckets (native schema 3 when scraped as protobuf).",
        None,
        MetricType::Histogram,
    )?;
    for reason in Reason::ALL {
        let h = &s.histograms[reason as usize];
        let count: u64 = h.buckets.iter().sum();
        let classic = classic_buckets(&h.buckets, &e.classic);
        let (spans, deltas) = native_buckets(&h.buckets);
        let native = NativeHistogram {
            schema: i32::from(latency_common::buckets::SCHEMA),
            zero_threshold: native_bound(ZERO_NATIVE_INDEX),
            zero_count: h.buckets[ZERO_BUCKET],
            negative: NativeHistogramBuckets { spans: &[], deltas: &[] },
            positive: NativeHistogramBuckets { spans: &spans, deltas: &deltas },
            created: None,
        };
        family.encode_family(&[("reason", reason.name())])?.encode_histogram_with_native::<NoLabelSet>(
            seconds(h.sum_ns),
            count,
            &classic,
            None,
            native,
        )?;
    }
    Ok(())
}

fn window_gauges(e: &Exposition, w: &Window, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let help = format!(
        "Largest run-queue delay that ended in the last completed {}s window, exact from the kernel \
         (0 if none); replaced when a window closes, never reset by scrapes.",
        e.window_seconds
    );
    let mut family = enc.encode_descriptor("runqlat_delay_window_max_seconds", &help, None, MetricType::Gauge)?;
    for reason in Reason::ALL {
        family.encode_family(&[("reason", reason.name())])?.encode_gauge(&seconds(w.max_ns[reason as usize]))?;
    }
    // A gauge per quantile, labelled `q`: prometheus-client 0.26 has no summary type, and
    // promtool rejects a `quantile` label on anything else.
    let help = format!(
        "Quantile q of run-queue delay in the last completed {}s window, estimated from the kernel's \
         buckets (within 9 %, never above the window max); absent without delays.",
        e.window_seconds
    );
    let mut family = enc.encode_descriptor("runqlat_delay_window_seconds", &help, None, MetricType::Gauge)?;
    for reason in Reason::ALL {
        for (q, v) in QUANTILES.iter().zip(w.quantiles[reason as usize].ns) {
            if let Some(ns) = v {
                let q = q.to_string();
                family.encode_family(&[("reason", reason.name()), ("q", q.as_str())])?.encode_gauge(&seconds(ns))?;
            }
        }
    }
    Ok(())
}

fn cpu_counters(e: &Exposition, s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let mut family = enc.encode_descriptor(
        "runqlat_context_switches",
        "Context switches per CPU by the kind of the task switched out: voluntary (it blocked) or \
         involuntary (it was preempted and stays runnable). Switches away from idle are not counted.",
        None,
        MetricType::Counter,
    )?;
    for (cpu, c) in s.cpus.iter().enumerate() {
        let cpu = cpu.to_string();
        for (kind, v) in [("voluntary", c.voluntary), ("involuntary", c.involuntary)] {
            family
                .encode_family(&[("cpu", cpu.as_str()), ("kind", kind)])?
                .encode_counter::<NoLabelSet, _, f64>(&v, None)?;
        }
    }
    let mut family = enc.encode_descriptor(
        "runqlat_cpu_idle_seconds",
        "Time each CPU ran its idle task since the monitor started.",
        None,
        MetricType::Counter,
    )?;
    for (cpu, c) in s.cpus.iter().enumerate() {
        // An idle period still open at the drain counts up to the drain; only on the monotonic
        // clock, which is the clock the drain was stamped with, so the counter never goes back.
        let open = if e.clock == Clock::Monotonic && c.idle_since_ns != 0 {
            s.taken_ns.saturating_sub(c.idle_since_ns)
        } else {
            0
        };
        let cpu = cpu.to_string();
        family
            .encode_family(&[("cpu", cpu.as_str())])?
            .encode_counter::<NoLabelSet, _, f64>(&seconds(c.idle_ns + open), None)?;
    }
    Ok(())
}

fn loss_counters(e: &Exposition, s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let mut family = enc.encode_descriptor(
        "runqlat_lost",
        "Things the monitor could not keep, by map: stamps (tid beyond the stamp array), tasks and \
         cgroups (map full), window_max (a maximum written after its window was read).",
        None,
        MetricType::Counter,
    )?;
    for what in Lost::ALL.into_iter().filter(|w| *w != Lost::Switches) {
        let n: u64 = s.cpus.iter().map(|c| c.lost[what as usize]).sum();
        family.encode_family(&[("map", what.map())])?.encode_counter::<NoLabelSet, _, f64>(&n, None)?;
    }
    family
        .encode_family(&[("map", "window_max")])?
        .encode_counter::<NoLabelSet, _, f64>(&e.late_window_writes, None)?;
    let untraced: u64 = s.cpus.iter().map(|c| c.lost[Lost::Switches as usize]).sum();
    enc.encode_descriptor(
        "runqlat_untraced_switches",
        "Context switches the kernel raised no sched_switch tracepoint for (a break in a CPU's chain of \
         prev/next): no tracer sees them, and the delays around them are missing from every histogram.",
        None,
        MetricType::Counter,
    )?
    .encode_counter::<NoLabelSet, _, f64>(&untraced, None)?;
    let mut family = enc.encode_descriptor(
        "runqlat_discarded",
        "Delays measured but not recorded because they were not believable: future_stamp (stamp \
         later than the clock), over_ceiling (above the configured ceiling).",
        None,
        MetricType::Counter,
    )?;
    for why in Discard::ALL {
        let n: u64 = s.cpus.iter().map(|c| c.discarded[why as usize]).sum();
        family.encode_family(&[("why", why.name())])?.encode_counter::<NoLabelSet, _, f64>(&n, None)?;
    }
    Ok(())
}

fn cgroup_histograms(e: &Exposition, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let mut family = enc.encode_descriptor(
        "runqlat_cgroup_delay_seconds",
        "Run-queue delay by cgroup v2 path of the task that waited: the top cgroups by delay time in \
         the last window, the rest summed in cgroup=\"other\"; updated when a window closes.",
        None,
        MetricType::Histogram,
    )?;
    for (label, h) in &e.cgroups {
        let count: u64 = h.buckets.iter().sum();
        let mut classic: Vec<(f64, u64)> =
            e.cgroup_classic.iter().map(|&m| (2f64.powi(-20 + 2 * i32::from(m)), 0)).collect();
        for (m, &c) in h.buckets.iter().enumerate().take(CGROUP_BUCKETS - 1) {
            if let Some(slot) = e.cgroup_classic.iter().position(|&b| usize::from(b) >= m) {
                classic[slot].1 += c;
            }
        }
        family.encode_family(&[("cgroup", label.as_str())])?.encode_histogram::<NoLabelSet>(
            seconds(h.sum_ns),
            count,
            &classic,
            None,
        )?;
    }
    Ok(())
}

fn alert_metrics(e: &Exposition, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let mut family = enc.encode_descriptor(
        "runqlat_alert_active",
        "1 for each alert the daemon is firing now, by reason and cgroup of the task that waited.",
        None,
        MetricType::Gauge,
    )?;
    for (reason, cgroup) in &e.alerts_active {
        family.encode_family(&[("reason", *reason), ("cgroup", cgroup.as_str())])?.encode_gauge(&1i64)?;
    }
    let mut family = enc.encode_descriptor(
        "runqlat_alerts",
        "Alerts fired by the daemon's own rules since start, by reason.",
        None,
        MetricType::Counter,
    )?;
    for (reason, n) in [("wakeup", e.alerts_total[0]), ("preempt", e.alerts_total[1])] {
        family.encode_family(&[("reason", reason)])?.encode_counter::<NoLabelSet, _, f64>(&n, None)?;
    }
    enc.encode_descriptor(
        "runqlat_alerts_suppressed",
        "Threshold breaches that did not fire because the alert was in its cooldown.",
        None,
        MetricType::Counter,
    )?
    .encode_counter::<NoLabelSet, _, f64>(&e.alerts_suppressed, None)
}

fn self_metrics(e: &Exposition, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let counter = |enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64| -> Result<(), fmt::Error> {
        enc.encode_descriptor(name, help, None, MetricType::Counter)?.encode_counter::<NoLabelSet, _, f64>(&v, None)
    };
    counter(enc, "runqlat_drains", "Drains of the kernel maps since start.", e.drains)?;
    counter(enc, "runqlat_drain_errors", "Drains that failed (the previous values stay published).", e.drain_errors)?;
    counter_f64(
        enc,
        "runqlat_drain_cpu_seconds",
        "CPU time spent draining (unlike runqlat_drain_duration_seconds, without waiting for a CPU).",
        e.drain_cpu_seconds,
    )?;
    counter(
        enc,
        "runqlat_cgroups_pruned",
        "Kernel per-cgroup entries deleted because the cgroup was removed.",
        e.cgroups_pruned,
    )?;
    enc.encode_descriptor(
        "runqlat_last_drain_timestamp_seconds",
        "Unix time of the last successful drain; alert when it stops moving.",
        None,
        MetricType::Gauge,
    )?
    .encode_gauge(&e.last_drain_unix)?;
    if let Some(p) = ProcStat::read() {
        counter_f64(
            enc,
            "process_cpu_seconds",
            "User and system CPU time of the monitor's own process.",
            p.cpu_seconds,
        )?;
        enc.encode_descriptor(
            "process_resident_memory_bytes",
            "Resident memory of the monitor's process.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&(p.resident_bytes as f64))?;
        if let Some(boot) = procstat::boot_time_unix() {
            enc.encode_descriptor(
                "process_start_time_seconds",
                "Start time of the monitor's process since the Unix epoch.",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&(boot + p.start_seconds_after_boot))?;
        }
    }
    Ok(())
}

fn counter_f64(enc: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> Result<(), fmt::Error> {
    enc.encode_descriptor(name, help, None, MetricType::Counter)?.encode_counter::<NoLabelSet, _, f64>(&v, None)
}
