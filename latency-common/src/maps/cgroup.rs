//! The per-cgroup maps: the coarse buckets, one slot's histogram, the slot hash and the removal
//! ring's size.

use super::cause::Cause;

/// Buckets of a per-cgroup histogram: every other octave, so bucket `m` holds delays up to
/// `2^(-20 + 2m)` s (m = 0: ≤ 2^-20 s ≈ 0.95 µs … m = 13: ≤ 64 s); the last holds what is above
/// 64 s. Each bound is a boundary of the fine buckets, so coarsening is exact.
pub const CGROUP_BUCKETS: usize = 15;

/// The coarse cgroup bucket of fine bucket `k` (see [`crate::buckets`]).
#[inline(always)]
pub const fn cgroup_bucket(k: usize) -> usize {
    // Octave j = ceil((k + NATIVE_OFFSET) / 8) + 20 = (k + 7) / 8 for k ≥ 1 (0 for the zero
    // bucket); pairs of octaves share a coarse bucket.
    let m = (((k + 7) >> 3) + 1) >> 1;
    if m < CGROUP_BUCKETS - 1 { m } else { CGROUP_BUCKETS - 1 }
}

/// One cgroup's delays on one CPU, and the delays of other cgroups' tasks it ended by giving the
/// CPU up. The small fields come first: a delay touches `sum_ns` and up to three `waited_ns` (same
/// cache line as the slot's id) and one bucket.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupHist {
    pub sum_ns: u64,
    /// `sum_ns` split by [`Cause`]; the six add up to `sum_ns` exactly.
    pub waited_ns: [u64; Cause::COUNT],
    /// How long tasks of this cgroup ran while a task of another cgroup waited for their CPU:
    /// at each switch that ends a wait held by [`Cause::Other`], the part of the wait that `prev` (of
    /// this cgroup) was running, i.e. `min(delay, prev's run)`. Who held others back, and for how
    /// long; a task that ran 50 µs at the end of a 3 ms wait is charged 50 µs, not 3 ms.
    pub held_others_ns: u64,
    pub buckets: [u64; CGROUP_BUCKETS],
}

impl CgroupHist {
    pub const ZERO: CgroupHist =
        CgroupHist { sum_ns: 0, waited_ns: [0; Cause::COUNT], held_others_ns: 0, buckets: [0; CGROUP_BUCKETS] };
}

/// One slot of the per-cgroup table on one CPU: the cgroup it holds (0: free) and its delays.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupSlot {
    pub id: u64,
    pub hist: CgroupHist,
}

impl CgroupSlot {
    pub const ZERO: CgroupSlot = CgroupSlot { id: 0, hist: CgroupHist::ZERO };
}

/// The slot of cgroup `id` in a table of `2^bits` slots (`1 ≤ bits ≤ 32`): Fibonacci hashing,
/// one multiply and a shift. Cgroup ids are kernfs inode numbers handed out in sequence with
/// each cgroup's files in between, a stride that would alias in a plain `id % 2^bits`.
#[inline(always)]
pub const fn cgroup_slot(id: u64, bits: u32) -> u32 {
    (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as u32
}

/// The table's size for a per-cgroup capacity of `max_cgroups`, as the `bits` of [`cgroup_slot`]:
/// a power of two, at least 64 slots so the bitmap has whole words. Chosen by the daemon, which
/// loads it as the `cgroup_slot_bits` knob and hashes with it too.
pub fn cgroup_slot_bits(max_cgroups: u32) -> u32 {
    max_cgroups.max(64).next_power_of_two().trailing_zeros()
}

/// Bytes of the removal ring buffer: 8,192 removals of 16 bytes (the kernel's 8-byte record
/// header + the id) before the daemon reads them — 8 s of removals at 1,000/s with the daemon
/// stopped. A power of two and a multiple of every page size (4, 16 and 64 KiB).
pub const REMOVED_BYTES: u32 = 128 * 1024;

// Shared with the kernel program byte for byte: pin the sizes so an accidental field change
// shows up here, not as garbage in user space.
const _: () = assert!(core::mem::size_of::<CgroupHist>() == 184);
const _: () = assert!(core::mem::size_of::<CgroupSlot>() == 192);

super::pod!(CgroupHist, CgroupSlot);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_buckets_are_pairs_of_octaves() {
        use crate::buckets::{BUCKETS, UPPER_NS, bucket_of};
        // Bucket m holds up to 2^(-20+2m) s: check both sides of every coarse boundary.
        for m in 0..CGROUP_BUCKETS - 1 {
            let bound_ns = 1e9 * 2f64.powi(-20 + 2 * m as i32);
            let below = bound_ns.floor() as u64;
            assert_eq!(cgroup_bucket(bucket_of(below)), m, "at {below} ns");
            assert_eq!(cgroup_bucket(bucket_of(below + 1)), m + 1, "above {below} ns");
        }
        assert_eq!(cgroup_bucket(0), 0);
        assert_eq!(cgroup_bucket(BUCKETS - 1), CGROUP_BUCKETS - 1);
        assert_eq!(cgroup_bucket(bucket_of(UPPER_NS[BUCKETS - 2])), CGROUP_BUCKETS - 1);
    }

    #[test]
    fn cgroup_slots_are_a_power_of_two_of_whole_words() {
        assert_eq!(cgroup_slot_bits(16), 6);
        assert_eq!(cgroup_slot_bits(1024), 10);
        assert_eq!(cgroup_slot_bits(1025), 11);
        assert_eq!(cgroup_slot_bits(65536), 16);
    }

    #[test]
    fn cgroup_slots_spread_strided_ids() {
        // kernfs ids of consecutive cgroups, 20 inodes apart: 1000 of them in 2048 slots.
        let bits = 11;
        let mut seen = [false; 1 << 11];
        for i in 0..1000u64 {
            seen[cgroup_slot(1000 + 20 * i, bits) as usize] = true;
        }
        let distinct = seen.iter().filter(|s| **s).count();
        assert!(distinct > 750, "only {distinct} distinct slots");
    }
}
