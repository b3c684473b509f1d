//! The run-queue latency monitor's user space: loads the kernel program, drains its maps, and
//! records, serves and alerts on wakeup-to-run delay. An internal API for the `latency-daemon`
//! binary, its tests and benchmarks; not a stable interface.
//!
//! # Layout
//!
//! - `cli`     — clap types of the command line (`run`'s settings are `config::args`).
//! - `cmd`     — where each command starts: `check`, `record` (+ its text rendering), `run`
//!   (`run()` as its named steps: bind, attach, exporters, sinks, drain thread, HTTP, stop;
//!   `signals`: reload and stop; `drainer`: the drain thread — kernel reads → `pipeline` →
//!   sinks → publish); `logger`: the process's logfmt/JSON logger behind the `log` facade.
//! - `kernel`  — the only code that touches aya, maps or BTF, and so needs privileges: `probe`
//!   (load, attach, detach), `features` (optional paths, dropped where a kernel lacks them),
//!   `drain` (map reads), `cgroups` (per-cgroup slots: read, retire removed cgroups), `removals` (the
//!   kernel's ring of removed cgroups, read on a thread of its own), `caps` (the
//!   gate), `privileges` (every capability dropped once attached), `btf` (struct layouts).
//! - `metrics` — the metrics floor: `families` (every `runqlat_*` family, named once, by group),
//!   `registry`, `encode` (text, OpenMetrics, protobuf; + `exemplars`, added to the encoded delay
//!   buckets), `instruments` (what the daemon counts about itself: drain and encode durations,
//!   HTTP, notification and OTLP counters). For a scrape (`serve`) or a push (`export`).
//! - `net`     — the network floor: outbound HTTP/1.1 over TCP or TLS (`Retry-After` honoured,
//!   bounded in time), CA roots, client identity, `credentials`; for the alert sinks, the OTLP
//!   exporter and `config`'s checks of CA and identity files.
//! - `host`    — facts from /proc and /sys, no aya: clocks, kernel release, pid_max, this
//!   process's cost, cgroup v2 id → path (any depth; bounded labels), container →
//!   namespace/pod/container from the runtime's OCI config (`containers`), a process's cgroup
//!   (`process_cgroups`); `paths`: where the host's procfs, sysfs, cgroupfs and root are (`--path.*`).
//! - `model`   — plain data and pure functions, no I/O: `Snapshot`, `Window`, `Report` (the JSON
//!   schema), `Attribution`, cgroup series, what a cgroup path's form says of a container, `Exposition`, the live view's `Timeline`, bucket math
//!   (`distribution`), the one wall clock (`wall`); sinks' and receivers' URLs (`sink_url`), which
//!   `config` checks and `net` connects to.
//! - `pipeline` — the run pipeline's rules, pure: each drain's `Snapshot` (at a window's close, the
//!   kernel's maxima slot and incidents, and `Names` the host answers) → the next `Exposition` and
//!   alert transitions: window boundaries, late writes, attribution, the last alert, cgroup series
//!   (top N and "other"), removed cgroups forgotten, each reason's worst wait (the exemplars), the
//!   timeline. Called by `cmd::run` and the bench.
//! - `serve`   — answering requests: `routes` (the endpoints), `view`
//!   (the live page and its SVG charts, which `record --svg` draws too), `http` (the hardened
//!   transport: TLS, basic auth, per-peer shares, the request cap).
//! - `export`  — push exporters: `otlp` (the families a scrape shows → OTLP/HTTP protobuf requests:
//!   names and units from the Prometheus names, native histograms as exponential ones; a bounded
//!   queue, retries with backoff and `Retry-After`, counted in `metrics::instruments::push`).
//! - `alert`   — `engine`: rules → transitions, typed by `Reason`; `notify`: the log, Alertmanager
//!   and webhook sinks (http or https through `net`, URLs shown redacted).
//! - `config`  — flags, `RUNQLAT_*` variables and the TOML file → one validated `Config`; `args`:
//!   the one table of settings (`settings!`: flag, variable, file key, help, default, reload or
//!   restart), which `reference` renders as docs/configuration.md and deploy/latency-daemon.toml;
//!   `file` (bounded reads of regular files), `web` (`--web.config.file`, built into rustls).
//!
//! # Layering
//!
//! Each layer imports only the layers (and the few items of another layer) that the rule allows;
//! nothing imports `cmd`, and no two files import each other, directly or around a loop (a parent
//! module and its children count as one). The rule is written once, in docs/layering.toml, and
//! shown as a table in docs/design.md ("The house"); `tests/layering.rs` reads it and checks every
//! `crate::`, `super::` and `self::` path in src (in `use` trees and inline), naming each
//! offending file:line; the crates a layer uses are not checked. A file's arrows by hand:
//! `grep -rnE '(crate|super)::' src/<layer>`. Instruments (`metrics::Instruments`) are created by
//! `cmd::run` and passed in. Every layer may log through the `log` crate's macros (a facade, not
//! a layer); only `cmd` installs the logger and sets its level and format. Nothing but the
//! reports of `check` and `record` and the usage errors prints directly.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod alert;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod export;
pub mod host;
pub mod kernel;
pub mod metrics;
pub mod model;
pub mod net;
pub mod pipeline;
pub mod serve;
