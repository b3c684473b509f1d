//! The experiment kit shared by xtask and latency-daemon's integration tests: in, the daemon's
//! binaries and root on a real kernel; out, measurements cross-checked against independent
//! oracles, and the machine left as it was.
pub mod bench;
pub mod cmd;
pub mod daemon;
pub mod demo;
pub mod guard;
pub mod oracle;
pub mod recorder;
pub mod recording;
pub mod services;
pub mod web;
pub mod workload;

use std::path::{Path, PathBuf};

/// The workspace root, where the demo's and the bench's reports go by default.
pub fn workspace_root() -> PathBuf {
    let lab_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    // lab/ is a direct child of the root (see `members` in the root Cargo.toml).
    lab_dir.parent().map_or_else(|| lab_dir.join(".."), Path::to_path_buf)
}
