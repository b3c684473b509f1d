//! The latest `Exposition` and this process's cost in; every `runqlat_*` family out, each named
//! and described once, in the file of its group: `kernel` (delays, windows, causes, CPUs,
//! losses), `cgroups` (per-cgroup histograms, waits in progress), `daemon` (alerts, the drain
//! loop, `process_*`) and `instruments` (what the daemon counts about itself). A scrape reads
//! what the last drain published; nothing here touches the kernel.
mod cgroups;
mod daemon;
pub mod instruments;
mod kernel;

use std::fmt;

use prometheus_client::{
    encoding::{DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, NoLabelSet},
    metrics::MetricType,
};

pub use self::kernel::DELAY;
use crate::model::{
    clock_name,
    exposition::{Exposition, ProcessSample},
};

/// Every family of `e`: the build and feature info, then each group's.
pub fn exposition(e: &Exposition, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
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
        "Constant 1 per optional kernel path: on, off (not asked for, or not needed on this kernel: \
         throttle_hooks where throttle_split is on, throttle_unknown where either is) or unavailable (asked for; this kernel's BTF or verifier did \
         not give it, and the monitor runs without it).",
        None,
        MetricType::Gauge,
    )?;
    for (feature, state) in &e.features {
        features.encode_family(&[("feature", *feature), ("state", *state)])?.encode_gauge(&1i64)?;
    }

    if let Some(s) = &e.snapshot {
        kernel::delay_histograms(e, s, enc)?;
        kernel::cpu_counters(e, s, enc)?;
        kernel::wait_causes(s, enc)?;
        kernel::loss_counters(e, s, enc)?;
    }
    if let Some(w) = &e.window {
        kernel::window_gauges(e, w, enc)?;
    }
    if e.snapshot.is_some() {
        cgroups::cgroup_histograms(e, enc)?;
    }
    if let Some(w) = &e.waits {
        cgroups::wait_metrics(e, w, enc)?;
    }
    daemon::alert_metrics(e, enc)?;
    daemon::self_metrics(e, enc)
}

/// The standard `process_*` families, when the process could be read.
pub fn process(p: Option<ProcessSample>, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    daemon::process_metrics(p, enc)
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A family of one unlabelled counter.
fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: impl EncodeCounterValue) -> Result<(), fmt::Error> {
    enc.encode_descriptor(name, help, None, MetricType::Counter)?.encode_counter::<NoLabelSet, _, f64>(&v, None)
}

/// A family of one unlabelled gauge.
fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: impl EncodeGaugeValue) -> Result<(), fmt::Error> {
    enc.encode_descriptor(name, help, None, MetricType::Gauge)?.encode_gauge(&v)
}
