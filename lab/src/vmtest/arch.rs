//! The guest architectures: in, a kernel's `Arch`; out, what differs between them — Debian's
//! name for it, the QEMU that runs it and its machine, the guest's console and data port, and
//! the ELF machine its binaries must be built for. Everything else (init.sh, the checks) is the
//! same on both.
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    /// The host's own: KVM when it works, the daemon and xtask as built here.
    #[default]
    X86_64,
    /// Under qemu-system-aarch64 (TCG on an x86_64 host), with static aarch64 binaries.
    Arm64,
}

impl Arch {
    /// Debian's architecture name (package names, `APT::Architecture`).
    pub fn debian(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    pub fn qemu(self) -> &'static str {
        match self {
            Arch::X86_64 => "qemu-system-x86_64",
            Arch::Arm64 => "qemu-system-aarch64",
        }
    }

    /// `-machine` and `-cpu` for `accel`. Under TCG an arm64 `max` CPU computes pointer
    /// authentication with QEMU's cheap implementation-defined algorithm (QARMA5, the default,
    /// costs about a third of the guest's speed); `virt` gets a second PL011 for `-serial` twice.
    pub fn machine(self, accel: &str) -> [&'static str; 4] {
        match (self, accel) {
            (Arch::X86_64, "kvm") => ["-machine", "q35", "-cpu", "host"],
            (Arch::X86_64, _) => ["-machine", "q35", "-cpu", "max"],
            (Arch::Arm64, _) => ["-machine", "virt", "-cpu", "max,pauth-impdef=on"],
        }
    }

    /// The first serial port (the console) and the second (init.sh's data port), as the guest
    /// names them.
    pub fn ports(self) -> (&'static str, &'static str) {
        match self {
            Arch::X86_64 => ("ttyS0", "ttyS1"),
            Arch::Arm64 => ("ttyAMA0", "ttyAMA1"),
        }
    }

    /// `e_machine` of its ELF binaries.
    pub fn elf_machine(self) -> u16 {
        match self {
            Arch::X86_64 => 62,
            Arch::Arm64 => 183,
        }
    }

    /// Whether this is the host's own architecture (its binaries run here; KVM may work).
    pub fn is_host(self) -> bool {
        self == Arch::X86_64 && cfg!(target_arch = "x86_64")
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "arm64",
        })
    }
}

/// An ELF file's `e_machine` and whether it asks for a loader (PT_INTERP): what the guest needs
/// to know before it packs a binary built elsewhere.
pub fn elf_kind(bytes: &[u8]) -> Option<(u16, bool)> {
    if bytes.get(..4)? != b"\x7fELF" || bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return None;
    }
    let u16_at = |at: usize| bytes.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |at: usize| bytes.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    let u64_at = |at: usize| bytes.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    let machine = u16_at(18)?;
    let (phoff, phentsize, phnum) = (u64_at(32)? as usize, usize::from(u16_at(54)?), usize::from(u16_at(56)?));
    const PT_INTERP: u32 = 3;
    let dynamic = (0..phnum).any(|i| u32_at(phoff + i * phentsize) == Some(PT_INTERP));
    Some((machine, dynamic))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_binaries_are_x86_64_elf() {
        let busybox = std::fs::read("/bin/busybox").unwrap_or_else(|e| panic!("/bin/busybox: {e}"));
        assert_eq!(elf_kind(&busybox), Some((Arch::X86_64.elf_machine(), false)), "busybox-static is static");
        let sh = std::fs::read("/bin/sh").unwrap_or_else(|e| panic!("/bin/sh: {e}"));
        assert_eq!(elf_kind(&sh), Some((62, true)));
        assert_eq!(elf_kind(b"#!/bin/sh\n"), None);
    }

    #[test]
    fn names_as_the_report_writes_them() {
        assert_eq!(serde_json::to_string(&Arch::Arm64).unwrap_or_default(), "\"arm64\"");
        assert_eq!(serde_json::to_string(&Arch::X86_64).unwrap_or_default(), "\"x86_64\"");
        assert_eq!(Arch::Arm64.to_string(), "arm64");
    }
}
