//! A directory of our own under the system's temp dir, removed with everything in it when the
//! guard goes, pass or fail.
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::web;

/// `<tmp>/<prefix>-<our pid>-<a free port>`, removed on drop.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// A fresh directory, unique among concurrent tests (the pid tells processes apart, a free
    /// port the calls within one).
    pub fn new(prefix: &str) -> anyhow::Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}-{}", std::process::id(), web::free_port()?));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_goes_with_the_guard() {
        let scratch = Scratch::new("runqlat-scratch-test").unwrap_or_else(|e| panic!("{e:#}"));
        let dir = scratch.path().to_path_buf();
        std::fs::write(scratch.join("file"), "x").unwrap_or_else(|e| panic!("{e}"));
        assert!(dir.is_dir());
        drop(scratch);
        assert!(!dir.exists());
    }
}
