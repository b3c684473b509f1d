//! A wait's enqueue stamp: its packing into one `u64` (time, reason, irq+steal snapshot), the
//! stamp array's element, and the cause split's wrapped snapshots.

use super::cause::Reason;

/// A stamp packs, in one `u64`, the enqueue time (monotonic ns, its low [`STAMP_TIME_BITS`]
/// bits), the reason (bit [`STAMP_TIME_BITS`], set for [`Reason::Preempt`]) and, with the cause
/// split on, the low bits of the run queue's irq+steal clock at that moment (the rest, in
/// [`SPLIT_UNIT_SHIFT`] units). `0` means "no stamp". The time is kept modulo 2^41 ns (36 min):
/// every delay is below the ceiling ([`MAX_CEILING_NS`]), so `now - at` modulo that is exact, and a
/// difference of more than half of it is a stamp from the future.
pub const STAMP_TIME_BITS: u32 = 41;
pub const STAMP_TIME_MASK: u64 = (1 << STAMP_TIME_BITS) - 1;
pub const STAMP_PREEMPT_BIT: u64 = 1 << STAMP_TIME_BITS;
/// Where the irq+steal snapshot starts, and how many bits it has.
pub const STAMP_STOLEN_SHIFT: u32 = STAMP_TIME_BITS + 1;
pub const STAMP_STOLEN_BITS: u32 = 64 - STAMP_STOLEN_SHIFT;
/// The ceiling's largest value: half the stamp's time range (18 min).
pub const MAX_CEILING_NS: u64 = 1 << (STAMP_TIME_BITS - 1);
/// The cause split's snapshots count in units of 2^10 ns (1.024 µs): the parts of a wait are
/// differences of two such snapshots, exact to a unit each, and the holder's part is the rest, so
/// the parts always add up to the wait exactly.
pub const SPLIT_UNIT_SHIFT: u32 = 10;
/// The stamps of tids `2i` and `2i + 1` (see [`stamp_pack`]) and, with the cause split on, their
/// split snapshots (see [`SPLIT_THROTTLE_BITS`]): 12 bytes per tid, and a task's stamp and
/// snapshot found by one lookup, mostly in one cache line.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StampPair {
    pub stamp: [u64; 2],
    pub split: [u32; 2],
}

const _: () = assert!(core::mem::size_of::<StampPair>() == 24);

/// The `STAMPS` element of tid `tid`, and its index in that element's arrays.
#[inline(always)]
pub const fn stamp_slot(tid: u32) -> (u32, usize) {
    (tid >> 1, (tid & 1) as usize)
}

/// Bits of the throttle snapshot in a `StampPair`'s split entry (the rest, [`SPLIT_MIGRATION_BITS`], is the
/// task's migration count): a throttled part wraps at 2^(28+10) ns ≈ 275 s, an irq+steal part at
/// 2^(22+10) ns ≈ 4.3 s (longer parts are taken modulo that).
pub const SPLIT_THROTTLE_BITS: u32 = 28;
pub const SPLIT_MIGRATION_BITS: u32 = 32 - SPLIT_THROTTLE_BITS;

#[inline(always)]
pub const fn stamp_pack(now_ns: u64, reason: Reason, stolen_units: u64) -> u64 {
    let s = (now_ns & STAMP_TIME_MASK)
        | match reason {
            Reason::Wakeup => 0,
            Reason::Preempt => STAMP_PREEMPT_BIT,
        }
        | (stolen_units << STAMP_STOLEN_SHIFT);
    // 0 means "no stamp": a wakeup at a multiple of 2^41 ns with nothing stolen is 1 ns late.
    if s == 0 { 1 } else { s }
}

/// `(enqueue time modulo 2^41 ns, reason, irq+steal snapshot)` of a non-zero stamp.
#[inline(always)]
pub const fn stamp_unpack(stamp: u64) -> (u64, Reason, u64) {
    let reason = if stamp & STAMP_PREEMPT_BIT != 0 { Reason::Preempt } else { Reason::Wakeup };
    (stamp & STAMP_TIME_MASK, reason, stamp >> STAMP_STOLEN_SHIFT)
}

/// How long ago (ns) a stamp's time `at` (from [`stamp_unpack`]) was at `now`, or `None` if it is
/// in the future (more than half the stamp's range away).
#[inline(always)]
pub const fn stamp_age(at: u64, now_ns: u64) -> Option<u64> {
    let age = now_ns.wrapping_sub(at) & STAMP_TIME_MASK;
    if age >= MAX_CEILING_NS { None } else { Some(age) }
}

/// `(snapshot - earlier) mod 2^bits`, in ns: a part of a wait from two wrapped snapshots.
#[inline(always)]
pub const fn split_part(now_units: u64, then_units: u64, bits: u32) -> u64 {
    (now_units.wrapping_sub(then_units) & ((1 << bits) - 1)) << SPLIT_UNIT_SHIFT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_tids_share_a_stamp_element() {
        assert_eq!(stamp_slot(0), (0, 0));
        assert_eq!(stamp_slot(1), (0, 1));
        assert_eq!(stamp_slot(32_769), (16_384, 1));
        // The last tid of PID_MAX_LIMIT (4 Mi) is in the last of 2 Mi elements.
        assert_eq!(stamp_slot(4 * 1024 * 1024 - 1), (2 * 1024 * 1024 - 1, 1));
    }

    #[test]
    fn stamp_round_trip() {
        for reason in Reason::ALL {
            for now in [1u64, 123_456_789, (1 << 62) + 7] {
                for stolen in [0u64, 5, (1 << STAMP_STOLEN_BITS) - 1] {
                    let (at, r, s) = stamp_unpack(stamp_pack(now, reason, stolen));
                    assert_eq!((at, r, s), (now & STAMP_TIME_MASK, reason, stolen));
                    // The age is exact across the wrap of the stamp's time.
                    assert_eq!(stamp_age(at, now + 600_000_000_000), Some(600_000_000_000));
                    assert_eq!(stamp_age(at, now), Some(0));
                }
            }
        }
        assert_ne!(stamp_pack(1 << STAMP_TIME_BITS, Reason::Wakeup, 0), 0);
        // A stamp later than now is not an age.
        assert_eq!(stamp_age(1000, 999), None);
        assert_eq!(stamp_age(0, MAX_CEILING_NS - 1), Some(MAX_CEILING_NS - 1));
    }

    #[test]
    fn split_parts_survive_the_wrap() {
        let bits = SPLIT_THROTTLE_BITS;
        let top = (1u64 << bits) - 1;
        assert_eq!(split_part(3, top, bits), 4 << SPLIT_UNIT_SHIFT);
        assert_eq!(split_part(10, 10, bits), 0);
        assert_eq!(split_part((1 << 40) + 10, 4, STAMP_STOLEN_BITS), 6 << SPLIT_UNIT_SHIFT);
    }
}
