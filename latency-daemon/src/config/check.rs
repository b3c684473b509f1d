//! Merged settings in, a `Config` out with every problem noted (never just the first), each
//! naming its field; also the checks `reload` repeats on the config it assembles.

use std::fmt;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use super::Config;
use super::args::RunArgs;
use super::buckets::{CGROUP, CLASSIC};

/// Below this, reading every CPU's counters each interval costs more than the latency it shows.
const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// Above this, the window (at least one interval) outlives Prometheus's default 15 s scrapes.
const MAX_INTERVAL: Duration = Duration::from_secs(60);
/// Longer windows belong in PromQL over the exported histograms, not in the daemon's memory.
const MAX_WINDOW: Duration = Duration::from_secs(3600);
const TOP_CGROUPS: RangeInclusive<usize> = 1..=1000;
/// Each entry is a histogram of 128 bytes per CPU: 65536 of them on 64 CPUs is already 512 MiB.
const MAX_CGROUPS: RangeInclusive<u32> = 16..=65536;
/// As `record` accepts: up to a quarter of the largest possible pid_max (2^22).
const MAX_TASKS: RangeInclusive<u32> = 1..=1_048_576;
const CAPTURE_EVENTS: RangeInclusive<u32> = 64..=1_048_576;
const CAPTURE_MAX_FILES: RangeInclusive<u32> = 1..=100_000;
const CAPTURE_MAX_MIB: RangeInclusive<u32> = 1..=1_048_576;
const CAPTURE_DEMAND: RangeInclusive<Duration> = Duration::from_secs(1)..=Duration::from_secs(600);

/// One thing wrong with one setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The setting's file key (flag name with `_` for `-`).
    pub field: String,
    pub message: String,
}

impl Problem {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem { field: field.into(), message: message.into() }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Bound of the web limits: a descriptor each, far below any real ulimit's worth of use.
const MAX_WEB: usize = 65_536;

/// Each field from `merged`, else its default; appends every problem to `problems`. The returned
/// config is only meaningful when `problems` stays empty.
pub(super) fn resolve(
    merged: RunArgs,
    config_file: Option<PathBuf>,
    env: super::Env<'_>,
    problems: &mut Vec<Problem>,
) -> Config {
    let d = Config::default();
    let alert = super::alert::resolve(&merged, problems);
    let otlp = super::otlp::resolve(&merged, env, problems);
    // On a problem, the default stands in: the config is void anyway, and an empty list would
    // add a second, misleading problem.
    let classic_buckets = match merged.classic_buckets.map(|s| CLASSIC.rungs_of("classic_buckets", &s)) {
        None => d.classic_buckets,
        Some(Ok(rungs)) => rungs.iter().map(|r| r + CLASSIC.first).collect(),
        Some(Err(found)) => {
            problems.extend(found);
            d.classic_buckets
        }
    };
    let cgroup_buckets = match merged.cgroup_buckets.map(|s| CGROUP.rungs_of("cgroup_buckets", &s)) {
        None => d.cgroup_buckets,
        // Rungs are below CGROUP.rungs = 14, so they fit in a u8.
        Some(Ok(rungs)) => rungs.iter().map(|&r| r as u8).collect(),
        Some(Err(found)) => {
            problems.extend(found);
            d.cgroup_buckets
        }
    };
    let web = merged.web_config_file.as_deref().and_then(|path| match super::web::WebConfig::load(path) {
        Ok(w) => Some(w),
        Err(e) => {
            problems.push(Problem::new("web_config_file", e.to_string()));
            None
        }
    });
    let config = Config {
        listen: merged.listen.unwrap_or(d.listen),
        web_config_file: merged.web_config_file.clone(),
        web,
        web_max_requests: merged.web_max_requests.unwrap_or(d.web_max_requests),
        web_max_connections: merged.web_max_connections.unwrap_or(d.web_max_connections),
        web_external_url: merged.web_external_url.clone(),
        interval: merged.interval.unwrap_or(d.interval),
        window: merged.window.unwrap_or(d.window),
        top_cgroups: merged.top_cgroups.unwrap_or(d.top_cgroups),
        max_cgroups: merged.max_cgroups.unwrap_or(d.max_cgroups),
        classic_buckets,
        cgroup_buckets,
        per_cgroup: merged.per_cgroup.unwrap_or(d.per_cgroup),
        capture_dir: merged.capture_dir.clone(),
        capture_events: merged.capture_events.unwrap_or(d.capture_events),
        capture_interval: merged.capture_interval.unwrap_or(d.capture_interval),
        capture_cpu_interval: merged.capture_cpu_interval.unwrap_or(d.capture_cpu_interval),
        capture_max_files: merged.capture_max_files.unwrap_or(d.capture_max_files),
        capture_max_mib: merged.capture_max_mib.unwrap_or(d.capture_max_mib),
        capture_demand: merged.capture_demand.unwrap_or(d.capture_demand),
        wait_scan: merged.wait_scan.unwrap_or(d.wait_scan),
        wait_causes: merged.wait_causes.unwrap_or(d.wait_causes),
        irq_tracepoints: merged.irq_tracepoints.unwrap_or(d.irq_tracepoints),
        throttle_hooks: merged.throttle_hooks.unwrap_or(d.throttle_hooks),
        per_task: merged.per_task.unwrap_or(d.per_task),
        max_tasks: merged.max_tasks.unwrap_or(d.max_tasks),
        ceiling: merged.ceiling.unwrap_or(d.ceiling),
        clock: merged.clock.map_or(d.clock, Into::into),
        alert,
        otlp,
        log_level: merged.log_level.unwrap_or(d.log_level),
        log_format: merged.log_format.unwrap_or(d.log_format),
        path_procfs: merged.path_procfs.unwrap_or(d.path_procfs),
        path_sysfs: merged.path_sysfs.unwrap_or(d.path_sysfs),
        path_cgroupfs: merged.path_cgroupfs.unwrap_or(d.path_cgroupfs),
        path_rootfs: merged.path_rootfs.unwrap_or(d.path_rootfs),
        config_file,
    };
    problems.extend(check(&config));
    config
}

/// Ranges and relations between fields.
pub(super) fn check(c: &Config) -> Vec<Problem> {
    let mut problems = Vec::new();
    problems.extend(within(
        "interval",
        human(c.interval),
        (MIN_INTERVAL..=MAX_INTERVAL).contains(&c.interval),
        format!("{}..={}", human(MIN_INTERVAL), human(MAX_INTERVAL)),
    ));
    problems.extend(outside("top_cgroups", c.top_cgroups, &TOP_CGROUPS));
    problems.extend(within(
        "web_max_requests",
        c.web_max_requests.to_string(),
        c.web_max_requests <= MAX_WEB,
        format!("0..={MAX_WEB}"),
    ));
    problems.extend(within(
        "web_max_connections",
        c.web_max_connections.to_string(),
        (1..=MAX_WEB).contains(&c.web_max_connections),
        format!("1..={MAX_WEB}"),
    ));
    if let Some(url) = &c.web_external_url {
        problems.extend(external_url(url).err().map(|why| Problem::new("web_external_url", why)));
    }
    problems.extend(outside("max_cgroups", c.max_cgroups, &MAX_CGROUPS));
    problems.extend(outside("max_tasks", c.max_tasks, &MAX_TASKS));
    problems.extend(outside("capture_events", c.capture_events, &CAPTURE_EVENTS));
    problems.extend(outside("capture_max_files", c.capture_max_files, &CAPTURE_MAX_FILES));
    problems.extend(outside("capture_max_mib", c.capture_max_mib, &CAPTURE_MAX_MIB));
    problems.extend(within(
        "capture_demand",
        human(c.capture_demand),
        CAPTURE_DEMAND.contains(&c.capture_demand),
        format!("{}..={}", human(*CAPTURE_DEMAND.start()), human(*CAPTURE_DEMAND.end())),
    ));

    let (window, interval) = (human(c.window), human(c.interval));
    let window_problem = if c.window < c.interval {
        Some(format!("{window} is shorter than interval {interval}"))
    } else if c.window.as_nanos().checked_rem(c.interval.as_nanos()) != Some(0) {
        Some(format!("{window} is not a whole multiple of interval {interval}"))
    } else if c.window > MAX_WINDOW {
        Some(format!("{window} is longer than {}", human(MAX_WINDOW)))
    } else {
        None
    };
    problems.extend(window_problem.map(|m| Problem::new("window", m)));

    if c.classic_buckets.is_empty() {
        problems.push(Problem::new("classic_buckets", "needs at least one bound"));
    }
    if c.cgroup_buckets.is_empty() {
        problems.push(Problem::new("cgroup_buckets", "needs at least one bound"));
    }
    problems.extend(super::args::ceiling_problem(c.ceiling).map(|m| Problem::new("ceiling", m)));
    problems.extend(super::alert::check(&c.alert, c.ceiling));
    problems.extend(super::otlp::check(&c.otlp, c.interval));
    for (field, path) in [
        ("path_procfs", &c.path_procfs),
        ("path_sysfs", &c.path_sysfs),
        ("path_cgroupfs", &c.path_cgroupfs),
        ("path_rootfs", &c.path_rootfs),
    ] {
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => problems.push(Problem::new(field, format!("{} is not a directory", path.display()))),
            Err(e) => problems.push(Problem::new(field, format!("{}: {e}", path.display()))),
        }
    }
    problems
}

/// Sorts problems into the order of `run --help` (file-only keys where they sit among the
/// fields), wherever each was found.
pub(super) fn in_field_order(problems: &mut [Problem]) {
    let order = super::sources::file_keys();
    problems.sort_by_key(|p| order.iter().position(|&f| f == p.field).unwrap_or(usize::MAX));
}

fn human(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn show<T: fmt::Display>(r: &RangeInclusive<T>) -> String {
    format!("{}..={}", r.start(), r.end())
}

/// `field`'s problem when it is not `ok`: "{value} is not in {range}".
fn within(field: &str, value: String, ok: bool, range: String) -> Option<Problem> {
    (!ok).then(|| Problem::new(field, format!("{value} is not in {range}")))
}

/// Why `url` cannot be where users reach the daemon: it must be an http(s) URL (the sinks' one
/// parser) with no credentials, query or fragment, since every alert carries it to every receiver.
fn external_url(url: &str) -> Result<(), String> {
    let shown = crate::model::sink_url::redact(url);
    let parsed =
        crate::model::sink_url::HttpUrl::parse(url).map_err(|e| format!("'{}': {}", shown.escape_debug(), e.why))?;
    if parsed.userinfo.is_some() || url.contains(['?', '#']) {
        return Err(format!(
            "'{}': must have no user information, query or fragment (alerts show it to everyone)",
            shown.escape_debug()
        ));
    }
    Ok(())
}

/// `field`'s problem when `value` is outside `range`: "{value} is not in {start}..={end}".
fn outside<T: PartialOrd + fmt::Display>(field: &str, value: T, range: &RangeInclusive<T>) -> Option<Problem> {
    (!range.contains(&value)).then(|| Problem::new(field, format!("{value} is not in {}", show(range))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(c: &Config) -> String {
        check(c).iter().map(Problem::to_string).collect::<Vec<_>>().join("; ")
    }

    #[test]
    fn defaults_pass() {
        assert_eq!(problems(&Config::default()), "");
    }

    #[test]
    fn each_message_names_its_field() {
        let d = Config::default();
        let cases: [(Config, &str); 12] = [
            (
                Config { interval: Duration::from_millis(50), window: Duration::from_millis(500), ..d.clone() },
                "interval: 50ms is not in 100ms..=1m",
            ),
            (
                Config { interval: Duration::from_secs(120), window: Duration::from_secs(240), ..d.clone() },
                "interval: 2m is not in 100ms..=1m",
            ),
            (
                Config { window: Duration::from_millis(1500), ..d.clone() },
                "window: 1s 500ms is not a whole multiple of interval 1s",
            ),
            (Config { window: Duration::from_millis(500), ..d.clone() }, "window: 500ms is shorter than interval 1s"),
            (Config { window: Duration::from_secs(7200), ..d.clone() }, "window: 2h is longer than 1h"),
            (Config { top_cgroups: 0, ..d.clone() }, "top_cgroups: 0 is not in 1..=1000"),
            (Config { max_cgroups: 8, ..d.clone() }, "max_cgroups: 8 is not in 16..=65536"),
            (Config { max_tasks: 0, ..d.clone() }, "max_tasks: 0 is not in 1..=1048576"),
            (Config { classic_buckets: vec![], ..d.clone() }, "classic_buckets: needs at least one bound"),
            (Config { cgroup_buckets: vec![], ..d.clone() }, "cgroup_buckets: needs at least one bound"),
            (Config { ceiling: Duration::ZERO, ..d.clone() }, "ceiling: must be greater than zero"),
            (
                Config { ceiling: Duration::from_secs(3600), ..d.clone() },
                "ceiling: 1h is above the longest delay the kernel's stamps can hold, 1100 s (about 18 minutes)",
            ),
        ];
        for (config, expected) in cases {
            assert_eq!(problems(&config), expected);
        }
    }

    #[test]
    fn an_external_url_is_a_plain_http_url_and_credentials_are_never_echoed() {
        let with = |url: &str| problems(&Config { web_external_url: Some(url.to_owned()), ..Config::default() });
        for fine in ["https://node1.example.com/latency/", "http://10.0.0.1:9954", "http://[::1]:9954/x"] {
            assert_eq!(with(fine), "", "{fine}");
        }
        assert_eq!(
            with("ftp://node1/"),
            "web_external_url: 'ftp://node1/': must start with http:// or https:// (e.g. http://alertmanager:9093)"
        );
        for leaky in ["https://admin:hunter2@node1/", "https://node1/?token=hunter2", "https://node1/#hunter2"] {
            let said = with(leaky);
            assert!(said.contains("must have no user information, query or fragment"), "{leaky}: {said}");
            assert!(!said.contains("hunter2"), "{said}");
        }
        assert!(with("https://node1/a b").contains("whitespace"));
    }

    #[test]
    fn bounds_are_inclusive() {
        let d = Config::default();
        let edges = [
            Config { interval: MIN_INTERVAL, window: MIN_INTERVAL, ..d.clone() },
            Config { interval: MAX_INTERVAL, window: MAX_INTERVAL, ..d.clone() },
            Config { window: MAX_WINDOW, top_cgroups: 1000, max_cgroups: 65536, max_tasks: 1_048_576, ..d.clone() },
            Config { top_cgroups: 1, max_cgroups: 16, max_tasks: 1, ..d.clone() },
        ];
        for config in edges {
            assert_eq!(problems(&config), "", "{config:?}");
        }
    }

    #[test]
    fn every_problem_is_reported() {
        let merged = RunArgs {
            window: Some(Duration::from_millis(1500)),
            top_cgroups: Some(0),
            classic_buckets: Some(vec![0.001]),
            ..RunArgs::default()
        };
        let mut found = Vec::new();
        resolve(merged, None, &|_| None, &mut found);
        in_field_order(&mut found);
        let fields: Vec<&str> = found.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, ["window", "top_cgroups", "classic_buckets"]);
    }
}
