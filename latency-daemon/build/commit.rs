//! The git commit the daemon is built from, for `--version`: `<short hash>`, `+dirty` when the
//! sources built into the binary differ from it, or `unknown` outside a git checkout (a source
//! tarball, no git installed). Never an error: a version string must not stop a build.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// What goes into the binary; changes elsewhere (docs, lab, xtask) do not make it `+dirty`.
const BUILT_FROM: [&str; 8] = [
    "Cargo.toml",
    "Cargo.lock",
    "latency-common",
    "latency-ebpf",
    "latency-daemon/Cargo.toml",
    "latency-daemon/build.rs",
    "latency-daemon/build",
    "latency-daemon/src",
];

pub fn describe(workspace: &Path) -> String {
    // Cargo reruns us when latency-ebpf (aya-build's rerun-if-changed) or latency-common (a
    // build-dependency of ours through it) change; our own sources must be named, or an edit
    // after a clean build would not show `+dirty`.
    watch(&workspace.join("latency-daemon/src"));
    let Some(git) = Git::at(workspace) else { return "unknown".to_owned() };
    git.watch_head();
    let Some(hash) = git.run(&["rev-parse", "--short=12", "HEAD"]) else { return "unknown".to_owned() };
    let mut status = vec!["status", "--porcelain", "--untracked-files=no", "--"];
    status.extend(BUILT_FROM);
    match git.run(&status) {
        Some(changes) if changes.is_empty() => hash,
        _ => format!("{hash}+dirty"),
    }
}

/// The repository whose top level is our workspace: not one that merely contains it (a tarball
/// unpacked inside some other checkout must say `unknown`, not that checkout's commit).
struct Git {
    workspace: PathBuf,
}

impl Git {
    fn at(workspace: &Path) -> Option<Git> {
        let git = Git { workspace: workspace.to_owned() };
        let top = git.run(&["rev-parse", "--show-toplevel"])?;
        let same = std::fs::canonicalize(top).ok()? == std::fs::canonicalize(workspace).ok()?;
        same.then_some(git)
    }

    /// Rerun when HEAD moves: a checkout rewrites HEAD, a commit the branch's ref (a loose file,
    /// or created in refs/heads/ when only packed-refs held it; worktrees keep both in the
    /// common directory, which `--git-path` resolves).
    fn watch_head(&self) {
        let Some(head) = self.path("HEAD") else { return };
        watch(&head);
        let Some(branch) = self.run(&["symbolic-ref", "-q", "HEAD"]) else { return }; // detached
        if let Some(packed) = self.path("packed-refs") {
            watch(&packed);
        }
        match self.path(&branch) {
            Some(loose) if loose.is_file() => watch(&loose),
            Some(loose) => loose.parent().into_iter().for_each(watch),
            None => {}
        }
    }

    /// A path inside the git directory, absolute.
    fn path(&self, name: &str) -> Option<PathBuf> {
        let path = PathBuf::from(self.run(&["rev-parse", "--git-path", name])?);
        Some(if path.is_absolute() { path } else { self.workspace.join(path) })
    }

    /// Git's trimmed output, or None when git is missing or fails. `--no-optional-locks`: `status`
    /// must not take index.lock, or a build could make a commit in the same tree fail.
    fn run(&self, args: &[&str]) -> Option<String> {
        let mut git = Command::new("git");
        git.arg("--no-optional-locks").arg("-C").arg(&self.workspace).args(args);
        let out = git.output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        out.status.success().then(|| text.trim().to_owned())
    }
}

/// Cargo reruns a build script when a path it names changes, and on every build when the path
/// does not exist: name only those that do.
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
