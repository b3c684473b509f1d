//! The `seccomp-profile` command: the profile shipped in deploy/seccomp (embedded at build time)
//! in; printed, or written atomically to a file (a kubelet's seccomp directory, from an init
//! container that runs before the daemon's own container is created) out.
use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use crate::cli::SeccompArgs;

/// The syscalls `run` makes on this architecture: recorded from the daemon itself on x86_64
/// (`cargo xtask seccomp`), and translated from that to aarch64's calls.
#[cfg(target_arch = "x86_64")]
const PROFILE: Option<&str> = Some(include_str!("../../../deploy/seccomp/latency-daemon.json"));
#[cfg(target_arch = "aarch64")]
const PROFILE: Option<&str> = Some(include_str!("../../../deploy/seccomp/latency-daemon-aarch64.json"));
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const PROFILE: Option<&str> = None;

/// `latency-daemon seccomp-profile [--write FILE]`: exit 0, or 1 with one line saying why.
pub fn main(args: SeccompArgs) -> ExitCode {
    let Some(profile) = PROFILE else {
        return super::fail(&format!("no seccomp profile is shipped for {} yet", std::env::consts::ARCH));
    };
    let written = match &args.write {
        None => std::io::stdout().lock().write_all(profile.as_bytes()).map_err(|e| format!("stdout: {e}")),
        Some(path) => write_atomically(path, profile.as_bytes()).map_err(|e| format!("{}: {e}", path.display())),
    };
    match written {
        Ok(()) => {
            if let Some(path) = &args.write {
                ::log::info!("wrote the seccomp profile for {} to {}", std::env::consts::ARCH, path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => super::fail(&format!("cannot write the seccomp profile: {e}")),
    }
}

/// A temporary file beside `path`, synced, then renamed over it: a runtime reading the profile
/// while we write sees the old one or the new one, never half of either.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_embedded_profile_is_a_seccomp_profile_for_this_arch() {
        let Some(profile) = PROFILE else { return };
        let json: serde_json::Value = serde_json::from_str(profile).unwrap();
        assert_eq!(json["defaultAction"], "SCMP_ACT_ERRNO");
        let names: Vec<&str> =
            json["syscalls"][0]["names"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
        assert!(names.contains(&"bpf") && names.contains(&"capset"), "{names:?}");
    }

    #[test]
    fn writing_is_atomic_and_creates_the_directory() {
        let dir = std::env::temp_dir().join(format!("runqlat-seccomp-{}", std::process::id()));
        let path = dir.join("kubelet/seccomp/latency-daemon.json");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        // Nothing left beside it.
        assert_eq!(std::fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
