//! The settings of `run` as every source writes them, declared once in the `settings!` table:
//! [`RunArgs`] is at once the `run` flags, the `RUNQLAT_*` variables and the `--config` file's
//! schema, with the parsers each value goes through (so a value means the same in all three), and
//! [`SETTINGS`] what the reference says of each. Plain clap/serde types; `config` merges and checks.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use clap::builder::BoolishValueParser;
use serde::Deserialize;

settings! {
    /// Settings of `run` from one source. The same struct is the schema of the `--config` file
    /// (key = field name) and of the `RUNQLAT_<FIELD>` variables (see `config`), so a flag, its key
    /// and its variable cannot drift apart. No field has a clap default: "not given" must stay
    /// visible so that the environment, the file or the built-in default can fill it, in that order.
    #[derive(Clone, Debug, Default, Args, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    #[command(after_help = "Every setting except --config can also be given in the environment as \
        RUNQLAT_<NAME> (e.g. RUNQLAT_TOP_CGROUPS=50) or in the --config file as <name> (e.g. top_cgroups = 50). \
        A flag wins over the environment, which wins over the file.")]
    pub struct RunArgs {
        #[arg(long, value_name = "PATH")]
        #[serde(skip)]
        config: PathBuf {
            section: "Sources" => "A flag wins over its RUNQLAT_* variable, which wins over the --config file, which \
                wins over the built-in default. Bad input stops the start with one line per problem, all at once.",
            help: "TOML file with any of the settings below (env RUNQLAT_CONFIG)",
            more: "Re-read on SIGHUP. Only a regular file of at most 1 MiB is read, once it has stood still for \
                   0.6 s (a reload waits up to 5 s for that); replace it by rename. A file that never stands still \
                   that long, or is empty, is refused on SIGHUP and the running settings stay.",
            default: "off",
            apply: Start,
        },

        #[arg(long, visible_alias = "web.listen-address", value_name = "ADDR:PORT", value_parser = parse_listen)]
        #[serde(deserialize_with = "super::format::de_listen")]
        listen: SocketAddr {
            section: "Serving" => "Where and how /metrics and the other endpoints are served.",
            help: "Where to serve /metrics; `:PORT` means every IPv4 interface",
            more: "\"[::]:9954\" adds IPv6.",
            default: "0.0.0.0:9954",
            apply: Restart,
        },

        #[arg(long, visible_alias = "web.config.file", value_name = "PATH")]
        web_config_file: PathBuf {
            help: "exporter-toolkit web configuration (YAML: tls_server_config, basic_auth_users, \
                   http_server_config.headers) for every endpoint; re-read on SIGHUP; without it, plain HTTP and no auth",
            more: "See deploy/web-config.yml and the security guide.",
            default: "off",
            example: "\"/etc/latency-daemon/web-config.yml\"",
            apply: Reload,
        },

        #[arg(long, visible_alias = "web.max-requests", value_name = "N")]
        web_max_requests: usize {
            help: "Requests handled at once, all endpoints together (0: no limit); more are answered 503 at once",
            default: "40",
            apply: Restart,
        },

        #[arg(long, visible_alias = "web.max-connections", value_name = "N")]
        web_max_connections: usize {
            help: "Connections open at once (idle, slow or busy), a quarter of them at most from one address; \
                   more are answered 503",
            default: "1024",
            apply: Restart,
        },

        #[arg(long, visible_alias = "web.external-url", value_name = "URL")]
        web_external_url: String {
            help: "Where users reach this daemon (e.g. through a reverse proxy or an ingress): alerts link to it \
                   (generatorURL, an alert's capture and its picture); without it, http(s)://HOSTNAME:PORT/ of \
                   listen",
            more: "An http:// or https:// URL without credentials, query or fragment; a path is kept as a prefix \
                   of every link (the proxy must strip it: the daemon serves at /).",
            default: "off",
            example: "\"https://node1.example.com/latency/\"",
            apply: Reload,
        },

        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[serde(deserialize_with = "super::format::de_duration")]
        interval: Duration {
            section: "Measuring" => "What the kernel program keeps and how the daemon reads it.",
            help: "How often to read the kernel's counters, 100ms to 1m",
            default: "1s",
            apply: Restart,
        },

        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[serde(deserialize_with = "super::format::de_duration")]
        window: Duration {
            help: "Span of the window maximum and quantiles; a whole multiple of --interval, at most 1h",
            default: "15s",
            apply: Reload,
        },

        #[arg(long, value_name = "N")]
        top_cgroups: usize {
            help: "Cgroups exported individually, the slowest first, 1 to 1000; the rest add up in cgroup=\"other\"",
            default: "20",
            apply: Reload,
        },

        #[arg(long, value_name = "N")]
        max_cgroups: u32 {
            help: "Capacity of the kernel's per-cgroup histogram maps (slots and overflow), 16 to 65536",
            more: "Slots are the power of two at or above it, plus an overflow map of this many; a delay that \
                   finds neither is counted as lost.",
            default: "1024",
            apply: Restart,
        },

        #[arg(long, value_name = "SECONDS,…", value_delimiter = ',')]
        classic_buckets: Vec<f64> {
            help: "Upper bounds (seconds) of the classic histogram, each a bucket boundary 2^(i/8)",
            more: "A bound that is not a boundary is refused, naming the nearest two.",
            default: "2^-20, 2^-19, …, 2^6",
            described: true,
            apply: Reload,
        },

        #[arg(long, value_name = "SECONDS,…", value_delimiter = ',')]
        cgroup_buckets: Vec<f64> {
            help: "Upper bounds (seconds) of the per-cgroup histograms, from 2^-20, 2^-18, …, 2^6",
            default: "all 14",
            described: true,
            apply: Reload,
        },

        #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true",
              value_parser = BoolishValueParser::new())]
        per_cgroup: bool {
            help: "Keep a histogram per cgroup v2 of the task that waited (an array store per delay)",
            default: "true",
            apply: Restart,
        },

        #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true",
              value_parser = BoolishValueParser::new())]
        wait_causes: bool {
            help: "Split each wait by cause: the part its cgroup was throttled by a CPU limit and the part its CPU \
                   spent in IRQ or hypervisor steal, from the kernel's own clocks (a few loads per enqueue and \
                   switch-in, 4 more bytes per stamp); the rest by who held the CPU",
            default: "true",
            apply: Restart,
        },

        #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true",
              value_parser = BoolishValueParser::new())]
        irq_tracepoints: bool {
            help: "With --wait-causes, on kernels that do not account IRQ time (CONFIG_IRQ_TIME_ACCOUNTING \
                   off), time device IRQ handlers and softirqs with the irq tracepoints and count them in each \
                   wait's irq_steal part (two clock reads per handler or softirq run) and, with capture_dir, \
                   record them in captures; unavailable where the kernel accounts IRQ time itself",
            default: "false",
            apply: Restart,
        },

        #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true",
              value_parser = BoolishValueParser::new())]
        throttle_hooks: bool {
            help: "With --wait-causes, on kernels before 6.8 (whose run queues keep no per-group throttle \
                   clock), time CPU-limit throttling with two programs on tg_throttle_down and tg_unthrottle_up \
                   (fexit, or kprobes where the kernel has no BPF trampolines; they run when a group is \
                   throttled or unthrottled; a hash lookup per enqueue and switch-in), so a throttled wait \
                   is counted as throttled; not needed on 6.8+, unavailable where the kernel attaches neither",
            default: "true",
            apply: Restart,
        },

        #[arg(long, value_name = "PATH")]
        capture_dir: PathBuf {
            help: "Keep every CPU's last scheduler events (the capture recorder) and, when an alert fires, \
                   write them there as a Perfetto trace, served at /api/v1/captures; off without it",
            more: "The recorder is four programs of their own on sched_switch, sched_waking, \
                   sched_migrate_task and cpu_idle (about 140 ns per switch and 310 ns per wakeup on a 2-vCPU \
                   VM), and with irq_tracepoints four more that record IRQ handlers and softirqs. Each capture \
                   is a trace and an SVG picture; capture_interval, capture_max_files and capture_max_mib \
                   bound them, runqlat_captures_total counts them. See the captures guide.",
            default: "off",
            example: "\"/var/lib/latency-daemon/captures\"",
            apply: Restart,
        },

        #[arg(long, value_name = "N")]
        capture_events: u32 {
            help: "Events the capture recorder keeps per CPU, the newest, 64 to 1048576 (rounded up to a power \
                   of two; 96 bytes of kernel memory each, per possible CPU). A finished wait is read at the \
                   next drain: enough for an interval of a busy CPU's events keeps it (a CPU switching 10,000 \
                   times a second writes about 20,000)",
            default: "4096",
            apply: Restart,
        },

        #[arg(long, value_name = "DURATION", value_parser = parse_duration_or_zero)]
        #[serde(deserialize_with = "super::format::de_duration_or_zero")]
        capture_interval: Duration {
            help: "At most one new capture of an alert per this long in all; 0s: no limit but the writer's (one \
                   capture at a time, two waiting)",
            default: "10s",
            apply: Restart,
        },

        #[arg(long, value_name = "DURATION", value_parser = parse_duration_or_zero)]
        #[serde(deserialize_with = "super::format::de_duration_or_zero")]
        capture_cpu_interval: Duration {
            help: "At most one new capture of an alert per this long for waits on one CPU, so a CPU in a storm \
                   leaves room for the others; 0s: no limit per CPU",
            default: "1m",
            apply: Restart,
        },

        #[arg(long, value_name = "N")]
        capture_max_files: u32 {
            help: "Captures kept in capture_dir, 1 to 100000; beyond it the oldest are removed \
                   (runqlat_captures_removed_total)",
            default: "32",
            apply: Restart,
        },

        #[arg(long, value_name = "MIB")]
        capture_max_mib: u32 {
            help: "MiB of captures kept in capture_dir, 1 to 1048576; beyond it the oldest are removed (the newest \
                   always stays)",
            default: "256",
            apply: Restart,
        },

        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[serde(deserialize_with = "super::format::de_duration")]
        capture_demand: Duration {
            help: "How long a capture asked for with SIGUSR1 (or `latency-daemon capture`) keeps reading: every \
                   CPU's events from the rings' reach before the signal to this long after it, 1s to 10m",
            default: "10s",
            apply: Restart,
        },

        #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true",
              value_parser = BoolishValueParser::new())]
        wait_scan: bool {
            help: "At each drain, list the tasks still waiting for a CPU (a kernel task iterator, off the \
                   scheduler's path; about 0.6 µs per task on the host): stalls are seen and alerted on while \
                   they last",
            default: "true",
            apply: Restart,
        },

        #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true",
              value_parser = BoolishValueParser::new())]
        per_task: bool {
            help: "Keep per-task statistics in the kernel (a hash update per context switch)",
            default: "false",
            apply: Restart,
        },

        #[arg(long, value_name = "N")]
        max_tasks: u32 {
            help: "Capacity of the kernel's per-task map, used with --per-task, 1 to 1048576",
            default: "32768",
            apply: Restart,
        },

        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[serde(deserialize_with = "super::format::de_duration")]
        ceiling: Duration {
            help: "Delays above this are discarded and counted instead of recorded",
            more: "At most 2^40 ns, about 18 minutes: the kernel's stamps keep time modulo twice that.",
            default: "10m",
            apply: Restart,
        },

        #[arg(long, value_enum, value_name = "CLOCK")]
        #[serde(deserialize_with = "super::format::de_clock")]
        clock: ClockArg {
            help: "Clock for stamps, as for `record` (see `record --help`)",
            more: "\"monotonic\" (as perf sched and runqlat) or \"run-queue\" (as the kernel's run_delay).",
            default: "monotonic",
            apply: Restart,
        },

        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[serde(deserialize_with = "super::format::de_duration")]
        alert_max_delay: Duration {
            section: "Alerts" => "Off until a threshold is set: alert_max_delay, or an entry of either table. A \
                threshold must be below ceiling. The kernel attributes delays (who ran instead, queue depth) at or \
                above the lowest threshold set at start: a reload may raise thresholds or turn alerting off, but \
                lowering them below that, or turning alerting on, waits for a restart.",
            help: "Alert when a run-queue delay exceeds this (e.g. 20ms); the file can also set it per reason \
                   (alert_reason_max_delay) and per cgroup (alert_cgroup_max_delay)",
            default: "off",
            example: "\"20ms\"",
            apply: Raise,
        },

        #[arg(skip)]
        alert_reason_max_delay: BTreeMap<String, String> {
            help: "Thresholds per reason (\"wakeup\": after a sleep, \"preempt\": after losing the CPU while \
                   runnable), over alert_max_delay",
            more: "Either key may be left out.",
            default: "off",
            example: "{ wakeup = \"20ms\", preempt = \"5ms\" }",
            file_only: true,
            apply: Raise,
        },

        #[arg(skip)]
        alert_cgroup_max_delay: BTreeMap<String, String> {
            help: "Thresholds per cgroup v2 path, over the others, for tasks in that cgroup",
            more: "Paths from the cgroup2 mount, \"/\" is the root; exact match, no trailing '/'.",
            default: "off",
            example: "{ \"/kubepods/besteffort\" = \"100ms\", \"/system.slice\" = \"50ms\" }",
            file_only: true,
            apply: Raise,
        },

        #[arg(long, value_name = "N")]
        alert_for: u32 {
            help: "Consecutive windows (each --window long) with a delay over the threshold before an alert \
                   fires, 1 to 100; a wait still in progress over it counts drains (each --interval long) \
                   instead: it is continuous evidence, and waiting for whole windows would delay the page by \
                   up to a window",
            default: "1",
            apply: Reload,
        },

        #[arg(long, value_name = "N")]
        alert_resolve_after: u32 {
            help: "Consecutive windows without one before a firing alert resolves, 1 to 100",
            default: "2",
            apply: Reload,
        },

        #[arg(long, value_name = "DURATION", value_parser = parse_duration_or_zero)]
        #[serde(deserialize_with = "super::format::de_duration_or_zero")]
        alert_cooldown: Duration {
            help: "After an alert resolves, it cannot fire again for this long; 0s turns this off",
            default: "1m",
            apply: Reload,
        },

        #[arg(long, value_name = "URL", value_delimiter = ',')]
        #[serde(deserialize_with = "super::format::de_urls")]
        alertmanager_url: Vec<String> {
            help: "Alertmanager to send alerts to, as http[s]://HOST:PORT; repeatable or comma-separated. \
                   Shown with user information and query hidden",
            more: "A URL with credentials or a query is refused as a flag (every user reads /proc/<pid>/cmdline): \
                   give it in the variable or the file. Firing alerts are also logged on stderr.",
            default: "off",
            example: "[\"http://127.0.0.1:9093\"]",
            apply: Reload,
        },

        #[arg(long, value_name = "URL", value_delimiter = ',')]
        #[serde(deserialize_with = "super::format::de_urls")]
        alert_webhook: Vec<String> {
            help: "URL to POST each alert's firing and resolution to as JSON, http[s]://; repeatable or \
                   comma-separated. Shown with user information and query hidden",
            default: "off",
            example: "[\"https://hooks.example/latency\"]",
            apply: Reload,
        },

        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[serde(deserialize_with = "super::format::de_duration")]
        alert_resend: Duration {
            help: "How often active alerts are sent to Alertmanager again, at least 100ms",
            default: "30s",
            apply: Reload,
        },

        #[arg(long, value_name = "TEXT")]
        alert_severity: String {
            help: "The alerts' `severity` label: at most 64 bytes, no control characters",
            default: "warning",
            apply: Reload,
        },

        #[arg(long, value_name = "PATH")]
        alert_ca_file: PathBuf {
            help: "PEM file of the CAs that sign https:// sinks' certificates; without it, the system bundle",
            default: "off",
            example: "\"/etc/latency-daemon/alert-ca.pem\"",
            apply: Reload,
        },

        #[arg(long, value_name = "NAME")]
        alert_basic_auth_user: String {
            help: "User name of HTTP basic auth for every sink (with --alert-basic-auth-password-file)",
            default: "off",
            example: "\"latency-daemon\"",
            apply: Reload,
        },

        #[arg(long, value_name = "PATH")]
        alert_basic_auth_password_file: PathBuf {
            help: "File holding the basic auth password (its first line); never a flag's value",
            default: "off",
            example: "\"/etc/latency-daemon/alert-password\"",
            apply: Reload,
        },

        #[arg(long, value_name = "PATH")]
        alert_bearer_token_file: PathBuf {
            help: "File holding a bearer token sent to every sink (its first line)",
            default: "off",
            example: "\"/etc/latency-daemon/alert-token\"",
            apply: Reload,
        },

        #[arg(long, visible_alias = "otlp.endpoint", value_name = "URL")]
        otlp_endpoint: String {
            section: "OpenTelemetry push" => "Every metric of /metrics pushed over OTLP/HTTP (protobuf) to an \
                OpenTelemetry Collector, Prometheus's or VictoriaMetrics's OTLP receiver or a vendor. The standard \
                OTEL_EXPORTER_OTLP_* variables fill what these settings leave unset; OTEL_SERVICE_NAME and \
                OTEL_RESOURCE_ATTRIBUTES name the resource. See docs/otlp.md.",
            help: "URL of the OTLP/HTTP metrics endpoint, http[s]://HOST:PORT/PATH (e.g. \
                   http://collector:4318/v1/metrics); without it, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, or \
                   OTEL_EXPORTER_OTLP_ENDPOINT plus /v1/metrics; shown with user information and query hidden",
            more: "A URL with credentials or a query is refused as a flag (every user reads /proc/<pid>/cmdline).",
            default: "off",
            example: "\"http://127.0.0.1:4318/v1/metrics\"",
            apply: Restart,
        },

        #[arg(long, visible_alias = "otlp.interval", value_name = "DURATION", value_parser = parse_duration)]
        #[serde(deserialize_with = "super::format::de_duration")]
        otlp_interval: Duration {
            help: "How often to push: a whole multiple of --interval, at most 1h; each push shows the latest drain",
            default: "15s",
            example: "\"15s\"",
            apply: Restart,
        },

        #[arg(long, visible_alias = "otlp.timeout", value_name = "DURATION", value_parser = parse_duration)]
        #[serde(deserialize_with = "super::format::de_duration")]
        otlp_timeout: Duration {
            help: "Time for one attempt (connect, send, the response's head), 100ms to 1m; else \
                   OTEL_EXPORTER_OTLP_METRICS_TIMEOUT / OTEL_EXPORTER_OTLP_TIMEOUT (milliseconds)",
            default: "10s",
            apply: Restart,
        },

        #[arg(long, visible_alias = "otlp.headers", value_name = "NAME=VALUE,…")]
        otlp_headers: String {
            help: "Headers sent with every push, e.g. an API key, as OTEL_EXPORTER_OTLP_HEADERS writes them \
                   (comma-separated name=value, values percent-encoded); never shown or logged",
            more: "Refused as a flag (every user reads /proc/<pid>/cmdline): give them in RUNQLAT_OTLP_HEADERS, \
                   OTEL_EXPORTER_OTLP_METRICS_HEADERS, OTEL_EXPORTER_OTLP_HEADERS or the --config file.",
            default: "off",
            example: "\"x-api-key=…\"",
            apply: Restart,
        },

        #[arg(long, visible_alias = "otlp.compression", value_enum, value_name = "gzip|none")]
        #[serde(deserialize_with = "super::format::de_choice")]
        otlp_compression: OtlpCompression {
            help: "Request body compression: gzip or none; else OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
            default: "gzip",
            apply: Restart,
        },

        #[arg(long, visible_alias = "otlp.temporality", value_enum, value_name = "cumulative|delta")]
        #[serde(deserialize_with = "super::format::de_choice")]
        otlp_temporality: OtlpTemporality {
            help: "Counters and histograms as totals since start (cumulative, what Prometheus takes) or as the \
                   change since the previous push (delta); else OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
            more: "With delta, a batch dropped while the receiver was unreachable is lost (and counted).",
            default: "cumulative",
            apply: Restart,
        },

        #[arg(long, visible_alias = "otlp.ca-file", value_name = "PATH")]
        otlp_ca_file: PathBuf {
            help: "PEM file of the CAs that sign an https:// receiver's certificate; else \
                   OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE, else the system bundle",
            default: "off",
            example: "\"/etc/latency-daemon/otlp-ca.pem\"",
            apply: Restart,
        },

        #[arg(long, visible_alias = "otlp.cert-file", value_name = "PATH")]
        otlp_cert_file: PathBuf {
            help: "PEM client certificate (chain) for receivers that require one, with --otlp.key-file; else \
                   OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE",
            default: "off",
            example: "\"/etc/latency-daemon/otlp-client.pem\"",
            apply: Restart,
        },

        #[arg(long, visible_alias = "otlp.key-file", value_name = "PATH")]
        otlp_key_file: PathBuf {
            help: "PEM private key of --otlp.cert-file; else OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY",
            default: "off",
            example: "\"/etc/latency-daemon/otlp-client.key\"",
            apply: Restart,
        },

        #[arg(long, visible_alias = "otlp.queue", value_name = "N")]
        otlp_queue: usize {
            help: "Pushes kept while the receiver is unreachable or slow, 1 to 1000; when full, the oldest is \
                   dropped and counted",
            default: "8",
            apply: Restart,
        },

        #[arg(long, visible_alias = "log.level", value_enum, value_name = "LEVEL")]
        #[serde(deserialize_with = "super::format::de_choice")]
        log_level: LogLevel {
            section: "Logs" => "One event per line on stderr; alert lines are JSON either way.",
            help: "Least severe log events written: debug, info, warn or error",
            default: "info",
            apply: Reload,
        },

        #[arg(long, visible_alias = "log.format", value_enum, value_name = "FORMAT")]
        #[serde(deserialize_with = "super::format::de_choice")]
        log_format: LogFormat {
            help: "How log events are written to stderr, one per line: logfmt or json",
            more: "logfmt is key=value, as Prometheus and its exporters write; json is one object per line with \
                   time, level, target and msg.",
            default: "logfmt",
            apply: Reload,
        },

        #[arg(long, visible_alias = "path.procfs", value_name = "PATH")]
        path_procfs: PathBuf {
            section: "Host file systems" => "Where the host's file systems are (node_exporter's --path.* flags), \
                for running in a container with them mounted elsewhere; each must be a directory.",
            help: "procfs of the host's PID namespace (hostPID in a container): pid_max, kernel release, host \
                   name, this process's mount table",
            more: "It must be the host PID namespace's: pid_max sizes the stamp array.",
            default: "/proc",
            apply: Restart,
        },

        #[arg(long, visible_alias = "path.sysfs", value_name = "PATH")]
        path_sysfs: PathBuf {
            help: "sysfs mount point: the kernel's BTF (kernel/btf/vmlinux)",
            default: "/sys",
            apply: Restart,
        },

        #[arg(long, visible_alias = "path.cgroupfs", value_name = "PATH")]
        path_cgroupfs: PathBuf {
            help: "cgroupfs mount point: the cgroup2 mount at or below it in this process's mount table names \
                   the cgroups",
            default: "/sys/fs/cgroup",
            apply: Restart,
        },

        #[arg(long, visible_alias = "path.rootfs", value_name = "PATH")]
        path_rootfs: PathBuf {
            help: "The host's root: container runtimes' state (run/containerd, var/lib/containers, …) is read \
                   below it",
            default: "/",
            apply: Restart,
        },
    }
}

pub use super::values::{
    ClockArg, LogFormat, LogLevel, MAX_CEILING, OtlpCompression, OtlpTemporality, ceiling_problem, parse_ceiling,
    parse_duration, parse_duration_or_zero, parse_listen,
};
