//! bpf-linker linked against the nightly toolchain's own libLLVM, so the bitcode rustc emits and
//! the LLVM that links it always match. In: the installed nightly and bpf-linker; out: a
//! bpf-linker (re)built by `cargo install` when it is missing, broken or built for another LLVM.
use std::env;
use std::fs;
use std::io;
use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use super::Check;
use crate::cmd;

/// Known to build with `--features llvm-22` and to link what aya-ebpf 0.2.1 emits; pinned like
/// the aya crates so a new release cannot change a fresh machine's setup behind our back.
const VERSION: &str = "0.13.0";

#[derive(Debug)]
pub struct BpfLinker;

impl Check for BpfLinker {
    fn name(&self) -> &'static str {
        "bpf-linker on nightly's LLVM"
    }
    fn doing(&self) -> &'static str {
        "installing"
    }
    fn is_done(&self) -> anyhow::Result<bool> {
        let llvm = NightlyLlvm::detect()?;
        Ok(matches!(installed(&llvm)?, Installed::Good(_)))
    }
    fn do_it(&self) -> anyhow::Result<()> {
        let llvm = NightlyLlvm::detect()?;
        println!("  {}", installed(&llvm)?.describe(&llvm.file_name));
        let prefix = cmd::cargo_home()?.join("bpf-linker-llvm").join(&llvm.file_name);
        link_prefix(&prefix, &llvm)?;
        let mut install = cmd::cargo()?;
        // --force: a bpf-linker of the same version but for another libLLVM must be replaced,
        // and without it cargo would call that one "already installed".
        install
            .args(["install", "--force", "bpf-linker", "--version", VERSION])
            .args(["--no-default-features", "--features"])
            .arg(format!("llvm-{}", llvm.major))
            .env("LLVM_PREFIX", &prefix);
        println!("  $ {}   (about 90 s; cargo's output follows)", cmd::show(&install));
        cmd::run(&mut install)
    }
}

/// The libLLVM the nightly toolchain ships. Looked up on every run: `rustup update` changes it.
#[derive(Debug)]
struct NightlyLlvm {
    /// `<nightly sysroot>/lib`
    lib_dir: PathBuf,
    /// e.g. `libLLVM.so.22.1-rust-1.97.0-nightly`
    file_name: String,
    /// e.g. 22, for bpf-linker's `llvm-22` feature
    major: u32,
}

impl NightlyLlvm {
    fn detect() -> anyhow::Result<Self> {
        let sysroot = cmd::stdout(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?;
        let lib_dir = PathBuf::from(sysroot.trim()).join("lib");
        let names = fs::read_dir(&lib_dir)
            .with_context(|| format!("listing {}", lib_dir.display()))?
            .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<io::Result<Vec<_>>>()
            .with_context(|| format!("listing {}", lib_dir.display()))?;
        let file_name =
            pick_libllvm(&names).with_context(|| format!("finding nightly's libLLVM in {}", lib_dir.display()))?;
        let version = cmd::stdout(Command::new("rustc").args(["+nightly", "-vV"]))?;
        let major = llvm_major(&version)
            .with_context(|| format!("no `LLVM version: N.…` line in `rustc +nightly -vV`:\n{version}"))?;
        Ok(Self { lib_dir, file_name, major })
    }
}

/// The shared library among the sysroot's files, e.g. `libLLVM.so.22.1-rust-1.97.0-nightly`.
/// Its sibling `libLLVM-22-rust-….so` is a 43-byte linker script, not the library.
fn pick_libllvm(names: &[String]) -> anyhow::Result<String> {
    let mut found = names.iter().filter(|name| name.starts_with("libLLVM.so.") && name.contains("-rust-"));
    match (found.next(), found.next()) {
        (Some(one), None) => Ok(one.clone()),
        (None, _) => bail!("no file named libLLVM.so.<version>-rust-<version> (among {names:?})"),
        (Some(a), Some(b)) => {
            bail!("more than one libLLVM ({a}, {b}, …); which one does rustc use?")
        }
    }
}

/// The LLVM major version from `rustc -vV` (`LLVM version: 22.1.4` → 22).
fn llvm_major(rustc_vv: &str) -> Option<u32> {
    let version = rustc_vv.lines().find_map(|line| line.strip_prefix("LLVM version:"))?;
    version.trim().split('.').next()?.parse().ok()
}

/// What is installed, judged against the libLLVM nightly ships.
#[derive(Debug, PartialEq, Eq)]
enum Installed {
    Missing,
    /// Found but `--version` fails, typically because its libLLVM is gone.
    Broken(PathBuf),
    /// Runs, but linked against another libLLVM (nightly was updated) or a static LLVM.
    OtherLlvm(PathBuf, Option<String>),
    Good(PathBuf),
}

impl Installed {
    fn describe(&self, wanted: &str) -> String {
        match self {
            Self::Missing => "bpf-linker is not installed (not on PATH nor in $CARGO_HOME/bin)".into(),
            Self::Broken(path) => format!("{} does not run (`--version` fails)", path.display()),
            Self::OtherLlvm(path, Some(lib)) => {
                format!("{} uses {lib}, nightly ships {wanted}; rebuilding", path.display())
            }
            Self::OtherLlvm(path, None) => {
                format!("{} does not load a shared libLLVM; rebuilding for {wanted}", path.display())
            }
            Self::Good(path) => format!("{} is fine", path.display()),
        }
    }
}

fn installed(llvm: &NightlyLlvm) -> anyhow::Result<Installed> {
    let path = env::var_os("PATH").unwrap_or_default();
    let dirs = env::split_paths(&path).chain([cmd::cargo_home()?.join("bin")]);
    let Some(linker) = find_executable("bpf-linker", dirs) else {
        return Ok(Installed::Missing);
    };
    let runs = Command::new(&linker).arg("--version").output().is_ok_and(|out| out.status.success());
    if !runs {
        return Ok(Installed::Broken(linker));
    }
    let ldd = cmd::stdout(Command::new("ldd").arg(&linker))?;
    Ok(judge_ldd(linker, &ldd, &llvm.file_name))
}

/// A bpf-linker that runs is good if `ldd` shows it loading the libLLVM nightly ships, by name.
fn judge_ldd(linker: PathBuf, ldd: &str, wanted: &str) -> Installed {
    match ldd_libllvm(ldd) {
        Some(LddLine { name, resolved: true }) if name == wanted => Installed::Good(linker),
        Some(LddLine { name, .. }) => Installed::OtherLlvm(linker, Some(name)),
        None => Installed::OtherLlvm(linker, None),
    }
}

/// The first executable file called `name` in `dirs`, like the shell's lookup.
fn find_executable(name: &str, dirs: impl IntoIterator<Item = PathBuf>) -> Option<PathBuf> {
    dirs.into_iter()
        .map(|dir| dir.join(name))
        .find(|path| fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0))
}

/// The libLLVM line of `ldd` output.
#[derive(Debug, PartialEq, Eq)]
struct LddLine {
    /// The file name the binary asks for (its DT_NEEDED entry).
    name: String,
    /// False for `=> not found`.
    resolved: bool,
}

fn ldd_libllvm(ldd: &str) -> Option<LddLine> {
    ldd.lines().find_map(|line| {
        let (name, target) = line.trim().split_once("=>")?;
        let name = name.trim();
        name.starts_with("libLLVM")
            .then(|| LddLine { name: name.to_owned(), resolved: !target.trim().starts_with("not found") })
    })
}

/// Makes `<prefix>/lib/` hold `libLLVM.so` (what llvm-sys links with `-lLLVM`) and the
/// library's own name (what the binary then asks for at run time), both pointing at nightly's
/// copy. The prefix lives in $CARGO_HOME, not target/, because the installed binary loads
/// libLLVM through it for as long as it exists.
fn link_prefix(prefix: &Path, llvm: &NightlyLlvm) -> anyhow::Result<()> {
    let lib = prefix.join("lib");
    fs::create_dir_all(&lib).with_context(|| format!("creating {}", lib.display()))?;
    let target = llvm.lib_dir.join(&llvm.file_name);
    for link in [lib.join("libLLVM.so"), lib.join(&llvm.file_name)] {
        replace_symlink(&link, &target)?;
    }
    Ok(())
}

fn replace_symlink(link: &Path, target: &Path) -> anyhow::Result<()> {
    match fs::read_link(link) {
        Ok(current) if current == target => return Ok(()),
        Ok(_) => fs::remove_file(link).with_context(|| format!("removing {}", link.display()))?,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => {
            return Err(err).with_context(|| format!("{} exists and is not a symlink", link.display()));
        }
    }
    symlink(target, link).with_context(|| format!("linking {} -> {}", link.display(), target.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn llvm_major_from_rustc_vv() {
        let vv = "rustc 1.97.0-nightly (e50aa6fba 2026-05-19)\nbinary: rustc\n\
                  host: x86_64-unknown-linux-gnu\nrelease: 1.97.0-nightly\nLLVM version: 22.1.4\n";
        assert_eq!(llvm_major(vv), Some(22));
        assert_eq!(llvm_major("LLVM version: 23\n"), Some(23));
    }

    #[test]
    fn llvm_major_missing_or_garbled() {
        assert_eq!(llvm_major("rustc 1.97.0-nightly\n"), None);
        assert_eq!(llvm_major("LLVM version: unknown\n"), None);
    }

    #[test]
    fn picks_the_library_not_the_linker_script() {
        let listing = names(&[
            "libLLVM-22-rust-1.97.0-nightly.so",
            "libLLVM.so.22.1-rust-1.97.0-nightly",
            "librustc_driver-b5a965480ee51f9a.so",
            "rustlib",
        ]);
        assert_eq!(pick_libllvm(&listing).ok().as_deref(), Some("libLLVM.so.22.1-rust-1.97.0-nightly"));
    }

    #[test]
    fn no_library_or_two_libraries_is_an_error() {
        assert!(pick_libllvm(&names(&["libLLVM-22-rust-1.97.0-nightly.so", "rustlib"])).is_err());
        assert!(pick_libllvm(&[]).is_err());
        let two = names(&["libLLVM.so.22.1-rust-1.97.0-nightly", "libLLVM.so.23.1-rust-1.98.0-nightly"]);
        assert!(pick_libllvm(&two).is_err());
    }

    const LDD_GOOD: &str = "\
\tlinux-vdso.so.1 (0x00007f9ee0f94000)
\tlibLLVM.so.22.1-rust-1.97.0-nightly => /root/.cargo/bpf-linker-llvm/libLLVM.so.22.1-rust-1.97.0-nightly/lib/libLLVM.so.22.1-rust-1.97.0-nightly (0x00007f9ed6400000)
\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f9ee0f63000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f9ee0f96000)
";

    #[test]
    fn ldd_resolved_libllvm() {
        assert_eq!(
            ldd_libllvm(LDD_GOOD),
            Some(LddLine { name: "libLLVM.so.22.1-rust-1.97.0-nightly".into(), resolved: true })
        );
    }

    #[test]
    fn ldd_libllvm_not_found() {
        let ldd = "\tlinux-vdso.so.1 (0x0)\n\tlibLLVM.so.21.1-rust-1.93.0-nightly => not found\n";
        assert_eq!(
            ldd_libllvm(ldd),
            Some(LddLine { name: "libLLVM.so.21.1-rust-1.93.0-nightly".into(), resolved: false })
        );
    }

    #[test]
    fn ldd_without_libllvm() {
        let ldd = "\tlinux-vdso.so.1 (0x0)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x0)\n";
        assert_eq!(ldd_libllvm(ldd), None);
    }

    #[test]
    fn judged_by_the_libllvm_name_nightly_ships() {
        let linker = PathBuf::from("/root/.cargo/bin/bpf-linker");
        let judge = |ldd, wanted| judge_ldd(linker.clone(), ldd, wanted);
        assert_eq!(judge(LDD_GOOD, "libLLVM.so.22.1-rust-1.97.0-nightly"), Installed::Good(linker.clone()));
        // nightly was updated: same binary, now stale
        assert_eq!(
            judge(LDD_GOOD, "libLLVM.so.23.1-rust-1.99.0-nightly"),
            Installed::OtherLlvm(linker.clone(), Some("libLLVM.so.22.1-rust-1.97.0-nightly".into()))
        );
        let gone = "\tlibLLVM.so.22.1-rust-1.97.0-nightly => not found\n";
        assert!(matches!(judge(gone, "libLLVM.so.22.1-rust-1.97.0-nightly"), Installed::OtherLlvm(..)));
        assert_eq!(judge("\tlibc.so.6 => /lib/libc.so.6 (0x0)\n", "x"), Installed::OtherLlvm(linker.clone(), None));
    }

    #[test]
    fn not_installed_when_no_directory_has_it() {
        let empty = env::temp_dir().join(format!("xtask-no-bpf-linker-{}", std::process::id()));
        assert_eq!(find_executable("bpf-linker", [empty.join("bin"), empty]), None);
        assert_eq!(find_executable("bpf-linker", Vec::new()), None);
    }

    #[test]
    fn finds_only_executable_files() -> anyhow::Result<()> {
        let dir = env::temp_dir().join(format!("xtask-find-exe-{}", std::process::id()));
        fs::create_dir_all(&dir)?;
        let tool = dir.join("bpf-linker");
        fs::write(&tool, "")?;
        fs::set_permissions(&tool, fs::Permissions::from_mode(0o644))?;
        let not_yet = find_executable("bpf-linker", [dir.clone()]);
        fs::set_permissions(&tool, fs::Permissions::from_mode(0o755))?;
        let found = find_executable("bpf-linker", [dir.clone()]);
        fs::remove_dir_all(&dir)?;
        assert_eq!(not_yet, None);
        assert_eq!(found, Some(tool));
        Ok(())
    }
}
