//! Loading and reloading through every source, with a fake environment and temporary files.

use std::path::{Path, PathBuf};

use clap::{Args as _, FromArgMatches as _};

use super::*;

/// The example file shipped for operators; it must list every key at its default.
const EXAMPLE: &str = include_str!("../../../deploy/latency-daemon.toml");

/// `run`'s flags as clap parses them.
fn parse_run(argv: &[&str]) -> Result<RunArgs, clap::Error> {
    let matches = run_command().try_get_matches_from(["run"].iter().chain(argv))?;
    RunArgs::from_arg_matches(&matches)
}

fn flags(argv: &[&str]) -> RunArgs {
    parse_run(argv).unwrap()
}

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

fn no_env(_: &str) -> Option<String> {
    None
}

/// A config file that disappears with the test. Read at once, without waiting for it to stand
/// still: these tests are about what a file says, config::file's about when it is taken.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        super::file::settle_here(std::time::Duration::ZERO);
        let path = std::env::temp_dir().join(format!("latency-daemon-{}-{name}.toml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        TempFile(path)
    }
    fn rewrite(&self, text: &str) {
        std::fs::write(&self.0, text).unwrap();
    }
    fn flag(&self) -> String {
        format!("--config={}", self.0.display())
    }
}

/// A config loaded from a file of `text` and no other flag: the file (to rewrite), the flags (to
/// reload with) and the config.
fn from_file(name: &str, text: &str) -> (TempFile, RunArgs, Config) {
    let file = TempFile::new(name, text);
    let args = flags(&[&file.flag()]);
    let config = Config::load_with(&args, &no_env).unwrap();
    (file, args, config)
}

/// Why a reload of `running` with `args` (its file rewritten) is refused.
fn refused_reload(running: &Config, args: &RunArgs) -> String {
    running.reload_with(args, &no_env).unwrap_err().to_string()
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn error(args: &RunArgs, env: Env<'_>) -> String {
    let e = Config::load_with(args, env).unwrap_err().to_string();
    assert!(!e.contains('\n'), "not one line: {e}");
    e
}

#[test]
fn defaults() {
    let c = Config::load_with(&flags(&[]), &no_env).unwrap();
    assert_eq!(c, Config::default());
    assert_eq!(c.listen, "0.0.0.0:9954".parse().unwrap());
    assert_eq!(
        (c.interval, c.window, c.ceiling),
        (Duration::from_secs(1), Duration::from_secs(15), Duration::from_secs(600))
    );
    assert_eq!((c.top_cgroups, c.max_cgroups, c.per_task, c.max_tasks), (20, 1024, false, 32768));
    assert_eq!(c.clock, Clock::Monotonic);
    assert_eq!(c.intervals_per_window(), 15);
    let classic = c.classic_bounds();
    assert_eq!(classic.len(), 27);
    assert_eq!(classic, (-20..=6).map(|k| 2f64.powi(k)).collect::<Vec<_>>());
    assert_eq!(c.cgroup_bounds(), (0..14).map(|m| 2f64.powi(-20 + 2 * m)).collect::<Vec<_>>());
    assert_eq!(c.config_file, None);
    assert_eq!(c.alert, AlertConfig::default());
    assert!(!c.alert.enabled(), "alerting is off until a threshold is set");
    assert_eq!(c.alert.attribute_ns(), 0);
    let a = &c.alert;
    assert_eq!((a.max_delay, a.per_reason, a.per_cgroup.as_slice()), (None, [None, None], &[][..]));
    assert_eq!((a.for_windows, a.resolve_after, a.cooldown), (1, 2, Duration::from_secs(60)));
    assert_eq!((a.alertmanagers.len(), a.webhooks.len()), (0, 0));
    assert_eq!((a.resend, a.severity.as_str()), (Duration::from_secs(30), "warning"));
}

#[test]
fn flag_beats_env_beats_file_beats_default() {
    let file = TempFile::new("precedence", "interval = \"2s\"\nwindow = \"30s\"\ntop_cgroups = 30\nmax_tasks = 100\n");
    let env = env(&[("RUNQLAT_INTERVAL", "500ms"), ("RUNQLAT_TOP_CGROUPS", "40"), ("RUNQLAT_CONFIG", "/nonexistent")]);
    let c = Config::load_with(&flags(&[&file.flag(), "--interval", "250ms"]), &env).unwrap();
    assert_eq!(c.interval, Duration::from_millis(250), "flag");
    assert_eq!(c.top_cgroups, 40, "env");
    assert_eq!((c.window, c.max_tasks), (Duration::from_secs(30), 100), "file");
    assert_eq!(c.max_cgroups, 1024, "default");
    assert_eq!(c.config_file.as_deref(), Some(file.0.as_path()), "--config beats RUNQLAT_CONFIG");
    assert_eq!(c.intervals_per_window(), 120);

    let c =
        Config::load_with(&flags(&[]), &|name: &str| (name == "RUNQLAT_CONFIG").then(|| file.0.display().to_string()))
            .unwrap();
    assert_eq!((c.interval, c.top_cgroups), (Duration::from_secs(2), 30), "file named by RUNQLAT_CONFIG");
}

#[test]
fn host_paths_from_flags_env_and_file() {
    let d = Config::default();
    assert_eq!(
        [&d.path_procfs, &d.path_sysfs, &d.path_cgroupfs, &d.path_rootfs].map(|p| p.to_str().unwrap()),
        ["/proc", "/sys", "/sys/fs/cgroup", "/"]
    );
    let tmp = std::env::temp_dir();
    let tmp_s = tmp.to_str().unwrap();
    let c = Config::load_with(&flags(&["--path.procfs", tmp_s, "--path-sysfs", tmp_s]), &no_env).unwrap();
    assert_eq!((c.path_procfs.as_path(), c.path_sysfs.as_path()), (tmp.as_path(), tmp.as_path()));
    let c = Config::load_with(&flags(&[]), &env(&[("RUNQLAT_PATH_ROOTFS", tmp_s)])).unwrap();
    assert_eq!(c.path_rootfs, tmp);
    let file = TempFile::new("paths", &format!("path_cgroupfs = \"{tmp_s}\"\n"));
    let c = Config::load_with(&flags(&["--config", file.0.to_str().unwrap()]), &no_env).unwrap();
    assert_eq!(c.path_cgroupfs, tmp);
    let e = Config::load_with(&flags(&["--path.rootfs", "/nonexistent/root"]), &no_env).unwrap_err().to_string();
    assert_eq!(e, "invalid configuration: path_rootfs: /nonexistent/root: No such file or directory (os error 2)");
}

#[test]
fn listen_alias_and_port_only() {
    let c = Config::load_with(&flags(&["--web.listen-address", ":9100"]), &no_env).unwrap();
    assert_eq!(c.listen, "0.0.0.0:9100".parse().unwrap());
    let c = Config::load_with(&flags(&["--listen=[::1]:9954"]), &no_env).unwrap();
    assert_eq!(c.listen, "[::1]:9954".parse().unwrap());
    let c = Config::load_with(&flags(&[]), &env(&[("RUNQLAT_LISTEN", ":9954")])).unwrap();
    assert_eq!(c.listen, "0.0.0.0:9954".parse().unwrap());
}

#[test]
fn other_flags_parse() {
    let args = flags(&[
        "--per-task",
        "--clock",
        "run-queue",
        "--classic-buckets",
        "1,0.5",
        "--cgroup-buckets=0.25",
        "--ceiling",
        "1m",
        "--max-cgroups",
        "64",
    ]);
    let c = Config::load_with(&args, &no_env).unwrap();
    assert!(c.per_task);
    assert_eq!(c.clock, Clock::RunQueue);
    assert_eq!(c.classic_bounds(), [0.5, 1.0]);
    assert_eq!(c.cgroup_bounds(), [0.25]);
    assert_eq!((c.ceiling, c.max_cgroups), (Duration::from_secs(60), 64));
    assert!(!Config::load_with(&flags(&["--per-task=false"]), &no_env).unwrap().per_task);
}

#[test]
fn alert_flags_parse() {
    let args = flags(&[
        "--alert-max-delay",
        "20ms",
        "--alert-for=3",
        "--alert-resolve-after",
        "5",
        "--alert-cooldown",
        "0s",
        "--alertmanager-url",
        "http://a:9093",
        "--alertmanager-url=http://b:9093,http://c:9093/am",
        "--alert-webhook",
        "http://hooks:8080/x",
        "--alert-webhook",
        "http://[::1]:9000",
        "--alert-resend",
        "100ms",
        "--alert-severity",
        "critical",
    ]);
    let a = Config::load_with(&args, &no_env).unwrap().alert;
    assert_eq!(a.max_delay, Some(Duration::from_millis(20)));
    assert_eq!((a.for_windows, a.resolve_after, a.cooldown), (3, 5, Duration::ZERO));
    assert_eq!(a.alertmanagers, ["http://a:9093", "http://b:9093", "http://c:9093/am"], "repeated and comma-separated");
    assert_eq!(a.webhooks, ["http://hooks:8080/x", "http://[::1]:9000"]);
    assert_eq!((a.resend, a.severity.as_str()), (Duration::from_millis(100), "critical"));
    assert!(a.enabled());
    assert_eq!(a.attribute_ns(), 20_000_000);

    // Zero is a cooldown, not a threshold or a resend period.
    assert!(parse_run(&["--alert-max-delay", "0s"]).is_err());
    assert!(parse_run(&["--alert-resend", "0s"]).is_err());
    assert!(parse_run(&["--alert-cooldown", "-1s"]).is_err());
    assert!(parse_run(&["--alert-reason-max-delay", "5ms"]).is_err(), "file only");
}

#[test]
fn alert_env() {
    let vars = env(&[
        ("RUNQLAT_ALERTMANAGER_URL", "http://a:9093,http://b:9093"),
        ("RUNQLAT_ALERT_WEBHOOK", "http://hooks/x"),
        ("RUNQLAT_ALERT_MAX_DELAY", "5ms"),
        ("RUNQLAT_ALERT_COOLDOWN", "0s"),
        ("RUNQLAT_ALERT_FOR", "2"),
        ("RUNQLAT_ALERT_SEVERITY", "page"),
    ]);
    let a = Config::load_with(&flags(&["--alertmanager-url", "http://flag:9093"]), &vars).unwrap().alert;
    assert_eq!(a.alertmanagers, ["http://flag:9093"], "the flag's list replaces the variable's");
    let a = Config::load_with(&flags(&[]), &vars).unwrap().alert;
    assert_eq!(a.alertmanagers, ["http://a:9093", "http://b:9093"]);
    assert_eq!(a.webhooks, ["http://hooks/x"]);
    assert_eq!((a.max_delay, a.cooldown), (Some(Duration::from_millis(5)), Duration::ZERO));
    assert_eq!((a.for_windows, a.severity.as_str()), (2, "page"));

    let e = error(&flags(&[]), &env(&[("RUNQLAT_ALERTMANAGER_URL", "http://a:9093,ftp://b:9093")]));
    assert_eq!(
        e,
        "invalid configuration: alertmanager_url: 'ftp://b:9093': must start with http:// or https:// \
         (e.g. http://alertmanager:9093)"
    );
}

#[test]
fn alert_file() {
    let file = TempFile::new(
        "alert",
        r#"
alert_max_delay = "20ms"
alert_reason_max_delay = { preempt = "5ms" }
alertmanager_url = ["http://a:9093", "http://b:9093"]
alert_webhook = "http://hooks/x,http://hooks/y"
alert_cooldown = "0s"

[alert_cgroup_max_delay]
"/system.slice" = "50ms"
"/kubepods/besteffort" = "100ms"
"/" = "1s"
"#,
    );
    let c = Config::load_with(&flags(&[&file.flag()]), &no_env).unwrap();
    let a = &c.alert;
    assert_eq!(a.max_delay, Some(Duration::from_millis(20)));
    assert_eq!(a.per_reason, [None, Some(Duration::from_millis(5))], "[wakeup, preempt]");
    assert_eq!(
        a.per_cgroup,
        [
            ("/".to_owned(), Duration::from_secs(1)),
            ("/kubepods/besteffort".to_owned(), Duration::from_millis(100)),
            ("/system.slice".to_owned(), Duration::from_millis(50)),
        ],
        "sorted by path"
    );
    assert_eq!(a.alertmanagers, ["http://a:9093", "http://b:9093"]);
    assert_eq!(a.webhooks, ["http://hooks/x", "http://hooks/y"], "a string splits at commas, as the variable");
    assert_eq!(a.cooldown, Duration::ZERO);
    assert_eq!(a.attribute_ns(), 5_000_000, "the lowest of all");
    let rules = a.rules();
    assert_eq!(rules.threshold(latency_common::Reason::Wakeup, "/web"), Some(20_000_000));
    assert_eq!(rules.threshold(latency_common::Reason::Preempt, "/web"), Some(5_000_000));
    assert_eq!(rules.threshold(latency_common::Reason::Preempt, "/system.slice"), Some(50_000_000));

    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["alert_reason_max_delay"], serde_json::json!({ "preempt": "5ms" }));
    assert_eq!(json["alert_cgroup_max_delay"]["/kubepods/besteffort"], "100ms");
    assert_eq!(json["alert_cooldown"], "0s");
}

#[test]
fn alert_file_problems_name_their_fields() {
    let file = TempFile::new(
        "alert-problems",
        r#"
ceiling = "1s"
alert_max_delay = "2s"
alert_reason_max_delay = { wakeup = "0s", preempt = "-5ms", migrate = "1ms" }
alert_cgroup_max_delay = { "system.slice" = "50ms", "/web" = "0ms" }
alert_for = 0
alertmanager_url = ["ftp://am:9093", "http://ok:9093"]
alert_webhook = ["http://hooks:http"]
alert_resend = "10ms"
alert_severity = "bad\u0007"
"#,
    );
    let e = error(&flags(&[&file.flag()]), &no_env);
    let expected = [
        "alert_max_delay: 2s is not below ceiling 1s: delays above the ceiling are discarded, so it could never fire",
        "alert_reason_max_delay: unknown reason 'migrate'; expected wakeup or preempt",
        "alert_reason_max_delay: preempt: '-5ms': expected number at 0",
        "alert_reason_max_delay: wakeup: '0s': must be greater than zero",
        "alert_cgroup_max_delay: '/web': '0ms': must be greater than zero",
        "alert_cgroup_max_delay: path 'system.slice' must start with '/' (a cgroup v2 path, e.g. /system.slice)",
        "alert_for: 0 is not in 1..=100",
        "alertmanager_url: 'ftp://am:9093': must start with http:// or https:// (e.g. http://alertmanager:9093)",
        "alert_webhook: 'http://hooks:http': port 'http' is not a number from 1 to 65535",
        "alert_resend: 10ms is below 100ms",
        "alert_severity: 'bad\\u{7}' contains control characters",
    ];
    assert_eq!(e, format!("invalid configuration: {}", expected.join("; ")));

    // Unparseable values stop at the file, naming the line (and so the key).
    for (text, want) in [
        ("alert_max_delay = \"0s\"\n", "line 1, column 19, key `alert_max_delay`: '0s': must be greater than zero"),
        ("alert_cooldown = \"-1s\"\n", "line 1, column 18, key `alert_cooldown`: '-1s'"),
        ("alert_reason_max_delay = { wakeup = 5 }\n", "key `alert_reason_max_delay`"),
        ("alertmanager_url = 9093\n", "line 1, column 20, key `alertmanager_url`: a URL string or an array of them"),
    ] {
        file.rewrite(text);
        let e = error(&flags(&[&file.flag()]), &no_env);
        assert!(e.contains(want), "{text}: {e}");
    }
}

#[test]
fn every_problem_on_one_line() {
    let e = error(&flags(&["--window", "1500ms", "--top-cgroups", "0"]), &no_env);
    assert_eq!(
        e,
        "invalid configuration: window: 1s 500ms is not a whole multiple of interval 1s; top_cgroups: 0 is not in 1..=1000"
    );
    // Problems from the environment and from validation together, in --help order.
    let e = error(&flags(&["--max-cgroups", "1"]), &env(&[("RUNQLAT_CEILING", "never"), ("RUNQLAT_INTERVAL", "10ms")]));
    assert!(
        e.starts_with(
            "invalid configuration: interval: 10ms is not in 100ms..=1m; max_cgroups: 1 is not in 16..=65536; \
             ceiling: RUNQLAT_CEILING: invalid value 'never' for '--ceiling <DURATION>'"
        ),
        "{e}"
    );
}

#[test]
fn an_otlp_queue_out_of_range_is_an_error_without_an_endpoint_too() {
    let e = error(&flags(&["--otlp.queue", "0"]), &no_env);
    assert_eq!(e, "invalid configuration: otlp_queue: 0 is not in 1..=1000");
}

#[test]
fn bad_bucket_names_the_nearest_boundaries() {
    let e = error(&flags(&["--classic-buckets", "0.001,0.5"]), &no_env);
    assert_eq!(
        e,
        "invalid configuration: classic_buckets: 0.001 is not a bucket boundary 2^(i/8) s; \
         the nearest are 0.0009765625 (976.6µs) and 0.001064948958 (1.065ms)"
    );
    let e = error(&flags(&["--cgroup-buckets", "0.5"]), &no_env);
    assert!(e.starts_with("invalid configuration: cgroup_buckets: 0.5 is not one of 2^-20, 2^-18, …, 2^6 s"), "{e}");
}

#[test]
fn file_problems() {
    let file = TempFile::new("unknown-key", "window = \"30s\"\ntop_cgroup = 5\n");
    let e = error(&flags(&[&file.flag()]), &no_env);
    let path = file.0.display();
    assert!(
        e.starts_with(&format!("config file {path}: line 2, column 1, key `top_cgroup`: unknown field `top_cgroup`")),
        "{e}"
    );

    // Values the file parses but validation rejects name the field, like any other source's.
    file.rewrite("top_cgroups = 5000\n");
    assert_eq!(error(&flags(&[&file.flag()]), &no_env), "invalid configuration: top_cgroups: 5000 is not in 1..=1000");

    let missing = Path::new("/nonexistent/latency-daemon.toml");
    let e = error(&flags(&["--config", &missing.display().to_string()]), &no_env);
    assert!(e.starts_with("config file: cannot read /nonexistent/latency-daemon.toml: "), "{e}");
}

#[test]
fn reload_keeps_restart_only_fields() {
    let file = TempFile::new("reload", "interval = \"1s\"\nwindow = \"15s\"\nmax_tasks = 100\n");
    let args = flags(&[&file.flag(), "--top-cgroups", "7"]);
    let running = Config::load_with(&args, &no_env).unwrap();

    file.rewrite(
        "listen = \":9999\"\ninterval = \"2s\"\nwindow = \"30s\"\nmax_tasks = 200\ntop_cgroups = 5\n\
         classic_buckets = [0.5, 1.0]\n",
    );
    let reload = running.reload_with(&args, &no_env).unwrap();
    assert_eq!(reload.needs_restart, ["listen", "interval", "max_tasks"]);
    let c = &reload.config;
    assert_eq!((c.listen, c.interval, c.max_tasks), (running.listen, running.interval, running.max_tasks), "kept");
    assert_eq!(c.window, Duration::from_secs(30), "reloaded");
    assert_eq!(c.classic_bounds(), [0.5, 1.0], "reloaded");
    assert_eq!(c.top_cgroups, 7, "the flag still wins");

    // Unchanged sources: nothing to restart, nothing different.
    let again = reload.config.reload_with(&args, &no_env).unwrap();
    assert_eq!(again.config, reload.config);
    assert_eq!(
        again.needs_restart,
        ["listen", "interval", "max_tasks"],
        "the file still differs from the running values"
    );
    file.rewrite("interval = \"1s\"\nwindow = \"15s\"\nmax_tasks = 100\n");
    let back = running.reload_with(&args, &no_env).unwrap();
    assert_eq!((back.config, back.needs_restart), (running.clone(), vec![]));
}

#[test]
fn reload_adopts_higher_thresholds_and_keeps_lower_ones() {
    let (file, args, running) =
        from_file("reload-alert", "alert_max_delay = \"20ms\"\nalert_reason_max_delay = { preempt = \"10ms\" }\n");
    assert_eq!(running.alert.attribute_ns(), 10_000_000);

    // Higher (or equal) everywhere: the kernel already attributes these delays.
    file.rewrite(
        "alert_max_delay = \"30ms\"\nalert_cgroup_max_delay = { \"/batch\" = \"10ms\" }\n\
         alert_for = 3\nalert_resolve_after = 4\nalert_cooldown = \"5m\"\n\
         alertmanager_url = [\"http://am:9093\"]\nalert_webhook = [\"http://hook/x\"]\n\
         alert_resend = \"1m\"\nalert_severity = \"critical\"\n",
    );
    let reload = running.reload_with(&args, &no_env).unwrap();
    assert_eq!(reload.needs_restart, Vec::<&str>::new());
    let a = &reload.config.alert;
    assert_eq!(a.max_delay, Some(Duration::from_millis(30)));
    assert_eq!(a.per_reason, [None, None]);
    assert_eq!(a.per_cgroup, [("/batch".to_owned(), Duration::from_millis(10))]);
    assert_eq!((a.for_windows, a.resolve_after, a.cooldown), (3, 4, Duration::from_secs(300)));
    assert_eq!((a.alertmanagers.join(" "), a.webhooks.join(" ")), ("http://am:9093".into(), "http://hook/x".into()));
    assert_eq!((a.resend, a.severity.as_str()), (Duration::from_secs(60), "critical"));

    // Lower: every threshold stays as it runs; everything else is adopted.
    file.rewrite(
        "alert_max_delay = \"50ms\"\nalert_reason_max_delay = { wakeup = \"5ms\" }\n\
         alert_severity = \"page\"\nalert_for = 2\n",
    );
    let reload = running.reload_with(&args, &no_env).unwrap();
    assert_eq!(reload.needs_restart, ["alert thresholds"]);
    let a = &reload.config.alert;
    assert_eq!((a.max_delay, a.per_reason), (running.alert.max_delay, running.alert.per_reason), "kept");
    assert_eq!(a.attribute_ns(), running.alert.attribute_ns());
    assert_eq!((a.severity.as_str(), a.for_windows), ("page", 2), "adopted");

    // Off: adopted at once. Back on from off: the kernel stopped nothing, but a config that
    // started off never had attribution, so on waits for a restart.
    file.rewrite("alert_severity = \"page\"\n");
    let reload = running.reload_with(&args, &no_env).unwrap();
    assert_eq!(reload.needs_restart, Vec::<&str>::new());
    assert!(!reload.config.alert.enabled());
    let started_off = Config::load_with(&flags(&[]), &no_env).unwrap();
    file.rewrite("alert_max_delay = \"1s\"\n");
    let reload = started_off.reload_with(&args, &no_env).unwrap();
    assert_eq!(reload.needs_restart, ["alert thresholds"]);
    assert!(!reload.config.alert.enabled());
}

#[test]
fn reload_checks_thresholds_against_the_running_ceiling() {
    let (file, args, running) = from_file("reload-ceiling", "ceiling = \"1s\"\nalert_max_delay = \"500ms\"\n");
    file.rewrite("ceiling = \"1m\"\nalert_max_delay = \"2s\"\n");
    assert_eq!(
        refused_reload(&running, &args),
        "invalid configuration: alert_max_delay: 2s is not below ceiling 1s: delays above the ceiling are \
         discarded, so it could never fire (running values kept until restart: ceiling)"
    );
}

#[test]
fn reload_rejects_a_window_that_only_fits_the_new_interval() {
    let (file, args, running) = from_file("reload-window", "interval = \"1s\"\n");
    file.rewrite("interval = \"500ms\"\nwindow = \"1500ms\"\n");
    assert_eq!(
        refused_reload(&running, &args),
        "invalid configuration: window: 1s 500ms is not a whole multiple of interval 1s \
         (running values kept until restart: interval)"
    );
    file.rewrite("interval = \"1s\"\nwindow = \"bad\"\n");
    assert!(refused_reload(&running, &args).contains("line 2, column 10, key `window`: "));
}

#[test]
fn an_empty_file_is_the_defaults_at_start_but_refused_on_reload() {
    let (file, args, started) = from_file("reload-empty", "");
    assert_eq!(started.top_cgroups, 20, "at start an empty file is the defaults");
    file.rewrite("top_cgroups = 7\nalert_max_delay = \"100ms\"\n");
    let running = Config::load_with(&args, &no_env).unwrap();
    for empty in ["", " \n\t\n"] {
        file.rewrite(empty);
        let e = running.reload_with(&args, &no_env).unwrap_err();
        assert!(matches!(e, ConfigError::Empty { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("config file {} is empty, which a reload does not take for the defaults", file.0.display())
        );
    }
    file.rewrite("# every setting at its default\n");
    let reload = running.reload_with(&args, &no_env).unwrap();
    assert!(!reload.config.alert.enabled(), "a file of comments is a file, and asks for the defaults");
}

#[test]
fn example_file_lists_every_setting_at_its_default() {
    let file = sources::parse_file(EXAMPLE, Path::new("deploy/latency-daemon.toml")).unwrap();
    let mut problems = Vec::new();
    assert_eq!(check::resolve(file, None, &|_| None, &mut problems), Config::default());
    assert!(problems.is_empty(), "{problems:?}");

    // Every setting is commented out, as `# key = value`: at its default, or an example where it
    // has none (alert thresholds).
    let commented = |line: &str| {
        let key = line.strip_prefix('#')?.trim_start().split_once('=')?.0.trim();
        sources::file_keys().contains(&key).then_some(key.to_owned())
    };
    let live = toml::from_str::<toml::Table>(EXAMPLE).unwrap();
    assert!(live.is_empty(), "set in the example, not commented out: {:?}", live.keys().collect::<Vec<_>>());
    let mut keys: Vec<String> = live.keys().cloned().collect();
    keys.extend(EXAMPLE.lines().filter_map(commented));
    keys.sort();
    let mut settings: Vec<String> = sources::file_keys().iter().map(|&k| k.to_owned()).collect();
    settings.sort();
    assert_eq!(keys, settings, "every key once, set or commented out");

    // Uncommented, the lines are valid too (an array's continuation lines with its first), except
    // those naming files (which exist only where deployed) and the basic-auth user (which needs
    // its password file).
    let names_a_file = |key: &str| key.ends_with("_file") || key == "alert_basic_auth_user";
    let mut in_array = false;
    let uncommented: String = EXAMPLE
        .lines()
        .map(|line| {
            let open = in_array || commented(line).is_some_and(|key| !names_a_file(&key));
            if !open {
                return format!("{line}\n");
            }
            let line = line.trim_start_matches(['#', ' ']);
            in_array = if in_array { line.trim() != "]" } else { line.trim_end().ends_with('[') };
            format!("{line}\n")
        })
        .collect();
    let file = sources::parse_file(&uncommented, Path::new("uncommented")).unwrap();
    let config = check::resolve(file, None, &|_| None, &mut problems);
    assert!(problems.is_empty(), "{problems:?}");
    assert!(config.alert.enabled() && config.alert.per_reason.iter().all(Option::is_some), "{:?}", config.alert);
    assert_eq!(config.alert.per_cgroup.len(), 2);
}

#[test]
fn serialized_config_reads_back() {
    let custom = Config {
        classic_buckets: vec![-80, -79, 0],
        cgroup_buckets: vec![3, 13],
        clock: Clock::RunQueue,
        window: Duration::from_millis(2500),
        interval: Duration::from_millis(500),
        alert: AlertConfig {
            max_delay: Some(Duration::from_millis(20)),
            per_reason: [Some(Duration::from_micros(1500)), None],
            per_cgroup: vec![("/".into(), Duration::from_secs(1)), ("/a b/c".into(), Duration::from_millis(7))],
            for_windows: 2,
            resolve_after: 3,
            cooldown: Duration::ZERO,
            alertmanagers: vec!["http://a:9093".into(), "http://[::1]:9093/am".into()],
            // A query is shown redacted, so only URLs without one read back.
            webhooks: vec!["http://hook/x".into()],
            resend: Duration::from_millis(1500),
            severity: "critical".into(),
            ..AlertConfig::default()
        },
        ..Config::default()
    };
    for config in [Config::default(), custom] {
        let text = toml::to_string(&config).unwrap();
        let mut problems = Vec::new();
        let parsed =
            check::resolve(sources::parse_file(&text, Path::new("x")).unwrap(), None, &|_| None, &mut problems);
        assert_eq!((parsed, problems), (config, vec![]), "{text}");
    }
}

#[test]
fn help_shows_the_real_defaults() {
    let defaults = serde_json::to_value(Config::default()).unwrap();
    for arg in run_command().get_arguments() {
        let Some(long) = arg.get_long().filter(|&l| l != "config") else { continue };
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        let shown = match &defaults[long.replace('-', "_")] {
            // No default: the setting is off unless given.
            serde_json::Value::Null => "off".to_owned(),
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(_) => continue,
            other => other.to_string(),
        };
        assert!(help.ends_with(&format!("[default: {shown}]")), "--{long}: {help}");
    }
}

fn run_command() -> clap::Command {
    RunArgs::augment_args(clap::Command::new("run"))
}

/// Every setting, changed alone in the file and reloaded, is adopted or kept as the table says
/// (`settings::Apply`), so the reference's "on SIGHUP" column is what a reload does.
#[test]
fn every_setting_reloads_as_the_table_says() {
    let secret = TempFile::new("reload-secret", "s3cret\n");
    let secret_path = secret.0.display().to_string();
    // A value other than the default, for each setting; a new setting needs one here.
    let other = |key: &str| -> Option<String> {
        Some(match key {
            "listen" => "\"127.0.0.1:9955\"".into(),
            "web_max_requests" => "41".into(),
            "web_max_connections" => "1000".into(),
            "interval" => "\"500ms\"".into(),
            "window" => "\"30s\"".into(),
            "top_cgroups" => "5".into(),
            "max_cgroups" => "2048".into(),
            "classic_buckets" => "[0.5, 1.0]".into(),
            "cgroup_buckets" => "[1.0]".into(),
            "per_cgroup" => "false".into(),
            "wait_scan" => "false".into(),
            "wait_causes" => "false".into(),
            "irq_tracepoints" => "true".into(),
            "throttle_hooks" => "false".into(),
            "per_task" => "true".into(),
            "max_tasks" => "100".into(),
            "ceiling" => "\"1m\"".into(),
            "clock" => "\"run-queue\"".into(),
            "alert_for" => "3".into(),
            "alert_resolve_after" => "3".into(),
            "alert_cooldown" => "\"0s\"".into(),
            "alert_resend" => "\"1m\"".into(),
            "alert_severity" => "\"critical\"".into(),
            "alert_bearer_token_file" => format!("{secret_path:?}"),
            "otlp_interval" => "\"30s\"".into(),
            "otlp_timeout" => "\"5s\"".into(),
            "otlp_headers" => "\"x-api-key=abc\"".into(),
            "otlp_compression" => "\"none\"".into(),
            "otlp_temporality" => "\"delta\"".into(),
            "otlp_queue" => "16".into(),
            "capture_events" => "8192".into(),
            "capture_interval" => "\"1m\"".into(),
            "capture_cpu_interval" => "\"5m\"".into(),
            "capture_max_files" => "5".into(),
            "capture_max_mib" => "64".into(),
            "capture_demand" => "\"30s\"".into(),
            "log_level" => "\"warn\"".into(),
            "log_format" => "\"json\"".into(),
            "path_procfs" | "path_sysfs" | "path_cgroupfs" | "path_rootfs" => "\"/tmp\"".into(),
            _ => return None,
        })
    };
    let (file, args, running) = from_file("reload-each", "");
    let shown = |c: &Config| serde_json::to_value(c).unwrap();
    let mut tried = 0;
    for setting in args::SETTINGS {
        // Thresholds (`Raise`) have their own tests above; the others need a file of their kind.
        let value = match (setting.apply, setting.example) {
            (settings::Apply::Start | settings::Apply::Raise, _) => continue,
            _ if [
                "web_config_file",
                "alert_ca_file",
                "alert_basic_auth_user",
                "alert_basic_auth_password_file",
                "otlp_ca_file",
                "otlp_cert_file",
                "otlp_key_file",
            ]
            .contains(&setting.key) =>
            {
                continue;
            }
            (_, example) => other(setting.key)
                .or(example.map(str::to_owned))
                .unwrap_or_else(|| panic!("no other value for {} in this test", setting.key)),
        };
        file.rewrite(&format!("{} = {value}\n", setting.key));
        let reload = running.reload_with(&args, &no_env).unwrap_or_else(|e| panic!("{}: {e}", setting.key));
        let changed = shown(&reload.config)[setting.key] != shown(&running)[setting.key];
        match setting.apply {
            settings::Apply::Restart => {
                assert_eq!(reload.needs_restart, [setting.key], "{} is restart-only", setting.key);
                assert!(!changed, "{}: the running value is kept", setting.key);
            }
            _ => {
                assert!(reload.needs_restart.is_empty(), "{}: {:?}", setting.key, reload.needs_restart);
                assert!(changed, "{} = {value} is adopted on reload", setting.key);
            }
        }
        tried += 1;
    }
    assert!(tried >= 25, "{tried}");
}
