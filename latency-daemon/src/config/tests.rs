//! Loading and reloading through every source, with a fake environment and temporary files.

use std::path::{Path, PathBuf};

use clap::{Args as _, Parser as _};

use super::*;
use crate::cli::{Cli, Command};

/// The example file shipped for operators; it must list every key at its default.
const EXAMPLE: &str = include_str!("../../../deploy/latency-daemon.toml");

fn flags(argv: &[&str]) -> RunArgs {
    let cli = Cli::try_parse_from(["latency-daemon", "run"].iter().chain(argv)).unwrap();
    let Command::Run(args) = cli.command else { panic!("not run: {argv:?}") };
    args
}

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

fn no_env(_: &str) -> Option<String> {
    None
}

/// A config file that disappears with the test.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
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
        e.starts_with(&format!("config file {path}: line 2 (`top_cgroup = 5`): unknown field `top_cgroup`")),
        "{e}"
    );

    // Values the file parses but validation rejects name the field, like any other source's.
    file.rewrite("top_cgroups = 5000\n");
    assert_eq!(error(&flags(&[&file.flag()]), &no_env), "invalid configuration: top_cgroups: 5000 is not in 1..=1000");

    let missing = Path::new("/nonexistent/latency-daemon.toml");
    let e = error(&flags(&["--config", &missing.display().to_string()]), &no_env);
    assert!(e.starts_with("cannot read config file /nonexistent/latency-daemon.toml: "), "{e}");
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
fn reload_rejects_a_window_that_only_fits_the_new_interval() {
    let file = TempFile::new("reload-window", "interval = \"1s\"\n");
    let args = flags(&[&file.flag()]);
    let running = Config::load_with(&args, &no_env).unwrap();
    file.rewrite("interval = \"500ms\"\nwindow = \"1500ms\"\n");
    let e = running.reload_with(&args, &no_env).unwrap_err().to_string();
    assert_eq!(
        e,
        "invalid configuration: window: 1s 500ms is not a whole multiple of interval 1s \
         (running values kept until restart: interval)"
    );
    file.rewrite("interval = \"1s\"\nwindow = \"bad\"\n");
    assert!(running.reload_with(&args, &no_env).unwrap_err().to_string().contains("line 2 (`window = \"bad\"`)"));
}

#[test]
fn example_file_lists_every_setting_at_its_default() {
    let file = sources::parse_file(EXAMPLE, Path::new("deploy/latency-daemon.toml")).unwrap();
    let mut problems = Vec::new();
    assert_eq!(check::resolve(file, None, &mut problems), Config::default());
    assert!(problems.is_empty(), "{problems:?}");

    let keys: Vec<String> = toml::from_str::<toml::Table>(EXAMPLE).unwrap().keys().cloned().collect();
    let mut settings: Vec<String> = run_command()
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|&l| l != "config")
        .map(|l| l.replace('-', "_"))
        .collect();
    settings.sort();
    assert_eq!(keys, settings);
}

#[test]
fn serialized_config_reads_back() {
    let custom = Config {
        classic_buckets: vec![-80, -79, 0],
        cgroup_buckets: vec![3, 13],
        clock: Clock::RunQueue,
        window: Duration::from_millis(2500),
        interval: Duration::from_millis(500),
        ..Config::default()
    };
    for config in [Config::default(), custom] {
        let text = toml::to_string(&config).unwrap();
        let mut problems = Vec::new();
        let parsed = check::resolve(sources::parse_file(&text, Path::new("x")).unwrap(), None, &mut problems);
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
