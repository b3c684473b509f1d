//! Where captures are kept: a directory in; each capture written whole (a temporary name, then a
//! rename, so a reader never sees half a file), the oldest removed beyond a count and a size, and
//! the shelf the HTTP routes list and send from, out. Only names `model::capture::name` makes are
//! read, listed or removed: nothing else in the directory is touched.
use std::io;
use std::path::{Path, PathBuf};

use crate::model::capture::{self, Listed, Shelf};

/// Captures kept at most; beyond it the oldest go.
pub const MAX_FILES: usize = 32;
/// Bytes of captures kept at most; beyond it the oldest go (the newest always stays).
pub const MAX_BYTES: u64 = 256 << 20;

#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The store in `dir`, made (owner-only) if it is not there.
    pub fn open(dir: &Path) -> io::Result<Store> {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        Ok(Store { dir: dir.to_owned() })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes capture `name`, then removes the oldest beyond the caps; how many it removed.
    pub fn write(&self, name: &str, bytes: &[u8]) -> io::Result<usize> {
        if !capture::is_name(name) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not a capture name: {name}")));
        }
        let temporary = self.dir.join(format!(".{name}.partial"));
        std::fs::write(&temporary, bytes)?;
        std::fs::rename(&temporary, self.dir.join(name))?;
        self.prune()
    }

    /// Ours, oldest first (names sort by time), with their sizes.
    fn ours(&self) -> io::Result<Vec<(String, u64)>> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else { continue };
            if capture::is_name(&name) && entry.file_type()?.is_file() {
                found.push((name, entry.metadata()?.len()));
            }
        }
        found.sort();
        Ok(found)
    }

    fn prune(&self) -> io::Result<usize> {
        let ours = self.ours()?;
        let mut total: u64 = ours.iter().map(|(_, b)| b).sum();
        let mut count = ours.len();
        let mut removed = 0;
        for (name, bytes) in &ours {
            if count <= 1 || (count <= MAX_FILES && total <= MAX_BYTES) {
                break;
            }
            std::fs::remove_file(self.dir.join(name))?;
            total -= bytes;
            count -= 1;
            removed += 1;
        }
        Ok(removed)
    }
}

impl Shelf for Store {
    fn list(&self) -> io::Result<Vec<Listed>> {
        let mut listed: Vec<Listed> =
            self.ours()?.into_iter().map(|(name, bytes)| Listed { url: capture::url(&name), name, bytes }).collect();
        listed.reverse();
        Ok(listed)
    }

    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        if !capture::is_name(name) {
            return Ok(None);
        }
        match std::fs::read(self.dir.join(name)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "runqlat-captures-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn the_oldest_go_beyond_the_count_and_nothing_else_is_touched() {
        let dir = scratch();
        let store = Store::open(&dir).unwrap();
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        for i in 0..(MAX_FILES as u64 + 3) {
            store.write(&capture::name(i * 1_000_000, 1, 7), b"trace").unwrap();
        }
        let listed = store.list().unwrap();
        assert_eq!(listed.len(), MAX_FILES);
        assert_eq!(listed[0].name, capture::name((MAX_FILES as u64 + 2) * 1_000_000, 1, 7), "newest first");
        assert_eq!(listed.last().unwrap().name, capture::name(3_000_000, 1, 7), "the three oldest gone");
        assert_eq!(listed[0].url, format!("/api/v1/captures/{}", listed[0].name));
        assert!(dir.join("notes.txt").exists());
        assert_eq!(store.read(&listed[0].name).unwrap().as_deref(), Some(&b"trace"[..]));
        assert_eq!(store.read("../notes.txt").unwrap(), None);
        assert_eq!(store.read(&capture::name(0, 1, 7)).unwrap(), None, "removed");
        assert!(store.write("../x.pftrace", b"x").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
