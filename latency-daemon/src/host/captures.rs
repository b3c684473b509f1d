//! Where captures are kept: a directory and its caps in; each capture (a trace and its picture)
//! written whole (a temporary name, then a rename, so a reader never sees half a file; the
//! picture first, so a listed trace has its picture), the oldest removed beyond a count and a
//! size, and the shelf the HTTP routes list and send from, out. Only names `model::capture` makes
//! are read, listed or removed: nothing else in the directory is touched.
use std::io;
use std::path::{Path, PathBuf};

use crate::model::capture::{self, Listed, Shelf};

/// How much the directory keeps: beyond either, the oldest captures go (the newest always stays).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    pub files: usize,
    pub bytes: u64,
}

#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    caps: Caps,
}

impl Store {
    /// The store in `dir`, made (owner-only) if it is not there.
    pub fn open(dir: &Path, caps: Caps) -> io::Result<Store> {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        Ok(Store { dir: dir.to_owned(), caps })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes capture `name` (its trace, and its picture when there is one), then removes the
    /// oldest captures beyond the caps; how many it removed.
    pub fn write(&self, name: &str, trace: &[u8], picture: Option<&[u8]>) -> io::Result<usize> {
        if !capture::is_name(name) || !name.ends_with(".pftrace") {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not a capture name: {name}")));
        }
        if let Some(picture) = picture {
            self.put(&capture::picture(name), picture)?;
        }
        self.put(name, trace)?;
        self.prune()
    }

    /// Whether capture `name` is still kept (the caps may have removed it since it was written).
    pub fn has(&self, name: &str) -> bool {
        capture::is_name(name) && self.dir.join(name).is_file()
    }

    fn put(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let temporary = self.dir.join(format!(".{name}.partial"));
        std::fs::write(&temporary, bytes)?;
        std::fs::rename(&temporary, self.dir.join(name))
    }

    /// Our captures, oldest first (names sort by time): each trace's name, its and its picture's
    /// bytes, and whether it has a picture.
    fn ours(&self) -> io::Result<Vec<(String, u64, bool)>> {
        let mut files = std::collections::BTreeMap::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else { continue };
            if capture::is_name(&name) && entry.file_type()?.is_file() {
                files.insert(name, entry.metadata()?.len());
            }
        }
        Ok(files
            .iter()
            .filter(|(name, _)| name.ends_with(".pftrace"))
            .map(|(name, bytes)| {
                let picture = files.get(&capture::picture(name));
                (name.clone(), bytes + picture.copied().unwrap_or(0), picture.is_some())
            })
            .collect())
    }

    fn prune(&self) -> io::Result<usize> {
        let ours = self.ours()?;
        let mut total: u64 = ours.iter().map(|(_, b, _)| b).sum();
        let mut count = ours.len();
        let mut removed = 0;
        for (name, bytes, _) in &ours {
            if count <= 1 || (count <= self.caps.files && total <= self.caps.bytes) {
                break;
            }
            // The trace first: a picture without its trace is never listed.
            std::fs::remove_file(self.dir.join(name))?;
            match std::fs::remove_file(self.dir.join(capture::picture(name))) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            total -= bytes;
            count -= 1;
            removed += 1;
        }
        Ok(removed)
    }
}

impl Shelf for Store {
    fn list(&self) -> io::Result<Vec<Listed>> {
        let mut listed: Vec<Listed> = self
            .ours()?
            .into_iter()
            .map(|(name, bytes, picture)| Listed {
                url: capture::url(&name),
                picture_url: picture.then(|| capture::url(&capture::picture(&name))),
                name,
                bytes,
            })
            .collect();
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
        const FILES: usize = 5;
        let dir = scratch();
        let store = Store::open(&dir, Caps { files: FILES, bytes: 1 << 20 }).unwrap();
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        let mut removed = 0;
        for i in 0..(FILES as u64 + 3) {
            removed += store.write(&capture::name(i * 1_000_000, 1, 7), b"trace", Some(b"<svg/>")).unwrap();
        }
        assert_eq!(removed, 3);
        let listed = store.list().unwrap();
        assert_eq!(listed.len(), FILES);
        assert_eq!(listed[0].name, capture::name((FILES as u64 + 2) * 1_000_000, 1, 7), "newest first");
        assert_eq!(listed.last().unwrap().name, capture::name(3_000_000, 1, 7), "the three oldest gone");
        assert_eq!(listed[0].url, format!("/api/v1/captures/{}", listed[0].name));
        assert_eq!(listed[0].picture_url, Some(format!("/api/v1/captures/{}", capture::picture(&listed[0].name))));
        assert_eq!(listed[0].bytes, 11, "the trace's and the picture's");
        assert!(dir.join("notes.txt").exists());
        assert_eq!(store.read(&listed[0].name).unwrap().as_deref(), Some(&b"trace"[..]));
        assert_eq!(store.read(&capture::picture(&listed[0].name)).unwrap().as_deref(), Some(&b"<svg/>"[..]));
        assert_eq!(store.read("../notes.txt").unwrap(), None);
        assert_eq!(store.read(&capture::name(0, 1, 7)).unwrap(), None, "removed");
        assert!(!dir.join(capture::picture(&capture::name(0, 1, 7))).exists(), "its picture too");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2 * FILES + 1, "nothing half-written left");
        assert!(store.write("../x.pftrace", b"x", None).is_err());
        assert!(store.write(&capture::picture(&capture::name(0, 1, 7)), b"x", None).is_err(), "a trace's name");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_oldest_go_beyond_the_size_but_the_newest_stays() {
        let dir = scratch();
        let store = Store::open(&dir, Caps { files: 100, bytes: 25 }).unwrap();
        for i in 0..4 {
            store.write(&capture::name(i * 1_000_000, 0, 1), &[0; 10], None).unwrap();
        }
        assert_eq!(store.list().unwrap().len(), 2, "20 bytes of 25");
        store.write(&capture::name(9_000_000, 0, 1), &[0; 100], None).unwrap();
        let listed = store.list().unwrap();
        assert_eq!(listed.len(), 1, "alone over the cap, the newest stays");
        assert_eq!(listed[0].picture_url, None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
