//! Our .deb under a booted systemd: in, a kernel (the oldest we support, 5.10), the amd64 .deb
//! and the cache folder; out, a `DebResult` — the unit's state as `systemctl show` gives it, the
//! process's capabilities, its /metrics counts and journal, each judged, with the timings — and
//! the guest's console in the report folder.
//!
//! The guest's userland is the kernel's own Debian release (bullseye for 5.10, so its systemd
//! 247 reads the unit): mmdebstrap's `minbase` with systemd, bootstrapped once into a tarball in
//! the cache (47–68 s) and unpacked per run. The release's own dpkg installs the .deb chrooted, so its
//! postinst enables the unit as on a real machine (it cannot start it: no systemd runs there yet).
//! A oneshot checker (`deb-check.sh`) ordered after the unit prints `@@ deb` markers on the console
//! and powers off. The root boots as an uncompressed initramfs whose /init is systemd: Debian's
//! kernels have their disk and 9p drivers as modules, and an initramfs needs none.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use super::apt::{Mirrors, source_line};
use super::arch::elf_kind;
use super::checks::Check;
use super::kernels::Kernel;
use super::qemu::{self, Guest};
use super::unpacked::HOST_BUSYBOX;
use crate::cmd;
use crate::guard::Scratch;

/// The kernel the .deb is booted on: the oldest we support.
pub const KERNEL: &str = "5.10";
/// The unit under test, as the .deb installs it.
pub const UNIT: &str = "latency-daemon.service";
const UNIT_PATH: &str = "usr/lib/systemd/system/latency-daemon.service";
const CONFFILE: &str = "etc/latency-daemon.toml";
const CHECKER: &str = "vmtest-deb-check.service";
const MARK: &str = "@@ deb ";
const DONE: &str = "@@ deb done";
/// systemd's first line on the console (`Welcome to Debian GNU/Linux 11 (bullseye)!`).
const WELCOME: &str = "Welcome to ";
/// CAP_PERFMON (38) and CAP_BPF (39): the unit's CapabilityBoundingSet=.
pub const BOUNDING: u64 = (1 << 38) | (1 << 39);
/// Measured under TCG on 2 busy host CPUs: systemd up at 8–10 s, /metrics served at 14–19 s, the
/// guest done at 19–24 s (a unit that fails: ≈40 s, the checker gives up after three restarts);
/// the checker waits 150 s at most, and the deadline leaves room for a slower host.
const DEADLINE: Duration = Duration::from_secs(300);

/// What to boot.
#[derive(Debug)]
pub struct Deb<'a> {
    /// x86_64 (the .deb is amd64).
    pub kernel: &'a Kernel,
    pub deb: &'a Path,
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
    /// The .deb's file name.
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
}

/// Builds the root, boots it and judges what the checker printed; `progress` sees the boot's
/// `@@` lines.
pub fn run(deb: &Deb<'_>, progress: &mut dyn FnMut(f64, &str)) -> anyhow::Result<DebResult> {
    let suite = release_of(&deb.kernel.suite);
    let tarball = deb.cache.join(format!("rootfs-{suite}-systemd-amd64.tar"));
    let bootstrap_s = if tarball.is_file() {
        None
    } else {
        let started = Instant::now();
        bootstrap(&suite, &tarball)?;
        Some(started.elapsed().as_secs_f64())
    };

    let built = Instant::now();
    let scratch = Scratch::new("runqlat-vmtest-deb")?;
    let root = scratch.join("root");
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let mut untar = Command::new("tar");
    untar.arg("-C").arg(&root).arg("-xf").arg(&tarball);
    cmd::stdout(&mut untar)?;
    let installed = install(&root, deb.deb)?;
    let listen = std::fs::read_to_string(root.join(CONFFILE)).with_context(|| format!("reading {CONFFILE}"))?;
    let (host, port) = probe_address(&listen).with_context(|| format!("{CONFFILE} names no listen address"))?;
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
    };
    let mut checks = vec![Check::new(
        "enabled by postinst",
        installed.enabled,
        format!("{}'s postinst, run by the root's dpkg: multi-user.target.wants/{UNIT}", suite),
    )];
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
        deb: deb.deb.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
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
    })
}

/// `bullseye-security` → `bullseye`: the release a kernel's suite belongs to.
fn release_of(suite: &str) -> String {
    suite.split('-').next().unwrap_or(suite).to_owned()
}

/// `mmdebstrap --variant=minbase --include=systemd,systemd-sysv SUITE` from the host's mirrors
/// into `tarball` (written beside it, then renamed), its progress shown.
fn bootstrap(suite: &str, tarball: &Path) -> anyhow::Result<()> {
    let mirrors = Mirrors::of_host()?;
    std::fs::create_dir_all(tarball.parent().context("the cache's directory")?)?;
    let partial = tarball.with_extension("partial.tar");
    println!(
        "vmtest: deb: bootstrapping Debian {suite} with systemd into {} (once; about a minute)",
        tarball.display()
    );
    let mut c = Command::new("mmdebstrap");
    c.args(["--variant=minbase", "--architectures=amd64", "--include=systemd,systemd-sysv"]);
    // Documentation is never read in the guest, and it is a quarter of the archive it boots from.
    for dir in ["doc", "man", "locale", "info"] {
        c.arg(format!("--dpkgopt=path-exclude=/usr/share/{dir}/*"));
    }
    c.arg(suite).arg(&partial);
    c.arg(source_line(&mirrors.archive, suite).trim());
    c.arg(source_line(&mirrors.security, &format!("{suite}-security")).trim());
    cmd::run(&mut c).context("bootstrapping the .deb's guest (apt-get install mmdebstrap)")?;
    std::fs::rename(&partial, tarball).with_context(|| format!("moving {} into place", partial.display()))
}

/// What installing the .deb left in the root.
#[derive(Debug)]
struct Installed {
    /// The sha256 of the .deb's /usr/bin/latency-daemon.
    sha256: String,
    /// It asks for no loader (static or static-pie).
    static_binary: bool,
    /// postinst left the unit's multi-user.target.wants link.
    enabled: bool,
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
    let mut sum = Command::new("sha256sum");
    sum.arg(root.join(binary.trim_start_matches('/')));
    let sha256 = cmd::stdout(&mut sum)?.split_whitespace().next().unwrap_or_default().to_owned();
    Ok(Installed {
        sha256,
        static_binary: elf_kind(&bytes).is_some_and(|(machine, dynamic)| machine == 62 && !dynamic),
        enabled: root.join("etc/systemd/system/multi-user.target.wants").join(UNIT).is_symlink(),
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
    let value = toml.lines().map(str::trim).find_map(|l| {
        let rest = l.strip_prefix("listen")?.trim_start().strip_prefix('=')?.trim();
        rest.strip_prefix('"')?.split('"').next()
    })?;
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

/// The checker's lines, read off the console.
#[derive(Debug, Default, PartialEq)]
pub struct Markers {
    pub fields: BTreeMap<String, String>,
    pub journal: Vec<String>,
}

impl Markers {
    /// `@@ deb KEY=VALUE` and `@@ deb journal LINE`, found anywhere in a line (the kernel may
    /// have written to the console first); the first value of a key wins.
    pub fn parse<'a>(console: impl IntoIterator<Item = &'a str>) -> Markers {
        let mut markers = Markers::default();
        for line in console {
            let Some(at) = line.find(MARK) else { continue };
            let rest = &line[at + MARK.len()..];
            if let Some(text) = rest.strip_prefix("journal ") {
                markers.journal.push(text.to_owned());
            } else if let Some((key, value)) = rest.split_once('=') {
                markers.fields.entry(key.trim().to_owned()).or_insert_with(|| value.trim().to_owned());
            }
        }
        markers
    }

    fn get(&self, key: &str) -> &str {
        self.fields.get(key).map_or("", String::as_str)
    }
}

/// What the guest must show.
#[derive(Debug, Clone)]
pub struct Expected {
    /// The kernel's `uname -r`.
    pub release: String,
    /// The .deb's binary.
    pub sha256: String,
    pub static_binary: bool,
}

/// The checker's markers judged: the kernel booted, the unit active and running without a
/// restart, its process the .deb's static binary, /metrics counting delays, and the process
/// bounded by CAP_BPF and CAP_PERFMON, holding nothing else (the daemon keeps CAP_BPF after
/// attaching where the kernel checks it on each map read, as 5.10 does), with no_new_privs and a
/// seccomp filter.
pub fn judge(m: &Markers, expected: &Expected) -> Vec<Check> {
    let show = |key: &str| format!("{key}={}", if m.get(key).is_empty() { "absent" } else { m.get(key) });
    let hex = |key: &str| u64::from_str_radix(m.get(key), 16).ok();
    let main_pid: u32 = m.get("MainPID").parse().unwrap_or(0);
    let sha = m.get("sha256");
    let count: f64 = m.get("metrics_count").parse().unwrap_or(0.0);
    let bounding = hex("CapBnd");
    let effective = hex("CapEff");
    let last_error = m.journal.iter().rev().find(|l| l.contains("level=error")).map(String::as_str);
    vec![
        Check::new("kernel", m.get("uname") == expected.release, format!("uname -r `{}`", m.get("uname"))),
        Check::new(
            "unit active",
            m.get("ActiveState") == "active" && m.get("SubState") == "running" && main_pid > 0,
            ["ActiveState", "SubState", "Result", "MainPID", "ExecMainStatus"].map(show).join(", "),
        ),
        Check::new(
            "no restart",
            m.get("NRestarts") == "0",
            format!("{}, {}; last error: {}", show("NRestarts"), show("LimitMEMLOCK"), last_error.unwrap_or("none")),
        ),
        Check::new(
            "the .deb's static binary",
            !sha.is_empty() && sha == expected.sha256 && expected.static_binary,
            format!(
                "{} sha256 {} ({}), {}; `{}`",
                if m.get("exe").is_empty() { "no serving process" } else { m.get("exe") },
                sha.get(..12).unwrap_or("absent"),
                if sha == expected.sha256 { "the .deb's" } else { "not the .deb's" },
                if expected.static_binary { "static" } else { "NOT static" },
                m.get("version")
            ),
        ),
        Check::new(
            "metrics",
            count > 0.0,
            format!(
                "runqlat_delay_seconds_count: {} series, {count} delays; served at uptime {} s",
                m.get("metrics_series"),
                m.get("served_uptime")
            ),
        ),
        Check::new(
            "bounding set",
            bounding == Some(BOUNDING),
            format!("CapBnd={} ({})", m.get("CapBnd"), bounding.map_or_else(|| "absent".into(), cap_names)),
        ),
        Check::new(
            "privileges",
            effective.is_some_and(|e| e & !BOUNDING == 0) && m.get("NoNewPrivs") == "1" && m.get("Seccomp") == "2",
            format!(
                "CapEff={} ({}), {}, {}, Uid={}",
                m.get("CapEff"),
                effective.map_or_else(|| "absent".into(), cap_names),
                show("NoNewPrivs"),
                show("Seccomp"),
                m.get("Uid")
            ),
        ),
    ]
}

/// The capabilities in a mask, by name (`CAP_PERFMON, CAP_BPF`), or `none`.
pub fn cap_names(mask: u64) -> String {
    const NAMES: [&str; 41] = [
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_DAC_READ_SEARCH",
        "CAP_FOWNER",
        "CAP_FSETID",
        "CAP_KILL",
        "CAP_SETGID",
        "CAP_SETUID",
        "CAP_SETPCAP",
        "CAP_LINUX_IMMUTABLE",
        "CAP_NET_BIND_SERVICE",
        "CAP_NET_BROADCAST",
        "CAP_NET_ADMIN",
        "CAP_NET_RAW",
        "CAP_IPC_LOCK",
        "CAP_IPC_OWNER",
        "CAP_SYS_MODULE",
        "CAP_SYS_RAWIO",
        "CAP_SYS_CHROOT",
        "CAP_SYS_PTRACE",
        "CAP_SYS_PACCT",
        "CAP_SYS_ADMIN",
        "CAP_SYS_BOOT",
        "CAP_SYS_NICE",
        "CAP_SYS_RESOURCE",
        "CAP_SYS_TIME",
        "CAP_SYS_TTY_CONFIG",
        "CAP_MKNOD",
        "CAP_LEASE",
        "CAP_AUDIT_WRITE",
        "CAP_AUDIT_CONTROL",
        "CAP_SETFCAP",
        "CAP_MAC_OVERRIDE",
        "CAP_MAC_ADMIN",
        "CAP_SYSLOG",
        "CAP_WAKE_ALARM",
        "CAP_BLOCK_SUSPEND",
        "CAP_AUDIT_READ",
        "CAP_PERFMON",
        "CAP_BPF",
        "CAP_CHECKPOINT_RESTORE",
    ];
    let names: Vec<String> = (0..64)
        .filter(|bit| mask & (1 << bit) != 0)
        .map(|bit| NAMES.get(bit).map_or_else(|| format!("cap {bit}"), |n| (*n).to_owned()))
        .collect();
    if names.is_empty() { "none".to_owned() } else { names.join(", ") }
}

/// One line for the console.
pub fn one_line(r: &DebResult) -> String {
    let failed: Vec<String> = r.checks.iter().filter(|c| !c.ok).map(|c| format!("{}: {}", c.what, c.detail)).collect();
    let verdict = if r.ok { "PASS".to_owned() } else { format!("FAIL — {}", failed.join("; ")) };
    let secs = |s: Option<f64>| s.map_or_else(|| "—".to_owned(), |s| format!("{s:.1} s"));
    format!(
        "{verdict}: systemd up {}, /metrics served {}, guest {:.0} s (build {:.0} s{})",
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

    /// A passing guest's console, with the kernel's noise between and before markers.
    const CONSOLE: &str = "[    0.000000] Linux version 5.10.0-46-amd64\n\
        Welcome to Debian GNU/Linux 11 (bullseye)!\n\
        @@ deb uname=5.10.0-46-amd64\n\
        [   40.1] random: crng init done@@ deb served_uptime=41.20\n\
        @@ deb metrics_series=3\n\
        @@ deb metrics_count=5120\n\
        @@ deb ActiveState=active\n\
        @@ deb SubState=running\n\
        @@ deb Result=success\n\
        @@ deb MainPID=231\n\
        @@ deb ExecMainStatus=0\n\
        @@ deb NRestarts=0\n\
        @@ deb exe=/usr/bin/latency-daemon\n\
        @@ deb sha256=00aa11bb22cc33dd\n\
        @@ deb version=latency-daemon 0.1.0 (commit c93b84b, bpf 1a2b)\n\
        @@ deb Uid=61234 61234 61234 61234\n\
        @@ deb CapEff=0000008000000000\n\
        @@ deb CapBnd=000000c000000000\n\
        @@ deb NoNewPrivs=1\n\
        @@ deb Seccomp=2\n\
        @@ deb journal attached: 4 programs\n\
        @@ deb journal serving on 0.0.0.0:9954\n\
        @@ deb uname=not the first\n\
        @@ deb done\n";

    fn expected() -> Expected {
        Expected { release: "5.10.0-46-amd64".into(), sha256: "00aa11bb22cc33dd".into(), static_binary: true }
    }

    fn failed(checks: &[Check]) -> Vec<&str> {
        checks.iter().filter(|c| !c.ok).map(|c| c.what.as_str()).collect()
    }

    #[test]
    fn markers_are_read_wherever_they_start() {
        let m = Markers::parse(CONSOLE.lines());
        assert_eq!(m.get("served_uptime"), "41.20");
        assert_eq!(m.get("uname"), "5.10.0-46-amd64", "the first value wins");
        assert_eq!(m.get("Uid"), "61234 61234 61234 61234");
        assert_eq!(m.journal, ["attached: 4 programs", "serving on 0.0.0.0:9954"]);
        assert!(!m.fields.contains_key("done") && !m.fields.contains_key("journal"));
    }

    #[test]
    fn a_passing_console_passes() {
        let checks = judge(&Markers::parse(CONSOLE.lines()), &expected());
        assert!(failed(&checks).is_empty(), "{checks:#?}");
        assert_eq!(checks.len(), 7);
    }

    /// Each condition, broken alone, fails its own check and only that one.
    #[test]
    fn each_fact_fails_its_check() {
        let cases: [(&str, &str, &str); 9] = [
            ("@@ deb SubState=running", "@@ deb SubState=auto-restart", "unit active"),
            ("@@ deb ActiveState=active", "@@ deb ActiveState=activating", "unit active"),
            ("@@ deb NRestarts=0", "@@ deb NRestarts=2", "no restart"),
            ("@@ deb sha256=00aa11bb22cc33dd", "@@ deb sha256=ffff", "the .deb's static binary"),
            ("@@ deb metrics_count=5120", "@@ deb metrics_count=0", "metrics"),
            // CAP_SYS_ADMIN (21) besides the two.
            ("@@ deb CapBnd=000000c000000000", "@@ deb CapBnd=000000c000200000", "bounding set"),
            ("@@ deb CapEff=0000008000000000", "@@ deb CapEff=0000008000200000", "privileges"),
            ("@@ deb Seccomp=2", "@@ deb Seccomp=0", "privileges"),
            ("@@ deb uname=5.10.0-46-amd64", "@@ deb uname=6.1.0-57-amd64", "kernel"),
        ];
        for (from, to, what) in cases {
            let console = CONSOLE.replacen(from, to, 1);
            assert_ne!(console, CONSOLE, "{from} is in the fixture");
            let checks = judge(&Markers::parse(console.lines()), &expected());
            assert_eq!(failed(&checks), [what], "{to}");
        }
    }

    /// 5.10 charges maps to RLIMIT_MEMLOCK: a unit without LimitMEMLOCK= restarts, and says why.
    #[test]
    fn a_restart_names_the_last_error() {
        let error = "level=error msg=\"loading the kernel object failed: map error: failed to create map `STAMPS`\"";
        let console = CONSOLE
            .replacen("@@ deb NRestarts=0", "@@ deb NRestarts=3\n@@ deb LimitMEMLOCK=65536", 1)
            .replacen("@@ deb done", &format!("@@ deb journal {error}\n@@ deb done"), 1);
        let checks = judge(&Markers::parse(console.lines()), &expected());
        assert_eq!(failed(&checks), ["no restart"]);
        let detail = &checks.iter().find(|c| c.what == "no restart").map(|c| c.detail.clone()).unwrap_or_default();
        assert!(detail.contains("LimitMEMLOCK=65536") && detail.contains("failed to create map `STAMPS`"), "{detail}");
    }

    #[test]
    fn a_dynamic_binary_or_a_silent_guest_fails() {
        let dynamic = Expected { static_binary: false, ..expected() };
        let checks = judge(&Markers::parse(CONSOLE.lines()), &dynamic);
        assert_eq!(failed(&checks), ["the .deb's static binary"]);
        let silent = judge(&Markers::default(), &expected());
        assert_eq!(silent.iter().filter(|c| c.ok).count(), 0, "{silent:#?}");
        assert!(silent.iter().any(|c| c.detail.contains("CapBnd= (absent)")), "{silent:#?}");
    }

    #[test]
    fn listen_addresses_become_loopback() {
        let conf = "# listen = \"1.2.3.4:1\"\nweb_max_requests = 40\nlisten = \"0.0.0.0:9954\"\n";
        assert_eq!(probe_address(conf), Some(("127.0.0.1".into(), 9954)));
        assert_eq!(probe_address("listen=\":9101\""), Some(("127.0.0.1".into(), 9101)));
        assert_eq!(probe_address("listen = \"[::]:9954\""), Some(("::1".into(), 9954)));
        assert_eq!(probe_address("listen = \"10.0.0.2:80\""), Some(("10.0.0.2".into(), 80)));
        assert_eq!(probe_address("listen = \"0.0.0.0\""), None);
        assert_eq!(probe_address("listening = 1"), None);
    }

    #[test]
    fn capabilities_by_name() {
        assert_eq!(cap_names(BOUNDING), "CAP_PERFMON, CAP_BPF");
        assert_eq!(cap_names(0), "none");
        assert_eq!(cap_names((1 << 21) | (1 << 50)), "CAP_SYS_ADMIN, cap 50");
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
