//! What the .deb's guest must show, as pure functions: in, the console lines of `deb-check.sh`
//! (`@@ deb KEY=VALUE`, `@@ deb journal LINE`) and what the .deb holds; out, the markers and named
//! checks with the figures behind them.
use std::collections::BTreeMap;

use super::checks::Check;

/// The unit under test, as the .deb installs it.
pub const UNIT: &str = "latency-daemon.service";
/// How each of the checker's lines starts.
pub const MARK: &str = "@@ deb ";
/// CAP_PERFMON (38) and CAP_BPF (39): the unit's CapabilityBoundingSet=.
pub const BOUNDING: u64 = (1 << 38) | (1 << 39);

/// The checker's lines, read off the console.
#[derive(Debug, Default, PartialEq)]
pub struct Markers {
    pub fields: BTreeMap<String, String>,
    pub journal: Vec<String>,
}

impl Markers {
    /// `@@ deb KEY=VALUE` and `@@ deb journal LINE`, found anywhere in a line (the kernel may
    /// have written to the console first); the first value of a key wins.
    pub fn parse<'a>(console: impl IntoIterator<Item = &'a str>) -> Markers {
        let mut markers = Markers::default();
        for line in console {
            let Some(at) = line.find(MARK) else { continue };
            let rest = &line[at + MARK.len()..];
            if let Some(text) = rest.strip_prefix("journal ") {
                markers.journal.push(text.to_owned());
            } else if let Some((key, value)) = rest.split_once('=') {
                markers.fields.entry(key.trim().to_owned()).or_insert_with(|| value.trim().to_owned());
            }
        }
        markers
    }

    fn get(&self, key: &str) -> &str {
        self.fields.get(key).map_or("", String::as_str)
    }
}

/// What the guest must show.
#[derive(Debug, Clone)]
pub struct Expected {
    /// The kernel's `uname -r`.
    pub release: String,
    /// The binary the unit must run: the .deb's, or target/dist's for the bare route.
    pub sha256: String,
    pub static_binary: bool,
    /// Whose binary that is, for the check's name (`the .deb's`).
    pub whose: &'static str,
}

/// The checker's markers judged: the kernel booted, the unit active and running without a
/// restart, no unit failed, its process the expected static binary, /metrics counting delays, and the process
/// bounded by CAP_BPF and CAP_PERFMON, holding nothing else (the daemon keeps CAP_BPF after
/// attaching where the kernel checks it on each map read, as 5.10 does), with no_new_privs and a
/// seccomp filter.
pub fn judge(m: &Markers, expected: &Expected) -> Vec<Check> {
    let show = |key: &str| format!("{key}={}", if m.get(key).is_empty() { "absent" } else { m.get(key) });
    let hex = |key: &str| u64::from_str_radix(m.get(key), 16).ok();
    let main_pid: u32 = m.get("MainPID").parse().unwrap_or(0);
    let sha = m.get("sha256");
    let count: f64 = m.get("metrics_count").parse().unwrap_or(0.0);
    let bounding = hex("CapBnd");
    let effective = hex("CapEff");
    let last_error = m.journal.iter().rev().find(|l| l.contains("level=error")).map(String::as_str);
    // The checker prints the marker with nothing after it when no unit failed.
    let failed_units = m.fields.get("failed_units").map(|f| f.split_whitespace().collect::<Vec<_>>());
    vec![
        Check::new("kernel", m.get("uname") == expected.release, format!("uname -r `{}`", m.get("uname"))),
        Check::new(
            "unit active",
            m.get("ActiveState") == "active" && m.get("SubState") == "running" && main_pid > 0,
            ["ActiveState", "SubState", "Result", "MainPID", "ExecMainStatus"].map(show).join(", "),
        ),
        Check::new(
            "no restart",
            m.get("NRestarts") == "0",
            format!("{}, {}; last error: {}", show("NRestarts"), show("LimitMEMLOCK"), last_error.unwrap_or("none")),
        ),
        Check::new(
            "no failed unit",
            failed_units.as_ref().is_some_and(Vec::is_empty),
            failed_units.map_or_else(|| "failed_units absent".to_owned(), |f| format!("failed: {f:?}")),
        ),
        Check::new(
            &format!("{} static binary", expected.whose),
            !sha.is_empty() && sha == expected.sha256 && expected.static_binary,
            format!(
                "{} sha256 {} ({}), {}; `{}`",
                if m.get("exe").is_empty() { "no serving process" } else { m.get("exe") },
                sha.get(..12).unwrap_or("absent"),
                if sha == expected.sha256 { expected.whose.to_owned() } else { format!("not {}", expected.whose) },
                if expected.static_binary { "static" } else { "NOT static" },
                m.get("version")
            ),
        ),
        Check::new(
            "metrics",
            count > 0.0,
            format!(
                "runqlat_delay_seconds_count: {} series, {count} delays; served at uptime {} s",
                m.get("metrics_series"),
                m.get("served_uptime")
            ),
        ),
        Check::new(
            "bounding set",
            bounding == Some(BOUNDING),
            format!("CapBnd={} ({})", m.get("CapBnd"), bounding.map_or_else(|| "absent".into(), cap_names)),
        ),
        Check::new(
            "privileges",
            effective.is_some_and(|e| e & !BOUNDING == 0) && m.get("NoNewPrivs") == "1" && m.get("Seccomp") == "2",
            format!(
                "CapEff={} ({}), {}, {}, Uid={}",
                m.get("CapEff"),
                effective.map_or_else(|| "absent".into(), cap_names),
                show("NoNewPrivs"),
                show("Seccomp"),
                m.get("Uid")
            ),
        ),
    ]
}

/// The capabilities in a mask, by name (`CAP_PERFMON, CAP_BPF`), or `none`.
pub fn cap_names(mask: u64) -> String {
    const NAMES: [&str; 41] = [
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_DAC_READ_SEARCH",
        "CAP_FOWNER",
        "CAP_FSETID",
        "CAP_KILL",
        "CAP_SETGID",
        "CAP_SETUID",
        "CAP_SETPCAP",
        "CAP_LINUX_IMMUTABLE",
        "CAP_NET_BIND_SERVICE",
        "CAP_NET_BROADCAST",
        "CAP_NET_ADMIN",
        "CAP_NET_RAW",
        "CAP_IPC_LOCK",
        "CAP_IPC_OWNER",
        "CAP_SYS_MODULE",
        "CAP_SYS_RAWIO",
        "CAP_SYS_CHROOT",
        "CAP_SYS_PTRACE",
        "CAP_SYS_PACCT",
        "CAP_SYS_ADMIN",
        "CAP_SYS_BOOT",
        "CAP_SYS_NICE",
        "CAP_SYS_RESOURCE",
        "CAP_SYS_TIME",
        "CAP_SYS_TTY_CONFIG",
        "CAP_MKNOD",
        "CAP_LEASE",
        "CAP_AUDIT_WRITE",
        "CAP_AUDIT_CONTROL",
        "CAP_SETFCAP",
        "CAP_MAC_OVERRIDE",
        "CAP_MAC_ADMIN",
        "CAP_SYSLOG",
        "CAP_WAKE_ALARM",
        "CAP_BLOCK_SUSPEND",
        "CAP_AUDIT_READ",
        "CAP_PERFMON",
        "CAP_BPF",
        "CAP_CHECKPOINT_RESTORE",
    ];
    let names: Vec<String> = (0..64)
        .filter(|bit| mask & (1 << bit) != 0)
        .map(|bit| NAMES.get(bit).map_or_else(|| format!("cap {bit}"), |n| (*n).to_owned()))
        .collect();
    if names.is_empty() { "none".to_owned() } else { names.join(", ") }
}

/// What installing left in the root.
#[derive(Debug)]
pub struct Installed {
    /// The sha256 of the binary the unit must run (the .deb's /usr/bin/latency-daemon, or
    /// target/dist's).
    pub sha256: String,
    /// It asks for no loader (static or static-pie).
    pub static_binary: bool,
    /// What the install itself showed, judged (the unit enabled, …).
    pub checks: Vec<Check>,
    /// What it ran and printed, for the report.
    pub log: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A passing guest's console, with the kernel's noise between and before markers.
    const CONSOLE: &str = "[    0.000000] Linux version 5.10.0-46-amd64\n\
        Welcome to Debian GNU/Linux 11 (bullseye)!\n\
        @@ deb uname=5.10.0-46-amd64\n\
        [   40.1] random: crng init done@@ deb served_uptime=41.20\n\
        @@ deb metrics_series=3\n\
        @@ deb metrics_count=5120\n\
        @@ deb ActiveState=active\n\
        @@ deb SubState=running\n\
        @@ deb Result=success\n\
        @@ deb MainPID=231\n\
        @@ deb ExecMainStatus=0\n\
        @@ deb NRestarts=0\n\
        @@ deb exe=/usr/bin/latency-daemon\n\
        @@ deb sha256=00aa11bb22cc33dd\n\
        @@ deb version=latency-daemon 0.1.0 (commit c93b84b, bpf 1a2b)\n\
        @@ deb Uid=61234 61234 61234 61234\n\
        @@ deb CapEff=0000008000000000\n\
        @@ deb CapBnd=000000c000000000\n\
        @@ deb NoNewPrivs=1\n\
        @@ deb Seccomp=2\n\
        @@ deb failed_units=\n\
        @@ deb journal attached: 4 programs\n\
        @@ deb journal serving on 0.0.0.0:9954\n\
        @@ deb uname=not the first\n\
        @@ deb done\n";

    fn expected() -> Expected {
        Expected {
            release: "5.10.0-46-amd64".into(),
            sha256: "00aa11bb22cc33dd".into(),
            static_binary: true,
            whose: "the .deb's",
        }
    }

    fn failed(checks: &[Check]) -> Vec<&str> {
        checks.iter().filter(|c| !c.ok).map(|c| c.what.as_str()).collect()
    }

    #[test]
    fn markers_are_read_wherever_they_start() {
        let m = Markers::parse(CONSOLE.lines());
        assert_eq!(m.get("served_uptime"), "41.20");
        assert_eq!(m.get("uname"), "5.10.0-46-amd64", "the first value wins");
        assert_eq!(m.get("Uid"), "61234 61234 61234 61234");
        assert_eq!(m.journal, ["attached: 4 programs", "serving on 0.0.0.0:9954"]);
        assert!(!m.fields.contains_key("done") && !m.fields.contains_key("journal"));
    }

    #[test]
    fn a_passing_console_passes() {
        let checks = judge(&Markers::parse(CONSOLE.lines()), &expected());
        assert!(failed(&checks).is_empty(), "{checks:#?}");
        assert_eq!(checks.len(), 8);
    }

    /// Each condition, broken alone, fails its own check and only that one.
    #[test]
    fn each_fact_fails_its_check() {
        let cases: [(&str, &str, &str); 10] = [
            ("@@ deb failed_units=\n", "@@ deb failed_units=systemd-remount-fs.service \n", "no failed unit"),
            ("@@ deb SubState=running", "@@ deb SubState=auto-restart", "unit active"),
            ("@@ deb ActiveState=active", "@@ deb ActiveState=activating", "unit active"),
            ("@@ deb NRestarts=0", "@@ deb NRestarts=2", "no restart"),
            ("@@ deb sha256=00aa11bb22cc33dd", "@@ deb sha256=ffff", "the .deb's static binary"),
            ("@@ deb metrics_count=5120", "@@ deb metrics_count=0", "metrics"),
            // CAP_SYS_ADMIN (21) besides the two.
            ("@@ deb CapBnd=000000c000000000", "@@ deb CapBnd=000000c000200000", "bounding set"),
            ("@@ deb CapEff=0000008000000000", "@@ deb CapEff=0000008000200000", "privileges"),
            ("@@ deb Seccomp=2", "@@ deb Seccomp=0", "privileges"),
            ("@@ deb uname=5.10.0-46-amd64", "@@ deb uname=6.1.0-57-amd64", "kernel"),
        ];
        for (from, to, what) in cases {
            let console = CONSOLE.replacen(from, to, 1);
            assert_ne!(console, CONSOLE, "{from} is in the fixture");
            let checks = judge(&Markers::parse(console.lines()), &expected());
            assert_eq!(failed(&checks), [what], "{to}");
        }
    }

    /// 5.10 charges maps to RLIMIT_MEMLOCK: a unit without LimitMEMLOCK= restarts, and says why.
    #[test]
    fn a_restart_names_the_last_error() {
        let error = "level=error msg=\"loading the kernel object failed: map error: failed to create map `STAMPS`\"";
        let console = CONSOLE
            .replacen("@@ deb NRestarts=0", "@@ deb NRestarts=3\n@@ deb LimitMEMLOCK=65536", 1)
            .replacen("@@ deb done", &format!("@@ deb journal {error}\n@@ deb done"), 1);
        let checks = judge(&Markers::parse(console.lines()), &expected());
        assert_eq!(failed(&checks), ["no restart"]);
        let detail = &checks.iter().find(|c| c.what == "no restart").map(|c| c.detail.clone()).unwrap_or_default();
        assert!(detail.contains("LimitMEMLOCK=65536") && detail.contains("failed to create map `STAMPS`"), "{detail}");
    }

    #[test]
    fn a_dynamic_binary_or_a_silent_guest_fails() {
        let dynamic = Expected { static_binary: false, ..expected() };
        let checks = judge(&Markers::parse(CONSOLE.lines()), &dynamic);
        assert_eq!(failed(&checks), ["the .deb's static binary"]);
        let silent = judge(&Markers::default(), &expected());
        assert_eq!(silent.iter().filter(|c| c.ok).count(), 0, "{silent:#?}");
        assert!(silent.iter().any(|c| c.detail.contains("CapBnd= (absent)")), "{silent:#?}");
    }

    #[test]
    fn capabilities_by_name() {
        assert_eq!(cap_names(BOUNDING), "CAP_PERFMON, CAP_BPF");
        assert_eq!(cap_names(0), "none");
        assert_eq!(cap_names((1 << 21) | (1 << 50)), "CAP_SYS_ADMIN, cap 50");
    }
}
