//! SIGHUP with a configuration that is not a small regular file — a named pipe without a writer,
//! a file over 1 MiB, a directory — is one line of refusal: the running configuration stays, HTTP
//! keeps answering at once, and SIGTERM still stops the daemon promptly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use latency_lab::{daemon::Daemon, guard::Scratch};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");

fn wait_for_line(daemon: &Daemon, needle: &str, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(line) = daemon.log().into_iter().find(|l| l.contains(needle)) {
            return line;
        }
        assert!(Instant::now() < deadline, "no log line with {needle:?} within {limit:?}: {:?}", daemon.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// /healthz answers, and quickly: a reload must not hold the server.
fn assert_serving(daemon: &Daemon, when: &str) {
    let started = Instant::now();
    let r = daemon.get("/healthz").unwrap_or_else(|e| panic!("{when}: /healthz: {e:#}"));
    assert_eq!(r.status, 200, "{when}: {}", r.text());
    assert!(started.elapsed() < Duration::from_secs(1), "{when}: /healthz took {:?}", started.elapsed());
}

#[test]
fn a_fifo_a_huge_file_or_a_directory_as_config_is_refused_and_nothing_stalls() {
    let dir = Scratch::new("runqlat-reload").unwrap();
    let config = dir.join("latency-daemon.toml");
    std::fs::write(&config, "top_cgroups = 7\n").unwrap();
    let mut daemon = Daemon::start(DAEMON, &["--config", config.to_str().unwrap()]).unwrap();

    // A named pipe nobody writes to, put where the file was.
    std::fs::remove_file(&config).unwrap();
    let c = std::ffi::CString::new(config.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    daemon.signal(libc::SIGHUP);
    let line = wait_for_line(&daemon, "reload failed", Duration::from_secs(3));
    assert!(line.contains("is a named pipe, not a regular file"), "{line}");
    assert_serving(&daemon, "after a FIFO");

    // Larger than 1 MiB: refused without reading it.
    std::fs::remove_file(&config).unwrap();
    let mut big = b"top_cgroups = 8\n".to_vec();
    big.resize((1 << 20) + 4096, b'#');
    std::fs::write(&config, &big).unwrap();
    daemon.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(3);
    while daemon.log().iter().filter(|l| l.contains("reload failed")).count() < 2 {
        assert!(Instant::now() < deadline, "no second refusal: {:?}", daemon.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let line = daemon.log().into_iter().rfind(|l| l.contains("reload failed")).unwrap();
    assert!(line.contains("is larger than 1048576 bytes"), "{line}");
    assert_serving(&daemon, "after a huge file");

    // The running configuration stayed: the landing page still shows the first file's value.
    let page = daemon.get("/").unwrap().text();
    assert!(page.contains("\"top_cgroups\": 7"), "the running configuration must stay");

    // A FIFO again, then SIGTERM: the stop must not wait on it.
    std::fs::remove_file(&config).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    daemon.signal(libc::SIGHUP);
    let took = daemon.stop().unwrap();
    assert!(took < Duration::from_secs(3), "SIGTERM took {took:?}");
}
