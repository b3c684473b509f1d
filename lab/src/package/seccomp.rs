//! The seccomp profile for each architecture: in, the x86_64 profile traced from the daemon
//! (deploy/seccomp/latency-daemon.json, `cargo xtask seccomp`) and the kernel's generic system call
//! table (asm-generic/unistd.h, the one arm64 uses); out, the aarch64 profile
//! (deploy/seccomp/latency-daemon-aarch64.json): each name kept where aarch64 has that call, else
//! replaced by the call the C libraries make there instead (`poll` → `ppoll`), and
//! `SCMP_ARCH_AARCH64` as its architecture. Nothing was traced on aarch64: regenerating it from a
//! trace of the aarch64 binary is the better source when a machine can run one.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::Arch;

/// The traced profile, and the one derived from it.
pub const X86_64_PROFILE: &str = crate::seccomp::PROFILE;
pub const AARCH64_PROFILE: &str = "deploy/seccomp/latency-daemon-aarch64.json";

/// The kernel's generic table (linux-libc-dev), whose `__NR_*` and 64-bit `__NR3264_*` names are
/// arm64's calls.
pub const GENERIC_UNISTD: &str = "/usr/include/asm-generic/unistd.h";

/// x86_64 calls arm64 does not have → what the C libraries (glibc, musl) call there instead; an
/// empty list where nothing replaces it. Every x86_64 call that the profile allows and arm64 lacks
/// must be here, or the translation fails.
const REPLACED: [(&str, &[&str]); 21] = [
    ("access", &["faccessat"]),
    // x86_64's TLS register set-up; arm64 sets its thread pointer without a system call.
    ("arch_prctl", &[]),
    ("chmod", &["fchmodat"]),
    ("creat", &["openat"]),
    ("dup2", &["dup3"]),
    ("epoll_create", &["epoll_create1"]),
    ("epoll_wait", &["epoll_pwait"]),
    ("eventfd", &["eventfd2"]),
    ("fork", &["clone"]),
    ("getdents", &["getdents64"]),
    ("lstat", &["newfstatat"]),
    ("mkdir", &["mkdirat"]),
    ("open", &["openat"]),
    ("pipe", &["pipe2"]),
    ("poll", &["ppoll"]),
    ("readlink", &["readlinkat"]),
    // glibc calls renameat where the kernel has it (arm64 does), musl too; renameat2 where not.
    ("rename", &["renameat", "renameat2"]),
    ("select", &["pselect6"]),
    ("stat", &["newfstatat"]),
    ("unlink", &["unlinkat"]),
    ("vfork", &["clone"]),
];

/// The profile in the repository for `arch` (what the image ships beside the binary).
pub fn profile_path(root: &Path, arch: Arch) -> PathBuf {
    root.join(match arch {
        Arch::Amd64 => X86_64_PROFILE,
        Arch::Arm64 => AARCH64_PROFILE,
    })
}

/// arm64's system call names, from the generic table's text.
pub fn aarch64_calls(unistd_h: &str) -> BTreeSet<String> {
    let mut calls = BTreeSet::new();
    for line in unistd_h.lines() {
        let Some(rest) = line.strip_prefix("#define ") else { continue };
        let mut words = rest.split_whitespace();
        let name = words.next().unwrap_or_default();
        // A call has a number; `__NR_x __NR3264_y` aliases are the 64-bit names (taken from their
        // `__NR3264_` line) or, inside `#ifdef`s arm64 does not meet, calls it lacks (`stat`).
        if words.next().is_none_or(|value| value.parse::<u32>().is_err()) {
            continue;
        }
        if let Some(call) = name.strip_prefix("__NR3264_") {
            // The 64-bit names of the calls that take 64-bit offsets (libseccomp's names too).
            calls.insert(if call == "fstatat" { "newfstatat".to_owned() } else { call.to_owned() });
        } else if let Some(call) = name.strip_prefix("__NR_")
            && call != "syscalls"
            && call.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            calls.insert(call.to_owned());
        }
    }
    calls
}

/// The x86_64 `profile` for aarch64, whose calls are `calls`.
pub fn translate(profile: &Value, calls: &BTreeSet<String>) -> anyhow::Result<Value> {
    if profile["architectures"] != serde_json::json!(["SCMP_ARCH_X86_64"]) {
        bail!("expected an x86_64 profile, found architectures {}", profile["architectures"]);
    }
    let mut out = profile.clone();
    out["architectures"] = serde_json::json!(["SCMP_ARCH_AARCH64"]);
    let rules = out["syscalls"].as_array_mut().context("the profile has no syscalls list")?;
    for rule in rules {
        let names = rule["names"].as_array().context("a rule without names")?;
        let mut translated = BTreeSet::new();
        for name in names {
            let name = name.as_str().context("a name that is not a string")?;
            if calls.contains(name) {
                translated.insert(name.to_owned());
            } else if let Some((_, instead)) = REPLACED.iter().find(|(x86, _)| *x86 == name) {
                for call in *instead {
                    if !calls.contains(*call) {
                        bail!("{name} → {call}, which aarch64 does not have either");
                    }
                    translated.insert((*call).to_owned());
                }
            } else {
                bail!("{name} is not an aarch64 system call and the translation table has no replacement");
            }
        }
        rule["names"] = serde_json::json!(translated);
    }
    Ok(out)
}

/// The aarch64 profile's text from the repository at `root` and the generic table at `unistd_h`.
pub fn aarch64_text(root: &Path, unistd_h: &Path) -> anyhow::Result<String> {
    let x86: Value = serde_json::from_slice(&std::fs::read(root.join(X86_64_PROFILE)).context("the x86_64 profile")?)?;
    let header = std::fs::read_to_string(unistd_h)
        .with_context(|| format!("reading {} (Debian: linux-libc-dev)", unistd_h.display()))?;
    Ok(serde_json::to_string_pretty(&translate(&x86, &aarch64_calls(&header))?)? + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_the_generic_table() {
        let header = "#define __NR_io_setup 0\n#define __NR3264_fstatat 79\n#define __NR3264_lseek 62\n\
                      #define __NR_syscalls 463\n#define __NR_ppoll 73\n";
        let calls = aarch64_calls(header);
        assert_eq!(calls.into_iter().collect::<Vec<_>>(), ["io_setup", "lseek", "newfstatat", "ppoll"]);
    }

    #[test]
    fn calls_arm64_lacks_are_replaced_or_refused() {
        let calls: BTreeSet<String> = ["ppoll", "openat", "read"].map(str::to_owned).into();
        let profile = serde_json::json!({
            "architectures": ["SCMP_ARCH_X86_64"],
            "syscalls": [{ "action": "SCMP_ACT_ALLOW", "names": ["arch_prctl", "open", "openat", "poll", "read"] }],
        });
        let out = translate(&profile, &calls).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(out["architectures"], serde_json::json!(["SCMP_ARCH_AARCH64"]));
        assert_eq!(out["syscalls"][0]["names"], serde_json::json!(["openat", "ppoll", "read"]));
        let unknown = serde_json::json!({ "architectures": ["SCMP_ARCH_X86_64"], "syscalls": [{ "names": ["iopl"] }] });
        assert!(translate(&unknown, &calls).is_err());
    }

    /// The shipped aarch64 profile is the translation of the shipped x86_64 one.
    #[test]
    fn the_aarch64_profile_is_up_to_date() {
        let root = crate::workspace_root();
        let header = Path::new(GENERIC_UNISTD);
        if !header.exists() {
            panic!("{GENERIC_UNISTD} is missing: apt-get install linux-libc-dev");
        }
        let want = aarch64_text(&root, header).unwrap_or_else(|e| panic!("{e:#}"));
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(root.join(AARCH64_PROFILE), &want).unwrap_or_else(|e| panic!("{e}"));
        }
        let have = std::fs::read_to_string(root.join(AARCH64_PROFILE)).unwrap_or_default();
        assert!(
            have == want,
            "{AARCH64_PROFILE} is stale: UPDATE_GOLDEN=1 cargo test -p latency-lab --lib package::seccomp"
        );
    }
}
