//! The alert settings: defaults, resolution into rules, every problem naming its key, reloads.
use super::*;

const MS: u64 = 1_000_000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn problems(a: &AlertConfig) -> Vec<String> {
    check(a, Duration::from_secs(600)).iter().map(Problem::to_string).collect()
}

#[test]
fn off_by_default() {
    let a = AlertConfig::default();
    assert!(!a.enabled());
    assert_eq!(a.attribute_ns(), 0);
    assert_eq!(problems(&a), Vec::<String>::new());
    let r = a.rules();
    assert_eq!((r.max_delay_ns, r.per_reason_ns, r.per_cgroup_ns), (None, [None, None], vec![]));
    assert_eq!((r.for_windows, r.resolve_after, r.cooldown_ns), (1, 2, 60_000 * MS));
}

#[test]
fn rules_in_nanoseconds_and_the_lowest_threshold() {
    let a = AlertConfig {
        max_delay: Some(ms(20)),
        per_reason: [None, Some(ms(5))],
        per_cgroup: vec![("/a".into(), ms(100)), ("/b".into(), Duration::from_micros(2500))],
        for_windows: 3,
        resolve_after: 4,
        cooldown: Duration::ZERO,
        ..AlertConfig::default()
    };
    assert_eq!(
        a.rules(),
        Rules {
            max_delay_ns: Some(20 * MS),
            per_reason_ns: [None, Some(5 * MS)],
            per_cgroup_ns: vec![("/a".into(), 100 * MS), ("/b".into(), 2_500_000)],
            for_windows: 3,
            resolve_after: 4,
            cooldown_ns: 0,
        }
    );
    assert_eq!(Reason::Preempt as usize, 1, "per_reason is indexed by Reason");
    assert_eq!(a.rules().threshold(latency_common::Reason::Preempt, "/c"), Some(5 * MS));
    // The minimum over every kind of threshold, wherever it is.
    assert_eq!(a.attribute_ns(), 2_500_000);
    for (one, lowest) in [
        (AlertConfig { max_delay: Some(ms(7)), ..AlertConfig::default() }, 7 * MS),
        (AlertConfig { per_reason: [Some(ms(8)), Some(ms(9))], ..AlertConfig::default() }, 8 * MS),
        (AlertConfig { per_cgroup: vec![("/".into(), ms(1))], ..AlertConfig::default() }, MS),
    ] {
        assert!(one.enabled());
        assert_eq!(one.attribute_ns(), lowest, "{one:?}");
    }
}

#[test]
fn each_message_names_its_field() {
    let d = AlertConfig::default();
    let cases: Vec<(AlertConfig, &str)> = vec![
        (AlertConfig { max_delay: Some(Duration::ZERO), ..d.clone() }, "alert_max_delay: must be greater than zero"),
        (
            AlertConfig { max_delay: Some(Duration::from_secs(600)), ..d.clone() },
            "alert_max_delay: 10m is not below ceiling 10m: delays above the ceiling are discarded, \
             so it could never fire",
        ),
        (
            AlertConfig { per_reason: [None, Some(Duration::from_secs(900))], ..d.clone() },
            "alert_reason_max_delay: preempt: 15m is not below ceiling 10m: delays above the ceiling are \
             discarded, so it could never fire",
        ),
        (
            AlertConfig { per_cgroup: vec![("/x".into(), Duration::ZERO)], ..d.clone() },
            "alert_cgroup_max_delay: '/x': must be greater than zero",
        ),
        (
            AlertConfig { per_cgroup: vec![("system.slice".into(), ms(5))], ..d.clone() },
            "alert_cgroup_max_delay: path 'system.slice' must start with '/' (a cgroup v2 path, e.g. /system.slice)",
        ),
        (
            AlertConfig { per_cgroup: vec![("/a/".into(), ms(5))], ..d.clone() },
            "alert_cgroup_max_delay: path '/a/' must not end with '/'",
        ),
        (
            AlertConfig { per_cgroup: vec![("/a//b".into(), ms(5))], ..d.clone() },
            "alert_cgroup_max_delay: path '/a//b' has an empty component",
        ),
        (AlertConfig { for_windows: 0, ..d.clone() }, "alert_for: 0 is not in 1..=100"),
        (AlertConfig { for_windows: 101, ..d.clone() }, "alert_for: 101 is not in 1..=100"),
        (AlertConfig { resolve_after: 0, ..d.clone() }, "alert_resolve_after: 0 is not in 1..=100"),
        (
            AlertConfig { alertmanagers: vec!["ftp://u:SECRET@am:9093?t=SECRET".into()], ..d.clone() },
            "alertmanager_url: 'ftp://xxxxx@am:9093?xxxxx': must start with http:// or https:// (e.g. \
             http://alertmanager:9093)",
        ),
        (
            AlertConfig { webhooks: vec!["hooks.local/x".into()], ..d.clone() },
            "alert_webhook: 'hooks.local/x': must start with http:// or https:// (e.g. http://alertmanager:9093)",
        ),
        (AlertConfig { resend: ms(50), ..d.clone() }, "alert_resend: 50ms is below 100ms"),
        (AlertConfig { severity: String::new(), ..d.clone() }, "alert_severity: must not be empty"),
        (
            AlertConfig { severity: "page\nnow".into(), ..d.clone() },
            "alert_severity: 'page\\nnow' contains control characters",
        ),
        (AlertConfig { severity: "x".repeat(65), ..d.clone() }, "alert_severity: is 65 bytes long; at most 64"),
    ];
    for (config, expected) in cases {
        assert_eq!(problems(&config), [expected], "{config:?}");
    }
}

#[test]
fn bounds_are_inclusive() {
    let edges = AlertConfig {
        max_delay: Some(Duration::from_nanos(1)),
        per_reason: [Some(Duration::from_secs(600) - Duration::from_nanos(1)), None],
        per_cgroup: vec![("/".into(), ms(1)), ("/a.slice/b.service".into(), ms(1))],
        for_windows: 100,
        resolve_after: 100,
        cooldown: Duration::ZERO,
        resend: MIN_RESEND,
        severity: "é".repeat(32),
        ..AlertConfig::default()
    };
    assert_eq!(problems(&edges), Vec::<String>::new());
    let low = AlertConfig { for_windows: 1, resolve_after: 1, ..AlertConfig::default() };
    assert_eq!(problems(&low), Vec::<String>::new());
}

#[test]
fn urls() {
    for ok in [
        "http://127.0.0.1:9093",
        "http://alertmanager",
        "http://am.example:8080/prefix/",
        "HTTP://am:9093",
        "http://hooks.local/x?token=a,b#frag",
        "http://hooks.local?token=abc",
        "http://[::1]:9093/am",
        "http://[::1]",
        "https://am:9093",
        "HTTPS://am",
        "http://user:pw@am",
    ] {
        assert_eq!(check_url(ok), Ok(()), "{ok}");
    }
    for (bad, why) in [
        ("ftp://am", "must start with http://"),
        ("am:9093", "must start with http://"),
        ("", "must start with http://"),
        ("http://", "has no host"),
        ("http://:9093", "has no host"),
        ("http:///path", "has no host"),
        ("http://am:", "port '' is not a number from 1 to 65535"),
        ("http://am:0", "port '0' is not a number"),
        ("http://am:99999", "port '99999' is not a number"),
        ("http://am:x1/", "port 'x1' is not a number"),
        ("http://user@am", "user information must be user:password"),
        ("http://::1:9093", "need brackets"),
        ("http://[::1", "unclosed"),
        ("http://[::1]x", "unexpected 'x'"),
        ("http://am/a b", "whitespace"),
        ("http://am/\r\nX-Injected: 1", "control characters"),
    ] {
        let e = check_url(bad).unwrap_err();
        assert!(e.contains(why), "{bad}: {e}");
    }
}

#[test]
fn reload_keeps_thresholds_the_kernel_cannot_serve() {
    let at = |max: u64, wakeup: Option<u64>| AlertConfig {
        max_delay: Some(ms(max)),
        per_reason: [wakeup.map(ms), None],
        ..AlertConfig::default()
    };
    let off = AlertConfig::default();
    // (running, new, adopted thresholds?)
    let cases = [
        (at(20, None), at(30, Some(20)), true),
        (at(20, None), at(20, None), true),
        (at(20, None), at(30, Some(10)), false),
        (at(20, None), at(10, None), false),
        (at(20, None), off.clone(), true),
        (off.clone(), at(20, None), false),
        (off.clone(), off.clone(), true),
    ];
    for (running, new, adopted) in cases {
        let mut reloaded = AlertConfig { for_windows: 5, alertmanagers: vec!["http://am".into()], ..new.clone() };
        let mut needs_restart = Vec::new();
        reload(&mut reloaded, &running, &mut needs_restart);
        let thresholds = |a: &AlertConfig| (a.max_delay, a.per_reason, a.per_cgroup.clone());
        let want = if adopted { &new } else { &running };
        assert_eq!(thresholds(&reloaded), thresholds(want), "{running:?} → {new:?}");
        assert_eq!(needs_restart.is_empty(), adopted, "{running:?} → {new:?}");
        assert_eq!((reloaded.for_windows, reloaded.alertmanagers.len()), (5, 1), "always adopted");
    }
}

#[test]
fn the_ca_file_must_hold_a_usable_certificate() {
    // The same verdicts as alert::notify's `Client::new`, which loads the text when sinks start.
    let certs = latency_lab::tls::Certs::new().unwrap();
    let ca = std::fs::read_to_string(certs.path("ca.pem")).unwrap();
    assert_eq!(check_ca(&ca), Ok(()));
    assert!(check_ca("not a certificate\n").unwrap_err().contains("no usable certificate"));
    let broken = "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n";
    assert!(check_ca(broken).unwrap_err().starts_with("bad PEM: "));
    let with = |pem: &str| AlertConfig { ca_pem: Some(pem.into()), ..AlertConfig::default() };
    assert!(problems(&with(&ca)).is_empty());
    assert_eq!(problems(&with("x\n")), ["alert_ca_file: the CA file holds no usable certificate"]);
}
