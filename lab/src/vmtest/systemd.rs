//! Our .deb, or the bare binary as docs/install.md installs it (`bare`), under a booted systemd:
//! in, a kernel (the oldest we support, 5.10), the route (the amd64 .deb, or the release's files
//! and the docs' block) and the cache folder; out, a `DebResult` — the unit's state as `systemctl
//! show` gives it, the process's capabilities, its /metrics counts and journal, each judged, with
//! the timings — and the guest's console in the report folder.
//!
//! The guest's userland is the kernel's own Debian release (bullseye for 5.10, so its systemd
//! 247 reads the unit): mmdebstrap's `minbase` with systemd, bootstrapped once into a tarball in
//! the cache (47–68 s) and unpacked per run. The release's own dpkg installs the .deb chrooted, so
//! its postinst enables the unit as on a real machine (it cannot start it: no systemd runs there
//! yet). A oneshot checker (`deb-check.sh`) ordered after the unit prints `@@ deb` markers on the
//! console and powers off; `deb_checks` reads and judges them. The root boots as an uncompressed
//! initramfs with systemd as its first process (`rdinit=`): Debian's kernels have their disk and
//! 9p drivers as modules, and an initramfs needs none.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use super::arch::elf_kind;
use super::bare;
use super::checks::Check;
use super::deb_checks::{Expected, Installed, MARK, Markers, UNIT, judge};
use super::kernels::Kernel;
use super::qemu::{self, Guest};
use super::unpacked::HOST_BUSYBOX;
use crate::apt::{Mirrors, source_line};
use crate::cmd;
use crate::guard::Scratch;
use crate::package::rootfs::{self, TARBALL_ARG};

/// The kernel the .deb is booted on: the oldest we support.
pub const KERNEL: &str = "5.10";
const UNIT_PATH: &str = "usr/lib/systemd/system/latency-daemon.service";
const CONFFILE: &str = "etc/latency-daemon.toml";
const CHECKER: &str = "vmtest-deb-check.service";
/// Where the daemon serves without a configuration file (`listen`'s default), as the checker
/// reaches it.
const DEFAULT_HOST: &str = "127.0.0.1";
const DEFAULT_PORT: u16 = 9954;
const DONE: &str = "@@ deb done";
/// systemd's first line on the console (`Welcome to Debian GNU/Linux 11 (bullseye)!`).
const WELCOME: &str = "Welcome to ";
/// Measured under TCG on 2 busy host CPUs: systemd up at 8–10 s, /metrics served at 14–19 s, the
/// guest done at 19–24 s (a unit that fails: ≈40 s, the checker gives up after three restarts);
/// the checker waits 150 s at most, and the deadline leaves room for a slower host.
const DEADLINE: Duration = Duration::from_secs(300);

/// How the daemon gets into the root.
#[derive(Debug, Clone, Copy)]
pub enum Route<'a> {
    /// This .deb, by the root's dpkg.
    Deb(&'a Path),
    /// The release's files, by docs/install.md's block.
    Bare(&'a bare::Release),
}

impl Route<'_> {
    /// `Route::Bare`'s title.
    pub const BARE: &'static str = "the bare binary (docs/install.md)";

    /// The report's and the console's name for it.
    pub fn title(&self) -> &'static str {
        match self {
            Route::Deb(_) => "the .deb",
            Route::Bare(_) => Self::BARE,
        }
    }
}

/// What to boot.
#[derive(Debug)]
pub struct Deb<'a> {
    /// x86_64 (the .deb is amd64).
    pub kernel: &'a Kernel,
    pub route: Route<'a>,
    pub accel: &'a str,
    pub cpus: u32,
    /// Where the bootstrap tarball is kept.
    pub cache: &'a Path,
    /// Where the console goes (console.txt).
    pub dir: PathBuf,
}

/// The .deb's guest, judged.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DebResult {
    pub kernel: Kernel,
    /// What was installed: `Route::title`.
    #[serde(default)]
    pub route: String,
    /// The .deb's file name, or the bare binary's.
    pub deb: String,
    /// The guest's Debian release.
    pub suite: String,
    pub accel: String,
    pub cpus: u32,
    /// mmdebstrap's run, when this run made the tarball (None: it was cached).
    pub bootstrap_s: Option<f64>,
    /// Unpacking the root, installing the .deb and packing the initramfs.
    pub build_s: f64,
    pub initramfs_bytes: u64,
    /// QEMU start → systemd's welcome line (host clock).
    pub systemd_s: Option<f64>,
    /// QEMU start → the checker's first scrape answered (host clock).
    pub served_s: Option<f64>,
    /// QEMU start → exit.
    pub guest_s: f64,
    /// Every `@@ deb KEY=VALUE` the checker printed.
    pub markers: BTreeMap<String, String>,
    /// The unit's journal (its last lines).
    pub journal: Vec<String>,
    pub checks: Vec<Check>,
    pub ok: bool,
    /// The console's last lines when the guest did not pass.
    pub console_tail: Vec<String>,
    /// How it was installed: the docs' block and what it printed (the bare route).
    #[serde(default)]
    pub install_log: Vec<String>,
}

/// The cached tarball of `kernel`'s Debian release with systemd, bootstrapped now if missing
/// (then also how long that took); `vmtest --fetch-only` makes it ahead of the boot.
pub fn root_tarball(kernel: &Kernel, cache: &Path) -> anyhow::Result<(PathBuf, Option<f64>)> {
    let suite = release_of(&kernel.suite);
    let tarball = cache.join(format!("rootfs-{suite}-systemd-amd64.tar"));
    if tarball.is_file() {
        return Ok((tarball, None));
    }
    let started = Instant::now();
    bootstrap(&suite, &tarball)?;
    Ok((tarball, Some(started.elapsed().as_secs_f64())))
}

/// Builds the root, boots it and judges what the checker printed; `progress` sees the boot's
/// `@@` lines.
pub fn run(deb: &Deb<'_>, progress: &mut dyn FnMut(f64, &str)) -> anyhow::Result<DebResult> {
    let suite = release_of(&deb.kernel.suite);
    let (tarball, bootstrap_s) = root_tarball(deb.kernel, deb.cache)?;

    let built = Instant::now();
    let scratch = Scratch::new("runqlat-vmtest-deb")?;
    let root = scratch.join("root");
    rootfs::unpack(&tarball, &root)?;
    let installed = match deb.route {
        Route::Deb(file) => install(&root, file)?,
        Route::Bare(release) => bare::install(&root, release)?,
    };
    let (host, port) = match std::fs::read_to_string(root.join(CONFFILE)) {
        Ok(listen) => probe_address(&listen).with_context(|| format!("{CONFFILE} names no listen address"))?,
        // A bare install that left the file out: the unit's `--config` fails, and the boot shows
        // it; the checker still needs an address.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (DEFAULT_HOST.to_owned(), DEFAULT_PORT),
        Err(e) => return Err(e).with_context(|| format!("reading {CONFFILE}")),
    };
    prepare(&root, &host, port)?;
    let initramfs = scratch.join("deb.cpio");
    let initramfs_bytes = pack(&root, &initramfs)?;
    // The root's files are in the archive now; the guest's run needs only that.
    std::fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    let build_s = built.elapsed().as_secs_f64();

    let guest = Guest {
        kernel: deb.kernel,
        initramfs: &initramfs,
        cpus: deb.cpus,
        accel: deb.accel,
        // systemd as PID 1 of the initramfs: no switch_root, nothing to mount.
        append: "rdinit=/lib/systemd/systemd systemd.show_status=1".into(),
        dir: deb.dir.clone(),
        deadline: DEADLINE,
        done: DONE,
    };
    let boot = qemu::boot(&guest, progress)?;
    let console: String = boot.console.iter().map(|(t, l)| format!("[{t:7.2}] {l}\n")).collect();
    std::fs::write(deb.dir.join("console.txt"), console)
        .with_context(|| format!("writing {}", deb.dir.join("console.txt").display()))?;

    let markers = Markers::parse(boot.console.iter().map(|(_, l)| l.as_str()));
    let expected = Expected {
        release: deb.kernel.release.clone(),
        sha256: installed.sha256,
        static_binary: installed.static_binary,
        whose: match deb.route {
            Route::Deb(_) => "the .deb's",
            Route::Bare(_) => "target/dist's",
        },
    };
    let mut checks = installed.checks;
    if !boot.finished {
        let why = if boot.timed_out { "the host's deadline passed" } else { "the guest stopped early" };
        checks.push(Check::new("finished", false, format!("{why} after {:.0} s", boot.wall_s)));
    }
    checks.extend(judge(&markers, &expected));
    let ok = checks.iter().all(|c| c.ok);
    let served_s = boot
        .console
        .iter()
        .find(|(_, l)| l.contains(&format!("{MARK}served_uptime=")) && !l.contains("never"))
        .map(|(t, _)| *t);
    Ok(DebResult {
        kernel: deb.kernel.clone(),
        route: deb.route.title().to_owned(),
        deb: match deb.route {
            Route::Deb(file) => file,
            Route::Bare(release) => release.binary.as_path(),
        }
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        suite,
        accel: deb.accel.to_owned(),
        cpus: deb.cpus,
        bootstrap_s,
        build_s,
        initramfs_bytes,
        systemd_s: boot.at(WELCOME),
        served_s,
        guest_s: boot.wall_s,
        markers: markers.fields,
        journal: markers.journal,
        checks,
        ok,
        console_tail: if ok {
            Vec::new()
        } else {
            boot.console.iter().rev().take(25).rev().map(|(_, l)| l.clone()).collect()
        },
        install_log: installed.log,
    })
}

/// `bullseye-security` → `bullseye`: the release a kernel's suite belongs to.
fn release_of(suite: &str) -> String {
    suite.split('-').next().unwrap_or(suite).to_owned()
}

/// `mmdebstrap --variant=minbase --include=systemd,systemd-sysv SUITE` from the host's mirrors
/// into `tarball`, once.
fn bootstrap(suite: &str, tarball: &Path) -> anyhow::Result<()> {
    let mirrors = Mirrors::of_host()?;
    let mut args: Vec<String> =
        ["--variant=minbase", "--architectures=amd64", "--include=systemd,systemd-sysv"].map(str::to_owned).to_vec();
    // Documentation is never read in the guest, and it is a quarter of the archive it boots from.
    for dir in ["doc", "man", "locale", "info"] {
        args.push(format!("--dpkgopt=path-exclude=/usr/share/{dir}/*"));
    }
    args.push(suite.to_owned());
    args.push(TARBALL_ARG.to_owned());
    args.push(source_line(&mirrors.archive, suite).trim().to_owned());
    args.push(source_line(&mirrors.security, &format!("{suite}-security")).trim().to_owned());
    rootfs::bootstrap(tarball, &args, &format!("Debian {suite} with systemd, for the .deb's guest"))
}

/// `dpkg --install` of `deb` by the root's own dpkg, chrooted (its maintainer scripts run there).
fn install(root: &Path, deb: &Path) -> anyhow::Result<Installed> {
    let inside = "tmp/latency-daemon.deb";
    std::fs::copy(deb, root.join(inside)).with_context(|| format!("copying {} into the root", deb.display()))?;
    let mut dpkg = Command::new("chroot");
    dpkg.arg(root)
        .args(["dpkg", "--install", &format!("/{inside}")])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    cmd::stdout(&mut dpkg).with_context(|| format!("installing {} in the guest's root", deb.display()))?;
    std::fs::remove_file(root.join(inside))?;
    let unit =
        std::fs::read_to_string(root.join(UNIT_PATH)).with_context(|| format!("the .deb installs no {UNIT_PATH}"))?;
    let binary = exec_binary(&unit).context("the installed unit has no ExecStart=")?;
    let bytes = std::fs::read(root.join(binary.trim_start_matches('/')))
        .with_context(|| format!("the unit's ExecStart names {binary}, which the .deb does not install"))?;
    let sha256 = crate::package::sha256_file(&root.join(binary.trim_start_matches('/')))?;
    let enabled = root.join("etc/systemd/system/multi-user.target.wants").join(UNIT).is_symlink();
    let suite = std::fs::read_to_string(root.join("etc/debian_version")).unwrap_or_default();
    Ok(Installed {
        sha256,
        static_binary: elf_kind(&bytes).is_some_and(|(machine, dynamic)| machine == 62 && !dynamic),
        checks: vec![Check::new(
            "enabled by postinst",
            enabled,
            format!("the postinst, run by Debian {}'s dpkg: multi-user.target.wants/{UNIT}", suite.trim()),
        )],
        log: Vec::new(),
    })
}

/// The program of a unit's `ExecStart=` (prefixes such as `-` or `!` dropped).
fn exec_binary(unit: &str) -> Option<String> {
    let line = unit.lines().map(str::trim).find_map(|l| l.strip_prefix("ExecStart="))?;
    let program = line.trim_start_matches(['-', '@', ':', '+', '!']).split_whitespace().next()?;
    Some(program.to_owned())
}

/// The host and port the checker scrapes, from the conffile's `listen = "ADDR:PORT"`: a wildcard
/// (`0.0.0.0`, `[::]`, or none as in `:9954`) is reached on loopback.
pub fn probe_address(toml: &str) -> Option<(String, u16)> {
    let listen = |l: &str| -> Option<String> {
        let rest = l.strip_prefix("listen")?.trim_start().strip_prefix('=')?.trim();
        rest.strip_prefix('"')?.split('"').next().map(str::to_owned)
    };
    // A line that sets it, else the commented default the shipped file shows.
    let lines = || toml.lines().map(str::trim);
    let value = lines()
        .find_map(listen)
        .or_else(|| lines().find_map(|l| l.strip_prefix('#').and_then(|l| listen(l.trim_start()))))?;
    let (host, port) = value.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let host = match host.trim_start_matches('[').trim_end_matches(']') {
        "" | "0.0.0.0" => "127.0.0.1",
        "::" => "::1",
        other => other,
    };
    Some((host.to_owned(), port))
}

/// The unit files and state systemd needs to boot straight to the checker.
fn prepare(root: &Path, host: &str, port: u16) -> anyhow::Result<()> {
    let etc = root.join("etc/systemd/system");
    let write =
        |path: PathBuf, text: &str| std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()));
    let link = |target: &str, path: PathBuf| {
        let _ = std::fs::remove_file(&path);
        std::os::unix::fs::symlink(target, &path).with_context(|| format!("linking {}", path.display()))
    };
    let checker = root.join("usr/local/sbin/vmtest-deb-check");
    write(checker.clone(), include_str!("deb-check.sh"))?;
    std::fs::set_permissions(&checker, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    write(
        etc.join(CHECKER),
        &format!(
            "[Unit]\nDescription=vmtest: does {UNIT} serve?\nAfter={UNIT}\n\n[Service]\nType=oneshot\n\
             TimeoutStartSec=280\nEnvironment=UNIT={UNIT} HOST={host} PORT={port}\n\
             ExecStart=/usr/local/sbin/vmtest-deb-check\n"
        ),
    )?;
    link(&format!("/etc/systemd/system/{CHECKER}"), etc.join("multi-user.target.wants").join(CHECKER))?;
    // Without udev no tty device unit ever appears (a getty would wait for it), and without D-Bus
    // logind restarts until it gives up: both only cost boot time here.
    for unit in ["getty.target", "serial-getty@ttyS0.service", "systemd-logind.service"] {
        link("/dev/null", etc.join(unit))?;
    }
    // A machine id of its own: an empty /etc/machine-id would make this boot a "first boot".
    let uuid = std::fs::read_to_string("/proc/sys/kernel/random/uuid").context("a random machine id")?;
    write(root.join("etc/machine-id"), &format!("{}\n", uuid.trim().replace('-', "")))?;
    // Indexes and caches only make the archive bigger.
    for dir in ["var/lib/apt/lists", "var/cache/apt", "var/cache/debconf"] {
        let path = root.join(dir);
        if let Ok(entries) = std::fs::read_dir(&path) {
            for entry in entries.flatten().filter(|e| e.path().is_file()) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    Ok(())
}

/// `find . | cpio -o -H newc` of `root` (busybox's cpio: the host may have no other) into `out`;
/// returns its size.
fn pack(root: &Path, out: &Path) -> anyhow::Result<u64> {
    let mut find = Command::new("find");
    find.arg(".").arg("-mindepth").arg("1").current_dir(root);
    let names = cmd::stdout(&mut find)?;
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut cpio = Command::new(HOST_BUSYBOX);
    cpio.args(["cpio", "-o", "-H", "newc"]).current_dir(root).stdin(Stdio::piped()).stdout(file).stderr(Stdio::piped());
    let mut child = cpio.spawn().with_context(|| format!("could not start `{}`", cmd::show(&cpio)))?;
    let mut stdin = child.stdin.take().context("cpio's stdin")?;
    std::io::Write::write_all(&mut stdin, names.as_bytes()).context("feeding cpio")?;
    drop(stdin);
    let done = child.wait_with_output().context("waiting for cpio")?;
    if !done.status.success() {
        bail!("`{}` failed ({}): {}", cmd::show(&cpio), done.status, String::from_utf8_lossy(&done.stderr).trim());
    }
    Ok(std::fs::metadata(out)?.len())
}

/// One line for the console.
pub fn one_line(r: &DebResult) -> String {
    let failed: Vec<String> = r.checks.iter().filter(|c| !c.ok).map(|c| format!("{}: {}", c.what, c.detail)).collect();
    let verdict = if r.ok { "PASS".to_owned() } else { format!("FAIL — {}", failed.join("; ")) };
    let secs = |s: Option<f64>| s.map_or_else(|| "—".to_owned(), |s| format!("{s:.1} s"));
    format!(
        "{}: {verdict}: systemd up {}, /metrics served {}, guest {:.0} s (build {:.0} s{})",
        r.route,
        secs(r.systemd_s),
        secs(r.served_s),
        r.guest_s,
        r.build_s,
        r.bootstrap_s.map_or_else(String::new, |b| format!(", bootstrap {b:.0} s"))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_become_loopback() {
        let conf = "# listen = \"1.2.3.4:1\"\nweb_max_requests = 40\nlisten = \"0.0.0.0:9954\"\n";
        assert_eq!(probe_address(conf), Some(("127.0.0.1".into(), 9954)));
        assert_eq!(probe_address("listen=\":9101\""), Some(("127.0.0.1".into(), 9101)));
        assert_eq!(probe_address("listen = \"[::]:9954\""), Some(("::1".into(), 9954)));
        assert_eq!(probe_address("listen = \"10.0.0.2:80\""), Some(("10.0.0.2".into(), 80)));
        assert_eq!(probe_address("listen = \"0.0.0.0\""), None);
        assert_eq!(probe_address("listening = 1"), None);
        // The shipped file comments every default out: the commented default is where it listens,
        // unless a line sets it.
        assert_eq!(probe_address("# listen = \"0.0.0.0:9954\"\n"), Some(("127.0.0.1".into(), 9954)));
        let set = "# listen = \"0.0.0.0:9954\"\nlisten = \"127.0.0.1:9101\"\n";
        assert_eq!(probe_address(set), Some(("127.0.0.1".into(), 9101)));
    }

    #[test]
    fn exec_start_program_and_release() {
        let unit = "[Service]\nExecStart=/usr/bin/latency-daemon run --config /etc/latency-daemon.toml\n";
        assert_eq!(exec_binary(unit).as_deref(), Some("/usr/bin/latency-daemon"));
        assert_eq!(exec_binary("ExecStart=-/bin/x a").as_deref(), Some("/bin/x"));
        assert_eq!(exec_binary("[Service]\n"), None);
        assert_eq!(release_of("bullseye-security"), "bullseye");
        assert_eq!(release_of("bookworm"), "bookworm");
    }
}
