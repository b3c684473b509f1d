//! The architectures `cargo xtask dist` builds for and `setup` readies cross tools for: in, an
//! `Arch`; out, every name the build and the packages give it (Rust's target, Debian's and OCI's
//! architecture, the GNU cross tools, the ELF machine) so no step spells them again.
use std::fmt;

/// A CPU architecture we ship a static `latency-daemon` for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The kernel's and Rust's name, as in the artifacts' names: `x86_64`, `aarch64`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// The Rust target of the static build.
    pub fn triple(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-musl",
            Arch::Aarch64 => "aarch64-unknown-linux-musl",
        }
    }

    /// Debian's architecture (package names, `Architecture:`).
    pub fn deb_name(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
        }
    }

    /// The OCI platform's `architecture` (Go's GOARCH).
    #[allow(dead_code, reason = "for the image step, which builds on dist")]
    pub fn oci_name(self) -> &'static str {
        // The same words as Debian's, by the two projects' choice, not by definition.
        self.deb_name()
    }

    /// The GNU tools' prefix (`<prefix>-gcc`, `<prefix>-ar`): Debian's gcc for the host arch and
    /// gcc-aarch64-linux-gnu, each a full cross compiler whatever the host.
    pub fn gnu(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-linux-gnu",
            Arch::Aarch64 => "aarch64-linux-gnu",
        }
    }

    /// musl's multiarch directory name (`/usr/lib/<this>`, `/usr/include/<this>` in musl-dev).
    pub fn musl(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-linux-musl",
            Arch::Aarch64 => "aarch64-linux-musl",
        }
    }

    /// `e_machine` of its ELF executables.
    pub fn elf_machine(self) -> u16 {
        match self {
            Arch::X86_64 => 62,
            Arch::Aarch64 => 183,
        }
    }

    /// What runs its binaries on this machine: nothing for the host's own, QEMU's user-mode
    /// emulator (Debian's qemu-user-static: no binfmt registration needed) for the other.
    pub fn runner(self) -> Option<&'static str> {
        match (self, cfg!(target_arch = "x86_64"), cfg!(target_arch = "aarch64")) {
            (Arch::X86_64, true, _) | (Arch::Aarch64, _, true) => None,
            (Arch::X86_64, _, _) => Some("qemu-x86_64-static"),
            (Arch::Aarch64, _, _) => Some("qemu-aarch64-static"),
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::Arch;

    #[test]
    fn names_agree_with_each_other() {
        for arch in Arch::ALL {
            assert!(arch.triple().starts_with(arch.name()), "{arch}");
            assert!(arch.gnu().starts_with(arch.name()), "{arch}");
            assert_eq!(arch.musl(), format!("{}-linux-musl", arch.name()));
        }
        assert_eq!(Arch::X86_64.deb_name(), "amd64");
        assert_eq!(Arch::Aarch64.oci_name(), "arm64");
    }
}
