//! No secret is served or logged: sink URLs carrying `user:password@` and `?token=` are used on
//! the wire (basic auth, the query) but shown only redacted — on the landing page, /metrics, the
//! snapshot, the heatmap and stderr. A URL with either given as a flag is refused; configuration
//! errors name the line and the key but never echo the text (a password, a token, or another
//! file's first line behind a symlink).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::{Read as _, Write as _},
    net::TcpListener,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use latency_lab::{daemon::Daemon, guard::Scratch, web};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");
const PASSWORD: &str = "PASSW0RD-SECRET";
const TOKEN: &str = "T0KEN-SECRET";

/// A webhook receiver answering 200 to everything, keeping each request head it read.
fn receiver() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&heads);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = vec![0u8; 16 * 1024];
            let n = s.read(&mut buf).unwrap_or(0);
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            seen.lock().unwrap().push(text.split("\r\n\r\n").next().unwrap_or_default().to_owned());
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (port, heads)
}

#[test]
fn credentials_in_sink_urls_are_used_but_never_shown() {
    let (port, heads) = receiver();
    let dead = web::free_port().unwrap();
    let webhook = format!("http://alice:{PASSWORD}@127.0.0.1:{port}/hook?token={TOKEN}");
    let alertmanager = format!("http://bob:{PASSWORD}@127.0.0.1:{dead}/am?token={TOKEN}");
    // From a file: a flag with a password is refused (see below).
    let dir = Scratch::new("runqlat-secrets").unwrap();
    let config = dir.join("runqlat.toml");
    std::fs::write(&config, format!("alert_webhook = [\"{webhook}\"]\nalertmanager_url = [\"{alertmanager}\"]\n"))
        .unwrap();
    let config = format!("--config={}", config.display());
    let daemon = Daemon::start(
        DAEMON,
        &[
            "--interval=500ms",
            "--window=1s",
            // Fires on the machine's own noise within a window or two.
            "--alert-max-delay=1us",
            &config,
        ],
    )
    .unwrap();

    // The webhook got the alert, with the URL's credentials as basic auth and its query intact.
    let deadline = Instant::now() + Duration::from_secs(20);
    let head = loop {
        if let Some(h) = heads.lock().unwrap().first().cloned() {
            break h;
        }
        assert!(Instant::now() < deadline, "no webhook request; log: {:?}", daemon.log());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(head.starts_with(&format!("POST /hook?token={TOKEN} HTTP/1.1")), "{head}");
    // base64("alice:PASSW0RD-SECRET")
    assert!(head.contains("Authorization: Basic YWxpY2U6UEFTU1cwUkQtU0VDUkVU"), "{head}");

    // The dead Alertmanager's failure is logged, with its URL redacted.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !daemon.log().iter().any(|l| l.contains("notify: alertmanager")) {
        assert!(Instant::now() < deadline, "no alertmanager failure logged: {:?}", daemon.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = daemon.log().join("\n");
    assert!(log.contains(&format!("http://xxxxx@127.0.0.1:{dead}/am?xxxxx")), "{log}");

    let page = daemon.get("/").unwrap().text();
    assert!(
        page.contains(&format!("http://xxxxx@127.0.0.1:{port}/hook?xxxxx")),
        "the landing page shows sinks redacted"
    );
    for path in ["/", "/metrics", "/api/v1/snapshot", "/heatmap.svg", "/metrics?format=openmetrics"] {
        let body = daemon.get(path).unwrap().text();
        for secret in [PASSWORD, TOKEN, "alice", "bob"] {
            assert!(!body.contains(secret), "{path} shows {secret}");
        }
    }
    let log = daemon.log();
    let stopped = daemon.stop();
    for secret in [PASSWORD, TOKEN] {
        assert!(!log.iter().any(|l| l.contains(secret)), "stderr shows {secret}: {log:?}");
    }
    stopped.unwrap();
}

#[test]
fn a_refused_url_is_refused_without_echoing_its_secret() {
    let out = std::process::Command::new(DAEMON)
        .args(["run", "--listen=127.0.0.1:1", "--alert-max-delay=5ms"])
        .arg(format!("--alert-webhook=ftp://carol:{PASSWORD}@h/?token={TOKEN}"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("alert_webhook: 'ftp://xxxxx@h/?xxxxx': must start with http://"), "{stderr}");
    assert!(!stderr.contains(PASSWORD) && !stderr.contains(TOKEN), "{stderr}");
}

#[test]
fn a_password_in_a_flag_is_refused() {
    let out = std::process::Command::new(DAEMON)
        .args(["run", "--listen=127.0.0.1:1", "--alert-max-delay=5ms"])
        .arg(format!("--alert-webhook=http://alice:{PASSWORD}@127.0.0.1:1/hook?token={TOKEN}"))
        .arg(format!("--alertmanager-url=https://bob:{PASSWORD}@am.example:9093"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("alert_webhook: 'http://xxxxx@127.0.0.1:1/hook?xxxxx': credentials or a query in a flag"),
        "{stderr}"
    );
    assert!(
        stderr.contains("alertmanager_url: 'https://xxxxx@am.example:9093': credentials or a query in a flag"),
        "{stderr}"
    );
    assert!(!stderr.contains(PASSWORD) && !stderr.contains(TOKEN), "{stderr}");
}

const FILE_PASSWORD: &str = "FILEPW111";
const FILE_TOKEN: &str = "FILETOKEN222";
const OTHER_FILE: &str = "SHADOW-SECRET-333";
const FLAG_TOKEN: &str = "FLAGTOKEN444";
const ENV_PASSWORD: &str = "ENVPW555";
const ENV_TOKEN: &str = "ENVTOKEN666";
const OTLP_HEADER: &str = "OTLPHEADER777";
const OTLP_PASSWORD: &str = "OTLPPW888";
const SEEDED: [&str; 8] =
    [FILE_PASSWORD, FILE_TOKEN, OTHER_FILE, FLAG_TOKEN, ENV_PASSWORD, ENV_TOKEN, OTLP_HEADER, OTLP_PASSWORD];

/// `run ARGS` that must be refused: its exit status and stderr.
fn refused(args: &[&str]) -> (Option<i32>, String) {
    // Bounded: a daemon that accepts them would run until stopped (timeout's status: 124).
    let out = std::process::Command::new("timeout")
        .args(["10", DAEMON, "run", "--listen=127.0.0.1:1", "--alert-max-delay=5ms"])
        .args(args)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn assert_no_secret(what: &str, text: &str) {
    for secret in SEEDED {
        assert!(!text.contains(secret), "{what} shows {secret}: {text}");
    }
}

#[test]
fn a_toml_error_names_file_line_and_key_but_never_the_text() {
    let dir = Scratch::new("runqlat-secrets-toml").unwrap();
    // The syntax error on the secret's own line (after it), then on a later line.
    let cases = [
        (
            format!("alert_webhook = [\"http://bob:{FILE_PASSWORD}@127.0.0.1:1/hook?token={FILE_TOKEN}\" oops]\n"),
            "line 1, column ",
        ),
        (
            format!(
                "interval = \"1s\"\nalert_webhook = [\"http://bob:{FILE_PASSWORD}@127.0.0.1:1/?token={FILE_TOKEN}\"]\n\
                 alertmanager_url = \"http://am:{FILE_PASSWORD}@h/?token={FILE_TOKEN}\" ]]\n"
            ),
            "line 3, column ",
        ),
        (
            format!("alert_webhook = 7\nalertmanager_url = [\"http://am:{FILE_PASSWORD}@h/?token={FILE_TOKEN}\", 3]\n"),
            "line 1",
        ),
    ];
    for (i, (text, line)) in cases.iter().enumerate() {
        let config = dir.join(&format!("bad{i}.toml"));
        std::fs::write(&config, text).unwrap();
        let (code, stderr) = refused(&[&format!("--config={}", config.display())]);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains(&format!("config file {}: {line}", config.display())), "{stderr}");
        assert_no_secret("a TOML error", &stderr);
    }
}

#[test]
fn a_config_symlinked_to_another_file_never_shows_that_file() {
    let dir = Scratch::new("runqlat-secrets-link").unwrap();
    let other = dir.join("shadow");
    std::fs::write(&other, format!("root:{OTHER_FILE}:19000:0:99999:7:::\nbin:*:19000:0:99999:7:::\n")).unwrap();
    let link = dir.join("runqlat.toml");
    std::os::unix::fs::symlink(&other, &link).unwrap();
    let (code, stderr) = refused(&[&format!("--config={}", link.display())]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("config file {}: line 1", link.display())), "{stderr}");
    assert!(!stderr.contains("root"), "{stderr}");
    assert_no_secret("an error about a symlinked config", &stderr);
}

#[test]
fn a_query_in_a_flag_is_refused_in_one_line() {
    for flag in ["--alert-webhook", "--alertmanager-url"] {
        let (code, stderr) = refused(&[&format!("{flag}=http://127.0.0.1:1/hook?token={FLAG_TOKEN}")]);
        assert_eq!(code, Some(2), "{stderr}");
        let field = flag.trim_start_matches("--").replace('-', "_");
        let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(&field)).collect();
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(
            lines[0].contains(&format!("{field}: 'http://127.0.0.1:1/hook?xxxxx': credentials or a query in a flag")),
            "{stderr}"
        );
        assert!(lines[0].contains("/proc/<pid>/cmdline"), "{stderr}");
        assert_no_secret("the refusal", &stderr);
    }
}

/// Every log line and every response of a running daemon, whose webhook (with a password and a
/// token) comes from the environment and whose reload meets a file with secrets and a syntax error.
#[test]
fn seeded_secrets_never_reach_a_log_line_or_a_response() {
    let (port, heads) = receiver();
    let dir = Scratch::new("runqlat-secrets-run").unwrap();
    let config = dir.join("runqlat.toml");
    std::fs::write(&config, "alert_for = 1\n").unwrap();
    let env = format!("RUNQLAT_ALERT_WEBHOOK=http://eve:{ENV_PASSWORD}@127.0.0.1:{port}/hook?token={ENV_TOKEN}");
    // The OTLP exporter's header and URL credentials, pushing to a closed port: each failed push
    // is logged, and the landing page shows the settings.
    let otlp_headers = format!("OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20{OTLP_HEADER}");
    let otlp_endpoint =
        format!("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=http://otel:{OTLP_PASSWORD}@127.0.0.1:1/v1/metrics");
    let mut daemon = Daemon::start_under(
        DAEMON,
        &["env", &env, &otlp_headers, &otlp_endpoint, "RUNQLAT_OTLP_INTERVAL=1s"],
        &["--interval=500ms", "--window=1s", "--alert-max-delay=1us", &format!("--config={}", config.display())],
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while heads.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no webhook request; log: {:?}", daemon.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let head = heads.lock().unwrap()[0].clone();
    assert!(
        head.starts_with(&format!("POST /hook?token={ENV_TOKEN} HTTP/1.1")),
        "the environment's URL is used: {head}"
    );

    // A reload meets secrets followed by a syntax error; the running configuration stays.
    let staged = dir.join("staged.toml");
    std::fs::write(
        &staged,
        format!("alert_webhook = [\"http://bob:{FILE_PASSWORD}@127.0.0.1:1/hook?token={FILE_TOKEN}\" oops]\n"),
    )
    .unwrap();
    std::fs::rename(&staged, &config).unwrap();
    daemon.signal(libc::SIGHUP);
    daemon.wait_for_log("reload failed", Duration::from_secs(5)).unwrap();

    daemon.wait_for_log("OTLP: pushing to", Duration::from_secs(10)).unwrap();
    // The snapshot answers 503 until the first window (1 s) has closed, which a busy machine
    // may not have done yet.
    let deadline = Instant::now() + Duration::from_secs(10);
    while daemon.get("/api/v1/snapshot").unwrap().status != 200 {
        assert!(Instant::now() < deadline, "no window closed within 10 s; log: {:?}", daemon.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    for path in ["/", "/metrics", "/api/v1/snapshot", "/healthz"] {
        let response = daemon.get(path).unwrap();
        assert_eq!(response.status, 200, "{path}");
        assert_no_secret(path, &response.text());
    }
    let landing = daemon.get("/").unwrap().text();
    assert!(
        landing.contains("authorization=&lt;hidden&gt;") || landing.contains("authorization=<hidden>"),
        "{landing}"
    );
    let (_, log) = daemon.stop_with_log().unwrap();
    assert!(log.iter().any(|l| l.contains("reload failed") && l.contains("line 1, column ")), "{log:?}");
    for line in &log {
        assert_no_secret("a log line", line);
    }
}
