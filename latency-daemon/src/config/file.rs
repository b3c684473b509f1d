//! A configuration file's path in, its text out — only from a regular file of at most
//! [`MAX_FILE_BYTES`], never blocking on what is not one (a FIFO, a device): the reload that
//! reads it must not freeze whatever waits for it; and only a text that stood still for
//! [`SETTLE`], so a file being rewritten in place is never taken half-written.

use std::fs::{Metadata, OpenOptions};
use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Far above any real configuration (ours and the web config are a few KiB); a file larger than
/// this is a mistake or an attack, and reading it would only cost memory.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// How long a file must have stood still (stamps and bytes) before it is taken. An in-place
/// writer between two of its `write`s leaves a file that is unchanged for as long as it pauses,
/// yet incomplete — and a torn TOML file still parses, later keys simply missing — so nothing but
/// time tells it from a whole one. Above the longest pause we tolerate, 500 ms (a slow script, an
/// editor saving in chunks on a busy machine), with room for the kernel's coarse file clock.
pub const SETTLE: Duration = Duration::from_millis(600);

/// The longest a read waits for a file that keeps changing: a writer that pauses for [`SETTLE`]
/// within it is read then; one that never does is refused in one line.
pub const PATIENCE: Duration = Duration::from_secs(5);

/// Between two looks at a file that has not stood still long enough yet.
const POLL: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{} is {what}, not a regular file", path.display())]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("{} is larger than {} bytes ({size} bytes)", path.display(), MAX_FILE_BYTES)]
    TooLarge { path: PathBuf, size: u64 },
    #[error("{} is not UTF-8", path.display())]
    NotText { path: PathBuf },
    #[error(
        "{} kept changing: it never stood still for {} ms in {} ms ({changes} changes seen; replace it by rename: write a temporary file, then mv)",
        path.display(),
        settle.as_millis(),
        waited.as_millis()
    )]
    Changing { path: PathBuf, settle: Duration, waited: Duration, changes: u32 },
}

/// What says whether a file changed: which file, its size, and when its data and inode last did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// How long ago, by the wall clock, the file last changed: its ctime is set by every write,
    /// truncate and rename, and nobody can set it back. Zero for a ctime in the future (the clock
    /// was set back): then only what this reader saw itself counts.
    fn age(&self) -> Duration {
        let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) else { return Duration::ZERO };
        let (Ok(secs), Ok(nanos)) = (u64::try_from(self.ctime.0), u32::try_from(self.ctime.1)) else {
            return Duration::ZERO;
        };
        now.checked_sub(Duration::new(secs, nanos)).unwrap_or(Duration::ZERO)
    }
}

/// One pass over the file: its bytes and its stamps just before and just after reading them.
struct Pass {
    bytes: Vec<u8>,
    before: Stamp,
    after: Stamp,
}

impl Pass {
    fn steady(&self) -> bool {
        self.before == self.after
    }

    /// The file as `self` found it is the one `earlier` found: same stamps, same bytes.
    fn same_as(&self, earlier: &Pass) -> bool {
        self.steady() && earlier.steady() && self.before == earlier.after && self.bytes == earlier.bytes
    }
}

/// Reads `path` whole, as a text that stood still for [`SETTLE`]: unchanged while it was read,
/// and for `SETTLE` before by its ctime or by what this reader saw (looking again every
/// [`POLL`]), whichever is longer; a file last changed long ago is read at once. A file that
/// changes all along is read once it pauses for `SETTLE`, and refused after [`PATIENCE`].
/// Opened non-blocking, so a FIFO without a writer cannot hold the caller; the type and size are
/// checked on the open descriptor (no race with a rename), and the read itself is capped in case
/// the file grows meanwhile. Symbolic links are followed (Kubernetes mounts ConfigMaps through
/// them).
pub fn read(path: &Path) -> Result<String, FileError> {
    #[cfg(test)]
    let settle = SETTLE_HERE.get();
    #[cfg(not(test))]
    let settle = SETTLE;
    read_settled(path, settle, PATIENCE)
}

#[cfg(test)]
thread_local! {
    /// [`SETTLE`] for reads on this thread: a unit test that rewrites a file and reloads dozens
    /// of times, and is not about torn files, may shorten it with [`settle_here`].
    static SETTLE_HERE: std::cell::Cell<Duration> = const { std::cell::Cell::new(SETTLE) };
}

/// Reads on this thread take a file once it stood still for `settle` (unit tests only).
#[cfg(test)]
pub(crate) fn settle_here(settle: Duration) {
    SETTLE_HERE.set(settle);
}

fn read_settled(path: &Path, settle: Duration, patience: Duration) -> Result<String, FileError> {
    let started = Instant::now();
    let mut seen = read_once(path)?;
    // When this reader first saw the file as `seen` has it.
    let mut since = Instant::now();
    let mut changes = 0u32;
    loop {
        let stood = if seen.steady() { since.elapsed().max(seen.after.age()) } else { Duration::ZERO };
        if stood >= settle {
            return String::from_utf8(seen.bytes).map_err(|_| FileError::NotText { path: path.to_owned() });
        }
        let waited = started.elapsed();
        if waited >= patience {
            return Err(FileError::Changing { path: path.to_owned(), settle, waited, changes });
        }
        std::thread::sleep(POLL.min(settle - stood).min(patience - waited));
        let next = read_once(path)?;
        if !next.same_as(&seen) {
            since = Instant::now();
            changes += 1;
        }
        seen = next;
    }
}

fn read_once(path: &Path) -> Result<Pass, FileError> {
    let io = |source| FileError::Io { path: path.to_owned(), source };
    let mut file =
        OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    let kind = meta.file_type();
    if !kind.is_file() {
        use std::os::unix::fs::FileTypeExt as _;
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a named pipe"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else {
            "not a file"
        };
        return Err(FileError::NotRegular { path: path.to_owned(), what });
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(FileError::TooLarge { path: path.to_owned(), size: meta.len() });
    }
    let before = Stamp::of(&meta);
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    (&mut file).take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FileError::TooLarge { path: path.to_owned(), size: bytes.len() as u64 });
    }
    let after = Stamp::of(&file.metadata().map_err(io)?);
    Ok(Pass { bytes, before, after })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("runqlat-file-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A fresh scratch directory `name` and, in it, a config file of `text`.
    fn config_file(name: &str, text: &str) -> (PathBuf, PathBuf) {
        let dir = scratch(name);
        let path = dir.join("c.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn reads_a_small_regular_file() {
        let (dir, path) = config_file("small", "interval = \"1s\"\n");
        assert_eq!(read(&path).unwrap(), "interval = \"1s\"\n");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn refuses_fifo_directory_and_huge_files_at_once() {
        let dir = scratch("refuse");
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let started = Instant::now();
        let e = read(&fifo).unwrap_err().to_string();
        assert!(e.ends_with("is a named pipe, not a regular file"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(1), "a FIFO without a writer must not block");

        let e = read(&dir).unwrap_err().to_string();
        assert!(e.ends_with("is a directory, not a regular file"), "{e}");

        let big = dir.join("big");
        std::fs::write(&big, vec![b'#'; MAX_FILE_BYTES as usize + 1]).unwrap();
        let e = read(&big).unwrap_err().to_string();
        assert!(e.contains("is larger than 1048576 bytes (1048577 bytes)"), "{e}");
        for e in [read(&fifo), read(&dir), read(&big), read(&dir.join("missing"))] {
            assert!(!e.unwrap_err().to_string().contains('\n'));
        }
        assert!(started.elapsed() < SETTLE, "refusals do not wait for the file to settle");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_file_changed_just_now_is_read_once_it_stood_still() {
        let (dir, path) = config_file("fresh", "top_cgroups = 3\n");
        let started = Instant::now();
        assert_eq!(read(&path).unwrap(), "top_cgroups = 3\n");
        let took = started.elapsed();
        assert!(took >= SETTLE - POLL, "a file written just now waits until it stood still {SETTLE:?}: {took:?}");
        assert!(took < SETTLE + 4 * POLL, "and not much longer: {took:?}");

        std::thread::sleep(SETTLE);
        let started = Instant::now();
        assert_eq!(read(&path).unwrap(), "top_cgroups = 3\n");
        assert!(started.elapsed() < POLL, "a quiet file is read at once: {:?}", started.elapsed());
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Rewrites `path` in place as `first`, a pause, then `second`, `times` times, `pause` after
    /// each `first` and `gap` after each `second`.
    fn two_writes(path: &Path, first: &str, second: &str, pause: Duration, gap: Duration, times: u32) {
        use std::io::Write as _;
        for _ in 0..times {
            let mut f = OpenOptions::new().write(true).truncate(true).open(path).unwrap();
            f.write_all(first.as_bytes()).unwrap();
            std::thread::sleep(pause);
            f.write_all(second.as_bytes()).unwrap();
            drop(f);
            std::thread::sleep(gap);
        }
    }

    #[test]
    fn a_writer_pausing_between_its_writes_is_never_read_torn() {
        // A torn TOML file still parses (later keys missing): only time can tell it.
        let whole = "top_cgroups = 3\nwindow = \"5s\"\n";
        let (dir, path) = config_file("pausing", whole);
        let writer = {
            let path = path.clone();
            std::thread::spawn(move || {
                for pause in [80, 250, 500] {
                    two_writes(
                        &path,
                        "top_cgroups = 3\n",
                        "window = \"5s\"\n",
                        Duration::from_millis(pause),
                        Duration::ZERO,
                        1,
                    );
                }
            })
        };
        let mut reads = 0;
        while !writer.is_finished() {
            assert_eq!(read(&path).unwrap(), whole, "read {reads}");
            reads += 1;
        }
        writer.join().unwrap();
        assert!(reads >= 1);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_file_rewritten_all_along_is_read_once_it_pauses() {
        let (dir, path) = config_file("pauses", "top_cgroups = 1\n");
        let writer = {
            let path = path.clone();
            std::thread::spawn(move || {
                two_writes(&path, "top_cgroups = 1", "\n", Duration::from_millis(20), Duration::from_millis(20), 40);
                two_writes(&path, "top_cgroups = 2", "\n", Duration::from_millis(20), Duration::ZERO, 1);
                Instant::now()
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        let text = read(&path).unwrap();
        let last_write = writer.join().unwrap();
        assert_eq!(text, "top_cgroups = 2\n", "the last state, once it stood still");
        // It stood still SETTLE by its ctime (the kernel's coarse clock, up to a tick behind), then
        // the next look: on a loaded machine a few polls late, never a whole PATIENCE.
        let ago = last_write.elapsed();
        assert!(ago < SETTLE + 4 * POLL, "read soon after it paused: {ago:?} ago");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_file_rewritten_all_along_is_refused_in_one_line_after_a_bounded_wait() {
        let (dir, path) = config_file("torn", "top_cgroups = 3\n");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (path, stop) = (path.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    two_writes(&path, "top_cgroups = ", "3\n", Duration::from_millis(1), Duration::from_millis(5), 1);
                }
            })
        };
        let started = Instant::now();
        let patience = Duration::from_millis(1500);
        let e = read_settled(&path, SETTLE, patience).unwrap_err();
        let took = started.elapsed();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().unwrap();
        assert!(matches!(e, FileError::Changing { .. }), "{e:?}");
        assert!(took >= patience && took < patience + 4 * POLL, "bounded: {took:?}");
        let e = e.to_string();
        let head = format!("{} kept changing: it never stood still for 600 ms in ", path.display());
        assert!(e.starts_with(&head), "{e}");
        assert!(e.contains("replace it by rename") && !e.contains('\n'), "{e}");
        assert_eq!(read(&path).unwrap(), "top_cgroups = 3\n", "readable again once it stands still");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
