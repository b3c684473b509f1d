//! Builds the kernel program (latency-ebpf, nightly, bpfel-unknown-none) and leaves the object
//! in OUT_DIR for `include_bytes_aligned!`; then stamps what `--version` prints beside the
//! crate's version: the git commit of the sources (`LATENCY_DAEMON_COMMIT`) and a SHA-256 prefix
//! of the kernel object (`LATENCY_DAEMON_BPF_ID`). Builds of the same object flavour share one
//! cargo target dir for it (build/shared_target.rs).
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

#[path = "build/commit.rs"]
mod commit;
#[path = "build/sha256.rs"]
mod sha256;
#[path = "build/shared_target.rs"]
mod shared_target;

fn main() -> anyhow::Result<()> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR not set")?);
    let workspace = manifest.parent().ok_or_else(|| anyhow!("no parent of {}", manifest.display()))?;
    let ebpf_dir = workspace.join("latency-ebpf").display().to_string();
    let ebpf = Package { name: "latency-ebpf", root_dir: &ebpf_dir, ..Default::default() };
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").context("OUT_DIR not set")?);
    // Held until aya-build has copied the object into OUT_DIR.
    let shared = match shared_target::share(&out_dir, &ebpf) {
        Ok(lock) => Some(lock),
        Err(err) => {
            println!("cargo:warning=the kernel program builds in a target dir of its own: {err:#}");
            None
        }
    };
    // aya-build turns every line its cargo prints on stderr into a build-script warning, which
    // cargo then replays on every later build ("Compiling core", "Finished"…: 40 lines before
    // `cargo xtask run` starts the daemon). A quiet cargo prints only problems there; the
    // compiler's own warnings and errors reach us through its JSON messages either way.
    // SAFETY: the build script's only thread; nothing reads the environment concurrently.
    unsafe { std::env::set_var("CARGO_TERM_QUIET", "true") };
    aya_build::build_ebpf([ebpf], Toolchain::default())
        .context("building the kernel program failed (is `cargo xtask setup` done?)")?;
    drop(shared);

    println!("cargo:rustc-env=LATENCY_DAEMON_BPF_ID={}", bpf_id(&out_dir.join("latency-ebpf")));
    println!("cargo:rustc-env=LATENCY_DAEMON_COMMIT={}", commit::describe(workspace));
    Ok(())
}

/// The first 12 hex digits of the object's SHA-256 (`sha256sum` of the file gives the same), or
/// `unknown` when aya-build was told to skip it (AYA_BUILD_SKIP); `include_bytes_aligned!` then
/// names the missing file itself.
fn bpf_id(object: &Path) -> String {
    match std::fs::read(object) {
        Ok(bytes) => sha256::hex(&sha256::digest(&bytes))[..12].to_owned(),
        Err(_) => "unknown".to_owned(),
    }
}
