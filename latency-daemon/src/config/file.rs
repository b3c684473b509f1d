//! A configuration file's path in, its text out — only from a regular file of at most
//! [`MAX_FILE_BYTES`], never blocking on what is not one (a FIFO, a device): the reload that
//! reads it must not freeze whatever waits for it; and only a text that stood still while it was
//! read, so a file being rewritten in place is never taken half-written.

use std::fs::{Metadata, OpenOptions};
use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Far above any real configuration (ours and the web config are a few KiB); a file larger than
/// this is a mistake or an attack, and reading it would only cost memory.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// The pause before the one retry of a file that changed lately or while it was read; the retry
/// must find it as it was. An in-place writer between two of its `write`s leaves a file that is
/// unchanged during a read yet incomplete; its next write comes within microseconds to
/// milliseconds, not 50 ms.
pub const SETTLE: Duration = Duration::from_millis(50);

/// A file whose ctime (set by every write and truncate; nobody can set it back) is this old is
/// read once. Far above `SETTLE`: the kernel stamps files from a coarse clock, and under load a
/// file rewritten in place was seen here still empty mid-rewrite with a ctime over 50 ms old.
const QUIET: Duration = Duration::from_secs(1);

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
        "{} changed while it was read, again {} ms later (replace it by rename: write a temporary file, then mv)",
        path.display(),
        SETTLE.as_millis()
    )]
    Changing { path: PathBuf },
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

    /// Last changed at least [`QUIET`] ago by the wall clock. A ctime in the future (the clock
    /// was set back) is not quiet; the retry covers that case.
    fn quiet(&self) -> bool {
        let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) else { return false };
        let (Ok(secs), Ok(nanos)) = (u64::try_from(self.ctime.0), u32::try_from(self.ctime.1)) else { return false };
        now.checked_sub(Duration::new(secs, nanos)).is_some_and(|age| age >= QUIET)
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
}

/// Reads `path` whole, as a text that did not change while it was read and had stood still for
/// [`QUIET`] (else, after a pause of [`SETTLE`], once more: then the file must be as the first
/// pass left it, stamps and bytes). Opened non-blocking, so a FIFO without a writer cannot hold
/// the caller; the type and size are checked on the open descriptor (no race with a rename), and
/// the read itself is capped in case the file grows meanwhile. Symbolic links are followed
/// (Kubernetes mounts ConfigMaps through them).
pub fn read(path: &Path) -> Result<String, FileError> {
    let first = read_once(path)?;
    let bytes = if first.steady() && first.after.quiet() {
        first.bytes
    } else {
        std::thread::sleep(SETTLE);
        let second = read_once(path)?;
        if !(second.steady() && second.before == first.after && second.bytes == first.bytes) {
            return Err(FileError::Changing { path: path.to_owned() });
        }
        second.bytes
    };
    String::from_utf8(bytes).map_err(|_| FileError::NotText { path: path.to_owned() })
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
        assert!(started.elapsed() >= SETTLE, "a file written just now waits {SETTLE:?}: {:?}", started.elapsed());

        std::thread::sleep(QUIET + SETTLE);
        let started = Instant::now();
        assert_eq!(read(&path).unwrap(), "top_cgroups = 3\n");
        assert!(started.elapsed() < SETTLE, "a quiet file is read at once: {:?}", started.elapsed());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_file_rewritten_in_place_all_along_is_refused_in_one_line() {
        let (dir, path) = config_file("torn", "top_cgroups = 3\n");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (path, stop) = (path.clone(), stop.clone());
            std::thread::spawn(move || {
                use std::io::Write as _;
                let mut n = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut f = std::fs::OpenOptions::new().write(true).truncate(true).open(&path).unwrap();
                    std::thread::sleep(Duration::from_millis(1));
                    writeln!(f, "top_cgroups = {n}").unwrap();
                    n += 1;
                }
            })
        };
        let e = read(&path).unwrap_err();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().unwrap();
        assert!(matches!(e, FileError::Changing { .. }), "{e:?}");
        let e = e.to_string();
        assert!(e.starts_with(&format!("{} changed while it was read, again 50 ms later", path.display())), "{e}");
        assert!(e.contains("replace it by rename") && !e.contains('\n'), "{e}");
        assert!(read(&path).unwrap().starts_with("top_cgroups = "), "readable again once it stands still");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
