//! No secret is served or logged: sink URLs carrying `user:password@` and `?token=` are used on
//! the wire (basic auth, the query) but shown only redacted — on the landing page, /metrics, the
//! snapshot, the heatmap and stderr.
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
    assert!(stderr.contains("alert_webhook: 'http://xxxxx@127.0.0.1:1/hook?xxxxx': a password in a flag"), "{stderr}");
    assert!(stderr.contains("alertmanager_url: 'https://xxxxx@am.example:9093': a password in a flag"), "{stderr}");
    assert!(!stderr.contains(PASSWORD) && !stderr.contains(TOKEN), "{stderr}");
}
