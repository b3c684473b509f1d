//! What `cargo xtask dist` links static musl binaries with. In: Debian's packages; out, the GNU
//! cross compilers and qemu-user-static installed, and per architecture a folder under
//! /var/cache/runqlat-tools/musl-<arch> holding what rustup's `rust-std` component would ship in
//! its `self-contained/` folder (we build std from source, so we have no such component): musl's
//! `libc.a`, its `crt*.o` and headers (musl-dev of that architecture, unpacked with `dpkg -x`,
//! never installed), gcc's `crtbegin*.o`/`crtend*.o`, and an unwinder, `libunwind.a` (Debian's
//! LLVM libunwind 14, the unwinder Rust's own musl targets ship). The nightly toolchain's
//! rust-src is `toolchain::RustSrc`'s check.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use latency_lab::apt::{Apt, Mirrors, source_line};

use super::Check;
use crate::arch::Arch;
use crate::cmd;

/// Installed on the host: the C compilers (ring's C and assembly, the link) and the runner of
/// the aarch64 binary's `--version`.
const PACKAGES: &[&str] = &["gcc", "gcc-aarch64-linux-gnu", "qemu-user-static"];
/// Files those packages put in place, checked instead of asking dpkg (setup runs before every
/// command).
const PROGRAMS: &[&str] = &[
    "/usr/bin/x86_64-linux-gnu-gcc",
    "/usr/bin/aarch64-linux-gnu-gcc",
    "/usr/bin/aarch64-linux-gnu-ar",
    "/usr/bin/qemu-aarch64-static",
];

/// Unpacked per architecture, never installed.
const DEBS: [&str; 2] = ["musl-dev", "libunwind-14-dev"];
const SUITE: &str = "bookworm";
const APT_DIR: &str = "/var/cache/runqlat-tools/apt-cross";
/// Written last into a complete folder; a change here rebuilds the folders.
const RECIPE: &str = "musl-dev + libunwind-14-dev (with __fprintf_chk) + gcc crtbegin/crtend, 1\n";

/// Debian's LLVM libunwind is built with _FORTIFY_SOURCE, so its tracing calls glibc's checked
/// `__fprintf_chk`, which musl lacks: the same call without the check, added to `libunwind.a`.
/// No header (the cross compiler has no musl headers of its own): musl's FILE is opaque here.
const FORTIFY_SHIM: &str = "\
typedef struct _IO_FILE FILE;
int vfprintf(FILE *restrict, const char *restrict, __builtin_va_list);
int __fprintf_chk(FILE *restrict f, int flag, const char *restrict fmt, ...)
{
    (void)flag;
    __builtin_va_list ap;
    __builtin_va_start(ap, fmt);
    int n = vfprintf(f, fmt, ap);
    __builtin_va_end(ap);
    return n;
}
";

/// The host's compilers and emulator.
#[derive(Debug)]
pub struct CrossTools;

impl Check for CrossTools {
    fn name(&self) -> &'static str {
        "cross compilers, qemu-user-static"
    }
    fn doing(&self) -> &'static str {
        "installing"
    }
    fn is_done(&self) -> anyhow::Result<bool> {
        Ok(PROGRAMS.iter().all(|program| Path::new(program).is_file()))
    }
    fn do_it(&self) -> anyhow::Result<()> {
        super::packages::apt_install(PACKAGES)
    }
}

/// One architecture's musl folder.
#[derive(Debug)]
pub struct Musl(pub Arch);

impl Musl {
    pub fn dir(&self) -> PathBuf {
        PathBuf::from(format!("/var/cache/runqlat-tools/musl-{}", self.0))
    }

    /// The libraries and start files, for `-L native=`: rustc finds the `crt*.o` of a
    /// self-contained musl link there too.
    pub fn lib(&self) -> PathBuf {
        self.dir().join("lib")
    }

    /// musl's headers, for C compiled into the binary (ring).
    pub fn include(&self) -> PathBuf {
        self.dir().join("deb/usr/include").join(self.0.musl())
    }

    fn recipe(&self) -> PathBuf {
        self.dir().join("RECIPE")
    }
}

impl Check for Musl {
    fn name(&self) -> &'static str {
        match self.0 {
            Arch::X86_64 => "musl libc, libunwind (x86_64)",
            Arch::Aarch64 => "musl libc, libunwind (aarch64)",
        }
    }
    fn doing(&self) -> &'static str {
        "downloading"
    }
    fn is_done(&self) -> anyhow::Result<bool> {
        Ok(std::fs::read_to_string(self.recipe()).is_ok_and(|recipe| recipe == RECIPE))
    }
    fn do_it(&self) -> anyhow::Result<()> {
        let arch = self.0;
        let debs = download(arch)?;
        // Assembled beside the final folder, then swapped in: a half-made one never counts.
        let dir = self.dir();
        let partial = dir.with_extension("partial");
        let _ = std::fs::remove_dir_all(&partial);
        // dpkg -x makes only the last folder of its destination.
        std::fs::create_dir_all(&partial).with_context(|| format!("creating {}", partial.display()))?;
        for deb in &debs {
            let mut unpack = Command::new("dpkg");
            unpack.arg("-x").arg(deb).arg(partial.join("deb"));
            println!("  $ {}", cmd::show(&unpack));
            cmd::run(&mut unpack)?;
        }
        assemble(arch, &partial)?;
        std::fs::write(partial.join("RECIPE"), RECIPE).context("writing RECIPE")?;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&partial, &dir).with_context(|| format!("moving {} into place", partial.display()))?;
        Ok(())
    }
}

/// `DEBS` of `arch` from the host's mirror, through a private apt configuration that also knows
/// arm64 (the host's dpkg is never told about another architecture); returns the .deb files.
fn download(arch: Arch) -> anyhow::Result<Vec<PathBuf>> {
    let mirrors = Mirrors::of_host()?;
    let apt = Apt::new(Path::new(APT_DIR), &[source_line(&mirrors.archive, SUITE)])?;
    // Appended to the host's architecture, so one set of indexes serves both.
    let arches = ["-o", "APT::Architectures::=arm64"];
    let mut update = apt.command("apt-get");
    update.args(arches).args(["-q", "update"]);
    println!("  $ {}", cmd::show(&update));
    cmd::stdout(&mut update)?;
    let debs = Path::new(APT_DIR).join(format!("debs-{arch}"));
    // A previous run's .deb of another version would be found too.
    let _ = std::fs::remove_dir_all(&debs);
    std::fs::create_dir_all(&debs).with_context(|| format!("creating {}", debs.display()))?;
    let mut fetch = apt.command("apt-get");
    fetch.current_dir(&debs).args(arches).args(["-q", "download"]);
    fetch.args(DEBS.iter().map(|deb| format!("{deb}:{}", arch.deb_name())));
    println!("  $ {}", cmd::show(&fetch));
    cmd::stdout(&mut fetch)?;
    let found: Vec<PathBuf> = std::fs::read_dir(&debs)?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "deb"))
        .collect();
    if found.len() != DEBS.len() {
        bail!("apt-get download left {} .deb files in {}, not {}", found.len(), debs.display(), DEBS.len());
    }
    Ok(found)
}

/// `dir/lib` from the unpacked packages in `dir/deb` and the cross compiler's start files.
fn assemble(arch: Arch, dir: &Path) -> anyhow::Result<()> {
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).with_context(|| format!("creating {}", lib.display()))?;
    let musl = dir.join("deb/usr/lib").join(arch.musl());
    for name in ["crt1.o", "crti.o", "crtn.o", "rcrt1.o", "Scrt1.o", "libc.a"] {
        copy(&musl.join(name), &lib.join(name))?;
    }
    // C-library independent (ELF .init_array/.eh_frame glue); the same ones musl-gcc links.
    let gcc = format!("{}-gcc", arch.gnu());
    for name in ["crtbegin.o", "crtbeginS.o", "crtend.o", "crtendS.o"] {
        let found = cmd::stdout(Command::new(&gcc).arg(format!("-print-file-name={name}")))?;
        copy(Path::new(found.trim()), &lib.join(name))?;
    }
    let unwind = lib.join("libunwind.a");
    copy(&dir.join("deb/usr/lib/llvm-14/lib/libunwind.a"), &unwind)?;
    let shim = (dir.join("fortify.c"), dir.join("fortify.o"));
    std::fs::write(&shim.0, FORTIFY_SHIM).context("writing fortify.c")?;
    let mut compile = Command::new(&gcc);
    compile.args(["-O2", "-fPIC", "-ffreestanding", "-nostdinc", "-c"]).arg(&shim.0).arg("-o").arg(&shim.1);
    println!("  $ {}", cmd::show(&compile));
    cmd::run(&mut compile)?;
    let mut add = Command::new(format!("{}-ar", arch.gnu()));
    add.arg("rs").arg(&unwind).arg(&shim.1);
    println!("  $ {}", cmd::show(&add));
    cmd::run(&mut add)
}

fn copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::copy(from, to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}
