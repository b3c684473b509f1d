//! A closed window's per-CPU maxima (and `Names` for the victim's pod) in; each reason's worst wait
//! out, the exemplar `runqlat_delay_seconds` shows until the next window closes.
use latency_common::Reason;

use super::Names;
use crate::model::{exposition::DelayExemplar, report::WindowMaxReport};

/// Per reason (index = `Reason as usize`), the largest of `maxima` (None: no wait of that reason),
/// its pod from the victim's process: one lookup per reason, "" when not a pod's or gone.
pub(super) fn worst(maxima: &[WindowMaxReport], names: &mut impl Names) -> [Option<DelayExemplar>; Reason::COUNT] {
    Reason::ALL.map(|reason| {
        let m = maxima.iter().filter(|m| m.reason == reason && m.delay_ns > 0).max_by_key(|m| m.delay_ns)?;
        let pod = names.process(m.victim.pid).map(|(_, labels)| labels.pod).unwrap_or_default();
        Some(DelayExemplar {
            delay_ns: m.delay_ns,
            unix_ns: m.end_unix_ns,
            tid: m.victim.tid,
            comm: m.victim.comm.clone(),
            pod,
        })
    })
}
