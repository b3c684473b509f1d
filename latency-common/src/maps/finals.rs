//! The final delays at or above the attribution threshold a CPU remembers.

/// How many final delays (at or above the attribution threshold) a CPU remembers.
pub const FINALS_KEPT: usize = 8;

/// One delay at or above the attribution threshold: who, why, how long, when it ended.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Final {
    pub tid: u32,
    /// A [`Reason`] as `u32`.
    pub reason: u32,
    pub delay_ns: u64,
    pub end_ns: u64,
}

/// The last [`FINALS_KEPT`] such delays on one CPU; the next goes to `finals[head % FINALS_KEPT]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinalRing {
    pub head: u64,
    pub finals: [Final; FINALS_KEPT],
}

impl FinalRing {
    pub const ZERO: FinalRing =
        FinalRing { head: 0, finals: [Final { tid: 0, reason: 0, delay_ns: 0, end_ns: 0 }; FINALS_KEPT] };
}

super::pod!(FinalRing);
