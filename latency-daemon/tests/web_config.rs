//! `--web.config.file` in exporter-toolkit's format, with real components: promtool accepts the
//! file; a real Prometheus scrapes over TLS with basic auth; a wrong or missing password gets 401
//! with `WWW-Authenticate`, counted as `unauthorized`; plain HTTP to the TLS port gets a clean 400 and the daemon keeps
//! serving; the configured headers are sent; a bad file on SIGHUP is refused and the old one keeps
//! serving; an expired or mismatched certificate is a one-line startup error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use latency_lab::{daemon::Daemon, services::Prometheus, tls::Certs, web};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");
const USER: &str = "prometheus";
const PASSWORD: &str = "correct horse";

fn web_config(certs: &Certs, cert: &str, key: &str) -> String {
    // Cost 4 keeps the test fast; the file format is the same at any cost.
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    format!(
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  min_version: TLS12\n\
         http_server_config:\n  headers:\n    X-Frame-Options: deny\n    X-Content-Type-Options: nosniff\n\
         basic_auth_users:\n  {USER}: '{hash}'\n",
        cert = certs.path(cert).display(),
        key = certs.path(key).display(),
    )
}

fn promtool_accepts(path: &Path) {
    let out = Command::new("promtool").args(["check", "web-config"]).arg(path).output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check web-config: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `curl` over TLS trusting our CA: (status, headers and body).
fn curl(certs: &Certs, addr: &str, path: &str, user: Option<&str>) -> (u16, String) {
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "5", "-D", "-", "--cacert"]).arg(certs.path("ca.pem"));
    if let Some(u) = user {
        c.args(["-u", u]);
    }
    let out = c.arg(format!("https://{addr}{path}")).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

fn start(file: &Path) -> Daemon {
    Daemon::start_attached(DAEMON, &["--web.config.file", file.to_str().unwrap()]).unwrap()
}

#[test]
fn prometheus_scrapes_over_tls_with_basic_auth_and_strangers_are_turned_away() {
    let certs = Certs::new().unwrap();
    let file = certs.path("web.yml");
    std::fs::write(&file, web_config(&certs, "server.pem", "server.key")).unwrap();
    promtool_accepts(&file);
    let mut daemon = start(&file);
    let addr = daemon.addr.clone();
    let good = format!("{USER}:{PASSWORD}");

    let (status, text) = curl(&certs, &addr, "/metrics", Some(&good));
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("runqlat_"), "{text}");
    let lower = text.to_ascii_lowercase();
    assert!(lower.contains("x-frame-options: deny") && lower.contains("x-content-type-options: nosniff"), "{text}");
    for path in ["/metrics", "/", "/heatmap.svg", "/api/v1/snapshot", "/healthz"] {
        for user in [None, Some(format!("{USER}:wrong")), Some(format!("nobody:{PASSWORD}"))] {
            if path == "/healthz" && user.is_none() {
                continue;
            }
            let (status, text) = curl(&certs, &addr, path, user.as_deref());
            assert_eq!(status, 401, "{path} as {user:?}: {text}");
            assert!(text.to_ascii_lowercase().contains("www-authenticate: basic"), "{text}");
        }
    }
    // Each of those 14 is counted as unauthorized, none as a page's error (a scrape's counters
    // are up to a drain old).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, text) = curl(&certs, &addr, "/metrics", Some(&good));
        let count =
            |outcome: &str| web::sample(&text, &format!("runqlat_http_requests_total{{outcome=\"{outcome}\"}}"));
        if count("unauthorized") == Some(14.0) {
            assert_eq!(count("handler_error"), Some(0.0), "a 401 counted as a handler error");
            break;
        }
        assert!(Instant::now() < deadline, "the 401s counted as {:?}, not 14 unauthorized", count("unauthorized"));
        std::thread::sleep(Duration::from_millis(200));
    }
    // A probe without credentials (a kubelet's) learns the status and nothing else; with them, why.
    let deadline = Instant::now() + Duration::from_secs(10);
    while curl(&certs, &addr, "/healthz", Some(&good)).0 != 200 {
        assert!(Instant::now() < deadline, "never healthy: {:?}", daemon.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, text) = curl(&certs, &addr, "/healthz", None);
    assert_eq!(status, 200, "{text}");
    assert!(text.ends_with("\r\n\r\nok\n"), "an unauthenticated /healthz says more than ok: {text}");
    let (_, text) = curl(&certs, &addr, "/healthz", Some(&good));
    assert!(text.contains("drains, last"), "{text}");

    // Plain HTTP on the TLS port: a clean 400 that says why, and the daemon keeps serving.
    let plain = web::get(&addr, "/metrics", &[]).unwrap();
    assert_eq!(plain.status, 400);
    assert!(plain.text().contains("HTTP request to an HTTPS server"), "{}", plain.text());
    assert_eq!(curl(&certs, &addr, "/healthz", Some(&good)).0, 200);

    // A real Prometheus, over TLS with basic auth (its password from a file).
    let password_file = certs.path("password");
    std::fs::write(&password_file, PASSWORD).unwrap();
    let job = format!(
        "  - job_name: tls\n    scheme: https\n    tls_config:\n      ca_file: {}\n    basic_auth:\n      \
         username: {USER}\n      password_file: {}\n    static_configs:\n      - targets: ['{addr}']\n",
        certs.path("ca.pem").display(),
        password_file.display()
    );
    let prometheus = Prometheus::start_job(&job).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let up = prometheus.scalar("up{job=\"tls\"}").ok().flatten();
        let series = prometheus.scalar("count(runqlat_drains_total{job=\"tls\"})").ok().flatten();
        if up == Some(1.0) && series.is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "Prometheus never scraped over TLS: {:?}", prometheus.target_health());
        std::thread::sleep(Duration::from_millis(250));
    }

    // A broken file on SIGHUP: refused in one line, the running configuration keeps serving.
    std::fs::write(&file, "tls_server_config:\n  cert_file: /nonexistent.pem\n  key_file: /nonexistent.key\n").unwrap();
    daemon.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !daemon.log().iter().any(|l| l.contains("reload failed")) {
        assert!(Instant::now() < deadline, "no refusal: {:?}", daemon.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let line = daemon.log().into_iter().find(|l| l.contains("reload failed")).unwrap();
    assert!(line.contains("web_config_file") && line.contains("/nonexistent.pem"), "{line}");
    assert_eq!(curl(&certs, &addr, "/healthz", Some(&good)).0, 200, "the old configuration serves");
    // A valid new file (no auth) takes effect.
    std::fs::write(
        &file,
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\n",
            certs.path("server.pem").display(),
            certs.path("server.key").display()
        ),
    )
    .unwrap();
    daemon.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(5);
    while curl(&certs, &addr, "/metrics", None).0 != 200 {
        assert!(Instant::now() < deadline, "the new configuration did not take effect: {:?}", daemon.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(prometheus);
    daemon.stop().unwrap();
}

#[test]
fn an_expired_or_mismatched_certificate_is_a_one_line_startup_error() {
    let certs = Certs::new().unwrap();
    for (cert, key, want) in [
        ("expired.pem", "expired.key", "the certificate expired"),
        ("server.pem", "other.key", "cert_file and key_file do not go together"),
    ] {
        let file = certs.path("web.yml");
        std::fs::write(&file, web_config(&certs, cert, key)).unwrap();
        let out = Command::new(DAEMON)
            .args(["run", "--listen=127.0.0.1:1", "--web.config.file"])
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("web_config_file") && stderr.contains(want), "{stderr}");
    }
}

/// deploy/web-config.yml, beside a certificate and key of the names it uses: promtool accepts it,
/// and so does the daemon (it serves with it).
#[test]
fn the_shipped_example_is_valid() {
    let certs = Certs::new().unwrap();
    let example = certs.path("web-config.yml");
    std::fs::copy(latency_lab::workspace_root().join("deploy/web-config.yml"), &example).unwrap();
    std::fs::copy(certs.path("server.pem"), certs.path("latency-daemon.crt")).unwrap();
    std::fs::copy(certs.path("server.key"), certs.path("latency-daemon.key")).unwrap();
    promtool_accepts(&example);
    let daemon = start(&example);
    let deadline = Instant::now() + Duration::from_secs(10);
    // 503 until the first drain, 401 if the example's password did not match its hash.
    while curl(&certs, &daemon.addr, "/healthz", Some("prometheus:change me")).0 != 200 {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            curl(&certs, &daemon.addr, "/healthz", Some("prometheus:change me"))
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    daemon.stop().unwrap();
}

/// A real Alertmanager behind its own web config (TLS + basic auth) receives our alerts over
/// https: the CA from `--alert-ca-file`, the password from `--alert-basic-auth-password-file`.
#[test]
fn alerts_reach_an_alertmanager_over_tls_with_basic_auth() {
    let certs = Certs::new().unwrap();
    let am_web = certs.path("am-web.yml");
    std::fs::write(&am_web, web_config(&certs, "server.pem", "server.key")).unwrap();
    let am =
        latency_lab::services::Alertmanager::start_tls(&am_web, &certs.path("ca.pem"), &format!("{USER}:{PASSWORD}"))
            .expect("alertmanager with a web config");
    let password_file = certs.path("am-password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    let daemon = Daemon::start(
        DAEMON,
        &[
            "--interval=500ms",
            "--window=1s",
            // Fires on the machine's own noise within a window or two.
            "--alert-max-delay=1us",
            "--alertmanager-url",
            &am.url().replace("127.0.0.1", "localhost"),
            "--alert-ca-file",
            certs.path("ca.pem").to_str().unwrap(),
            "--alert-basic-auth-user",
            USER,
            "--alert-basic-auth-password-file",
            password_file.to_str().unwrap(),
        ],
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ours = am.alerts().unwrap_or_default();
        if ours.iter().any(|a| a["labels"]["alertname"] == "RunQueueDelayHigh") {
            break;
        }
        assert!(Instant::now() < deadline, "no alert reached Alertmanager over TLS; log: {:?}", daemon.log());
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(!daemon.log().iter().any(|l| l.contains("notify: alertmanager")), "a delivery failed: {:?}", daemon.log());
    daemon.stop().unwrap();
}

/// `RequireAndVerifyClientCert`: a client without a certificate signed by `client_ca_file` gets
/// no TLS session; one with it is served.
#[test]
fn client_certificates_are_required_and_verified() {
    let certs = Certs::new().unwrap();
    let file = certs.path("web.yml");
    std::fs::write(
        &file,
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  \
             client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {}\n",
            certs.path("ca.pem").display()
        ),
    )
    .unwrap();
    promtool_accepts(&file);
    let daemon = start(&file);
    let with_cert = |cert: bool| {
        let mut c = Command::new("curl");
        c.args(["-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
            .arg(certs.path("ca.pem"));
        if cert {
            c.arg("--cert").arg(certs.path("client.pem")).arg("--key").arg(certs.path("client.key"));
        }
        let out = c.arg(format!("https://{}/metrics", daemon.addr)).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(with_cert(true), "200");
    assert_eq!(with_cert(false), "000", "no certificate, no session");
    assert_eq!(with_cert(true), "200", "and the daemon goes on");
    daemon.stop().unwrap();
}

/// A scraper that accepts gzip (Prometheus sends `Accept-Encoding: gzip`) gets /metrics gzipped,
/// the same exposition once decompressed; one that does not, or refuses it with `q=0`, gets it
/// plain; both carry `Vary: Accept-Encoding`. Prints the sizes.
#[test]
fn metrics_are_gzipped_for_a_scraper_that_accepts_it() {
    use std::io::Read as _;
    let daemon = Daemon::start(DAEMON, &["--interval", "1s"]).expect("latency-daemon run");
    let header = |r: &web::Response, name: &str| {
        r.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone())
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let (plain, zipped, unzipped) = loop {
        let plain = web::get(&daemon.addr, "/metrics", &[]).expect("a plain scrape");
        let zipped = web::get(&daemon.addr, "/metrics", &[("Accept-Encoding", "gzip, deflate")]).expect("a scrape");
        let mut unzipped = Vec::new();
        flate2::read::GzDecoder::new(&zipped.body[..]).read_to_end(&mut unzipped).expect("a gzip body");
        // The two scrapes may straddle a drain: the same exposition gives the same bytes.
        if unzipped == plain.body || Instant::now() > deadline {
            break (plain, zipped, unzipped);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    daemon.stop().expect("stopping the daemon");
    assert_eq!((plain.status, zipped.status), (200, 200));
    assert_eq!(header(&zipped, "Content-Encoding").as_deref(), Some("gzip"));
    assert_eq!(header(&plain, "Content-Encoding"), None);
    for r in [&plain, &zipped] {
        assert_eq!(header(r, "Vary").as_deref(), Some("Accept-Encoding"));
    }
    assert!(unzipped == plain.body, "the gzipped body is another exposition than the plain one");
    assert!(String::from_utf8_lossy(&unzipped).contains("# TYPE runqlat_delay_seconds histogram"));
    eprintln!(
        "gzip: /metrics {} bytes plain, {} gzipped ({:.1} %)",
        plain.body.len(),
        zipped.body.len(),
        100.0 * zipped.body.len() as f64 / plain.body.len() as f64
    );
    assert!(zipped.body.len() * 3 < plain.body.len(), "gzip saved less than two thirds");
    let daemon = Daemon::start(DAEMON, &[]).expect("latency-daemon run");
    let refused = web::get(&daemon.addr, "/metrics", &[("Accept-Encoding", "gzip;q=0, identity")]).expect("a scrape");
    daemon.stop().expect("stopping the daemon");
    assert_eq!(header(&refused, "Content-Encoding"), None, "gzip sent though refused with q=0");
}
