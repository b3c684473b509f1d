//! One reason's delays on one CPU: the fine histogram's layout.

use crate::buckets::BUCKETS;

/// One reason's delays on one CPU: bucket counts (see [`crate::buckets`]) and the exact sum.
/// The count is the sum of the buckets, so the kernel does not keep it separately.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Histogram {
    pub sum_ns: u64,
    pub buckets: [u64; BUCKETS],
}

impl Histogram {
    pub const ZERO: Histogram = Histogram { sum_ns: 0, buckets: [0; BUCKETS] };
}

// Shared with the kernel program byte for byte: pin the sizes so an accidental field change
// shows up here, not as garbage in user space.
const _: () = assert!(core::mem::size_of::<Histogram>() == 8 + 8 * BUCKETS);

super::pod!(Histogram);
