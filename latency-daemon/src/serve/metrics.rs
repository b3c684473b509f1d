//! The latest published `Exposition` and the daemon's own instruments in; Prometheus text,
//! OpenMetrics or protobuf (native histograms) out. Every `runqlat_*` family is named and
//! described here, and only here. A scrape reads what the last drain published; nothing here
//! touches the kernel.
use std::{
    fmt,
    sync::{Arc, Mutex, PoisonError},
};

use latency_common::{
    Discard, Lost, Reason,
    buckets::{ZERO_BUCKET, ZERO_NATIVE_INDEX},
    knobs::Clock,
    maps::Cause,
};
use prometheus_client::{
    collector::Collector,
    encoding::{
        DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, NativeHistogram, NativeHistogramBuckets, NoLabelSet,
    },
    metrics::MetricType,
    registry::Registry,
};

use super::{
    Instruments, ProcessSampler,
    http::HttpStats,
    push::{FAILURES, PushStats},
};
use crate::{
    alert::notify::NotifyStats,
    model::{
        clock_name,
        distribution::native_bound,
        exposition::{
            CGROUP_UNRESOLVED, Exposition, ProcessSample, cgroup_classic_buckets, classic_buckets, native_buckets,
        },
        snapshot::Snapshot,
        waits::WaitsNow,
        window::{QUANTILES, Window},
    },
};

/// Every metric the daemon serves: the latest exposition and process figures at scrape time,
/// the instruments, the HTTP server's and the alert sinks' counters.
pub fn registry(pinned: Pinned, instruments: &Instruments, process: ProcessSampler) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ExpositionCollector { pinned, process }));
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
    registry
}

/// The exposition an encode is of: `encode::Metrics` sets it before each encode, so that one
/// encode (and the exemplars added after it) shows one drain, whatever the drain loop publishes
/// meanwhile.
pub type Pinned = Arc<Mutex<Arc<Exposition>>>;

/// Adds the pinned exposition, and this process's own cost, to every encode.
struct ExpositionCollector {
    pinned: Pinned,
    process: ProcessSampler,
}

impl fmt::Debug for ExpositionCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpositionCollector").finish_non_exhaustive()
    }
}

impl Collector for ExpositionCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        // Clone the Arc and let go of the lock at once.
        let e = self.pinned.lock().unwrap_or_else(PoisonError::into_inner).clone();
        encode_all(&e, &mut encoder)?;
        process_metrics((self.process)(), &mut encoder)
    }
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn encode_all(e: &Exposition, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let mut info = enc.encode_descriptor(
        "runqlat_build_info",
        "Constant 1, labelled with the monitor's version, the git commit it was built from, its kernel object's id, \
         the kernel it runs on and the clock it reads.",
        None,
        MetricType::Gauge,
    )?;
    info.encode_family(&[
        ("version", e.version),
        ("revision", e.revision),
        ("bpf", e.bpf),
        ("kernel", e.kernel.as_str()),
        ("clock", clock_name(e.clock)),
    ])?
    .encode_gauge(&1i64)?;
    let mut features = enc.encode_descriptor(
        "runqlat_feature_info",
        "Constant 1 per optional kernel path: on, off (not asked for) or unavailable (asked for; this kernel's BTF \
         or verifier did not give it, and the monitor runs without it).",
        None,
        MetricType::Gauge,
    )?;
    for (feature, state) in &e.features {
        features.encode_family(&[("feature", *feature), ("state", *state)])?.encode_gauge(&1i64)?;
    }

    if let Some(s) = &e.snapshot {
        delay_histograms(e, s, enc)?;
        cpu_counters(e, s, enc)?;
        wait_causes(s, enc)?;
        loss_counters(e, s, enc)?;
    }
    if let Some(w) = &e.window {
        window_gauges(e, w, enc)?;
    }
    if e.snapshot.is_some() {
        cgroup_histograms(e, enc)?;
    }
    if let Some(w) = &e.waits {
        wait_metrics(e, w, enc)?;
    }
    alert_metrics(e, enc)?;
    self_metrics(e, enc)
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

/// What each `cause` means, in the help of both families that carry it.
const CAUSES: &str = "cause=\"throttled\" its cgroup (or an ancestor) was throttled by a CPU limit \
     (CFS bandwidth) on that CPU; \"irq_steal\" the CPU was in IRQ or taken by the hypervisor (steal), \
     as far as the kernel accounts them (runqlat_feature_info); the rest by who held the CPU when the \
     wait ended: \"same\" a task of its own cgroup, \"other\" another cgroup's task, \"kernel\" a \
     kernel thread, \"idle\" nobody (the wakeup itself).";

fn wait_causes(s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let mut family = enc.encode_descriptor(
        "runqlat_wait_cause_seconds",
        &format!(
            "Time tasks waited for a CPU, all CPUs, by cause: {CAUSES} The six add up to \
                  runqlat_delay_seconds_sum (both reasons)."
        ),
        None,
        MetricType::Counter,
    )?;
    for cause in Cause::ALL {
        let ns: u64 = s.cpus.iter().map(|c| c.waited_ns[cause as usize]).sum();
        family.encode_family(&[("cause", cause.name())])?.encode_counter::<NoLabelSet, _, f64>(&seconds(ns), None)?;
    }
    let unsplit: u64 = s.cpus.iter().map(|c| c.unsplit).sum();
    counter(
        enc,
        "runqlat_wait_unsplit",
        "Waits not split by cause because the task moved to another CPU while it waited (the clocks \
         of its first CPU are not its last's): the whole wait is charged to who held the CPU.",
        unsplit,
    )?;
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
    if let Some(irq) = &s.irq_ns {
        let mut family = enc.encode_descriptor(
            "runqlat_cpu_irq_seconds",
            "Time each CPU spent in device IRQ handlers and softirqs, timed by the irq tracepoints \
             (--irq-tracepoints; the architecture's own vectors, such as the local timer and IPIs, are not \
             seen). A handler or softirq in progress counts from the next drain.",
            None,
            MetricType::Counter,
        )?;
        for (cpu, ns) in irq.iter().enumerate() {
            let cpu = cpu.to_string();
            family
                .encode_family(&[("cpu", cpu.as_str())])?
                .encode_counter::<NoLabelSet, _, f64>(&seconds(*ns), None)?;
        }
    }
    Ok(())
}

fn loss_counters(e: &Exposition, s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let mut family = enc.encode_descriptor(
        "runqlat_lost",
        "Things the monitor could not keep, by map: stamps (tid beyond the stamp array), tasks and \
         cgroups (map full), window_max (a maximum written after its window was read), \
         cgroup_removed (removals the kernel's ring had no room for; found later by a walk).",
        None,
        MetricType::Counter,
    )?;
    let kernel = |what: Lost| -> u64 { s.cpus.iter().map(|c| c.lost[what as usize]).sum() };
    for what in [Lost::Stamps, Lost::Tasks, Lost::Cgroups] {
        family.encode_family(&[("map", what.map())])?.encode_counter::<NoLabelSet, _, f64>(&kernel(what), None)?;
    }
    family
        .encode_family(&[("map", "window_max")])?
        .encode_counter::<NoLabelSet, _, f64>(&e.late_window_writes, None)?;
    family
        .encode_family(&[("map", Lost::Removals.map())])?
        .encode_counter::<NoLabelSet, _, f64>(&kernel(Lost::Removals), None)?;
    let untraced = kernel(Lost::Switches);
    counter(
        enc,
        "runqlat_untraced_switches",
        "Context switches the kernel raised no sched_switch tracepoint for (a break in a CPU's chain of \
         prev/next): no tracer sees them, and the delays around them are missing from every histogram.",
        untraced,
    )?;
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
         the last window, the rest summed in cgroup=\"other\"; updated when a window closes. Containers \
         also carry namespace, pod, container and container_id from the runtime's config on the node.",
        None,
        MetricType::Histogram,
    )?;
    for (label, h) in &e.cgroups {
        let count: u64 = h.buckets.iter().sum();
        let classic = cgroup_classic_buckets(h, &e.cgroup_classic);
        family
            .encode_family(&with_container(e, &[("cgroup", label.as_str())], label))?
            .encode_histogram::<NoLabelSet>(seconds(h.sum_ns), count, &classic, None)?;
    }
    let mut family = enc.encode_descriptor(
        "runqlat_cgroup_wait_cause_seconds",
        &format!(
            "Time the tasks of a cgroup waited, by cause: {CAUSES} The six add up to \
                  runqlat_cgroup_delay_seconds_sum; same series as that."
        ),
        None,
        MetricType::Counter,
    )?;
    for (label, h) in &e.cgroups {
        for cause in Cause::ALL {
            family
                .encode_family(&with_container(e, &[("cgroup", label.as_str()), ("cause", cause.name())], label))?
                .encode_counter::<NoLabelSet, _, f64>(&seconds(h.waited_ns[cause as usize]), None)?;
        }
    }
    let mut family = enc.encode_descriptor(
        "runqlat_cgroup_held_others_seconds",
        "Time tasks of this cgroup ran while a task of another cgroup waited for their CPU: at each \
         switch that ends such a wait (cause=\"other\" for the waiter), the part of it the holder ran \
         just before. Who held others back; same series as runqlat_cgroup_delay_seconds.",
        None,
        MetricType::Counter,
    )?;
    for (label, h) in &e.cgroups {
        family
            .encode_family(&with_container(e, &[("cgroup", label.as_str())], label))?
            .encode_counter::<NoLabelSet, _, f64>(&seconds(h.held_others_ns), None)?;
    }
    Ok(())
}

fn wait_metrics(e: &Exposition, w: &WaitsNow, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let mut family = enc.encode_descriptor(
        "runqlat_wait_in_progress_seconds",
        "Longest run-queue wait still in progress at the last drain: a task runnable since its wakeup or \
         preemption that had not got a CPU yet (0 if none), exact from its stamp; a stall shows here \
         while it lasts, its delay reaches runqlat_delay_seconds once the task runs.",
        None,
        MetricType::Gauge,
    )?;
    for reason in Reason::ALL {
        family.encode_family(&[("reason", reason.name())])?.encode_gauge(&seconds(w.oldest_ns[reason as usize]))?;
    }
    let mut family = enc.encode_descriptor(
        "runqlat_waiting_tasks",
        "Tasks waiting in a run queue at the last drain for longer than over_seconds: \"0\" counts every \
         waiting task, the others are the alert thresholds in force.",
        None,
        MetricType::Gauge,
    )?;
    for (threshold, n) in &w.over {
        let over = seconds(*threshold).to_string();
        family.encode_family(&[("over_seconds", over.as_str())])?.encode_gauge(&(*n as i64))?;
    }
    if !w.cgroups.is_empty() {
        let mut family = enc.encode_descriptor(
            "runqlat_cgroup_wait_in_progress_seconds",
            "Longest run-queue wait still in progress at the last drain of a task of this cgroup (0 if \
             none); same series as runqlat_cgroup_delay_seconds (the rest in cgroup=\"other\").",
            None,
            MetricType::Gauge,
        )?;
        for (label, ns) in &w.cgroups {
            family
                .encode_family(&with_container(e, &[("cgroup", label.as_str())], label))?
                .encode_gauge(&seconds(*ns))?;
        }
    }
    counter(enc, "runqlat_wait_scans", "Wait scans run (one per drain) since start.", w.scans)?;
    counter(enc, "runqlat_wait_scan_errors", "Wait scans that failed (the gauges then read 0).", w.scan_errors)?;
    counter(
        enc,
        "runqlat_wait_scan_seconds",
        "Wall time spent in wait scans (the kernel's task iterator and reading its records).",
        w.scan_seconds,
    )
}

/// `labels` + namespace, pod, container and container_id of `cgroup` where it is a container. Empty
/// values are left out (Prometheus reads a missing label as empty), so `sum by (namespace, pod)`
/// works on every series and a host without containers pays nothing.
fn with_container<'a>(e: &'a Exposition, labels: &[(&'a str, &'a str)], cgroup: &str) -> Vec<(&'a str, &'a str)> {
    let mut out = labels.to_vec();
    if let Some(c) = e.containers.get(cgroup) {
        let named = [
            ("namespace", &c.namespace),
            ("pod", &c.pod),
            ("container", &c.container),
            ("container_id", &c.container_id),
        ];
        out.extend(named.into_iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| (k, v.as_str())));
    }
    out
}

fn alert_metrics(e: &Exposition, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let mut family = enc.encode_descriptor(
        "runqlat_alert_active",
        "1 for each alert the daemon is firing now, by reason and cgroup of the task that waited.",
        None,
        MetricType::Gauge,
    )?;
    for (reason, cgroup) in &e.alerts_active {
        family
            .encode_family(&with_container(e, &[("reason", reason.name()), ("cgroup", cgroup.as_str())], cgroup))?
            .encode_gauge(&1i64)?;
    }
    let mut family = enc.encode_descriptor(
        "runqlat_alerts",
        "Alerts fired by the daemon's own rules since start, by reason.",
        None,
        MetricType::Counter,
    )?;
    for reason in Reason::ALL {
        let n = e.alerts_total[reason as usize];
        family.encode_family(&[("reason", reason.name())])?.encode_counter::<NoLabelSet, _, f64>(&n, None)?;
    }
    counter(
        enc,
        "runqlat_alerts_suppressed",
        "Threshold breaches that did not fire because the alert was in its cooldown.",
        e.alerts_suppressed,
    )
}

fn self_metrics(e: &Exposition, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    counter(enc, "runqlat_drains", "Drains of the kernel maps since start.", e.drains)?;
    counter(enc, "runqlat_drain_errors", "Drains that failed (the previous values stay published).", e.drain_errors)?;
    counter(
        enc,
        "runqlat_drain_cpu_seconds",
        "CPU time spent draining (unlike runqlat_drain_duration_seconds, without waiting for a CPU).",
        e.drain_cpu_seconds,
    )?;
    counter(
        enc,
        "runqlat_cgroups_pruned",
        "Removed cgroups whose kernel entries were retired: final counts kept, slots free for reuse.",
        e.cgroups_pruned,
    )?;
    let mut family = enc.encode_descriptor(
        "runqlat_cgroup_unresolved",
        "Cgroup ids of a window whose delays went to cgroup=\"other\" because they had no name, by reason: \
         not_found (no such directory in a complete walk: created and removed between walks), walk_truncated \
         (the walk stopped at its bound), walk_failed (the cgroup2 mount was unreadable).",
        None,
        MetricType::Counter,
    )?;
    for (reason, n) in CGROUP_UNRESOLVED.iter().zip(&e.cgroups_unresolved) {
        family.encode_family(&[("reason", *reason)])?.encode_counter::<NoLabelSet, _, f64>(n, None)?;
    }
    counter(
        enc,
        "runqlat_container_unresolved",
        "Container cgroups whose runtime config was not found on this node (namespace, pod and container \
         left empty), counted per lookup; a lookup is retried at most every 2 s.",
        e.containers_unresolved,
    )?;
    gauge(
        enc,
        "runqlat_container_names",
        "Containers whose names the daemon holds; a container's go when its cgroup is removed.",
        e.container_names_cached as i64,
    )?;
    counter(
        enc,
        "runqlat_culprit_cgroup_unknown",
        "Tasks that ran while an attributed victim waited whose process was gone before the daemon read \
         its cgroup (their cgroup and pod show as \"unknown\" in alerts).",
        e.culprit_cgroups_unknown,
    )?;
    gauge(
        enc,
        "runqlat_last_drain_timestamp_seconds",
        "Unix time of the last successful drain; alert when it stops moving.",
        e.last_drain_unix,
    )
}

/// The standard `process_*` metrics, when the process could be read.
fn process_metrics(p: Option<ProcessSample>, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let Some(p) = p else { return Ok(()) };
    counter(enc, "process_cpu_seconds", "User and system CPU time of the monitor's own process.", p.cpu_seconds)?;
    let rss = p.resident_bytes as f64;
    gauge(enc, "process_resident_memory_bytes", "Resident memory of the monitor's process.", rss)?;
    match p.start_time_unix {
        Some(start) => {
            gauge(enc, "process_start_time_seconds", "Start time of the monitor's process since the Unix epoch.", start)
        }
        None => Ok(()),
    }
}

/// A family of one unlabelled counter.
fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: impl EncodeCounterValue) -> Result<(), fmt::Error> {
    enc.encode_descriptor(name, help, None, MetricType::Counter)?.encode_counter::<NoLabelSet, _, f64>(&v, None)
}

/// A family of one unlabelled gauge.
fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: impl EncodeGaugeValue) -> Result<(), fmt::Error> {
    enc.encode_descriptor(name, help, None, MetricType::Gauge)?.encode_gauge(&v)
}

/// The HTTP server's own counters as metrics.
#[derive(Debug)]
struct HttpCollector(Arc<HttpStats>);

impl Collector for HttpCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let s = self.0.snapshot();
        let mut family = encoder.encode_descriptor(
            "runqlat_http_requests",
            "HTTP requests by outcome, including those turned away (busy, throttled, too large, timeout, malformed, evicted).",
            None,
            MetricType::Counter,
        )?;
        for (outcome, n) in [
            ("ok", s.ok),
            ("not_found", s.not_found),
            ("handler_error", s.handler_error),
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
