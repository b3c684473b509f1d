//! `latency-daemon --version` and `-V`: the crate's version, the commit the binary was built from
//! and the kernel object's build id, which must be the SHA-256 prefix of the object in OUT_DIR (so
//! build.rs's own SHA-256 is checked against ring's). Needs no privileges.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");

/// The parts of `latency-daemon 0.1.0 (commit 0123456789ab+dirty, bpf 33a9b97676a7)`.
#[derive(Debug)]
struct Version {
    version: String,
    commit: String,
    bpf: String,
}

fn version(flag: &str) -> Version {
    let out = Command::new(DAEMON).arg(flag).output().expect("run latency-daemon");
    assert!(out.status.success(), "latency-daemon {flag} failed: {out:?}");
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    let parse = || -> Option<Version> {
        let line = text.strip_suffix('\n')?.strip_prefix("latency-daemon ")?;
        let (version, rest) = line.split_once(" (commit ")?;
        let (commit, rest) = rest.split_once(", bpf ")?;
        let bpf = rest.strip_suffix(')')?;
        Some(Version { version: version.into(), commit: commit.into(), bpf: bpf.into() })
    };
    parse()
        .unwrap_or_else(|| panic!("latency-daemon {flag} printed {text:?}, not `latency-daemon V (commit C, bpf B)`"))
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[test]
fn version_names_the_release_the_commit_and_the_kernel_object() {
    let v = version("--version");
    assert_eq!(v.version, env!("CARGO_PKG_VERSION"));

    let hash = v.commit.strip_suffix("+dirty").unwrap_or(&v.commit);
    assert!(
        v.commit == "unknown" || (is_hex(hash) && (7..=40).contains(&hash.len())),
        "commit {:?}: want a short hash, optionally +dirty, or `unknown`",
        v.commit
    );
    // HEAD may have moved since the build (a shared tree); the commit must still exist.
    if v.commit != "unknown" {
        let exists = Command::new("git")
            .args(["-C", env!("CARGO_MANIFEST_DIR"), "cat-file", "-e", &format!("{hash}^{{commit}}")])
            .status();
        if let Ok(status) = exists {
            assert!(status.success(), "commit {hash} is not in this repository");
        }
    }

    assert!(is_hex(&v.bpf) && v.bpf.len() == 12, "bpf id {:?}: want 12 hex digits", v.bpf);
    let object = std::fs::read(concat!(env!("OUT_DIR"), "/latency-ebpf")).expect("the kernel object in OUT_DIR");
    let digest = ring::digest::digest(&ring::digest::SHA256, &object);
    let want: String = digest.as_ref()[..6].iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(v.bpf, want, "bpf id is not the SHA-256 prefix of the embedded object");
}

#[test]
fn short_flag_prints_the_same() {
    let (long, short) = (version("--version"), version("-V"));
    assert_eq!((long.version, long.commit, long.bpf), (short.version, short.commit, short.bpf));
}
