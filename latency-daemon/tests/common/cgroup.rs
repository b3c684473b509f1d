//! Cgroup v2 directories a test creates under the cgroup2 mount, with processes started inside;
//! everything inside is killed and the directory removed when the guard goes.
use std::{
    process::{Command, Stdio},
    sync::Mutex,
    time::{Duration, Instant},
};

use super::Guarded;

/// A cgroup v2 directory of this test, removed (after its processes are killed) when dropped.
pub struct TestCgroup {
    dir: std::path::PathBuf,
    /// Its path as the daemon labels it: relative to the cgroup2 mount, starting with '/'.
    pub path: String,
    members: Mutex<Vec<u32>>,
}

impl TestCgroup {
    pub fn new(name: &str) -> TestCgroup {
        let mount = cgroup2_mount();
        let top = format!("runqlat-test-{}-{name}", std::process::id());
        let dir = mount.join(&top);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        TestCgroup { dir, path: format!("/{top}"), members: Mutex::new(Vec::new()) }
    }

    /// Start `argv` inside this cgroup (the shell moves itself in, then execs).
    pub fn spawn(&self, argv: &[&str]) -> Guarded {
        let procs = self.dir.join("cgroup.procs");
        let script = format!("echo $$ > '{}' && exec \"$@\"", procs.display().to_string().replace('\'', "'\\''"));
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(argv)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.members.lock().unwrap().push(child.id());
        Guarded { child, what: "cgroup workload" }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // Kill anything still inside (the Guarded handles kill their own; this catches strays).
        if let Ok(pids) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in pids.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                // SAFETY: kill(2) on processes this test put in its own cgroup.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn cgroup2_mount() -> std::path::PathBuf {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            right.starts_with("cgroup2 ").then(|| left.split_whitespace().nth(4).map(std::path::PathBuf::from))?
        })
        .expect("a cgroup2 mount")
}
