//! The release artifacts (`latency_lab::package`) built and checked as a user's tools check them.
//! In: the static binaries in target/dist/ or `LATENCY_DIST_DIR`
//! (`latency-daemon-<version>-{x86_64,aarch64}-linux-musl`); for an architecture without one, another
//! binary stands in (the other architecture's, else target/release/latency-daemon, else this
//! test's own daemon). Out: the .deb's fields, contents and scripts, its man pages (rendered by
//! man-db without a warning, naming every option `run --help` names) and shell completions (bash's
//! run: `latency-daemon r` completes to run and record), lintian, install / remove /
//! purge in a scratch bookworm root; the OCI index's platforms and annotations, `ctr images import`,
//! `podman load`, and the amd64 image run as the DaemonSet declares (static binaries only: a
//! dynamic stand-in has no C library in the image); the SBOM against cargo's own crate list; and
//! that two builds of one commit are the same bytes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use clap::CommandFactory as _;
use latency_daemon::{cli::Cli, config::reference};
use latency_lab::package::{self, Arch, Binary, Release, deb, manual, oci, rootfs::Rootfs, runtimes, sbom};
use serde_json::Value;

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");
/// The project's address (`repository` in the root Cargo.toml), which every artifact names.
fn source() -> String {
    package::workspace_field(&root(), "repository").unwrap_or_else(|e| panic!("{e:#}"))
}

struct Built {
    release: Release,
    binaries: Vec<Binary>,
    /// The architectures whose binary is its own static build (not a stand-in).
    own: Vec<Arch>,
    debs: Vec<(Arch, PathBuf)>,
    tarballs: Vec<(Arch, PathBuf)>,
    sboms: Vec<(Arch, PathBuf)>,
    image: oci::Image,
    /// The man pages and completions (`manual::write`'s tree) the packages ship.
    manual: PathBuf,
}

fn root() -> PathBuf {
    latency_lab::workspace_root()
}

/// Where the static binaries are (`LATENCY_DIST_DIR`, else target/dist).
fn dist_dir() -> PathBuf {
    std::env::var_os("LATENCY_DIST_DIR").map_or_else(|| root().join("target/dist"), PathBuf::from)
}

/// Per architecture, its static binary from the dist directory; where there is none, a copy (in
/// `out`: a rebuild must not change it under the tests) of another binary standing in: the other
/// architecture's, else target/release/latency-daemon, else this test's daemon. Out: the
/// binaries, and the architectures whose binary is its own.
fn binaries(release: &Release, out: &Path) -> (Vec<Binary>, Vec<Arch>) {
    let dist = |arch: Arch| dist_dir().join(format!("latency-daemon-{}-{}-linux-musl", release.version, arch.uname()));
    let own: Vec<Arch> = Arch::ALL.into_iter().filter(|a| dist(*a).is_file()).collect();
    let release_build = root().join("target/release/latency-daemon");
    let original = match own.first() {
        Some(arch) => dist(*arch),
        None if release_build.is_file() => release_build,
        None => PathBuf::from(DAEMON),
    };
    let stand_in = out.join("stand-in/latency-daemon");
    let binaries = Arch::ALL
        .into_iter()
        .map(|arch| {
            if own.contains(&arch) {
                return Binary::checked(&dist(arch), arch).unwrap_or_else(|e| panic!("{e:#}"));
            }
            eprintln!("package: no {arch} binary in {}; {} stands in", dist_dir().display(), original.display());
            std::fs::create_dir_all(stand_in.parent().unwrap()).unwrap();
            if !stand_in.is_file() {
                std::fs::copy(&original, &stand_in).unwrap();
                // Stripped as dist strips: a debug build is 100 MB of symbols that lintian reads
                // and xz packs byte by byte (minutes in CI), and says nothing of the package.
                let strip = std::process::Command::new("strip")
                    .args(["--strip-unneeded", "--remove-section=.comment"])
                    .arg(&stand_in)
                    .status()
                    .unwrap();
                assert!(strip.success(), "strip {}: {strip}", stand_in.display());
            }
            Binary::stand_in(&stand_in, arch)
        })
        .collect();
    (binaries, own)
}

/// Every artifact, built once into `out`.
fn build(out: &Path) -> Built {
    let release = Release::from_checkout(&root()).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(release.source, Some(source()), "the release's source is the workspace's repository");
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).unwrap();
    let (binaries, own) = binaries(&release, out);
    let manual = out.join("manual");
    manual::write(Cli::command(), &reference::variables(), &release, &root(), &manual)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let built = package::build(out, &binaries, &release, &root(), &manual).unwrap_or_else(|e| panic!("{e:#}"));
    Built {
        release,
        binaries,
        own,
        debs: built.debs,
        tarballs: built.tarballs,
        sboms: built.sboms,
        image: built.image,
        manual,
    }
}

fn artifacts() -> &'static Built {
    static ARTIFACTS: OnceLock<Built> = OnceLock::new();
    ARTIFACTS.get_or_init(|| build(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("package")))
}

fn deb_of(arch: Arch) -> &'static Path {
    &artifacts().debs.iter().find(|(a, _)| *a == arch).unwrap().1
}

#[test]
fn each_deb_holds_the_daemon_its_unit_conffile_and_docs() {
    let a = artifacts();
    for (arch, deb) in &a.debs {
        let fields = deb::fields(deb).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(fields["Package"], "latency-daemon");
        assert_eq!(fields["Version"], format!("{}-{}", a.release.version, deb::REVISION));
        assert_eq!(fields["Architecture"], arch.debian());
        assert_eq!(fields["Homepage"], source());
        assert!(fields["Maintainer"].contains('@'), "{fields:?}");
        assert!(fields["Description"].lines().count() > 3, "a synopsis and a long description: {fields:?}");
        assert!(!fields.contains_key("Depends"), "a static binary depends on nothing: {fields:?}");
        let installed: u64 = fields["Installed-Size"].parse().unwrap();
        let binary = std::fs::metadata(&a.binaries.iter().find(|b| b.arch == *arch).unwrap().path).unwrap().len();
        assert!(installed >= binary / 1024, "Installed-Size {installed} KiB < the binary's {binary} bytes");

        let contents = deb::contents(deb).unwrap_or_else(|e| panic!("{e:#}"));
        let mode = |path: &str| contents.iter().find(|e| e.path == path).map(|e| e.mode.as_str());
        assert!(contents.iter().all(|e| e.owner == "root/root"), "{contents:?}");
        assert_eq!(mode("/usr/bin/latency-daemon"), Some("-rwxr-xr-x"));
        assert_eq!(mode(deb::CONFFILE), Some("-rw-r--r--"));
        assert_eq!(mode(deb::UNIT), Some("-rw-r--r--"));
        for doc in
            ["copyright", "changelog.Debian.gz", "changelog.gz", "README.md.gz", "docs/design.md.gz", deb::SBOM_NAME]
        {
            assert_eq!(mode(&format!("/usr/share/doc/latency-daemon/{doc}")), Some("-rw-r--r--"), "{doc}");
        }
        assert!(contents.iter().all(|e| !e.path.starts_with("/usr/local")), "nothing under /usr/local: {contents:?}");

        assert_eq!(deb::control_file(deb, "conffiles").unwrap().trim(), deb::CONFFILE);
        let postinst = deb::control_file(deb, "postinst").unwrap();
        assert!(postinst.contains("deb-systemd-helper enable") && postinst.contains("deb-systemd-invoke"));
        assert!(deb::control_file(deb, "postrm").unwrap().contains("deb-systemd-helper purge"));
        assert!(deb::control_file(deb, "prerm").unwrap().contains("deb-systemd-invoke stop"));
    }
}

#[test]
fn each_tarball_holds_the_binary_unit_config_manual_and_completions_under_one_directory() {
    let a = artifacts();
    for (arch, tarball) in &a.tarballs {
        let binary = a.binaries.iter().find(|b| b.arch == *arch).unwrap();
        let top = package::tarball::top(&a.release, binary);
        assert_eq!(tarball.file_name().unwrap().to_string_lossy(), format!("{top}.tar.gz"));
        // GNU tar's own listing: modes and owners as a user's `tar xzf` makes them.
        let listing = std::process::Command::new("tar").arg("tzvf").arg(tarball).output().unwrap();
        assert!(listing.status.success(), "tar tzvf {}", tarball.display());
        let listing = String::from_utf8(listing.stdout).unwrap();
        let entry = |path: &str| {
            listing
                .lines()
                .find(|l| l.ends_with(&format!(" ./{top}/{path}")))
                .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        };
        assert_eq!(entry("latency-daemon").as_deref(), Some("-rwxr-xr-x 0/0"), "{listing}");
        let mut wanted: Vec<String> = package::tarball::FROM_REPOSITORY
            .iter()
            .map(|f| Path::new(f).file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        wanted.extend(manual::files(&a.manual).unwrap().into_iter().map(|(tree, _)| tree.display().to_string()));
        assert!(wanted.iter().any(|w| w.ends_with("latency-daemon-run.8")), "{wanted:?}");
        for path in &wanted {
            assert_eq!(entry(path).as_deref(), Some("-rw-r--r-- 0/0"), "{path} in {}:\n{listing}", tarball.display());
        }
        assert!(
            listing
                .lines()
                .all(|l| l.split_whitespace().last().is_some_and(|p| p == "./" || p.starts_with(&format!("./{top}")))),
            "everything under {top}/:\n{listing}"
        );
        // What is inside is what dist built and the repository holds, byte for byte.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("tarball-{arch}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let x = std::process::Command::new("tar").arg("xzf").arg(tarball).arg("-C").arg(&dir).status().unwrap();
        assert!(x.success());
        let inside = dir.join(&top);
        assert!(std::fs::read(inside.join("latency-daemon")).unwrap() == std::fs::read(&binary.path).unwrap());
        for file in package::tarball::FROM_REPOSITORY {
            let name = Path::new(file).file_name().unwrap();
            assert!(std::fs::read(inside.join(name)).unwrap() == std::fs::read(root().join(file)).unwrap(), "{file}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// `deb`'s files unpacked (`dpkg-deb -x`) into a fresh folder of this test's.
fn unpacked(deb: &Path, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let out = std::process::Command::new("dpkg-deb").arg("-x").arg(deb).arg(&dir).output().unwrap();
    assert!(out.status.success(), "dpkg-deb -x {}: {}", deb.display(), String::from_utf8_lossy(&out.stderr));
    dir
}

/// What the built binary prints for `args` (`--help` of a command): its own words, not the
/// generator's.
fn help(args: &[&str]) -> String {
    let out = std::process::Command::new(DAEMON).args(args).output().unwrap();
    assert!(out.status.success(), "{DAEMON} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// man-db's `man` on one page file: (status, stdout, stderr).
fn man(page: &Path, args: &[&str], width: &str) -> (bool, String, String) {
    let out = std::process::Command::new("man")
        .args(args)
        .arg("-l")
        .arg(page)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LC_ALL", "C.UTF-8")
        .env("MANWIDTH", width)
        .env("MANPAGER", "cat")
        .output()
        .unwrap_or_else(|e| panic!("man: {e} (apt-get install man-db)"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Each package's man pages: the main page and one per command the binary's `--help` lists, each
/// formatted by man-db as lintian does (`man --warnings`) at 80 columns without a word on stderr,
/// with a NAME line lexgrog (mandb's whatis) reads; the run page names every long option of the
/// binary's own `run --help`, aliases included, and the main page its sections.
#[test]
fn each_deb_ships_man_pages_that_render_cleanly_with_every_run_option() {
    let commands: Vec<String> = help(&["--help"])
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 5 && commands.contains(&"run".to_owned()), "commands of --help: {commands:?}");
    let options: BTreeSet<String> = help(&["run", "--help"])
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.trim_end_matches('.').to_owned())
        .collect();
    assert!(
        options.len() > 40 && options.contains("--listen") && options.contains("--web.listen-address"),
        "{options:?}"
    );
    for (arch, deb) in &artifacts().debs {
        let tree = unpacked(deb, &format!("package-man-{arch}"));
        let man8 = tree.join("usr/share/man/man8");
        let mut pages: Vec<String> = std::fs::read_dir(&man8)
            .unwrap_or_else(|e| panic!("{arch}: {}: {e}", man8.display()))
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        pages.sort();
        let mut want: Vec<String> = commands.iter().map(|c| format!("latency-daemon-{c}.8.gz")).collect();
        want.push("latency-daemon.8.gz".to_owned());
        want.sort();
        assert_eq!(pages, want, "{arch}: the pages in {}", man8.display());
        for page in &pages {
            let path = man8.join(page);
            let (ok, _, warnings) = man(&path, &["--warnings", "-E", "UTF-8", "-Tutf8", "-Z"], "80");
            assert!(ok && warnings.trim().is_empty(), "{arch}: man --warnings on {page}:\n{warnings}");
            let whatis = std::process::Command::new("lexgrog").arg(&path).output().unwrap();
            let whatis_text = String::from_utf8_lossy(&whatis.stdout);
            let name = page.trim_end_matches(".8.gz");
            assert!(
                whatis.status.success() && whatis_text.contains(&format!("\"{name} - ")),
                "{arch}: lexgrog {page}: {whatis_text}{}",
                String::from_utf8_lossy(&whatis.stderr)
            );
        }
        // ASCII, wide and unhyphenated, so every option is one word as `--help` writes it.
        let text = |page: &str| {
            let (ok, text, errors) =
                man(&man8.join(page), &["-E", "ascii", "--no-hyphenation", "--no-justification"], "250");
            assert!(ok, "{arch}: man {page}: {errors}");
            text
        };
        let run = text("latency-daemon-run.8.gz");
        let missing: Vec<&String> = options.iter().filter(|o| !run.contains(o.as_str())).collect();
        assert!(missing.is_empty(), "{arch}: latency-daemon-run(8) lacks {missing:?} of `run --help`:\n{run}");
        assert!(
            run.contains("[default: 0.0.0.0:9954]") && run.contains("run-queue"),
            "{arch}: defaults and values:\n{run}"
        );
        let main = text("latency-daemon.8.gz");
        for section in [
            "NAME",
            "SYNOPSIS",
            "DESCRIPTION",
            "COMMANDS",
            "OPTIONS",
            "ENVIRONMENT",
            "FILES",
            "SIGNALS",
            "EXIT STATUS",
            "EXAMPLES",
            "SEE ALSO",
        ] {
            assert!(main.lines().any(|l| l == section), "{arch}: latency-daemon(8) has no {section}:\n{main}");
        }
        for needle in ["RUNQLAT_TOP_CGROUPS", "SIGHUP", "SIGUSR1", "/etc/latency-daemon.toml", "latency-daemon-run(8)"]
        {
            assert!(main.contains(needle), "{arch}: latency-daemon(8) does not say {needle}:\n{main}");
        }
    }
}

/// Each package's completions at the paths bash-completion, zsh and fish look in. bash's, sourced
/// in a plain `bash`, and fish's, in a plain `fish`, complete `latency-daemon r` to run and record
/// and `run --top-c` to `--top-cgroups`; zsh's passes `zsh -n` and compinit binds it to
/// `latency-daemon` (completing in zsh needs its line editor, which no script drives).
#[test]
fn each_deb_ships_completions_bash_completes_commands_and_options() {
    for (arch, deb) in &artifacts().debs {
        let tree = unpacked(deb, &format!("package-completions-{arch}"));
        let file = |installed: &str| tree.join(installed.trim_start_matches('/'));
        for (_, _, installed) in manual::COMPLETIONS {
            let meta = std::fs::metadata(file(installed)).unwrap_or_else(|e| panic!("{arch}: {installed}: {e}"));
            assert!(meta.len() > 100, "{arch}: {installed} is {} bytes", meta.len());
        }
        let bash = file("/usr/share/bash-completion/completions/latency-daemon");
        let complete = |words: &[&str]| {
            // `complete -p` names the function; it is called as bash calls it on <Tab>.
            let script = r#"source "$1" || exit 3
spec=$(complete -p latency-daemon) || exit 4
fn=${spec##*-F }; fn=${fn%% *}
shift
COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
"$fn" latency-daemon "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}""#;
            let out = std::process::Command::new("bash")
                .args(["--norc", "--noprofile", "-c", script, "complete"])
                .arg(&bash)
                .args(words)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{arch}: bash completion of {words:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap().split_whitespace().map(str::to_owned).collect::<BTreeSet<_>>()
        };
        assert_eq!(
            complete(&["latency-daemon", "r"]),
            BTreeSet::from(["record".to_owned(), "run".to_owned()]),
            "{arch}"
        );
        assert_eq!(
            complete(&["latency-daemon", "run", "--top-c"]),
            BTreeSet::from(["--top-cgroups".to_owned()]),
            "{arch}"
        );
        // fish's, sourced in a plain `fish`, completes the same (`complete -C` asks as <Tab> does).
        let fish = file("/usr/share/fish/vendor_completions.d/latency-daemon.fish");
        let fish_complete = |line: &str| {
            let out = std::process::Command::new("fish")
                .args(["--no-config", "-c", "source $argv[1]; complete -C $argv[2]"])
                .arg(&fish)
                .arg(line)
                .output()
                .expect("fish (cargo xtask setup installs it)");
            assert!(
                out.status.success(),
                "{arch}: fish completion of {line:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8(out.stdout).unwrap();
            text.lines().filter_map(|l| l.split('\t').next()).map(str::to_owned).collect::<BTreeSet<_>>()
        };
        assert_eq!(
            fish_complete("latency-daemon r"),
            BTreeSet::from(["record".to_owned(), "run".to_owned()]),
            "{arch}: fish"
        );
        assert_eq!(
            fish_complete("latency-daemon run --top-c"),
            BTreeSet::from(["--top-cgroups".to_owned()]),
            "{arch}: fish"
        );
        // zsh's passes its syntax check, and compinit, finding it on the fpath, binds it to the
        // command (its `#compdef` line).
        let zsh_dir = file("/usr/share/zsh/vendor-completions");
        let zsh = zsh_dir.join("_latency-daemon");
        let checked = std::process::Command::new("zsh")
            .arg("-n")
            .arg(&zsh)
            .output()
            .expect("zsh (cargo xtask setup installs it)");
        assert!(checked.status.success(), "{arch}: zsh -n: {}", String::from_utf8_lossy(&checked.stderr));
        let bound = std::process::Command::new("zsh")
            .args([
                "-f",
                "-c",
                "fpath=($1 $fpath); autoload -Uz compinit; compinit -u -D; print -r -- ${_comps[latency-daemon]}",
                "zsh",
            ])
            .arg(&zsh_dir)
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&bound.stdout).trim(),
            "_latency-daemon",
            "{arch}: zsh's compinit: {}",
            String::from_utf8_lossy(&bound.stderr)
        );
    }
}

/// lintian (Debian 12's) on each package: nothing but the overrides deploy/debian/lintian-overrides
/// gives reasons for, and what the binary handed in explains: a stand-in's own tags, and symbols a
/// release build should strip (`unstripped-binary-or-object`, printed).
#[test]
fn each_deb_is_lintian_clean() {
    let a = artifacts();
    for (arch, deb) in &a.debs {
        let binary = &a.binaries.iter().find(|b| b.arch == *arch).unwrap().path;
        let file = std::process::Command::new("file").arg("-b").arg(binary).output().unwrap();
        let file = String::from_utf8_lossy(&file.stdout);
        let stand_in = !a.own.contains(arch);
        let explained = |tag: &str| {
            // A stand-in is another build's binary: what lintian says of it says nothing of ours.
            (stand_in && tag.ends_with(" [usr/bin/latency-daemon]"))
                || (tag.contains(" unstripped-binary-or-object ") && file.contains("not stripped"))
                // The overrides cover stripped and unstripped, static and static-pie builds: one
                // another build does not raise is unused, or (a tag of the same name with other
                // words, e.g. another false spelling in other code bytes) mismatched.
                || tag.contains(" unused-override ")
                || tag.contains(" mismatched-override ")
        };
        let tags = deb::lintian(deb).unwrap_or_else(|e| panic!("{e:#}"));
        for tag in tags.iter().filter(|t| explained(t)) {
            eprintln!("package: {arch}: lintian {tag} (the binary: {})", file.trim());
        }
        let unexplained: Vec<&String> = tags.iter().filter(|t| !explained(t)).collect();
        assert!(unexplained.is_empty(), "lintian on the {arch} package:\n{unexplained:#?}");
    }
}

/// Both packages installed, removed and purged by dpkg in a scratch bookworm root: the files
/// appear; on removal the conffile stays (and dpkg says config-files); on purge it goes too.
#[test]
fn each_deb_installs_removes_and_purges_in_a_scratch_root() {
    let started = std::time::Instant::now();
    let rootfs = Rootfs::bookworm().unwrap_or_else(|e| panic!("{e:#}"));
    let shipped = std::fs::read(root().join("deploy/latency-daemon.toml")).unwrap();
    for arch in Arch::ALL {
        rootfs.install_remove_purge(deb_of(arch), &shipped).unwrap_or_else(|e| panic!("{arch}: {e:#}"));
    }
    eprintln!("package: install/remove/purge of both packages in {:?}", started.elapsed());
}

#[test]
fn the_oci_index_names_both_platforms_with_the_annotations() {
    let a = artifacts();
    let layout = &a.image.layout;
    let top: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    assert_eq!(top["manifests"][0]["digest"], a.image.index.as_str());
    assert_eq!(top["manifests"][0]["annotations"]["io.containerd.image.name"], a.image.reference.as_str());
    let index = oci::read_json(layout, &a.image.index).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(index["mediaType"], oci::INDEX_TYPE);
    let want = [
        ("org.opencontainers.image.source", source()),
        ("org.opencontainers.image.url", source()),
        ("org.opencontainers.image.documentation", format!("{}/tree/v{}/docs", source(), a.release.version)),
        ("org.opencontainers.image.revision", a.release.revision.clone()),
        ("org.opencontainers.image.version", a.release.version.clone()),
        ("org.opencontainers.image.licenses", oci::LICENSES.to_owned()),
        ("org.opencontainers.image.title", "latency-daemon".to_owned()),
        ("org.opencontainers.image.created", a.release.created()),
    ];
    for (key, value) in &want {
        assert_eq!(index["annotations"][key], value.as_str(), "index: {key}");
    }
    let mut platforms = BTreeSet::new();
    for m in index["manifests"].as_array().unwrap() {
        let platform = (m["platform"]["os"].as_str().unwrap(), m["platform"]["architecture"].as_str().unwrap());
        platforms.insert(format!("{}/{}", platform.0, platform.1));
        let manifest = oci::read_json(layout, m["digest"].as_str().unwrap()).unwrap();
        for (key, value) in &want {
            assert_eq!(manifest["annotations"][key], value.as_str(), "{platform:?} manifest: {key}");
        }
        let config = oci::read_json(layout, manifest["config"]["digest"].as_str().unwrap()).unwrap();
        assert_eq!(config["architecture"], platform.1);
        assert_eq!(config["os"], "linux");
        assert_eq!(config["config"]["Entrypoint"], serde_json::json!([oci::ENTRYPOINT]));
        assert_eq!(config["config"]["User"], "65534:65534");
        for (key, value) in &want {
            assert_eq!(config["config"]["Labels"][key], value.as_str(), "{platform:?} config: {key}");
        }
        assert_eq!(manifest["layers"].as_array().unwrap().len(), 1);
    }
    assert_eq!(platforms, BTreeSet::from(["linux/amd64".to_owned(), "linux/arm64".to_owned()]));
}

/// containerd (1.6, Debian 12) imports every platform of the archive, and has every blob.
#[test]
fn ctr_images_import_accepts_the_archive() {
    let a = artifacts();
    let containerd = runtimes::OwnContainerd::start().unwrap_or_else(|e| panic!("{e:#}"));
    let check = containerd.import(&a.image.archive).unwrap_or_else(|e| panic!("{e:#}"));
    let line = check.lines().find(|l| l.starts_with(&a.image.reference)).unwrap_or_else(|| panic!("{check}"));
    // `check` counts the host's platform: its manifest's config and layer, unpacked.
    assert!(line.contains("complete (2/2)") && line.trim_end().ends_with("true"), "{check}");
    let content = containerd.ctr(&["content", "ls", "--quiet"]).unwrap();
    for (arch, digest) in &a.image.manifests {
        assert!(content.lines().any(|l| l == digest), "no {arch} manifest {digest} in the content store:\n{content}");
    }
    let index = containerd.ctr(&["images", "list", "--quiet"]).unwrap();
    assert!(index.lines().any(|l| l == a.image.reference), "{index}");
    let platforms = containerd.ctr(&["images", "list"]).unwrap();
    assert!(platforms.contains("linux/amd64") && platforms.contains("linux/arm64"), "{platforms}");
}

/// podman loads the archive (the host's platform) and sees both platforms in its index; the amd64
/// image prints its version and serves /metrics confined as the DaemonSet declares.
#[test]
fn podman_loads_the_archive_and_runs_the_image_confined() {
    let a = artifacts();
    let podman = latency_lab::services::Podman::new().unwrap_or_else(|e| panic!("{e:#}"));
    let loaded = runtimes::podman_load(&podman, &a.image.archive).unwrap_or_else(|e| panic!("{e:#}"));
    let platforms: BTreeSet<String> = loaded.manifest["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            format!("{}/{}", m["platform"]["os"].as_str().unwrap(), m["platform"]["architecture"].as_str().unwrap())
        })
        .collect();
    assert_eq!(platforms, BTreeSet::from(["linux/amd64".to_owned(), "linux/arm64".to_owned()]), "{}", loaded.manifest);
    let image =
        loaded.load.lines().find_map(|l| l.strip_prefix("Loaded image: ")).unwrap_or_else(|| panic!("{}", loaded.load));
    let result = if a.own.contains(&Arch::Amd64) {
        let seccomp = package::seccomp::profile_path(&root(), Arch::Amd64);
        Some(runtimes::podman_run_confined(&podman, image, &seccomp))
    } else {
        eprintln!("package: no static amd64 binary: the image is not run (a dynamic one has no C library there)");
        None
    };
    drop(podman.podman(&["rmi", "--force", image]));
    if let Some(result) = result {
        let confined = result.unwrap_or_else(|e| {
            let e = format!("{e:#}");
            let hint = if e.contains("Operation not permitted") {
                "\n(a call the shipped seccomp profile refuses: retrace it from this binary, `cargo xtask seccomp`)"
            } else {
                ""
            };
            panic!("{e}{hint}")
        });
        assert!(confined.version.starts_with(&format!("latency-daemon {}", a.release.version)), "{}", confined.version);
        assert!(confined.metrics.contains("runqlat_delay_seconds_count"), "{}", confined.metrics);
        let (encoding, zipped, unzipped) = &confined.gzipped;
        assert_eq!(encoding.as_deref(), Some("gzip"), "/metrics not gzipped for a scraper that accepts it");
        assert!(unzipped.contains("runqlat_delay_seconds_count"), "the gzipped scrape: {unzipped}");
        assert!(*zipped * 2 < unzipped.len(), "gzip: {zipped} bytes for {} plain", unzipped.len());
        let field = |k: &str| confined.status.iter().find_map(|l| l.strip_prefix(k)).map(str::trim).unwrap_or("?");
        let bounding = u64::from_str_radix(field("CapBnd:"), 16).unwrap_or(u64::MAX);
        assert_eq!(bounding & !(1 << 38 | 1 << 39), 0, "{:?}", confined.status);
        assert_eq!(field("Seccomp:"), "2", "{:?}", confined.status);
        assert_eq!(field("NoNewPrivs:"), "1", "{:?}", confined.status);
    }
}

/// The crates cargo says the binary links: `cargo metadata`'s resolve for the daemon's target,
/// walked from latency-daemon along normal edges (proc-macros left out), and from the kernel
/// program for bpfel-unknown-none.
fn cargo_metadata_crates(triple: &str) -> BTreeSet<(String, String)> {
    let walk = |package: &str, target: &str| {
        let out = std::process::Command::new(env!("CARGO"))
            .current_dir(root())
            .args(["metadata", "--format-version", "1", "--locked", "--offline", "--filter-platform", target])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
        let packages = meta["packages"].as_array().unwrap();
        let by_id = |id: &str| packages.iter().find(|p| p["id"] == id).unwrap();
        let is_proc_macro = |p: &Value| {
            p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "proc-macro"))
        };
        // cargo metadata's resolve also lists an optional dependency that only a weak feature
        // (`dep?/feature`) names, though nothing enables it and it is not linked: an optional
        // dependency counts when an enabled feature of its parent names it (`dep:x`, `x`, `x/f`).
        let enabled = |parent: &Value, node: &Value, dep: &Value| {
            let name = dep["name"].as_str().unwrap();
            let declared = parent["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["name"] == name && d["kind"].is_null() && d["optional"] == true);
            let Some(declared) = declared else { return true };
            let key = declared["rename"].as_str().unwrap_or(name);
            let features: Vec<&str> = node["features"].as_array().unwrap().iter().filter_map(|f| f.as_str()).collect();
            features.contains(&key)
                || features.iter().any(|f| {
                    parent["features"][*f].as_array().into_iter().flatten().filter_map(|v| v.as_str()).any(|v| {
                        v == format!("dep:{key}") || v.strip_prefix(key).is_some_and(|rest| rest.starts_with('/'))
                    })
                })
        };
        let nodes = meta["resolve"]["nodes"].as_array().unwrap();
        let start = packages.iter().find(|p| p["name"] == package).unwrap()["id"].as_str().unwrap().to_owned();
        let mut seen = BTreeSet::new();
        let mut pending = vec![start];
        while let Some(id) = pending.pop() {
            if !seen.insert(id.clone()) {
                continue;
            }
            let node = nodes.iter().find(|n| n["id"] == id.as_str()).unwrap();
            for dep in node["deps"].as_array().unwrap() {
                let normal = dep["dep_kinds"].as_array().unwrap().iter().any(|k| k["kind"].is_null());
                let pkg = dep["pkg"].as_str().unwrap();
                if normal && !is_proc_macro(by_id(pkg)) && enabled(by_id(&id), node, by_id(pkg)) {
                    pending.push(pkg.to_owned());
                }
            }
        }
        seen.into_iter()
            .map(|id| {
                let p = by_id(&id);
                (p["name"].as_str().unwrap().to_owned(), p["version"].as_str().unwrap().to_owned())
            })
            .collect::<BTreeSet<_>>()
    };
    let mut all = walk("latency-daemon", triple);
    all.extend(walk("latency-ebpf", "bpfel-unknown-none"));
    all
}

#[test]
fn each_sbom_lists_the_crates_cargo_links_into_the_binary() {
    let a = artifacts();
    for (arch, path) in &a.sboms {
        let doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let mut listed = sbom::check(&doc).unwrap_or_else(|e| panic!("{arch}: {e:#}"));
        listed.insert(("latency-daemon".to_owned(), a.release.version.clone()));
        let binary = a.binaries.iter().find(|b| b.arch == *arch).unwrap();
        let sha = package::sha256_file(&binary.path).unwrap();
        assert_eq!(doc["metadata"]["component"]["hashes"][0]["content"], sha.as_str(), "{arch}");
        let cargo = cargo_metadata_crates(&arch.musl_target());
        // metadata unifies features across the workspace, so it may name a crate another member
        // enables; it must not miss one the SBOM lists, nor list one the SBOM misses.
        let missing: Vec<_> = cargo.difference(&listed).collect();
        let extra: Vec<_> = listed.difference(&cargo).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{arch}: not in the SBOM {missing:?}; only in the SBOM {extra:?}"
        );
    }
}

/// The venv `cargo xtask setup` fills (xtask/src/setup/python.rs).
const PYTHON: &str = "/var/cache/runqlat-tools/venv/bin/python3";

/// Validates the CycloneDX documents named on the command line against the 1.5 JSON schema with
/// the official library's strict validator; prints each one's errors and exits 1 if any fails.
const CYCLONEDX_VALIDATE: &str = r#"
import sys
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
validator = JsonStrictValidator(SchemaVersion.V1_5)
failed = False
for path in sys.argv[1:]:
    with open(path) as f:
        error = validator.validate_str(f.read())
    if error is not None:
        print(f"{path}: {error}")
        failed = True
sys.exit(1 if failed else 0)
"#;

/// Each SBOM is valid CycloneDX 1.5 as the CycloneDX project's own library reads it (a broken
/// one is refused by the same call: the last document).
#[test]
fn each_sbom_is_valid_cyclonedx_to_the_official_library() {
    let a = artifacts();
    let validate = |paths: &[&Path]| {
        std::process::Command::new(PYTHON)
            .args(["-c", CYCLONEDX_VALIDATE])
            .args(paths)
            .output()
            .unwrap_or_else(|e| panic!("{PYTHON}: {e} (cargo xtask setup installs cyclonedx-python-lib)"))
    };
    let sboms: Vec<&Path> = a.sboms.iter().map(|(_, p)| p.as_path()).collect();
    let checked = validate(&sboms);
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    let broken = Path::new(env!("CARGO_TARGET_TMPDIR")).join("package-broken.cdx.json");
    let text = std::fs::read_to_string(sboms[0]).unwrap().replacen("\"bomFormat\"", "\"bomFormats\"", 1);
    std::fs::write(&broken, text).unwrap();
    let refused = validate(&[broken.as_path()]);
    assert!(!refused.status.success(), "a document without bomFormat passed");
}

/// A second build of the same commit gives the same bytes: every SBOM, .deb and the image archive.
#[test]
fn a_second_build_is_the_same_bytes() {
    let a = artifacts();
    let again = Path::new(env!("CARGO_TARGET_TMPDIR")).join("package-again");
    let _ = std::fs::remove_dir_all(&again);
    let second =
        package::build(&again, &a.binaries, &a.release, &root(), &a.manual).unwrap_or_else(|e| panic!("{e:#}"));
    let pairs = a.sboms.iter().zip(&second.sboms).chain(a.debs.iter().zip(&second.debs));
    let pairs = pairs.chain(a.tarballs.iter().zip(&second.tarballs));
    for ((arch, first), (_, second)) in pairs {
        assert!(std::fs::read(first).unwrap() == std::fs::read(second).unwrap(), "{arch}: {} differs", first.display());
    }
    assert_eq!(second.image.index, a.image.index, "the image index differs");
    assert!(std::fs::read(&second.image.archive).unwrap() == std::fs::read(&a.image.archive).unwrap());
    std::fs::remove_dir_all(&again).unwrap();
}
