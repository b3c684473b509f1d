//! cgroup v2 ids, as the kernel program records them, → cgroup paths relative to the cgroup2 mount
//! ("/" is the root), found in mountinfo. Why the id is the directory's inode number, and what a
//! walk of the tree costs (hence its rate limit), is in docs/measuring.md.

mod dir;
pub mod label;

use std::{
    collections::HashMap,
    ffi::OsStr,
    fs, io,
    os::unix::ffi::{OsStrExt as _, OsStringExt as _},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use crate::model::exposition::CGROUP_UNRESOLVED;

/// One walk a second is cheap (docs/measuring.md) yet bounds the cost of ids we will never
/// find, e.g. of a cgroup that was created and removed between two scans.
pub const DEFAULT_MIN_RESCAN: Duration = Duration::from_secs(1);

/// Far above real hosts (a busy Kubernetes node has a few thousand cgroups), so only a pathological tree
/// hits it; docs/measuring.md says what a walk this long costs.
pub const DEFAULT_MAX_DIRS: usize = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup2 file system is mounted (see {}); per-cgroup delays need cgroup v2", .mountinfo.display())]
    NoCgroup2 { mountinfo: PathBuf },
    #[error("cannot read {}: {source}", .path.display())]
    Io { path: PathBuf, source: io::Error },
}

/// The outcome of one walk of the cgroup2 tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walk {
    /// Cgroup directories indexed, the root included.
    pub dirs: usize,
    /// Directories that vanished or could not be read mid-walk (normal while containers come and go).
    pub skipped: usize,
    /// Of those, the ones that could not be read for another reason than being gone: cgroups
    /// below them may exist unseen.
    pub unreadable: usize,
    /// The walk stopped at `max_dirs`; deeper or later cgroups stay unknown.
    pub truncated: bool,
    pub took: Duration,
}

#[derive(Debug)]
struct Known {
    /// For people and labels: '/'-separated, names verbatim unless they are not UTF-8 (see `push_name`),
    /// bounded in length (`label::bounded`).
    path: String,
    /// For the file system: the exact bytes, so `prune` can check the directory is still this cgroup.
    dir: PathBuf,
}

/// A cache id → path over one cgroup2 mount.
#[derive(Debug)]
pub struct CgroupNames {
    mount: PathBuf,
    known: HashMap<u64, Known>,
    min_rescan: Duration,
    max_dirs: usize,
    /// When the last walk ended and how long it took (failed ones too, so they are rate-limited as well).
    walked: Option<(Instant, Duration)>,
    last_walk: Option<Walk>,
    /// The latest walk failed (the mount became unreadable); what we knew stays.
    last_failed: bool,
    /// `Unresolved::ALL`'s counts.
    unresolved: [u64; CGROUP_UNRESOLVED.len()],
}

/// Why a window's cgroup id had no name, so its delays went to the "other" series
/// (`runqlat_cgroup_unresolved_total{reason}`, each reason's label at its index in `CGROUP_UNRESOLVED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unresolved {
    /// No directory had this id in a complete walk: created and removed between two walks, or
    /// outside the mount we walk (a cgroup namespace, a subtree mount).
    NotFound = 0,
    /// The walk stopped at its bound of directories, so the id may be in the part not walked.
    WalkTruncated = 1,
    /// The latest walk failed (the mount unreadable).
    WalkFailed = 2,
}

impl CgroupNames {
    /// Find the cgroup2 mount in this process's mount table (`<procfs>/self/mountinfo`), preferring
    /// one at or below `--path.cgroupfs`, and index it. Its mount point is a path in our own mount
    /// namespace, so it is used as it is: no `--path.rootfs` prefix (unlike node_exporter's
    /// filesystem collector, which reads the host's PID 1 table and must translate it).
    pub fn discover() -> Result<CgroupNames, CgroupError> {
        let paths = super::paths::get();
        let mountinfo = super::paths::proc("self/mountinfo");
        let text = fs::read(&mountinfo).map_err(|source| CgroupError::Io { path: mountinfo.clone(), source })?;
        let mount = cgroup2_mount(&text, &paths.cgroupfs).ok_or(CgroupError::NoCgroup2 { mountinfo })?;
        let mut names = CgroupNames::at(mount);
        names.rescan()?;
        Ok(names)
    }

    /// Names relative to `mount`, which may also be any cgroup directory below a cgroup2 mount. Nothing is
    /// read until the first miss.
    pub fn at(mount: PathBuf) -> CgroupNames {
        CgroupNames {
            mount,
            known: HashMap::new(),
            min_rescan: DEFAULT_MIN_RESCAN,
            max_dirs: DEFAULT_MAX_DIRS,
            walked: None,
            last_walk: None,
            last_failed: false,
            unresolved: [0; CGROUP_UNRESOLVED.len()],
        }
    }

    #[cfg(test)]
    pub fn with_min_rescan(mut self, min_rescan: Duration) -> CgroupNames {
        self.min_rescan = min_rescan;
        self
    }

    #[cfg(test)]
    pub fn with_max_dirs(mut self, max_dirs: usize) -> CgroupNames {
        self.max_dirs = max_dirs;
        self
    }

    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// Path for an id; on a miss, rescan the tree (at most once per `min_rescan`, so an unknown id can't
    /// make us walk the tree on every call; docs/measuring.md), then None if still unknown. A failed
    /// rescan keeps what we knew; call `rescan` to see the error.
    pub fn path(&mut self, id: u64) -> Option<&str> {
        // Two lookups on a hit: returning the first lookup's borrow early would keep `self` borrowed
        // across the rescan (the borrow checker's "conditional return" limit).
        if !self.known.contains_key(&id) && self.rescan_due() {
            let _ = self.rescan();
        }
        self.known.get(&id).map(|k| k.path.as_str())
    }

    /// Walk the tree now, adding what is new. Cgroups that are gone stay until `prune`, so their ids are
    /// still reported to the daemon for deletion from the kernel map.
    pub fn rescan(&mut self) -> Result<Walk, CgroupError> {
        let started = Instant::now();
        let walk = walk(&self.mount, self.max_dirs, &mut self.known);
        self.walked = Some((Instant::now(), started.elapsed()));
        self.last_failed = walk.is_err();
        let walk = walk?;
        self.last_walk = Some(walk);
        Ok(walk)
    }

    /// The path for a window's id like `path`, counting a miss by its reason: the ids whose delays
    /// go to "other" only because they have no name.
    pub fn label(&mut self, id: u64) -> Option<String> {
        let path = self.path(id).map(str::to_string);
        if path.is_none() {
            let reason = if self.last_failed {
                Unresolved::WalkFailed
            } else if self.last_walk.is_some_and(|w| w.truncated) {
                Unresolved::WalkTruncated
            } else {
                Unresolved::NotFound
            };
            self.unresolved[reason as usize] += 1;
        }
        path
    }

    /// Misses of `label` so far, by reason (in `CGROUP_UNRESOLVED`'s order).
    pub fn unresolved_total(&self) -> [u64; CGROUP_UNRESOLVED.len()] {
        self.unresolved
    }

    /// The most recent successful walk, if any.
    #[cfg(test)]
    pub fn last_walk(&self) -> Option<Walk> {
        self.last_walk
    }

    /// Forget ids whose directories are gone (cgroup removed), returning them, so the daemon can delete
    /// their kernel map entries. One `stat` per known cgroup.
    pub fn prune(&mut self) -> Vec<u64> {
        let mut gone = Vec::new();
        self.known.retain(|&id, known| {
            // cgroup2 refuses renames (EPERM: only v1 has a kernfs rename op), so a path names one cgroup
            // for its whole life; a different id at the same path is a new cgroup that reused the name.
            // Any error but ENOENT (EACCES, say) proves nothing, so the entry stays.
            let alive = match id_at(&known.dir) {
                Ok(now) => now == id,
                Err(e) => e.kind() != io::ErrorKind::NotFound,
            };
            if !alive {
                gone.push(id);
            }
            alive
        });
        gone
    }

    /// Of `ids` (seen in the kernel's maps before this call), those a fresh walk of the whole
    /// hierarchy does not find: removed. `None` when that proves nothing — the mount is not the
    /// hierarchy's root (a cgroup namespace or a subtree: cgroups outside it are not gone), or
    /// the walk failed, stopped at its bound or could not read a directory. After `prune`, so
    /// what is known is what exists.
    pub fn sweep(&mut self, ids: impl Iterator<Item = u64>) -> Option<Vec<u64>> {
        /// The root of a cgroup2 hierarchy is kernfs node 1.
        const HIERARCHY_ROOT: u64 = 1;
        if id_at(&self.mount).ok()? != HIERARCHY_ROOT {
            return None;
        }
        let walk = self.rescan().ok()?;
        if walk.truncated || walk.unreadable > 0 {
            return None;
        }
        Some(ids.filter(|id| !self.known.contains_key(id)).collect())
    }

    pub fn len(&self) -> usize {
        self.known.len()
    }

    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    fn rescan_due(&self) -> bool {
        const IDLE_PER_BUSY: u32 = 9;
        self.walked
            .is_none_or(|(ended, took)| ended.elapsed() >= self.min_rescan.max(took.saturating_mul(IDLE_PER_BUSY)))
    }
}

/// Depth-first over directories (every directory in cgroupfs is a cgroup; there are no symlinks), with an
/// explicit stack because cgroup depth is unbounded by default (`cgroup.max.depth` = max); `dir` opens
/// paths longer than PATH_MAX in steps.
fn walk(mount: &Path, max_dirs: usize, known: &mut HashMap<u64, Known>) -> Result<Walk, CgroupError> {
    let started = Instant::now();
    let io_err = |source| CgroupError::Io { path: mount.to_path_buf(), source };
    let root_id = id_at(mount).map_err(io_err)?;
    // Read the root before recording anything so an unreadable mount is an error, not an empty tree.
    let root_entries = dir::open(mount).and_then(dir::entries).map_err(io_err)?;
    known.entry(root_id).or_insert_with(|| Known { path: "/".to_string(), dir: mount.to_path_buf() });

    let mut walk = Walk { dirs: 1, skipped: 0, unreadable: 0, truncated: false, took: Duration::ZERO };
    // Directories still to read, opened one at a time: a stack of open handles could run out of file
    // descriptors on a wide tree. The path strings are whole here; `Known` keeps the bounded label.
    let mut pending: Vec<(PathBuf, String)> = Vec::new();
    // The root's children get "" + "/" + name.
    let mut next = Some((root_entries, mount.to_path_buf(), String::new()));
    'walk: while let Some((entries, parent_dir, parent)) = next.take() {
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                // The directory went away under us; the listing ends after an error.
                Err(e) => {
                    walk.skipped += 1;
                    walk.unreadable += usize::from(e.kind() != io::ErrorKind::NotFound);
                    break;
                }
            };
            if !entry.is_dir {
                continue;
            }
            if walk.dirs >= max_dirs {
                walk.truncated = true;
                break 'walk;
            }
            let dir = parent_dir.join(&*entry.name);
            let Ok(id) = entry_id(&entry, &dir) else {
                walk.skipped += 1;
                continue;
            };
            let mut path = parent.clone();
            path.push('/');
            push_name(&mut path, &entry.name);
            walk.dirs += 1;
            known.insert(id, Known { path: label::bounded(&path), dir: dir.clone() });
            pending.push((dir, path));
        }
        while let Some((dir, path)) = pending.pop() {
            match dir::open(&dir).and_then(dir::entries) {
                Ok(entries) => {
                    next = Some((entries, dir, path));
                    break;
                }
                // Removed since we listed it; `prune` will drop it.
                Err(e) => {
                    walk.skipped += 1;
                    walk.unreadable += usize::from(e.kind() != io::ErrorKind::NotFound);
                }
            }
        }
    }
    walk.took = started.elapsed();
    Ok(walk)
}

#[cfg(target_pointer_width = "64")]
fn entry_id(entry: &dir::Entry, _dir: &Path) -> io::Result<u64> {
    Ok(entry.ino)
}

#[cfg(not(target_pointer_width = "64"))]
fn entry_id(_entry: &dir::Entry, dir: &Path) -> io::Result<u64> {
    handle_id(dir)
}

/// The cgroup id of the directory at `path` (docs/measuring.md says why the inode number is it).
#[cfg(target_pointer_width = "64")]
fn id_at(path: &Path) -> io::Result<u64> {
    dir::ino(path)
}

#[cfg(not(target_pointer_width = "64"))]
fn id_at(path: &Path) -> io::Result<u64> {
    handle_id(path)
}

/// The cgroup id from the directory's file handle: kernfs encodes a handle as its 8-byte node id with
/// type FILEID_KERNFS (include/linux/exportfs.h).
#[cfg(any(test, not(target_pointer_width = "64")))]
fn handle_id(path: &Path) -> io::Result<u64> {
    const FILEID_KERNFS: libc::c_int = 0xfe;
    /// `struct file_handle` with room for exactly the 8 bytes a kernfs handle needs.
    #[repr(C)]
    struct Handle {
        bytes: libc::c_uint,
        kind: libc::c_int,
        id: [u8; 8],
    }
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    let mut handle = Handle { bytes: 8, kind: 0, id: [0; 8] };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `c_path` is NUL-terminated; `handle` is a `file_handle` header followed by the 8 bytes its
    // `bytes` field announces, and the kernel writes no more than that (it fails with EOVERFLOW instead).
    let rc =
        unsafe { libc::name_to_handle_at(libc::AT_FDCWD, c_path.as_ptr(), (&raw mut handle).cast(), &mut mount_id, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if handle.kind != FILEID_KERNFS || handle.bytes != 8 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a cgroup (kernfs) file handle"));
    }
    Ok(u64::from_ne_bytes(handle.id))
}

/// Append one cgroup name. UTF-8 names, the usual case, go in verbatim: quotes, backslashes and spaces
/// included (escaping for a label format is the exporter's job; the kernel rejects '\n' in names). Other
/// names get `\` → `\\` and each invalid byte → `\xNN`, which keeps distinct non-UTF-8 names distinct
/// (U+FFFD would merge them). The one collision left is a UTF-8 name that spells out such an escape, e.g.
/// the six characters `\xff\xfe` next to the bytes ff fe: no `String` can separate every byte string
/// while keeping UTF-8 names verbatim.
fn push_name(out: &mut String, name: &OsStr) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = name.as_bytes();
    if let Ok(name) = std::str::from_utf8(bytes) {
        out.push_str(name);
        return;
    }
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        for &b in chunk.invalid() {
            out.push_str("\\x");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
}

/// The mount point of the cgroup2 file system in a mountinfo text (proc(5)). Mounts at or below
/// `cgroupfs` (`--path.cgroupfs`: /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host) come
/// first, then the rest; in each, the first whose root is the hierarchy's root, else the first at
/// all (a bind mount of a subtree still names what is under it).
fn cgroup2_mount(mountinfo: &[u8], cgroupfs: &Path) -> Option<PathBuf> {
    let mut found: Vec<(PathBuf, bool)> = Vec::new();
    for line in mountinfo.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        // Optional fields end at a lone "-"; the file system type follows it.
        let Some(dash) = fields.iter().position(|f| *f == b"-") else { continue };
        if fields.get(dash + 1) != Some(&&b"cgroup2"[..]) || dash < 5 {
            continue;
        }
        let mount_point = PathBuf::from(std::ffi::OsString::from_vec(unescape_octal(fields[4])));
        found.push((mount_point, fields[3] == b"/"));
    }
    let under = |m: &PathBuf| m.starts_with(cgroupfs);
    let rank = |(m, whole): &(PathBuf, bool)| (!under(m), !whole);
    found.iter().min_by_key(|f| rank(f)).map(|(m, _)| m.clone())
}

/// mountinfo writes space, tab, newline and backslash in paths as `\ooo`.
fn unescape_octal(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal =
            field.get(i + 1..i + 4).filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push(d.iter().fold(0u8, |acc, c| acc.wrapping_mul(8).wrapping_add(c - b'0')));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
