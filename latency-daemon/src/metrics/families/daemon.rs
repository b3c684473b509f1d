//! The latest `Exposition`'s alert state and the drain loop's own figures in, and this process's
//! cost sampled at scrape time; the `runqlat_alert*`, drain and lookup families and the standard
//! `process_*` ones out.
use std::fmt;

use latency_common::Reason;
use prometheus_client::{
    encoding::{DescriptorEncoder, NoLabelSet},
    metrics::MetricType,
};

use super::{cgroups::with_container, counter, gauge};
use crate::model::exposition::{CGROUP_UNRESOLVED, Exposition, ProcessSample};

pub(super) fn alert_metrics(e: &Exposition, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
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

pub(super) fn self_metrics(e: &Exposition, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
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
pub(super) fn process_metrics(p: Option<ProcessSample>, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
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
