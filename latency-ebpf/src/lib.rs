//! Empty on the host: this crate's product is the `latency-ebpf` binary for bpfel-unknown-none,
//! built and embedded by latency-daemon's build script. The lib target exists so the daemon can
//! name this crate as a build dependency and be rebuilt when it changes.
#![no_std]
