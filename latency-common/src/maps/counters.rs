//! The per-CPU counters in, by slot: what was discarded, what was lost, and the counters the
//! switch path keeps.

use super::cause::Cause;

/// A delay the kernel measured but refused to record.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discard {
    /// The stamp is later than the clock read at switch-in.
    FutureStamp = 0,
    /// The delay exceeds the configured ceiling.
    OverCeiling = 1,
}

impl Discard {
    pub const COUNT: usize = 2;
    pub const ALL: [Discard; Self::COUNT] = [Discard::FutureStamp, Discard::OverCeiling];

    pub const fn name(self) -> &'static str {
        match self {
            Discard::FutureStamp => "future_stamp",
            Discard::OverCeiling => "over_ceiling",
        }
    }
}

/// Something the kernel could not keep: a map had no room for it, or the kernel never showed it.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// A tid at or above the size of `STAMPS` (pid_max raised after load): its stamp was not kept.
    Stamps = 0,
    /// The per-task map was full: a new task's statistics were not kept.
    Tasks = 1,
    /// The per-cgroup map was full: a delay was not added to its cgroup's histogram (it is
    /// still in the per-CPU histograms).
    Cgroups = 2,
    /// Context switches the kernel raised no `sched_switch` for: seen as a break in a CPU's
    /// chain of switches (a `prev` that is not the previous `next`). The delay and run time
    /// around each are unknown to every tracer; the kernel's own accounting still has them.
    Switches = 3,
    /// Removed cgroups whose id found the removal ring buffer full: the daemon learns of them
    /// only from its next walk of the cgroup tree, so their slots are freed late.
    Removals = 4,
    /// Groups the throttle hooks saw throttled while their clock map was full: a wait in such a
    /// group is not split off as throttled (it is its holder's).
    ThrottleClocks = 5,
}

impl Lost {
    pub const COUNT: usize = 6;
    pub const ALL: [Lost; Self::COUNT] =
        [Lost::Stamps, Lost::Tasks, Lost::Cgroups, Lost::Switches, Lost::Removals, Lost::ThrottleClocks];

    /// What was lost, as a label value: the map that had no room, or `switches`.
    pub const fn map(self) -> &'static str {
        match self {
            Lost::Stamps => "stamps",
            Lost::Tasks => "tasks",
            Lost::Cgroups => "cgroups",
            Lost::Switches => "switches",
            Lost::Removals => "cgroup_removed",
            Lost::ThrottleClocks => "throttle_clocks",
        }
    }
}

/// Per-CPU counters, one entry per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStats {
    /// `sched_switch` events seen on this CPU (including switches away from idle).
    pub switches: u64,
    /// Switches of a task that blocked (left the run queue).
    pub voluntary: u64,
    /// Switches of a task that stayed runnable (preempted).
    pub involuntary: u64,
    /// Time this CPU's idle task ran, completed periods only.
    pub idle_ns: u64,
    /// When the idle task last switched in, or 0 if it is not running (or not seen yet).
    pub idle_since_ns: u64,
    /// 1 + the tid of the last `next` on this CPU (0: none seen yet), to find [`Lost::Switches`].
    pub last_next: u64,
    /// When the task now on this CPU got it (the last switch seen; 0: none yet): how long a
    /// holder ran while another task waited ([`CgroupHist::held_others_ns`](super::CgroupHist::held_others_ns)).
    pub running_since_ns: u64,
    /// The cgroup v2 id of the task now on this CPU, if its switch-in read it (it ended a delay
    /// with per-cgroup histograms on); 0 otherwise. Saves reading it again when that task is the
    /// `prev` that ends someone else's wait.
    pub running_cgroup: u64,
    /// Waits not split by cause because the task migrated between CPUs while it waited (the
    /// clocks of its first CPU are not this one's): the whole wait is its holder's.
    pub unsplit: u64,
    /// Time waited on this CPU, by [`Cause`] (adds up to the histograms' sums).
    pub waited_ns: [u64; Cause::COUNT],
    pub discarded: [u64; Discard::COUNT],
    pub lost: [u64; Lost::COUNT],
}

// Shared with the kernel program byte for byte: pin the sizes so an accidental field change
// shows up here, not as garbage in user space.
const _: () = assert!(core::mem::size_of::<CpuStats>() == 8 * (9 + Cause::COUNT + Discard::COUNT + Lost::COUNT));

super::pod!(CpuStats);

#[cfg(test)]
mod tests {
    use super::{Discard, Lost};
    use crate::maps::{Cause, Reason};

    #[test]
    fn enum_slots_are_dense() {
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
            assert_eq!(Reason::from_u32(i as u32), Some(*r));
        }
        for (i, d) in Discard::ALL.iter().enumerate() {
            assert_eq!(*d as usize, i);
        }
        for (i, l) in Lost::ALL.iter().enumerate() {
            assert_eq!(*l as usize, i);
        }
        for (i, c) in Cause::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }
}
