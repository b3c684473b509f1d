//! `cargo xtask image` and `cargo xtask seccomp`: the release daemon → its `FROM scratch` OCI image
//! (podman, no registry; saved as an OCI archive for `ctr`/`skopeo`/`docker load`), and → the
//! seccomp profile in deploy/seccomp/ from `strace` of what it really calls (the lab's driver).
use anyhow::Context as _;
use latency_lab::{services::Podman, workspace_root};

use crate::{build, setup};

/// The image's name and tag: this workspace's version.
pub fn tag() -> String {
    format!("localhost/latency-daemon:{}", env!("CARGO_PKG_VERSION"))
}

pub fn image() -> anyhow::Result<()> {
    setup::ensure(setup::Report::ChangesOnly, setup::ALL)?;
    let daemon = build::daemon(true)?;
    let podman = Podman::new()?;
    let tag = tag();
    podman.build_daemon_image(&daemon, &tag)?;
    let archive = build::target_dir().join("latency-daemon-image.oci.tar");
    podman
        .podman(&["save", "--quiet", "--format", "oci-archive", "--output", &archive.to_string_lossy(), &tag])
        .context("saving the image")?;
    println!("image: built {tag}; saved to {}", archive.display());
    Ok(())
}

pub fn seccomp() -> anyhow::Result<()> {
    setup::ensure(setup::Report::ChangesOnly, setup::ALL)?;
    let daemon = build::daemon(true)?;
    // The static build `cargo xtask dist` made, if any: the release image runs it.
    let dist = workspace_root().join("target/dist");
    let statics: Vec<std::path::PathBuf> = std::fs::read_dir(&dist)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with("-x86_64-linux-musl")))
        .collect();
    let mut daemons = vec![daemon.as_path()];
    daemons.extend(statics.iter().map(|p| p.as_path()));
    latency_lab::seccomp::write(&daemons, &workspace_root())?;
    crate::seccomp_spo::run()
}
