//! Gives aya-build one cargo target dir per kernel-object flavour (target architecture and
//! features) under the workspace's target root, instead of one per build of latency-daemon. In:
//! OUT_DIR, the package and its features; out: a symlink at the dir aya-build will use, and a
//! lock held while the object is built and copied.
//!
//! aya-build puts its target dir in OUT_DIR, which differs for every profile, target and feature
//! set of latency-daemon, so a dev build, a test build and a release build each compiled `core`
//! and the program again, although the object is built `--release` for the same BPF target every
//! time. cargo's fingerprints in the shared dir still rebuild on a changed source or flag.
use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use aya_build::Package;

/// Where aya-build 0.2 puts its cargo `--target-dir` for `package`; the link goes here.
fn aya_build_target_dir(out_dir: &Path, package: &str) -> PathBuf {
    out_dir.join("aya-build").join("target").join(package)
}

/// Points aya-build's target dir for `package` at the shared one and returns the lock on it,
/// to be held until aya-build has copied the object out: cargo flocks the target dir only
/// while it builds, and re-links a fresh binary on every run, so a second build of the same
/// flavour would otherwise replace the file under the first one's copy. On an error no link is
/// left, so aya-build builds in a target dir of its own, as without this.
pub fn share(out_dir: &Path, package: &Package<'_>) -> anyhow::Result<File> {
    let shared = link(out_dir, package);
    if shared.is_err() {
        let link = aya_build_target_dir(out_dir, package.name);
        if std::fs::symlink_metadata(&link).is_ok_and(|meta| meta.file_type().is_symlink()) {
            let _ = std::fs::remove_file(&link);
        }
    }
    shared
}

fn link(out_dir: &Path, package: &Package<'_>) -> anyhow::Result<File> {
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").context("CARGO_CFG_TARGET_ARCH not set")?;
    // aya-build passes `--cfg bpf_target_arch=<arch>`: the one thing in its flags that differs
    // between builds of latency-daemon, besides the endianness, which names the BPF target (and
    // so the output directory inside the target dir) itself.
    let mut flavour = arch;
    if package.no_default_features {
        flavour.push_str("+no-default");
    }
    for feature in package.features {
        flavour.push('+');
        flavour.push_str(feature);
    }
    // The first directory up from OUT_DIR that cargo marks as a target dir (target/, or whatever
    // CARGO_TARGET_DIR names), or its parent when that is one too: `xtask dist` builds in
    // target/dist-build, and its x86_64 object is the one the host's test build embeds.
    let tagged = |dir: &Path| dir.join("CACHEDIR.TAG").is_file();
    let first = match out_dir.ancestors().find(|dir| tagged(dir)) {
        Some(dir) => dir,
        // A target dir's first build, before cargo tags it: OUT_DIR is
        // <target dir>[/<target triple>]/<profile>/build/<package>-<hash>/out.
        None => {
            let above_profile = out_dir.ancestors().nth(4);
            let triple = std::env::var("TARGET").ok();
            let dir = match above_profile {
                Some(dir) if triple.is_some() && dir.file_name().and_then(|n| n.to_str()) == triple.as_deref() => {
                    dir.parent()
                }
                dir => dir,
            };
            dir.ok_or_else(|| anyhow!("no target dir above {}", out_dir.display()))?
        }
    };
    let root = first.parent().filter(|parent| tagged(parent)).unwrap_or(first);
    let shared_root = root.join("bpf-shared");
    let shared = shared_root.join(&flavour);
    std::fs::create_dir_all(&shared).with_context(|| format!("creating {}", shared.display()))?;

    let lock_path = shared_root.join(format!("{flavour}.lock"));
    let lock = File::create(&lock_path).with_context(|| format!("creating {}", lock_path.display()))?;
    lock.lock().with_context(|| format!("locking {}", lock_path.display()))?;

    let link = aya_build_target_dir(out_dir, package.name);
    match std::fs::symlink_metadata(&link) {
        Ok(meta) if meta.file_type().is_symlink() => {
            if std::fs::read_link(&link).ok().as_deref() == Some(shared.as_path()) {
                return Ok(lock);
            }
            std::fs::remove_file(&link).with_context(|| format!("removing {}", link.display()))?;
        }
        // A target dir of its own from before: only a cache, replaced by the shared one.
        Ok(_) => std::fs::remove_dir_all(&link).with_context(|| format!("removing {}", link.display()))?,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err).with_context(|| format!("inspecting {}", link.display())),
    }
    let parent = link.parent().ok_or_else(|| anyhow!("no parent of {}", link.display()))?;
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    std::os::unix::fs::symlink(&shared, &link)
        .with_context(|| format!("linking {} to {}", link.display(), shared.display()))?;
    Ok(lock)
}
