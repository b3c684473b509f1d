//! The kernel's figures of the latest `Exposition` in (its `Snapshot` and closed `Window`); the
//! `runqlat_delay_seconds` histograms (classic and native), the window's maxima and quantiles, wait
//! causes, per-CPU counters (the host's steal among them) and losses out, as prometheus-client families.
use std::fmt;

use latency_common::{
    Discard, Lost, Reason,
    buckets::{ZERO_BUCKET, ZERO_NATIVE_INDEX},
    knobs::Clock,
    maps::Cause,
};
use prometheus_client::{
    encoding::{DescriptorEncoder, NativeHistogram, NativeHistogramBuckets, NoLabelSet},
    metrics::MetricType,
};

use super::{counter, seconds};
use crate::model::{
    distribution::native_bound,
    exposition::{Exposition, classic_buckets, native_buckets},
    snapshot::Snapshot,
    window::{QUANTILES, Window},
};

/// The delay histograms' family: exemplars go on its buckets (`metrics::exemplars`).
pub const DELAY: &str = "runqlat_delay_seconds";

pub(super) fn delay_histograms(e: &Exposition, s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let mut family = enc.encode_descriptor(
        DELAY,
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

pub(super) fn window_gauges(e: &Exposition, w: &Window, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
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
pub(super) const CAUSES: &str = "cause=\"throttled\" its cgroup (or an ancestor) was throttled by a CPU limit \
     (CFS bandwidth) on that CPU; \"irq_steal\" the CPU was in IRQ or taken by the hypervisor (steal), \
     as far as the kernel accounts them (runqlat_feature_info); the rest by who held the CPU when the \
     wait ended: \"same\" a task of its own cgroup, \"other\" another cgroup's task, \"kernel\" a \
     kernel thread, \"idle\" nobody (the wakeup itself). Where the kernel keeps no throttle clock the \
     daemon can read (runqlat_feature_info{feature=\"throttle_unknown\"} on), \"unknown\" in place of \
     \"throttled\": the whole of each wait a CPU-limit throttle overlapped, how much of it throttled \
     not known.";

pub(super) fn wait_causes(s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
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
        family
            .encode_family(&[("cause", crate::model::causes::name(cause))])?
            .encode_counter::<NoLabelSet, _, f64>(&seconds(ns), None)?;
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

pub(super) fn cpu_counters(e: &Exposition, s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
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
    if let Some(steal) = &s.steal_ns {
        let mut family = enc.encode_descriptor(
            "runqlat_cpu_steal_seconds",
            "The hypervisor's steal per CPU since boot, as the kernel reports it in /proc/stat (the same \
             figure as node_cpu_seconds_total{mode=\"steal\"}). It is in the irq_steal part of the wait causes \
             only where irq_steal_split is on (runqlat_feature_info) and the kernel accounts steal \
             (CONFIG_PARAVIRT_TIME_ACCOUNTING; the daemon logs at start what the part holds); elsewhere the \
             waits it delayed are charged to who held the CPU.",
            None,
            MetricType::Counter,
        )?;
        for (cpu, ns) in steal {
            let cpu = cpu.to_string();
            family
                .encode_family(&[("cpu", cpu.as_str())])?
                .encode_counter::<NoLabelSet, _, f64>(&seconds(*ns), None)?;
        }
    }
    Ok(())
}

pub(super) fn loss_counters(e: &Exposition, s: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let mut family = enc.encode_descriptor(
        "runqlat_lost",
        "Things the monitor could not keep, by map: stamps (tid beyond the stamp array), tasks and \
         cgroups (map full), window_max (a maximum written after its window was read), \
         cgroup_removed (removals the kernel's ring had no room for; found later by a walk), \
         throttle_clocks (groups the throttle hooks saw throttled with their map full: those waits are \
         not split off as throttled).",
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
    family
        .encode_family(&[("map", Lost::ThrottleClocks.map())])?
        .encode_counter::<NoLabelSet, _, f64>(&kernel(Lost::ThrottleClocks), None)?;
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
