//! `latency-daemon run` in the background on a loopback port of its own; stopped (SIGTERM, must
//! exit 0 within 2 s) or killed when dropped.
use std::{
    io::{BufRead as _, BufReader},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use super::{DAEMON, Guarded, web};

pub struct Daemon {
    pub proc: Guarded,
    pub addr: String,
    pub stderr: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    /// Start with `args` (besides --listen) and wait until /healthz says it drains.
    pub fn start(args: &[&str]) -> Daemon {
        Daemon::start_under(&[], args)
    }

    /// The same, the daemon started through `wrapper` (e.g. setpriv with its arguments).
    pub fn start_under(wrapper: &[&str], args: &[&str]) -> Daemon {
        let addr = format!("127.0.0.1:{}", web::free_port());
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(DAEMON);
                c
            }
            None => Command::new(DAEMON),
        };
        let mut child = command
            .arg("run")
            .arg("--listen")
            .arg(&addr)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn latency-daemon run");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = stderr.clone();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let mut d = Daemon { proc: Guarded { child, what: "latency-daemon run" }, addr, stderr };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = web::get(&d.addr, "/healthz", &[])
                && r.status == 200
            {
                return d;
            }
            if let Some(status) = d.proc.child.try_wait().unwrap() {
                panic!("latency-daemon run exited ({status}): {:?}", d.stderr.lock().unwrap());
            }
            assert!(Instant::now() < deadline, "not healthy in 30 s: {:?}", d.stderr.lock().unwrap());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn get(&self, path: &str) -> web::Response {
        web::get(&self.addr, path, &[]).unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    pub fn metrics(&self) -> String {
        let r = self.get("/metrics");
        assert_eq!(r.status, 200);
        r.text()
    }

    pub fn log(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// SIGTERM; returns how long it took to exit, which must be 0.
    pub fn stop(mut self) -> Duration {
        let t = Instant::now();
        self.proc.signal(libc::SIGTERM);
        let status = self.proc.wait_timeout(Duration::from_secs(10)).expect("no exit 10 s after SIGTERM");
        assert!(status.success(), "exit status {status}; log: {:?}", self.log());
        t.elapsed()
    }
}

/// One sample's value from Prometheus text: the line starting with `series` (name and labels
/// exactly as printed).
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
}
