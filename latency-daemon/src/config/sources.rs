//! Flags, environment and file in, one merged `RunArgs` out (each field from the highest source
//! that sets it), plus the problems found in the environment.

use std::path::{Path, PathBuf};

use clap::{Args as _, FromArgMatches as _};

use super::args::RunArgs;
use super::{ConfigError, Env, Problem};

/// Every variable is this prefix plus the flag's name in upper snake case.
const ENV_PREFIX: &str = "RUNQLAT_";

/// Why the sources are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Occasion {
    /// At start an empty file means the defaults, as it always has.
    Start,
    /// On SIGHUP an empty file is refused: it is what an in-place rewrite leaves between its
    /// truncate and its first write, and taking it as "all defaults" would turn alerting off.
    Reload,
}

/// `args` over the environment over the `--config` file (named by a flag or `RUNQLAT_CONFIG`).
/// Returns the merged settings, the file read (if any) and the environment's problems; a file
/// that cannot be read or parsed is an error of its own, since nothing in it can be trusted.
pub(super) fn merge(
    args: &RunArgs,
    env: Env<'_>,
    occasion: Occasion,
) -> Result<(RunArgs, Option<PathBuf>, Vec<Problem>), ConfigError> {
    let mut problems = super::alert::secrets_in_flags(args);
    problems.extend(super::otlp::secrets_in_flags(args));
    let merged = args.clone().or(from_env(env, &mut problems));
    let Some(path) = merged.config.clone() else { return Ok((merged, None, problems)) };
    let text = super::file::read(&path).map_err(|source| ConfigError::Read { source })?;
    if occasion == Occasion::Reload && text.trim().is_empty() {
        return Err(ConfigError::Empty { path });
    }
    let file = parse_file(&text, &path)?;
    Ok((merged.or(file), Some(path), problems))
}

/// `run`'s arguments after clap refused them: each flag (with its values) parsed on its own, so
/// every bad one is named, not only the first. Empty when each is fine alone (the fault is in
/// their combination, e.g. a flag given twice): clap's own message says it then.
pub fn flag_problems(args: &[String]) -> Vec<String> {
    let command = RunArgs::augment_args(clap::Command::new("run"));
    let mut groups: Vec<Vec<&str>> = Vec::new();
    for arg in args {
        match groups.last_mut() {
            Some(group) if !(arg.starts_with('-') && arg.len() > 1) => group.push(arg),
            _ => groups.push(vec![arg]),
        }
    }
    groups
        .into_iter()
        .filter_map(|group| {
            let parsed = command
                .clone()
                .try_get_matches_from(std::iter::once("run").chain(group))
                .and_then(|matches| RunArgs::from_arg_matches(&matches));
            parsed.err().map(|e| first_line(&e))
        })
        .collect()
}

/// Variables named like ours that set nothing (a typo, or a setting that does not exist), from
/// the names of the process environment.
pub(super) fn unknown_vars(names: impl IntoIterator<Item = String>) -> Vec<Problem> {
    let command = RunArgs::augment_args(clap::Command::new("run"));
    let known: Vec<String> = command.get_arguments().filter_map(|a| a.get_long()).map(env_name).collect();
    let mut unknown: Vec<String> =
        names.into_iter().filter(|n| n.starts_with(ENV_PREFIX) && !known.contains(n)).collect();
    unknown.sort();
    unknown
        .into_iter()
        .map(|name| {
            Problem::new(
                name,
                format!(
                    "no such setting (each variable is {ENV_PREFIX} and the name of a flag of run, in upper snake case)"
                ),
            )
        })
        .collect()
}

/// Every problem of the process environment: values that do not parse and unknown variables.
pub(super) fn env_problems(env: Env<'_>, names: impl IntoIterator<Item = String>) -> Vec<Problem> {
    let mut problems = Vec::new();
    from_env(env, &mut problems);
    problems.extend(unknown_vars(names));
    problems
}

/// Every key the file takes, in the order of `RunArgs`'s fields (which is also `run --help`'s):
/// the flags' names and the file-only tables, as serde's derive lists them for `deny_unknown_fields`.
pub(super) fn file_keys() -> &'static [&'static str] {
    /// A deserializer that only asks for the struct's field list.
    struct Fields<'a>(&'a mut &'static [&'static str]);
    impl<'de> serde::Deserializer<'de> for Fields<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(serde::de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(serde::de::Error::custom("fields taken"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    // The error is the point: deserialization stops once the list is taken.
    let _ = <RunArgs as serde::Deserialize>::deserialize(Fields(&mut fields));
    fields
}

/// The variable that sets the flag `--long`.
pub(super) fn env_name(long: &str) -> String {
    format!("{ENV_PREFIX}{}", long.replace('-', "_").to_uppercase())
}

/// Parses each `RUNQLAT_*` variable as if it were given as its flag, so variables and flags share
/// one parser per setting and nothing here needs to change when a setting is added. Empty
/// variables count as unset, as for clap's own `env`.
fn from_env(env: Env<'_>, problems: &mut Vec<Problem>) -> RunArgs {
    let command = RunArgs::augment_args(clap::Command::new("run"));
    let mut merged = RunArgs::default();
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let name = env_name(long);
        let Some(value) = env(&name).filter(|v| !v.is_empty()) else { continue };
        let parsed = command
            .clone()
            .try_get_matches_from(["run".to_owned(), format!("--{long}={value}")])
            .and_then(|matches| RunArgs::from_arg_matches(&matches));
        match parsed {
            Ok(one) => merged = merged.or(one),
            Err(e) => problems.push(Problem::new(arg.get_id().as_str(), format!("{name}: {}", first_line(&e)))),
        }
    }
    merged
}

/// clap's message without its "error: " prefix and usage hints.
fn first_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let line = rendered.lines().find(|l| !l.trim().is_empty()).unwrap_or("invalid value");
    line.trim_start_matches("error: ").to_owned()
}

/// The file's settings; errors become one line naming the file, the line, the column and the key.
pub(super) fn parse_file(text: &str, path: &Path) -> Result<RunArgs, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Parse { path: path.to_owned(), message: squash(&e, text) })
}

/// toml renders errors over several lines with a caret under the offending text; keep the line,
/// the column, the key that line sets (when it is a plain key) and the message with its values
/// hidden — never the text: it may hold a password or a token, or be another file's (a path
/// symlinked by mistake).
fn squash(e: &toml::de::Error, text: &str) -> String {
    let key_line = |line: &str| bare_key(line).map(str::to_owned);
    let (place, key) = match e.span().and_then(|span| text.get(..span.start)) {
        Some(before) => {
            let number = before.matches('\n').count() + 1;
            let start = before.rfind('\n').map_or(0, |i| i + 1);
            let column = before[start..].chars().count() + 1;
            let line = text[start..].lines().next().unwrap_or_default();
            (Some(format!("line {number}, column {column}")), key_line(line))
        }
        None => (None, None),
    };
    let keys = file_keys();
    // A value of a known setting that cannot hold a credential is shown (`window = "soon"` says
    // what is wrong with it); on any other line, values stay hidden.
    let plain = key.as_deref().is_some_and(|k| keys.contains(&k) && !may_hold_secrets(k));
    let message = super::redact::hide_values(e.message(), |s| plain || keys.contains(&s) || key.as_deref() == Some(s));
    match (place, key) {
        (Some(place), Some(key)) => format!("{place}, key `{key}`: {message}"),
        (Some(place), None) => format!("{place}: {message}"),
        (None, _) => message,
    }
}

/// Settings whose values may carry a credential: sink URLs (user information, query tokens),
/// passwords, tokens, headers, anything about auth.
fn may_hold_secrets(key: &str) -> bool {
    ["url", "webhook", "password", "token", "secret", "header", "auth"].iter().any(|w| key.contains(w))
}

/// The key a line sets, if it starts with a bare key (`name =`, TOML's letters, digits, `-`, `_`).
fn bare_key(line: &str) -> Option<&str> {
    let (key, _) = line.split_once('=')?;
    let key = key.trim();
    let bare = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    bare.then_some(key)
}

#[cfg(test)]
mod tests {
    use super::super::args::{LogFormat, LogLevel};
    use super::*;

    fn fake(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn file_keys_are_the_fields_in_order() {
        let keys = file_keys();
        assert_eq!(keys.first(), Some(&"listen"), "config is not a file key");
        assert!(keys.contains(&"alert_cgroup_max_delay"), "file-only keys are listed: {keys:?}");
        let flags: Vec<String> = RunArgs::augment_args(clap::Command::new("run"))
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|&l| l != "config")
            .map(|l| l.replace('-', "_"))
            .collect();
        let keys_with_flags: Vec<&str> = keys.iter().copied().filter(|k| flags.iter().any(|f| f == k)).collect();
        assert_eq!(keys_with_flags, flags, "same order as run --help");
    }

    #[test]
    fn env_names_follow_the_flags() {
        assert_eq!(env_name("top-cgroups"), "RUNQLAT_TOP_CGROUPS");
        assert_eq!(env_name("config"), "RUNQLAT_CONFIG");
    }

    #[test]
    fn env_values_use_the_flag_parsers() {
        let env = fake(&[
            ("RUNQLAT_LISTEN", ":1234"),
            ("RUNQLAT_PER_TASK", "yes"),
            ("RUNQLAT_CLASSIC_BUCKETS", "0.5,1"),
            ("RUNQLAT_CLOCK", "run-queue"),
            ("RUNQLAT_CONFIG", "/etc/x.toml"),
            ("RUNQLAT_WINDOW", ""),
        ]);
        let mut problems = Vec::new();
        let args = from_env(&env, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(args.listen, Some("0.0.0.0:1234".parse().unwrap()));
        assert_eq!(args.per_task, Some(true));
        assert_eq!(args.classic_buckets, Some(vec![0.5, 1.0]));
        assert_eq!(args.clock, Some(super::super::args::ClockArg::RunQueue));
        assert_eq!(args.config, Some(PathBuf::from("/etc/x.toml")));
        assert_eq!(args.window, None, "empty means unset");
    }

    #[test]
    fn bad_env_values_name_field_and_variable() {
        let env = fake(&[("RUNQLAT_INTERVAL", "soon"), ("RUNQLAT_TOP_CGROUPS", "many")]);
        let mut problems = Vec::new();
        from_env(&env, &mut problems);
        let text: Vec<String> = problems.iter().map(Problem::to_string).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text[0].starts_with("interval: RUNQLAT_INTERVAL: ") && text[0].contains("'soon'"), "{text:?}");
        assert!(text[1].starts_with("top_cgroups: RUNQLAT_TOP_CGROUPS: ") && text[1].contains("'many'"), "{text:?}");
        assert!(text.iter().all(|t| !t.contains('\n')));
    }

    #[test]
    fn file_errors_are_one_line_with_line_number_and_key() {
        let path = Path::new("/etc/latency-daemon.toml");
        let e = parse_file("interval = \"1s\"\nbogus = 3\n", path).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "config file /etc/latency-daemon.toml: line 2, column 1, key `bogus`: unknown field `bogus`, \
                 expected one of `listen`"
            ),
            "{e}"
        );
        let e = parse_file("top_cgroups = \"20\"\n", path).unwrap_err().to_string();
        assert!(e.contains("line 1, column 15, key `top_cgroups`: invalid type: string \"20\""), "{e}");
        let e = parse_file("interval = \"soon\"\n", path).unwrap_err().to_string();
        assert!(e.contains("line 1, column 12, key `interval`: 'soon'"), "{e}");
        let e = parse_file("window = [\n", path).unwrap_err().to_string();
        assert!(e.contains("line "), "{e}");
        for e in ["config = \"/x\"", "clock = \"sundial\"", "listen = \"nowhere\""] {
            let e = parse_file(e, path).unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn every_bad_flag_is_named() {
        let args: Vec<String> =
            ["stray", "--bogus", "--interval", "soon", "--per-task", "--top-cgroups", "many"].map(String::from).into();
        let problems = flag_problems(&args);
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems[0].contains("'stray'"), "{problems:?}");
        assert!(problems[1].contains("'--bogus'"), "{problems:?}");
        assert!(problems[2].contains("'soon'") && problems[2].contains("--interval"), "{problems:?}");
        assert!(problems[3].contains("'many'"), "{problems:?}");
        assert!(problems.iter().all(|p| !p.contains('\n')));
        let fine: Vec<String> = ["--interval", "2s", "--log.level=warn", "--per-task"].map(String::from).into();
        assert!(flag_problems(&fine).is_empty());
    }

    #[test]
    fn log_settings_in_the_file() {
        let path = Path::new("/etc/latency-daemon.toml");
        let args = parse_file("log_level = \"warn\"\nlog_format = \"json\"\n", path).unwrap();
        assert_eq!((args.log_level, args.log_format), (Some(LogLevel::Warn), Some(LogFormat::Json)));
        let e = parse_file("log_level = \"loud\"\n", path).unwrap_err().to_string();
        assert!(e.contains("key `log_level`: 'loud' is not one of debug, info, warn, error"), "{e}");
    }

    #[test]
    fn file_errors_never_echo_the_text() {
        let path = Path::new("/etc/latency-daemon.toml");
        let cases = [
            ("alert_webhook = [\"http://bob:PW1@h/?token=TK1\" oops]\n", "line 1, column 48, key `alert_webhook`: "),
            ("window = \"1s\"\nalertmanager_url = [\n  \"http://a:PW1@h/?token=TK1\" ]]\n", "line 3, column "),
            ("alertmanager_url = [\"http://a:PW1@h/?token=TK1\", 3]\n", "line 1, column "),
            ("alert_severity = 7\n", "key `alert_severity`: invalid type: integer `7`"),
            ("window = \"soon\"\n", "key `window`: "),
            ("root:PW1:19000:0:99999:7:::\n", "line 1, column 28: key with no value"),
            ("PW1 = \"TK1\"\n", "line 1, column 1, key `PW1`: unknown field `PW1`"),
        ];
        for (text, want) in cases {
            let e = parse_file(text, path).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(!e.contains("TK1") && !e.contains('\n'), "{text:?}: {e}");
            assert!(want.contains("PW1") || !e.contains("PW1"), "{text:?}: {e}");
        }
    }

    #[test]
    fn bare_keys() {
        assert_eq!(bare_key("  top_cgroups = 3"), Some("top_cgroups"));
        assert_eq!(bare_key("a-b=1"), Some("a-b"));
        for line in ["root:x:0:0::/root:/bin/sh", "\"quoted\" = 1", "a.b = 1", "= 1", "no equals"] {
            assert_eq!(bare_key(line), None, "{line}");
        }
    }

    #[test]
    fn unknown_variables_are_named() {
        let names = ["RUNQLAT_TOP_CGROUP", "PATH", "RUNQLAT_INTERVAL", "RUNQLAT_LOG_LEVEL", "RUNQLAT_AAA"];
        let env = fake(&[("RUNQLAT_WINDOW", "never")]);
        let problems = env_problems(&env, names.map(String::from));
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, ["window", "RUNQLAT_AAA", "RUNQLAT_TOP_CGROUP"]);
    }

    #[test]
    fn or_prefers_self() {
        let high = RunArgs { top_cgroups: Some(1), ..RunArgs::default() };
        let low = RunArgs { top_cgroups: Some(2), max_tasks: Some(3), ..RunArgs::default() };
        let merged = high.or(low);
        assert_eq!((merged.top_cgroups, merged.max_tasks), (Some(1), Some(3)));
    }
}
