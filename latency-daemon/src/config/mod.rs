//! Settings of `run`: flags, `RUNQLAT_*` variables and the `--config` TOML file in, one validated
//! [`Config`] out (or every problem at once, on one line). On SIGHUP, [`Config::reload`] re-reads
//! them and says which changes wait for a restart. Adding a setting: docs/design.md.

#[macro_use]
pub mod settings;
mod alert;
pub mod args;
mod buckets;
mod check;
pub mod file;
mod format;
pub mod otlp;
mod redact;
pub mod reference;
mod sources;
mod values;
pub mod web;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use latency_common::knobs::{Clock, DEFAULT_CEILING_NS};
use serde::Serialize;

use self::args::RunArgs;

pub use self::alert::AlertConfig;
pub use self::check::Problem;
pub use self::otlp::OtlpConfig;

/// Default port. Not in Prometheus's default port allocations list (where node_exporter has 9100,
/// Prometheus 9090, Alertmanager 9093, and 9435 is taken), so it can sit beside those exporters.
pub const DEFAULT_PORT: u16 = 9954;

/// The validated settings of `run`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Config {
    pub listen: SocketAddr,
    /// exporter-toolkit web configuration file (TLS, basic auth, headers), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub web_config_file: Option<PathBuf>,
    /// What `web_config_file` holds, checked. Never shown (it holds hashes and keys).
    #[serde(skip)]
    pub web: Option<web::WebConfig>,
    /// Requests handled at once (0: no limit); more get 503.
    pub web_max_requests: usize,
    /// Connections open at once; more get 503.
    pub web_max_connections: usize,
    /// Where users reach the daemon, as alerts link to it; None: `http(s)://HOSTNAME:PORT/`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub web_external_url: Option<String>,
    /// Drain period: how often the kernel's maps are read.
    #[serde(serialize_with = "format::ser_duration")]
    pub interval: Duration,
    /// Span of the window maximum and quantiles; a whole multiple of `interval`.
    #[serde(serialize_with = "format::ser_duration")]
    pub window: Duration,
    pub top_cgroups: usize,
    /// Capacity of the kernel's per-cgroup histogram map.
    pub max_cgroups: u32,
    /// Classic histogram bounds as native schema-3 indices (bound `2^(i/8)` s), ascending.
    #[serde(serialize_with = "format::ser_classic_buckets")]
    pub classic_buckets: Vec<i32>,
    /// Per-cgroup histogram bounds as steps `m` (bound `2^(-20+2m)` s), ascending.
    #[serde(serialize_with = "format::ser_cgroup_buckets")]
    pub cgroup_buckets: Vec<u8>,
    pub per_cgroup: bool,
    /// Where captures go when an alert fires; None: the capture recorder is off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture_dir: Option<PathBuf>,
    /// The capture recorder's ring, events per CPU.
    pub capture_events: u32,
    /// At most one new capture per this long in all (zero: no limit).
    #[serde(serialize_with = "format::ser_duration")]
    pub capture_interval: Duration,
    /// At most one new capture per this long for one CPU's waits (zero: no limit).
    #[serde(serialize_with = "format::ser_duration")]
    pub capture_cpu_interval: Duration,
    pub capture_max_files: u32,
    pub capture_max_mib: u32,
    /// How long a capture on demand keeps reading.
    #[serde(serialize_with = "format::ser_duration")]
    pub capture_demand: Duration,
    /// Scan the tasks waiting for a CPU at each drain (waits in progress).
    pub wait_scan: bool,
    /// Split each wait by cause (throttled, irq+steal, holder).
    pub wait_causes: bool,
    /// Time IRQs with the irq tracepoints for the irq+steal part.
    pub irq_tracepoints: bool,
    /// Time CFS bandwidth throttling with the throttle hooks where the kernel keeps no group
    /// throttle clock (before 6.8), for the throttled part.
    pub throttle_hooks: bool,
    pub per_task: bool,
    pub max_tasks: u32,
    /// Delays above this are discarded (and counted).
    #[serde(serialize_with = "format::ser_duration")]
    pub ceiling: Duration,
    #[serde(serialize_with = "format::ser_clock")]
    pub clock: Clock,
    /// Thresholds, timing and sinks of alerts (shown under their own `alert_*` keys).
    #[serde(flatten)]
    pub alert: AlertConfig,
    /// The OTLP push exporter (shown under its `otlp_*` keys).
    #[serde(flatten)]
    pub otlp: OtlpConfig,
    /// Least severe log events written; adopted on reload.
    pub log_level: args::LogLevel,
    /// Logfmt or JSON lines on stderr; adopted on reload.
    pub log_format: args::LogFormat,
    /// Where the host's procfs, sysfs, cgroupfs and root are (`host::paths`); each an existing
    /// directory.
    pub path_procfs: PathBuf,
    pub path_sysfs: PathBuf,
    pub path_cgroupfs: PathBuf,
    pub path_rootfs: PathBuf,
    /// The file the settings were read from, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_file: Option<PathBuf>,
}

/// What [`Config::reload`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct Reload {
    /// The new settings, except that restart-only fields keep their running values.
    pub config: Config,
    /// Restart-only fields whose new value differs from the running one (the new value is ignored).
    pub needs_restart: Vec<&'static str>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file: {source}")]
    Read { source: file::FileError },
    #[error("config file {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    /// Only on reload (the caller says it keeps the running configuration).
    #[error("config file {} is empty, which a reload does not take for the defaults", path.display())]
    Empty { path: PathBuf },
    #[error("invalid configuration: {}", problems.iter().map(Problem::to_string).collect::<Vec<_>>().join("; "))]
    Invalid { problems: Vec<Problem> },
}

/// Looks up an environment variable; tests pass a fake instead of the process environment.
type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn process_env_names() -> impl Iterator<Item = String> {
    std::env::vars_os().filter_map(|(name, _)| name.into_string().ok())
}

/// `run`'s flags after clap refused them, and the process environment: every problem, one line
/// each, for a usage error that names them all at once.
pub fn usage_problems(run_args: &[String]) -> Vec<String> {
    let mut lines = sources::flag_problems(run_args);
    lines.extend(sources::env_problems(&process_env, process_env_names()).iter().map(Problem::to_string));
    lines
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)),
            web_config_file: None,
            web: None,
            // exporter-toolkit's default for --web.max-requests.
            web_max_requests: 40,
            // Each open connection costs a task and a few KiB; slow clients must not exhaust them.
            web_max_connections: 1024,
            web_external_url: None,
            interval: Duration::from_secs(1),
            // Prometheus's default scrape interval: every scrape sees a window no older than itself.
            window: Config::DEFAULT_WINDOW,
            top_cgroups: 20,
            // Hundreds of cgroups are common on a systemd host running containers.
            max_cgroups: 1024,
            // Every octave from about 1 µs to 64 s: 27 series, fine enough for SLO thresholds.
            classic_buckets: (-20..=6).map(|octave| 8 * octave).collect(),
            cgroup_buckets: (0..buckets::CGROUP.rungs as u8).collect(),
            per_cgroup: true,
            capture_dir: None,
            // 384 KiB per CPU: a busy CPU's last tenth of a second or more, a quiet one's minutes.
            capture_events: 4096,
            capture_interval: Duration::from_secs(10),
            capture_cpu_interval: Duration::from_secs(60),
            capture_max_files: 32,
            capture_max_mib: 256,
            capture_demand: Duration::from_secs(10),
            wait_scan: true,
            wait_causes: true,
            irq_tracepoints: false,
            throttle_hooks: true,
            per_task: false,
            // The kernel's default pid_max.
            max_tasks: 32768,
            ceiling: Duration::from_nanos(DEFAULT_CEILING_NS),
            clock: Clock::Monotonic,
            alert: AlertConfig::default(),
            otlp: OtlpConfig::defaults(),
            log_level: args::LogLevel::Info,
            log_format: args::LogFormat::Logfmt,
            path_procfs: PathBuf::from("/proc"),
            path_sysfs: PathBuf::from("/sys"),
            path_cgroupfs: PathBuf::from("/sys/fs/cgroup"),
            path_rootfs: PathBuf::from("/"),
            config_file: None,
        }
    }
}

impl Config {
    /// Prometheus's default scrape interval: every scrape sees a window no older than itself.
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(15);

    /// Merges flags (`args`), the environment, the `--config` file and the defaults, in that order
    /// of precedence, and validates the result.
    /// Variables of the `RUNQLAT_` family that set nothing are problems too.
    pub fn load(args: &RunArgs) -> Result<Config, ConfigError> {
        let unknown = sources::unknown_vars(process_env_names());
        match Self::load_with(args, &process_env) {
            Ok(config) if unknown.is_empty() => Ok(config),
            Ok(_) => Err(ConfigError::Invalid { problems: unknown }),
            Err(ConfigError::Invalid { mut problems }) => {
                problems.extend(unknown);
                Err(ConfigError::Invalid { problems })
            }
            Err(e) => Err(e),
        }
    }

    fn load_with(args: &RunArgs, env: Env<'_>) -> Result<Config, ConfigError> {
        Self::assemble(args, env, sources::Occasion::Start)
    }

    fn assemble(args: &RunArgs, env: Env<'_>, occasion: sources::Occasion) -> Result<Config, ConfigError> {
        let (merged, config_file, mut problems) = sources::merge(args, env, occasion)?;
        let config = check::resolve(merged, config_file, env, &mut problems);
        check::in_field_order(&mut problems);
        if problems.is_empty() { Ok(config) } else { Err(ConfigError::Invalid { problems }) }
    }

    /// Re-reads every source (flags and environment still win over the file). Fields the running
    /// pipeline cannot adopt keep their running values and, if they changed, are listed. On an
    /// error nothing is adopted; the caller keeps running with `self`.
    pub fn reload(&self, args: &RunArgs) -> Result<Reload, ConfigError> {
        self.reload_with(args, &process_env)
    }

    fn reload_with(&self, args: &RunArgs, env: Env<'_>) -> Result<Reload, ConfigError> {
        let mut config = Self::assemble(args, env, sources::Occasion::Reload)?;
        let mut needs_restart = Vec::new();
        let r = &mut needs_restart;
        // What the table marks as waiting for a restart keeps its running value here.
        for setting in args::SETTINGS.iter().filter(|s| s.apply == settings::Apply::Restart) {
            let key = setting.key;
            match key {
                "listen" => keep(key, &mut config.listen, self.listen, r),
                "web_max_requests" => keep(key, &mut config.web_max_requests, self.web_max_requests, r),
                "web_max_connections" => keep(key, &mut config.web_max_connections, self.web_max_connections, r),
                "interval" => keep(key, &mut config.interval, self.interval, r),
                "max_cgroups" => keep(key, &mut config.max_cgroups, self.max_cgroups, r),
                "per_cgroup" => keep(key, &mut config.per_cgroup, self.per_cgroup, r),
                "capture_dir" => keep(key, &mut config.capture_dir, self.capture_dir.clone(), r),
                "capture_events" => keep(key, &mut config.capture_events, self.capture_events, r),
                "capture_interval" => keep(key, &mut config.capture_interval, self.capture_interval, r),
                "capture_cpu_interval" => keep(key, &mut config.capture_cpu_interval, self.capture_cpu_interval, r),
                "capture_max_files" => keep(key, &mut config.capture_max_files, self.capture_max_files, r),
                "capture_max_mib" => keep(key, &mut config.capture_max_mib, self.capture_max_mib, r),
                "capture_demand" => keep(key, &mut config.capture_demand, self.capture_demand, r),
                "wait_scan" => keep(key, &mut config.wait_scan, self.wait_scan, r),
                "wait_causes" => keep(key, &mut config.wait_causes, self.wait_causes, r),
                "irq_tracepoints" => keep(key, &mut config.irq_tracepoints, self.irq_tracepoints, r),
                "throttle_hooks" => keep(key, &mut config.throttle_hooks, self.throttle_hooks, r),
                "per_task" => keep(key, &mut config.per_task, self.per_task, r),
                "max_tasks" => keep(key, &mut config.max_tasks, self.max_tasks, r),
                "ceiling" => keep(key, &mut config.ceiling, self.ceiling, r),
                "clock" => keep(key, &mut config.clock, self.clock, r),
                "path_procfs" => keep(key, &mut config.path_procfs, self.path_procfs.clone(), r),
                "path_sysfs" => keep(key, &mut config.path_sysfs, self.path_sysfs.clone(), r),
                "path_cgroupfs" => keep(key, &mut config.path_cgroupfs, self.path_cgroupfs.clone(), r),
                "path_rootfs" => keep(key, &mut config.path_rootfs, self.path_rootfs.clone(), r),
                // The exporter starts once; its settings (and the OTEL_* variables) wait for a restart.
                k if k.starts_with("otlp_") => {
                    // Compared as shown (header values hidden); all of it is kept below either way.
                    let shown = |o: &OtlpConfig| serde_json::to_value(o).unwrap_or_default()[k].clone();
                    if shown(&config.otlp) != shown(&self.otlp) {
                        r.push(key);
                    }
                }
                // A setting marked so in the table with no line here: refuse the reload rather than
                // adopt what the running daemon cannot (a unit test reloads every setting).
                _ => {
                    let why = "marked restart-only but not kept on reload (config::Config::reload_with)";
                    return Err(ConfigError::Invalid { problems: vec![Problem::new(key, why)] });
                }
            }
        }
        // The exporter starts once: what it runs with stays, whatever the files and OTEL_* say now.
        config.otlp = self.otlp.clone();
        // Thresholds below the kernel's attribution threshold (`Apply::Raise`) wait for a restart.
        alert::reload(&mut config.alert, &self.alert, r);

        // The new file was valid on its own, but a kept value (the running interval) may not fit
        // a new one (the window).
        let mut problems = check::check(&config);
        if !problems.is_empty() {
            let note = format!(" (running values kept until restart: {})", needs_restart.join(", "));
            for p in &mut problems {
                p.message.push_str(&note);
            }
            return Err(ConfigError::Invalid { problems });
        }
        Ok(Reload { config, needs_restart })
    }

    /// Classic histogram bounds in seconds, ascending (`+Inf` not included).
    #[cfg(test)]
    pub fn classic_bounds(&self) -> Vec<f64> {
        self.classic_buckets.iter().map(|&i| crate::model::distribution::native_bound(i)).collect()
    }

    /// Per-cgroup histogram bounds in seconds, ascending (`+Inf` not included).
    #[cfg(test)]
    pub fn cgroup_bounds(&self) -> Vec<f64> {
        self.cgroup_buckets.iter().map(|&m| buckets::CGROUP.bound(i32::from(m))).collect()
    }

    /// How many drain intervals one window spans.
    pub fn intervals_per_window(&self) -> u32 {
        let n = self.window.as_nanos() / self.interval.as_nanos().max(1);
        // check.rs bounds the window to MAX_WINDOW and the interval from below, so n is small.
        u32::try_from(n).unwrap_or(u32::MAX)
    }
}

/// Puts the running value back; notes `name` if the sources now ask for another.
fn keep<T: PartialEq>(name: &'static str, new: &mut T, running: T, needs_restart: &mut Vec<&'static str>) {
    if *new != running {
        needs_restart.push(name);
        *new = running;
    }
}

#[cfg(test)]
mod tests;
