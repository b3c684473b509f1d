//! The experiment kit shared by xtask and latency-daemon's integration tests: in, the daemon's
//! binaries and root on a real kernel; out, measurements cross-checked against independent
//! oracles, and the machine left as it was.
//!
//! # Layout
//!
//! - [`guard`]: what the lab starts and changes, undone on every exit path: child processes,
//!   sysctls, caught signals; and readers of the children's output.
//! - [`oracle`]: independent views of the same delays: the kernel's run_delay, `perf sched`,
//!   libbpf-tools `runqlat`; bpftool for what stays loaded; OpenTelemetry's own classes for OTLP requests.
//! - [`workload`]: the experiment itself: its modes, the plan of named threads, and the crew
//!   that runs a plan in this process (tests) or in `xtask workload` (the demo).
//! - [`ebpf`]: the kernel program built without diagnostics, for the bench and the daemon's tests.
//! - [`recorder`]: `latency-daemon record` in the background.
//! - [`recording`]: what `record --json` prints (schema 1), typed for the demo.
//! - [`daemon`]: `latency-daemon run` on a loopback port of its own.
//! - [`logs`]: the daemon's log lines (logfmt, timestamps) read back.
//! - [`watch`]: a stall watched through the daemon's wait scan while it lasts (the demo, vmtest).
//! - [`web`]: HTTP GET over std, free loopback ports, samples in Prometheus text.
//! - [`services`]: real Prometheus (a test's own configuration, or the shipped scrape.yml and
//!   rules.yml) and Alertmanager, cgroups of a test's own, podman and containerd containers, and
//!   the daemon's own `FROM scratch` image.
//! - [`seccomp`]: the daemon's seccomp profile from `strace` of what it really calls.
//! - [`grafana`]: a dashboard's queries and variables, substituted as Grafana would, and a lint.
//! - [`browser`]: headless Chromium loading a page: its rendered DOM and a screenshot.
//! - [`demo`]: the perf-sched experiment cross-checked (`cargo xtask demo`).
//! - [`bench`](mod@bench): what the monitor costs (`cargo xtask bench`).
//! - [`vmtest`]: the daemon on Debian's kernels under QEMU (`cargo xtask vmtest`).
//! - [`cmd`]: running a program, with its command line in every error.
//! - [`apt`]: private apt configurations (Debian's kernels, QEMU, cross tools) in a cache of ours.
//!
//! `demo`, `bench` and `vmtest` are drivers: they use everything else, and nothing imports them
//! but xtask's forwarders. That rule and the few modules that import less (`cmd`, `guard`, `logs`
//! and `web` only each other) are written in docs/layering.toml, which the layering test reads.
pub mod apt;
pub mod bench;
pub mod browser;
pub mod cmd;
pub mod daemon;
pub mod demo;
pub mod ebpf;
pub mod grafana;
pub mod guard;
pub mod logs;
pub mod oracle;
pub mod package;
pub mod recorder;
pub mod recording;
pub mod seccomp;
pub mod services;
pub mod tls;
pub mod vmtest;
pub mod watch;
pub mod web;
pub mod workload;

use std::path::{Path, PathBuf};

/// The workspace root, where the demo's and the bench's reports go by default.
pub fn workspace_root() -> PathBuf {
    let lab_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    // lab/ is a direct child of the root (see `members` in the root Cargo.toml).
    lab_dir.parent().map_or_else(|| lab_dir.join(".."), Path::to_path_buf)
}
