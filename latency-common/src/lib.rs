//! The only definitions the kernel program and the daemon share: bucket math, map layouts and
//! load-time knobs. `no_std` so that the same code compiles for `bpfel-unknown-none`.
#![no_std]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod buckets;
pub mod knobs;
pub mod maps;

pub use buckets::{BUCKETS, bucket_of};
pub use knobs::{Knobs, THROTTLE_FROM_HOOKS, THROTTLE_FROM_OVERLAP, THROTTLE_FROM_SELF_CLOCK};
pub use maps::{CpuStats, Discard, Histogram, Lost, Reason, TaskStats, WindowMax};
