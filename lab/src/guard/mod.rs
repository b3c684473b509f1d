//! What the lab starts and changes on the machine, and how it is undone on every exit path: in,
//! commands and sysctls; out, guards that kill and reap children and restore sysctls when they
//! go, and a signal flag that lets a driver unwind through them instead of dying half way; and
//! readers for the children's output, and scratch directories removed when they go.
mod child;
mod lines;
mod scratch;
mod signals;
mod sysctl;

pub use child::{Forked, Proc, children_alive, piped};
pub use lines::{Lines, Log, Slurp, Stream, spawn_until_line};
pub use scratch::Scratch;
pub use signals::{Signals, catch_signals, check_interrupted};
pub use sysctl::Sysctl;
