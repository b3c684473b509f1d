//! A configuration file's path in, its text out — only from a regular file of at most
//! [`MAX_FILE_BYTES`], and never blocking on what is not one (a FIFO, a device): the reload that
//! reads it must not freeze whatever waits for it.

use std::fs::OpenOptions;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// Far above any real configuration (ours and the web config are a few KiB); a file larger than
/// this is a mistake or an attack, and reading it would only cost memory.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

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
}

/// Reads `path` whole. Opened non-blocking, so a FIFO without a writer cannot hold the caller; the
/// type and size are checked on the open descriptor (no race with a rename), and the read itself
/// is capped in case the file grows meanwhile. Symbolic links are followed (Kubernetes mounts
/// ConfigMaps through them).
pub fn read(path: &Path) -> Result<String, FileError> {
    let io = |source| FileError::Io { path: path.to_owned(), source };
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(path).map_err(io)?;
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
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FileError::TooLarge { path: path.to_owned(), size: bytes.len() as u64 });
    }
    String::from_utf8(bytes).map_err(|_| FileError::NotText { path: path.to_owned() })
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

    #[test]
    fn reads_a_small_regular_file() {
        let dir = scratch("small");
        let path = dir.join("c.toml");
        std::fs::write(&path, "interval = \"1s\"\n").unwrap();
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
        std::fs::remove_dir_all(dir).unwrap();
    }
}
