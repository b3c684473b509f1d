//! Cgroup directories named by paths of any length → open directories, their entries and ids.
//! A cgroup path has no length limit (`cgroup.max.depth` is unbounded, each name up to 255
//! bytes), but a path handed to one system call must fit PATH_MAX (4096 bytes with its NUL), so
//! a longer one is opened in steps, each `openat` relative to the directory the previous one
//! opened. One step per 4 KiB of path: a real tree never pays more than the one `openat` of before.
use std::{
    ffi::OsStr,
    io,
    os::{fd::OwnedFd, unix::ffi::OsStrExt as _},
    path::Path,
};

use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags};

/// The longest path one call takes: PATH_MAX counts the terminating NUL.
const MAX_STEP: usize = libc::PATH_MAX as usize - 1;

/// Open the directory at `path` (absolute or relative to the working directory), whatever its length.
pub(super) fn open(path: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut rest = path.as_os_str().as_bytes();
    let mut at: Option<OwnedFd> = None;
    loop {
        let step = split(rest)?;
        let fd = match &at {
            None => rustix::fs::openat(CWD, step, flags, Mode::empty()),
            Some(dir) => rustix::fs::openat(dir, step, flags, Mode::empty()),
        }?;
        at = Some(fd);
        rest = &rest[step.len()..];
        // The '/' that ended this step, if any, starts the next one's relative path.
        while let [b'/', tail @ ..] = rest {
            rest = tail;
        }
        if rest.is_empty() {
            return at.ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput));
        }
    }
}

/// The next step of `rest`: all of it when it fits one call, else its longest prefix that does and
/// ends before a '/' (a name is at most 255 bytes, so there is one).
fn split(rest: &[u8]) -> io::Result<&[u8]> {
    if rest.len() <= MAX_STEP {
        return Ok(rest);
    }
    match rest[..=MAX_STEP].iter().rposition(|&b| b == b'/') {
        // A leading '/' alone: the root, then the rest relative to it.
        Some(0) => Ok(&rest[..1]),
        Some(slash) => Ok(&rest[..slash]),
        None => Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG)),
    }
}

/// The inode number of the directory at `path` (the cgroup id on 64-bit kernels), not following
/// a symlink, whatever the path's length.
pub(super) fn ino(path: &Path) -> io::Result<u64> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() <= MAX_STEP {
        return Ok(rustix::fs::statat(CWD, path, AtFlags::SYMLINK_NOFOLLOW)?.st_ino);
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    Ok(rustix::fs::statat(open(parent)?, name, AtFlags::SYMLINK_NOFOLLOW)?.st_ino)
}

/// One entry of a directory: its name, whether it is a directory (d_type, which kernfs always
/// fills, so no `stat`) and its inode number.
pub(super) struct Entry {
    pub(super) name: Box<OsStr>,
    pub(super) is_dir: bool,
    pub(super) ino: u64,
}

/// The entries of the open directory `fd`, "." and ".." left out. An error ends the listing (the
/// directory went away under us).
pub(super) fn entries(fd: OwnedFd) -> io::Result<impl Iterator<Item = io::Result<Entry>>> {
    let mut dir = Dir::new(fd)?;
    let mut failed = false;
    Ok(std::iter::from_fn(move || {
        loop {
            if failed {
                return None;
            }
            let entry = match dir.read()? {
                Ok(entry) => entry,
                Err(e) => {
                    failed = true;
                    return Some(Err(e.into()));
                }
            };
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            return Some(Ok(Entry {
                name: OsStr::from_bytes(name).into(),
                is_dir: entry.file_type() == FileType::Directory,
                ino: entry.ino(),
            }));
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_paths_are_one_step() {
        assert_eq!(split(b"/sys/fs/cgroup/a").unwrap(), b"/sys/fs/cgroup/a");
        let exact = [b'a'; MAX_STEP];
        assert_eq!(split(&exact).unwrap().len(), MAX_STEP);
    }

    #[test]
    fn long_paths_split_before_a_slash() {
        let name = [b'n'; 255];
        let mut path = b"/mnt".to_vec();
        while path.len() <= 2 * MAX_STEP {
            path.push(b'/');
            path.extend_from_slice(&name);
        }
        let first = split(&path).unwrap();
        assert!(first.len() <= MAX_STEP && first.len() > MAX_STEP - 256, "{}", first.len());
        assert_eq!(path[first.len()], b'/');
        let mut steps = 0;
        let mut rest = &path[..];
        while !rest.is_empty() {
            let step = split(rest).unwrap();
            assert!(step.len() <= MAX_STEP);
            rest = rest[step.len()..].strip_prefix(b"/").unwrap_or(&rest[step.len()..]);
            steps += 1;
        }
        assert_eq!(steps, 3, "{} bytes", path.len());
    }

    #[test]
    fn a_name_longer_than_a_step_is_an_error() {
        let path = [b'x'; MAX_STEP + 1];
        assert_eq!(split(&path).unwrap_err().raw_os_error(), Some(libc::ENAMETOOLONG));
    }
}
