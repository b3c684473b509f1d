//! The latest `Exposition`'s cgroup series and waits in progress in; the per-cgroup delay
//! histograms and the wait-scan families out, containers labelled with namespace, pod and
//! container where the runtime's config names them.
use std::fmt;

use latency_common::{Reason, maps::Cause};
use prometheus_client::{
    encoding::{DescriptorEncoder, NoLabelSet},
    metrics::MetricType,
};

use super::{counter, kernel::CAUSES, seconds};
use crate::model::{
    exposition::{Exposition, cgroup_classic_buckets},
    waits::WaitsNow,
};

pub(super) fn cgroup_histograms(e: &Exposition, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
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
                .encode_family(&with_container(
                    e,
                    &[("cgroup", label.as_str()), ("cause", crate::model::causes::name(cause))],
                    label,
                ))?
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

pub(super) fn wait_metrics(e: &Exposition, w: &WaitsNow, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
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
pub(super) fn with_container<'a>(
    e: &'a Exposition,
    labels: &[(&'a str, &'a str)],
    cgroup: &str,
) -> Vec<(&'a str, &'a str)> {
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
