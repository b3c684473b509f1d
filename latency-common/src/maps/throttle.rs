//! The throttle hooks' per-group throttle clocks (kernels before 6.8).

/// One group's throttle clock on one CPU, kept by the throttle hooks (fexit on `tg_throttle_down`
/// and `tg_unthrottle_up`) in `THROTTLE_CLOCKS`, keyed by the `struct cfs_rq *`: the two numbers
/// 6.8+ keeps in the `cfs_rq` itself as `throttled_clock_self` and `throttled_clock_self_time`.
/// `since_ns` is `rq->clock` when the group (by itself or an ancestor) entered the throttled
/// state on that CPU (its `throttle_count` went 0 → 1), 0 while it is not throttled; `total_ns`
/// the `rq->clock` time it spent throttled before that. Only differences of the clock over one
/// wait are read, so where it starts does not matter.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThrottleClock {
    pub since_ns: u64,
    pub total_ns: u64,
}

const _: () = assert!(core::mem::size_of::<ThrottleClock>() == 16);

super::pod!(ThrottleClock);
