//! Time waited split by `Cause` (from a CPU's, a cgroup's or a task's `waited_ns`) in; `Causes`
//! out: their sum, their change between two snapshots, and their JSON, a map from each cause's
//! label value to ns in the kernel's order (`{"throttled": …, "irq_steal": …, …}`); and each
//! cause's name for people and labels.
//!
//! Where the kernel gives no throttle clock (`throttle_unknown` on), the kernel program puts each
//! wait a throttle overlapped, whole, in the throttled slot: this process then names that slot
//! `unknown` everywhere (`set_throttled_unknown`, once the program is loaded).
use std::sync::atomic::{AtomicBool, Ordering};

use latency_common::maps::Cause;
use serde::{Serialize, Serializer, ser::SerializeMap as _};

#[cfg(not(test))]
static THROTTLED_IS_UNKNOWN: AtomicBool = AtomicBool::new(false);

// In unit tests, each test's own: the test harness runs tests on threads of their own, side by
// side, and a test that sets it must not rename the slot under another that reads it.
#[cfg(test)]
thread_local! {
    static THROTTLED_IS_UNKNOWN: AtomicBool = const { AtomicBool::new(false) };
}

/// Says whether this process's kernel program counts waits a throttle overlapped as unknown in
/// the throttled slot (see the module). Set once per load, before anything is reported.
pub fn set_throttled_unknown(on: bool) {
    #[cfg(not(test))]
    THROTTLED_IS_UNKNOWN.store(on, Ordering::Relaxed);
    #[cfg(test)]
    THROTTLED_IS_UNKNOWN.with(|u| u.store(on, Ordering::Relaxed));
}

/// Whether the throttled slot holds `unknown` (see the module).
pub fn throttled_is_unknown() -> bool {
    #[cfg(not(test))]
    return THROTTLED_IS_UNKNOWN.load(Ordering::Relaxed);
    #[cfg(test)]
    THROTTLED_IS_UNKNOWN.with(|u| u.load(Ordering::Relaxed))
}

/// The cause's label value: `Cause::name`, except the throttled slot's where it holds `unknown`.
pub fn name(cause: Cause) -> &'static str {
    if cause == Cause::Throttled && throttled_is_unknown() { "unknown" } else { cause.name() }
}

/// Nanoseconds waited per cause (index = `Cause as usize`); the six add up to the wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Causes(pub [u64; Cause::COUNT]);

impl Causes {
    /// `later - earlier`, cause by cause (0 where a counter went back: a reset).
    pub fn between(earlier: &[u64; Cause::COUNT], later: &[u64; Cause::COUNT]) -> Causes {
        Causes(std::array::from_fn(|i| later[i].saturating_sub(earlier[i])))
    }

    pub fn get(&self, cause: Cause) -> u64 {
        self.0[cause as usize]
    }

    /// Every cause together: the time waited.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// `self += other`.
    pub fn add(&mut self, other: &[u64; Cause::COUNT]) {
        for (s, o) in self.0.iter_mut().zip(other) {
            *s += o;
        }
    }
}

/// What a cause means, for people: "throttled by a CPU limit", …
pub fn describe(cause: Cause) -> &'static str {
    if cause == Cause::Throttled && throttled_is_unknown() {
        return "cause unknown on this kernel: a CPU-limit throttle overlapped the wait and the kernel keeps no \
                clock of it";
    }
    match cause {
        Cause::Throttled => "throttled: its cgroup (or a parent) had used up its CPU limit",
        Cause::IrqSteal => "IRQ or steal: its CPU was handling interrupts or taken by the hypervisor",
        Cause::Same => "behind a task of its own cgroup",
        Cause::Other => "behind a task of another cgroup",
        Cause::Kernel => "behind a kernel thread",
        Cause::Idle => "behind nothing: the CPU was idle (the wakeup's own latency)",
    }
}

/// A short column header: `thr`, `irq`, `same`, `other`, `kern`, `idle`.
pub fn short(cause: Cause) -> &'static str {
    if cause == Cause::Throttled && throttled_is_unknown() {
        return "unkn";
    }
    match cause {
        Cause::Throttled => "thr",
        Cause::IrqSteal => "irq",
        Cause::Same => "same",
        Cause::Other => "other",
        Cause::Kernel => "kern",
        Cause::Idle => "idle",
    }
}

impl Serialize for Causes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(Cause::COUNT))?;
        for cause in Cause::ALL {
            map.serialize_entry(name(cause), &self.get(cause))?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_sums_and_json_in_cause_order() {
        let c = Causes::between(&[1, 2, 3, 4, 5, 6], &[11, 2, 13, 3, 25, 36]);
        assert_eq!(c, Causes([10, 0, 10, 0, 20, 30]), "a counter that went back counts 0");
        assert_eq!(c.total(), 70);
        assert_eq!(c.get(Cause::Idle), 30);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(json, r#"{"throttled":10,"irq_steal":0,"same":10,"other":0,"kernel":20,"idle":30}"#);
    }

    #[test]
    fn the_throttled_slot_is_unknown_where_the_kernel_keeps_no_throttle_clock() {
        set_throttled_unknown(true);
        let said = (name(Cause::Throttled), describe(Cause::Throttled), short(Cause::Throttled));
        let json = serde_json::to_string(&Causes([10, 0, 0, 0, 0, 0])).unwrap();
        set_throttled_unknown(false);
        assert_eq!((said.0, said.2), ("unknown", "unkn"));
        assert!(said.1.starts_with("cause unknown on this kernel"), "{}", said.1);
        assert!(json.starts_with(r#"{"unknown":10,"irq_steal":0"#), "{json}");
        assert_eq!((name(Cause::Throttled), name(Cause::Idle)), ("throttled", "idle"));
    }
}
