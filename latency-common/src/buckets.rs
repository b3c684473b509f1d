//! Delay (ns) → histogram bucket, the one definition both sides use: the buckets of a Prometheus
//! native histogram with schema 3, found by comparing integer nanoseconds with an integer table
//! (exact, no floating point). The definition and why it is exact: docs/design.md, "Buckets".

/// Number of buckets per histogram: a power of two so the kernel's binary search takes exactly
/// `log2(BUCKETS)` steps and every index can be masked into range for the verifier.
pub const BUCKETS: usize = 256;
/// The native schema these buckets reproduce.
pub const SCHEMA: i8 = 3;
/// Our bucket 0: every delay `≤ 2^(ZERO_NATIVE_INDEX/8) s`, the native zero bucket.
pub const ZERO_BUCKET: usize = 0;
/// Our last bucket: delays above the top native bucket.
pub const OVERFLOW_BUCKET: usize = BUCKETS - 1;
/// Native index whose upper bound is the zero-bucket threshold (`2^-20 s`).
pub const ZERO_NATIVE_INDEX: i32 = -160;
/// `native index = k + NATIVE_OFFSET` for our buckets `1..=254`.
pub const NATIVE_OFFSET: i32 = ZERO_NATIVE_INDEX;

/// `UPPER_NS[k]`: the largest whole number of nanoseconds in bucket `k`, i.e.
/// `floor(10^9 · 2^((k + NATIVE_OFFSET)/8))`; the overflow bucket is unbounded.
#[rustfmt::skip]
pub const UPPER_NS: [u64; BUCKETS] = [
    953, 1039, 1134, 1236, 1348, 1470,
    1603, 1749, 1907, 2079, 2268, 2473,
    2697, 2941, 3207, 3498, 3814, 4159,
    4536, 4947, 5394, 5883, 6415, 6996,
    7629, 8319, 9072, 9894, 10789, 11766,
    12831, 13992, 15258, 16639, 18145, 19788,
    21579, 23532, 25662, 27984, 30517, 33279,
    36291, 39576, 43158, 47064, 51324, 55969,
    61035, 66559, 72583, 79152, 86316, 94129,
    102648, 111938, 122070, 133118, 145166, 158305,
    172633, 188258, 205296, 223877, 244140, 266237,
    290333, 316611, 345266, 376516, 410593, 447755,
    488281, 532474, 580667, 633222, 690533, 753032,
    821187, 895511, 976562, 1064948, 1161335, 1266444,
    1381067, 1506065, 1642375, 1791023, 1953125, 2129897,
    2322670, 2532889, 2762135, 3012130, 3284751, 3582047,
    3906250, 4259795, 4645340, 5065779, 5524271, 6024261,
    6569503, 7164094, 7812500, 8519591, 9290680, 10131559,
    11048543, 12048522, 13139006, 14328188, 15625000, 17039183,
    18581361, 20263118, 22097086, 24097044, 26278012, 28656376,
    31250000, 34078366, 37162722, 40526236, 44194173, 48194088,
    52556025, 57312752, 62500000, 68156733, 74325444, 81052472,
    88388347, 96388176, 105112051, 114625505, 125000000, 136313466,
    148650889, 162104944, 176776695, 192776353, 210224103, 229251010,
    250000000, 272626933, 297301778, 324209888, 353553390, 385552706,
    420448207, 458502021, 500000000, 545253866, 594603557, 648419777,
    707106781, 771105412, 840896415, 917004043, 1000000000, 1090507732,
    1189207115, 1296839554, 1414213562, 1542210825, 1681792830, 1834008086,
    2000000000, 2181015465, 2378414230, 2593679109, 2828427124, 3084421650,
    3363585661, 3668016172, 4000000000, 4362030930, 4756828460, 5187358218,
    5656854249, 6168843301, 6727171322, 7336032345, 8000000000, 8724061861,
    9513656920, 10374716437, 11313708498, 12337686603, 13454342644, 14672064691,
    16000000000, 17448123722, 19027313840, 20749432874, 22627416997, 24675373206,
    26908685288, 29344129382, 32000000000, 34896247445, 38054627680, 41498865748,
    45254833995, 49350746413, 53817370576, 58688258765, 64000000000, 69792494890,
    76109255360, 82997731497, 90509667991, 98701492826, 107634741152, 117376517530,
    128000000000, 139584989781, 152218510720, 165995462995, 181019335983, 197402985652,
    215269482304, 234753035060, 256000000000, 279169979562, 304437021440, 331990925990,
    362038671967, 394805971304, 430538964609, 469506070120, 512000000000, 558339959124,
    608874042881, 663981851981, 724077343935, 789611942608, 861077929219, 939012140241,
    1024000000000, 1116679918249, 1217748085762, 1327963703962, 1448154687870, 1579223885217,
    1722155858439, 1878024280483, 2048000000000, 2233359836498, 2435496171525, 2655927407925,
    2896309375740, 3158447770435, 3444311716879,
    u64::MAX,
];

/// Sub-octave bits of [`GUESS`]'s index: 16 slices per octave, each narrower (at most 17/16)
/// than a bucket (2^(1/8) ≈ 1.09), so a slice meets at most one bucket boundary.
const SLICE_BITS: u32 = 4;
/// Entries of [`GUESS`]: 64 octaves × 16 slices.
pub const GUESS_LEN: usize = 64 << SLICE_BITS;

/// The slice of `delay_ns`: its highest set bit `h` and the 4 bits below it, `(h << 4) | bits`;
/// below 16 the delay itself (those slices all lie in bucket 0).
#[inline(always)]
const fn slice_of(delay_ns: u64) -> usize {
    if delay_ns < 1 << SLICE_BITS {
        return delay_ns as usize;
    }
    let h = highest_bit(delay_ns);
    ((h << SLICE_BITS) as usize) | ((delay_ns >> (h - SLICE_BITS)) as usize & ((1 << SLICE_BITS) - 1))
}

/// The index of the highest set bit of `x` (> 0): smear it into every lower bit, and the
/// product of that mask with a de Bruijn constant has a distinct top six bits for each of the
/// 64 masks, which [`HIGHEST_BIT`] maps back. Not `leading_zeros`: BPF has no such instruction
/// and LLVM lowers it to the smear plus a popcount, about 45 instructions on every delay where
/// this takes about 20.
#[inline(always)]
const fn highest_bit(mut x: u64) -> u32 {
    x |= x >> 1;
    x |= x >> 2;
    x |= x >> 4;
    x |= x >> 8;
    x |= x >> 16;
    x |= x >> 32;
    HIGHEST_BIT[de_bruijn_index(x)] as u32
}

/// A de Bruijn sequence B(2, 6) as a 64-bit constant.
const DE_BRUIJN: u64 = 0x03f7_9d71_b4cb_0a89;

#[inline(always)]
const fn de_bruijn_index(mask: u64) -> usize {
    (mask.wrapping_mul(DE_BRUIJN) >> 58) as usize
}

/// `HIGHEST_BIT[de_bruijn_index(2^(h+1) - 1)] = h`, built at compile time; the build fails if two
/// masks shared an index.
const HIGHEST_BIT: [u8; 64] = {
    let mut t = [u8::MAX; 64];
    let mut h = 0;
    while h < 64 {
        let mask = if h == 63 { u64::MAX } else { (1u64 << (h + 1)) - 1 };
        let i = de_bruijn_index(mask);
        assert!(t[i] == u8::MAX, "two masks share a de Bruijn index");
        t[i] = h as u8;
        h += 1;
    }
    t
};

/// The smallest delay in slice `i` (see [`slice_of`]).
const fn slice_start(i: usize) -> u64 {
    let h = (i >> SLICE_BITS) as u32;
    if h < SLICE_BITS {
        return i as u64;
    }
    (((1 << SLICE_BITS) | (i & ((1 << SLICE_BITS) - 1))) as u64) << (h - SLICE_BITS)
}

/// `GUESS[slice]`: the bucket of the slice's smallest delay; every delay in the slice is in that
/// bucket or the next (see [`SLICE_BITS`]). Built at compile time from [`UPPER_NS`].
pub const GUESS: [u8; GUESS_LEN] = {
    let mut t = [0u8; GUESS_LEN];
    let mut i = 0;
    while i < GUESS_LEN {
        t[i] = search(slice_start(i)) as u8;
        i += 1;
    }
    t
};

/// The bucket that holds `delay_ns`: the first `k` with `delay_ns ≤ UPPER_NS[k]`.
///
/// The slice (highest set bit and the 4 bits below it) gives the bucket or the one before, and
/// one compare against the exact table settles it: two table loads instead of a search's eight.
/// Both indices are masked so the kernel verifier sees them in bounds.
#[inline(always)]
pub fn bucket_of(delay_ns: u64) -> usize {
    let slice = slice_of(delay_ns);
    // The compiler can prove `slice < GUESS_LEN` and would drop the mask, but it proves it with
    // bit tricks (leading zeros as a popcount) whose bound the verifier cannot follow; a volatile
    // read hides the proof, so the mask stays (one store and load on the stack).
    // SAFETY: a read of a local variable.
    let slice = unsafe { core::ptr::read_volatile(&raw const slice) };
    let k = GUESS[slice & (GUESS_LEN - 1)] as usize & (BUCKETS - 1);
    (k + usize::from(delay_ns > UPPER_NS[k])) & (BUCKETS - 1)
}

/// The same by binary search over [`UPPER_NS`] (how [`GUESS`] is built; the reference in tests).
const fn search(delay_ns: u64) -> usize {
    let mut pos = 0usize;
    let mut half = BUCKETS / 2;
    while half > 0 {
        if UPPER_NS[pos + half - 1] < delay_ns {
            pos += half;
        }
        half /= 2;
    }
    pos
}

/// The native-histogram index of bucket `k`, or `None` for the zero and overflow buckets.
#[inline]
pub const fn native_index(k: usize) -> Option<i32> {
    if k == ZERO_BUCKET || k >= OVERFLOW_BUCKET { None } else { Some(k as i32 + NATIVE_OFFSET) }
}

/// Our bucket for a native index, or `None` if it is outside the range we keep.
#[inline]
pub const fn bucket_of_native(index: i32) -> Option<usize> {
    let k = index - NATIVE_OFFSET;
    if k >= 1 && k < OVERFLOW_BUCKET as i32 { Some(k as usize) } else { None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_bigint::BigUint;
    use proptest::prelude::*;

    /// `n ≤ 10^9·2^(j/8)` exactly, i.e. `n^8 · 2^max(-j,0) ≤ 10^72 · 2^max(j,0)`.
    fn at_or_below_bound(n: u64, j: i32) -> bool {
        let lhs = BigUint::from(n).pow(8) << (if j < 0 { (-j) as usize } else { 0 });
        let rhs = BigUint::from(10u32).pow(72) << (if j > 0 { j as usize } else { 0 });
        lhs <= rhs
    }

    #[test]
    fn table_is_exact_floor_of_each_bound() {
        for (k, &upper) in UPPER_NS.iter().enumerate().take(OVERFLOW_BUCKET) {
            let j = k as i32 + NATIVE_OFFSET;
            assert!(at_or_below_bound(upper, j), "bucket {k}: {upper} is above the bound");
            assert!(!at_or_below_bound(upper + 1, j), "bucket {k}: {} is not above", upper + 1);
        }
    }

    #[test]
    fn powers_of_two_seconds_are_inclusive_upper_bounds() {
        // 1 s = 2^0 s is the upper bound of native bucket 0, exactly representable in ns.
        let one_s = bucket_of_native(0).unwrap();
        assert_eq!(UPPER_NS[one_s], 1_000_000_000);
        assert_eq!(bucket_of(1_000_000_000), one_s);
        assert_eq!(bucket_of(1_000_000_001), one_s + 1);
        // 2 s and 0.5 s likewise (native 8 and -8).
        assert_eq!(bucket_of(2_000_000_000), bucket_of_native(8).unwrap());
        assert_eq!(bucket_of(500_000_000), bucket_of_native(-8).unwrap());
        assert_eq!(bucket_of(500_000_001), bucket_of_native(-7).unwrap());
    }

    #[test]
    fn highest_bit_is_the_kernels_fls_minus_one() {
        for shift in 0..64 {
            let bit = 1u64 << shift;
            for x in [bit, bit | (bit >> 1), bit | 1, bit.wrapping_mul(2).wrapping_sub(1).max(bit)] {
                assert_eq!(highest_bit(x), 63 - x.leading_zeros(), "{x:#x}");
            }
        }
        assert_eq!(highest_bit(u64::MAX), 63);
    }

    #[test]
    fn every_boundary_and_its_neighbours() {
        assert_eq!(bucket_of(0), ZERO_BUCKET);
        for k in 0..OVERFLOW_BUCKET {
            let upper = UPPER_NS[k];
            assert_eq!(bucket_of(upper), k, "upper bound of {k}");
            assert_eq!(bucket_of(upper + 1), k + 1, "just above {k}");
            if upper > 0 && (k == 0 || UPPER_NS[k - 1] < upper - 1) {
                assert_eq!(bucket_of(upper - 1), k, "just below upper of {k}");
            }
        }
        assert_eq!(bucket_of(u64::MAX), OVERFLOW_BUCKET);
    }

    #[test]
    fn zero_bucket_is_the_native_zero_threshold() {
        // 2^-20 s = 953.67… ns
        assert_eq!(UPPER_NS[ZERO_BUCKET], 953);
        assert_eq!(bucket_of(953), ZERO_BUCKET);
        assert_eq!(bucket_of(954), 1);
        assert_eq!(native_index(1), Some(-159));
        assert_eq!(native_index(ZERO_BUCKET), None);
        assert_eq!(native_index(OVERFLOW_BUCKET), None);
        // 60 s is inside the regular range, as the issue asks.
        assert!(bucket_of(60_000_000_000) < OVERFLOW_BUCKET);
    }

    #[test]
    fn native_round_trip() {
        for k in 1..OVERFLOW_BUCKET {
            let n = native_index(k).unwrap();
            assert_eq!(bucket_of_native(n), Some(k));
        }
        assert_eq!(bucket_of_native(-160), None);
        assert_eq!(bucket_of_native(95), None);
    }

    #[test]
    fn every_slice_meets_at_most_one_boundary() {
        // The guess is the bucket of the slice's first delay; its last delay is at most one further.
        // Indices 16..64 are never a slice (below 16 the slice is the delay; from 16 on, h ≥ 4).
        for i in (0..16).chain(64..GUESS_LEN) {
            let next = match i {
                15 => 16,
                _ if i + 1 < GUESS_LEN => slice_start(i + 1),
                _ => 0,
            };
            let start = slice_start(i);
            if next > start {
                assert!(search(next - 1) <= GUESS[i] as usize + 1, "slice {i} [{start}, {next}) spans > 2 buckets");
                assert_eq!(slice_of(start), i);
                assert_eq!(slice_of(next - 1), i);
            }
        }
    }

    proptest! {
        /// Against a naive reference: the first bucket whose upper bound is not below the delay.
        #[test]
        fn matches_linear_scan(d in any::<u64>(), small in 0u64..10_000_000_000) {
            for delay in [d, small] {
                let naive = UPPER_NS.iter().position(|&u| delay <= u).unwrap();
                prop_assert_eq!(bucket_of(delay), naive);
                prop_assert_eq!(search(delay), naive);
            }
        }
    }
}
