//! A cgroup whose path is longer than PATH_MAX (4096 bytes), made under the cgroup2 mount (found
//! in mountinfo) with mkdirat, one level at a time: two spinners pinned to one CPU inside it must
//! have their delays under its own series, labelled with the path's bounded form
//! (`host::cgroups::label`), not folded into `cgroup="other"`. Every cgroup made is removed,
//! pass or fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    ffi::CString,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    process::Command,
    time::{Duration, Instant},
};

use latency_daemon::host::cgroups::{CgroupNames, label};
use latency_lab::{daemon::Daemon, guard::Proc, web::sample};

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");

/// 24 levels of 200-byte names: about 4,900 bytes below the mount.
const LEVELS: usize = 24;
const NAME_BYTES: usize = 200;

/// The chain of cgroups, each held open so it can be reached (and removed) with *at calls, whatever
/// the length of its path. Drop kills what is inside the deepest and removes them deepest first.
struct DeepChain {
    /// (the parent's fd, this level's name, this level's fd), top first.
    levels: Vec<(OwnedFd, CString, OwnedFd)>,
}

fn open_dir(at: libc::c_int, name: &CString) -> std::io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated; the fd returned is new and owned by the OwnedFd.
    let fd = unsafe { libc::openat(at, name.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a file descriptor we just opened and nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl DeepChain {
    fn new(mount: &std::path::Path, top: &str) -> DeepChain {
        let mut chain = DeepChain { levels: Vec::new() };
        let mut parent = open_dir(libc::AT_FDCWD, &CString::new(mount.as_os_str().as_encoded_bytes()).unwrap())
            .unwrap_or_else(|e| panic!("open {}: {e}", mount.display()));
        let names = std::iter::once(top.to_string())
            .chain((0..LEVELS).map(|i| format!("{i:02}{}", "d".repeat(NAME_BYTES - 2))));
        for name in names {
            let c_name = CString::new(name.clone()).unwrap();
            // SAFETY: a NUL-terminated name relative to an open directory.
            if unsafe { libc::mkdirat(parent.as_raw_fd(), c_name.as_ptr(), 0o755) } != 0 {
                panic!("mkdirat {name}: {}", std::io::Error::last_os_error());
            }
            let fd = open_dir(parent.as_raw_fd(), &c_name).unwrap_or_else(|e| panic!("open {name}: {e}"));
            let next = fd.try_clone().unwrap();
            chain.levels.push((parent, c_name, fd));
            parent = next;
        }
        chain
    }

    /// The path as the daemon names it: relative to the mount, starting with '/'.
    fn path(&self) -> String {
        self.levels.iter().map(|(_, name, _)| format!("/{}", name.to_str().unwrap())).collect()
    }

    fn deepest(&self) -> libc::c_int {
        self.levels.last().unwrap().2.as_raw_fd()
    }

    /// Moves `pid` into the deepest cgroup.
    fn enter(&self, pid: u32) {
        let procs = CString::new("cgroup.procs").unwrap();
        // SAFETY: a NUL-terminated name relative to an open directory.
        let fd = unsafe { libc::openat(self.deepest(), procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
        assert!(fd >= 0, "open cgroup.procs: {}", std::io::Error::last_os_error());
        // SAFETY: a file descriptor we just opened and nobody else owns.
        let file = unsafe { std::fs::File::from_raw_fd(fd) };
        use std::io::Write as _;
        (&file).write_all(pid.to_string().as_bytes()).unwrap_or_else(|e| panic!("moving {pid}: {e}"));
    }

    fn pids(&self) -> Vec<i32> {
        let procs = CString::new("cgroup.procs").unwrap();
        // SAFETY: as in `enter`.
        let fd = unsafe { libc::openat(self.deepest(), procs.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Vec::new();
        }
        // SAFETY: as in `enter`.
        let text = std::io::read_to_string(unsafe { std::fs::File::from_raw_fd(fd) }).unwrap_or_default();
        text.lines().filter_map(|l| l.trim().parse().ok()).collect()
    }
}

impl Drop for DeepChain {
    fn drop(&mut self) {
        for pid in self.pids() {
            // SAFETY: kill(2) on processes in a cgroup this test created for itself.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        while let Some((parent, name, fd)) = self.levels.pop() {
            drop(fd);
            let deadline = Instant::now() + Duration::from_secs(5);
            // SAFETY: a NUL-terminated name relative to an open directory.
            while unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) } != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EBUSY) || Instant::now() > deadline {
                    eprintln!("cannot remove test cgroup {name:?}: {e}");
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

#[test]
fn a_cgroup_deeper_than_path_max_has_its_own_series() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test creates cgroups and attaches the program: run it as root");
    let mount = CgroupNames::discover().expect("a cgroup2 mount").mount().to_path_buf();
    let chain = DeepChain::new(&mount, &format!("runqlat-test-{}-deep", std::process::id()));
    let path = chain.path();
    assert!(mount.as_os_str().len() + path.len() > 4096, "{} bytes: not deeper than PATH_MAX", path.len());

    let daemon = Daemon::start(DAEMON, &["--interval", "1s", "--window", "2s"]).expect("the daemon starts");
    // Two spinners on one CPU: each waits while the other runs.
    let spinners: Vec<Proc> = (0..2)
        .map(|_| {
            let mut spin = Command::new("taskset");
            spin.args(["-c", "0", "sh", "-c", "while :; do :; done"]);
            let spinner = Proc::spawn(&mut spin, "spinner").unwrap();
            chain.enter(spinner.pid());
            spinner
        })
        .collect();

    let want = label::bounded(&path);
    assert!(want.len() <= label::MAX_BYTES, "a {}-byte label", want.len());
    let series = format!("runqlat_cgroup_delay_seconds_count{{cgroup=\"{want}\"}}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let (count, text) = loop {
        let text = daemon.metrics().unwrap();
        match sample(&text, &series) {
            Some(n) if n > 0.0 => break (n, text),
            _ if Instant::now() > deadline => {
                let cgroups: Vec<&str> =
                    text.lines().filter(|l| l.starts_with("runqlat_cgroup_delay_seconds_count")).collect();
                let unresolved: Vec<&str> =
                    text.lines().filter(|l| l.starts_with("runqlat_cgroup_unresolved_total")).collect();
                panic!(
                    "no delays under the deep cgroup's own series ({} bytes, labelled {want:?}) after 20 s; \
                     cgroup series: {cgroups:#?}; unresolved: {unresolved:#?}",
                    path.len()
                );
            }
            _ => std::thread::sleep(Duration::from_millis(500)),
        }
    };
    println!("deep cgroup: {} bytes of path, {}-byte label, {count} delays", path.len(), want.len());
    // No label in the whole exposition is longer than the bound.
    for line in text.lines().filter(|l| l.contains("cgroup=\"")) {
        let value = line.split("cgroup=\"").nth(1).and_then(|v| v.split('"').next()).unwrap_or_default();
        assert!(value.len() <= label::MAX_BYTES, "a {}-byte cgroup label: {line:.200}", value.len());
    }
    drop(spinners);
    daemon.stop().unwrap();
}
