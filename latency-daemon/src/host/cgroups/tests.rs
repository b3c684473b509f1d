//! The cgroup resolver against real cgroups it creates (when root), and its pure parts: names, mountinfo, rate limits.
use std::{
    ffi::OsString,
    os::unix::ffi::OsStringExt as _,
    process::{Child, Command},
};

use super::*;

/// The cgroup2 mount when this test can create cgroups (root), else None after saying why: these tests
/// need the real kernel, and pretending to pass without it would hide that.
fn writable_mount() -> Option<PathBuf> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: creating cgroups needs root");
        return None;
    }
    match CgroupNames::discover() {
        Ok(names) => Some(names.mount().to_path_buf()),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// Test cgroups under <mount>/runqlat-test-<pid>-<tag>, removed in Drop deepest first (reverse creation
/// order) even when an assertion fails.
struct TestTree {
    base: PathBuf,
    created: Vec<PathBuf>,
}

impl TestTree {
    /// A fresh tree when this test can create cgroups (see `writable_mount`).
    fn when_writable(tag: &str) -> Option<TestTree> {
        writable_mount().map(|mount| TestTree::new(&mount, tag))
    }

    fn new(mount: &Path, tag: &str) -> TestTree {
        let base = mount.join(format!("runqlat-test-{}-{tag}", std::process::id()));
        let mut tree = TestTree { base: base.clone(), created: Vec::new() };
        tree.mkdir_at(base);
        tree
    }

    /// Create `base/rel` (parents first, as given) and return its path.
    fn mkdir(&mut self, rel: impl AsRef<Path>) -> PathBuf {
        let dir = self.base.join(rel);
        self.mkdir_at(dir.clone());
        dir
    }

    fn mkdir_at(&mut self, dir: PathBuf) {
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        self.created.push(dir);
    }
}

impl Drop for TestTree {
    fn drop(&mut self) {
        for dir in self.created.iter().rev() {
            // A cgroup whose last task just exited can report EBUSY for a moment.
            for _ in 0..50 {
                match fs::remove_dir(dir) {
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => std::thread::sleep(Duration::from_millis(10)),
                    Err(e) if e.kind() != io::ErrorKind::NotFound => {
                        eprintln!("cannot remove test cgroup {}: {e}", dir.display());
                        break;
                    }
                    _ => break,
                }
            }
        }
    }
}

/// Kills and reaps the child even when an assertion fails, before the cgroups are removed.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ino(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    fs::symlink_metadata(path).unwrap().ino()
}

fn relative(tree: &TestTree, rel: &str) -> String {
    format!("/{}/{rel}", tree.base.file_name().unwrap().to_str().unwrap())
}

#[test]
fn root_resolves_to_slash() {
    let Some(_) = writable_mount() else { return };
    let mut names = CgroupNames::discover().unwrap();
    let mount = names.mount().to_path_buf();
    let id = handle_id(&mount).unwrap();
    assert_eq!(id, ino(&mount), "cgroup2 root: file handle id vs inode");
    assert_eq!(names.path(id), Some("/"));
    let walk = names.last_walk().unwrap();
    eprintln!("{}: {} cgroups in {:?}, {} skipped", mount.display(), walk.dirs, walk.took, walk.skipped);
    assert!(!walk.truncated);
}

#[test]
fn nested_ids_resolve_and_equal_inodes() {
    let Some(mut tree) = TestTree::when_writable("nested") else { return };
    let a = tree.mkdir("a");
    let b = tree.mkdir("a/b");
    let mut names = CgroupNames::discover().unwrap();
    for (dir, rel) in [(&a, "a"), (&b, "a/b")] {
        let id = handle_id(dir).unwrap();
        assert_eq!(id, ino(dir), "{}: file handle id vs inode", dir.display());
        assert_eq!(names.path(id), Some(relative(&tree, rel).as_str()));
    }
}

#[test]
fn a_new_cgroup_is_found_on_a_later_miss() {
    let Some(mut tree) = TestTree::when_writable("rescan") else { return };
    let a = tree.mkdir("a");
    let min_rescan = Duration::from_millis(500);
    let mut names = CgroupNames::at(tree.base.clone()).with_min_rescan(min_rescan);
    assert_eq!(names.path(handle_id(&a).unwrap()), Some("/a"));
    let b_id = handle_id(&tree.mkdir("b")).unwrap();
    assert_eq!(names.path(b_id), None, "a miss within min_rescan must not walk again");
    std::thread::sleep(min_rescan);
    assert_eq!(names.path(b_id), Some("/b"));
    assert_eq!(names.len(), 3);
}

#[test]
fn prune_reports_removed_and_recreated_cgroups() {
    let Some(mut tree) = TestTree::when_writable("prune") else { return };
    let a = tree.mkdir("a");
    let b = tree.mkdir("b");
    let (a_id, b_id) = (handle_id(&a).unwrap(), handle_id(&b).unwrap());
    let mut names = CgroupNames::at(tree.base.clone());
    names.rescan().unwrap();
    assert_eq!(names.prune(), Vec::<u64>::new());

    fs::remove_dir(&b).unwrap();
    assert_eq!(names.prune(), vec![b_id]);
    assert_eq!(names.path(b_id), None);

    // Same name, new cgroup: the old id is gone even though the path exists.
    fs::remove_dir(&a).unwrap();
    fs::create_dir(&a).unwrap();
    let new_a_id = handle_id(&a).unwrap();
    assert_ne!(new_a_id, a_id, "kernfs ids are not reused");
    assert_eq!(names.prune(), vec![a_id]);
    names.rescan().unwrap();
    assert_eq!(names.path(new_a_id), Some("/a"));
}

#[test]
fn hostile_names() {
    let Some(mut tree) = TestTree::when_writable("names") else { return };
    let mut want = Vec::new();

    let odd = "we\"ird\\name with space\tand ünïcødé";
    want.push((handle_id(&tree.mkdir(odd)).unwrap(), format!("/{odd}")));

    // Distinct non-UTF-8 names stay distinct (U+FFFD would merge the first two).
    let raw: [(&[u8], &str); 3] =
        [(b"\xff\xfe", "/\\xff\\xfe"), (b"\xfe\xff", "/\\xfe\\xff"), (b"\\xff\xfe", "/\\\\xff\\xfe")];
    for (raw, path) in raw {
        want.push((handle_id(&tree.mkdir(OsString::from_vec(raw.to_vec()))).unwrap(), path.to_string()));
    }

    // proc(5) paths are line-oriented, so the kernel refuses '\n' in cgroup names (cgroup_mkdir).
    let newline = tree.base.join("new\nline");
    match fs::create_dir(&newline) {
        Err(e) => {
            eprintln!("mkdir of a name with a newline: {e}");
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        }
        Ok(()) => {
            tree.created.push(newline.clone());
            eprintln!("the kernel accepted a newline in a cgroup name");
            want.push((handle_id(&newline).unwrap(), "/new\nline".to_string()));
        }
    }

    let mut names = CgroupNames::at(tree.base.clone());
    for (id, path) in want {
        assert_eq!(names.path(id), Some(path.as_str()));
    }
}

#[test]
fn a_tiny_bound_truncates_the_walk() {
    let Some(mut tree) = TestTree::when_writable("bound") else { return };
    for i in 0..10 {
        tree.mkdir(format!("c{i}"));
        tree.mkdir(format!("c{i}/d"));
    }
    let mut names = CgroupNames::at(tree.base.clone()).with_max_dirs(5);
    let walk = names.rescan().unwrap();
    assert!(walk.truncated);
    assert_eq!((walk.dirs, names.len()), (5, 5));
    let walk = names.with_max_dirs(100).rescan().unwrap();
    assert!(!walk.truncated);
    assert_eq!(walk.dirs, 21);
}

/// The kernel's own view of a task's cgroup (`0::` in /proc/<pid>/cgroup) must match our name for the
/// id of the cgroup we put it in.
#[test]
fn a_moved_process_reports_our_path() {
    let Some(mut tree) = TestTree::when_writable("procs") else { return };
    let cgroup = tree.mkdir("task");
    let child = Reaped(Command::new("sleep").arg("5").spawn().unwrap());
    let pid = child.0.id();
    fs::write(cgroup.join("cgroup.procs"), pid.to_string()).unwrap();

    let proc_cgroup = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let unified = proc_cgroup.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    let mut names = CgroupNames::discover().unwrap();
    assert_eq!(names.path(handle_id(&cgroup).unwrap()), Some(unified));
    assert_eq!(unified, relative(&tree, "task"));
    drop(child);
}

/// Not an assertion: prints the walk cost over 1 010 synthetic cgroups (10 × 100), median of 11 walks,
/// next to name_to_handle_at on each directory (what 32-bit kernels need). `--nocapture` shows it.
#[test]
fn walk_cost() {
    let Some(mut tree) = TestTree::when_writable("cost") else { return };
    let mut dirs = Vec::new();
    for i in 0..10 {
        tree.mkdir(format!("p{i}"));
        for j in 0..100 {
            dirs.push(tree.mkdir(format!("p{i}/c{j}")));
        }
    }
    let mut walks = Vec::new();
    let mut handles = Vec::new();
    for _ in 0..11 {
        let mut names = CgroupNames::at(tree.base.clone());
        let walk = names.rescan().unwrap();
        assert_eq!(walk.dirs, 1011);
        walks.push(walk.took);
        let started = Instant::now();
        for dir in &dirs {
            handle_id(dir).unwrap();
        }
        handles.push(started.elapsed());
    }
    walks.sort();
    handles.sort();
    eprintln!("walk of 1011 cgroups: median {:?} (min {:?}, max {:?})", walks[5], walks[0], walks[10]);
    eprintln!("name_to_handle_at on 1000 cgroups: median {:?}", handles[5]);
    let whole = CgroupNames::discover().unwrap().last_walk().unwrap();
    eprintln!("whole tree incl. this test's: {} cgroups in {:?}", whole.dirs, whole.took);
}

#[test]
fn walks_are_rate_limited_even_when_they_fail() {
    let mut names = CgroupNames::at(PathBuf::from("/nonexistent/cgroup")).with_min_rescan(Duration::ZERO);
    let e = names.rescan().unwrap_err();
    assert_eq!(e.to_string(), "cannot read /nonexistent/cgroup: No such file or directory (os error 2)");
    assert_eq!(names.path(1), None);
    names.walked = Some((Instant::now(), Duration::from_secs(1)));
    assert!(!names.rescan_due(), "a 1 s walk buys 9 s of idle");
    let Some(long_ago) = Instant::now().checked_sub(Duration::from_secs(10)) else { return };
    names.walked = Some((long_ago, Duration::from_secs(1)));
    assert!(names.rescan_due());
}

#[test]
fn names_escape_only_non_utf8() {
    let name = |bytes: &[u8]| {
        let mut out = String::new();
        push_name(&mut out, OsStr::from_bytes(bytes));
        out
    };
    assert_eq!(name(b"a\\b \"c\""), "a\\b \"c\"");
    assert_eq!(name("ü".as_bytes()), "ü");
    assert_eq!(name(b"\xff"), "\\xff");
    assert_eq!(name(b"a\\\xc3"), "a\\\\\\xc3");
    assert_ne!(name(b"\xff\xfe"), name(b"\xfe\xff"));
    assert_ne!(name(b"\\xff\xfe"), name(b"\xff\xfe"));
}

#[test]
fn finds_cgroup2_in_mountinfo() {
    let cgroupfs = Path::new("/sys/fs/cgroup");
    let hybrid = b"31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
        40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
        41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
    assert_eq!(cgroup2_mount(hybrid, cgroupfs), Some(PathBuf::from("/sys/fs/cgroup/unified")));
    let pure = b"30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
    assert_eq!(cgroup2_mount(pure, cgroupfs), Some(PathBuf::from("/sys/fs/cgroup")));
    let subtree_first = b"50 1 0:26 /kubepods /mnt/pods rw - cgroup2 cgroup2 rw\n\
        51 1 0:26 / /mnt/all\\040cgroups rw - cgroup2 cgroup2 rw\n";
    assert_eq!(cgroup2_mount(subtree_first, cgroupfs), Some(PathBuf::from("/mnt/all cgroups")));
    let only_subtree = b"50 1 0:26 /kubepods /mnt/pods rw - cgroup2 cgroup2 rw\n";
    assert_eq!(cgroup2_mount(only_subtree, cgroupfs), Some(PathBuf::from("/mnt/pods")));
    assert_eq!(cgroup2_mount(b"32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", cgroupfs), None);
    assert_eq!(cgroup2_mount(b"", cgroupfs), None);
    // --path.cgroupfs picks among several: the one below it first, even a subtree.
    let container = b"60 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n\
        61 1 0:26 /kubepods /host/sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
    assert_eq!(cgroup2_mount(container, cgroupfs), Some(PathBuf::from("/sys/fs/cgroup")));
    assert_eq!(cgroup2_mount(container, Path::new("/host/sys/fs/cgroup")), Some(PathBuf::from("/host/sys/fs/cgroup")));
}

#[test]
fn no_cgroup2_is_one_line() {
    let e = CgroupError::NoCgroup2 { mountinfo: PathBuf::from("/proc/self/mountinfo") };
    assert_eq!(
        e.to_string(),
        "no cgroup2 file system is mounted (see /proc/self/mountinfo); per-cgroup delays need cgroup v2"
    );
}
