//! `cargo xtask vmtest`: the daemon on the kernels fleets run. In: kernel ids, vCPUs, the
//! daemon and xtask binaries (the host's for x86_64, static aarch64 builds for arm64); out, each
//! kernel booted under QEMU with every configuration attached and judged (`guest`),
//! `vmtest-report/` (report.md, report.json, each guest's console and data port) and
//! docs/kernels.md's table, or the first thing that kept a guest from passing.
//!
//! `kernels` fetches and caches the images (through the lab's `apt`, unpacked by `vmlinux`),
//! `unpacked` and `binaries` find what each architecture's guest runs, `initramfs` packs it (its
//! /init is `init.sh`), `qemu` boots one guest under a deadline (`arch` says how, per
//! architecture), `sections` reads what came back on the data port, `checks` judges it, `report`
//! writes it down; `stall` runs inside the guests of `STALL_KERNELS` (this binary's `vmtest
//! --guest-stall`): a stall watched through the daemon's wait scan (the lab's `watch`);
//! `throttle` reads what every paired guest wrote around a busy loop in a cgroup limited by
//! `cpu.max`: its wait split by cause. With `--deb`, `systemd` boots 5.10 twice more
//! in a Debian root under systemd, once with our .deb installed, once with the release's bare
//! binary, unit and configuration installed by docs/install.md's block (`bare`), and `deb_checks`
//! judges the unit of each.
mod arch;
pub mod bare;
mod binaries;
mod checks;
mod deb_checks;
mod guest;
mod initramfs;
mod kernels;
mod qemu;
mod report;
mod sections;
pub mod stall;
mod systemd;
mod throttle;
mod unpacked;
mod vmlinux;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

pub use self::arch::Arch;
use self::guest::GuestResult;
use self::qemu::Guest;
use crate::apt;
use crate::guard::Scratch;

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Kernels to boot, comma-separated (default: every x86_64 one): 5.10, 5.10-rt, 6.1, 6.1-rt,
    /// 6.1-cloud, 6.12 (bookworm-security), 6.12-trixie, 6.12-bpo (bookworm-backports); arm64
    /// only when named: 6.1-arm64, 6.12-arm64 (`arm64`: both), under qemu-system-aarch64 with
    /// the binaries of --arm64-bins; `all`: every kernel of both architectures.
    #[arg(long, value_delimiter = ',')]
    pub kernels: Vec<String>,
    /// vCPUs of each guest.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub cpus: u32,
    /// The newest x86_64 kernel boots with this many vCPUs instead of --cpus (0: with --cpus like
    /// every other): one boot checks every configuration there on a wider machine. If that kernel
    /// has a stall or beside scene (which need --cpus), it boots twice, at --cpus and then wide.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub wide: u32,
    /// Seconds of load in each guest.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=60))]
    pub secs: u32,
    /// Where the report goes. The default, vmtest-report/ at the workspace root, also rewrites
    /// docs/kernels.md's table from it; any other folder leaves docs/kernels.md alone.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where the arm64 guests' static aarch64 builds are (repeat the flag; the newest wins):
    /// `latency-daemon` and `xtask` (the load), as DIR/NAME or any file NAME* whose path below
    /// DIR names aarch64 (default: target/dist, where `cargo xtask dist` puts the daemon, and
    /// target/dist-tools, where `cargo xtask dist --guest-tools` puts the xtask). Without an
    /// aarch64 xtask the guests run this one under qemu-x86_64, and the sleepers' own sleep counts
    /// are not judged (the emulator's locks block them too).
    #[arg(long)]
    pub arm64_bins: Vec<PathBuf>,
    /// The x86_64 guests run the static (musl) daemon of target/dist (`cargo xtask dist --arch
    /// x86-64`) instead of the host's glibc build: the shipped binary on old kernels.
    #[arg(long = "static")]
    pub static_daemon: bool,
    /// Boot each kernel to its init and read its data port only (no daemon, no load, no
    /// docs/kernels.md): the plumbing, e.g. of arm64 before there are aarch64 binaries.
    #[arg(long)]
    pub smoke: bool,
    /// After the matrix, boot 5.10 twice more in a Debian bullseye root under systemd: with
    /// target/dist's amd64 .deb (`cargo xtask dist` builds it) installed, then with its static
    /// x86_64 binary, unit and configuration installed by docs/install.md's `## The binary` block.
    /// Each unit must run that static daemon, bounded by CAP_BPF and CAP_PERFMON, and /metrics
    /// must count delays.
    #[arg(long)]
    pub deb: bool,
    /// The .deb of `--deb` (xtask names target/dist's).
    #[arg(skip)]
    pub deb_file: Option<PathBuf>,
    /// The release's files of `--deb`'s bare route (xtask names target/dist's).
    #[arg(skip)]
    pub bare_release: Option<bare::Release>,
    /// Only fetch what the guests boot into the cache (the kernels, their busybox, with --deb the
    /// Debian root), and boot nothing: network and unpacking, which `cargo xtask test` overlaps
    /// with its build.
    #[arg(long, conflicts_with = "smoke")]
    pub fetch_only: bool,
    /// Inside a guest: run the stall beside the daemon listening here and print what it saw
    /// (`stall::guest`); nothing else runs.
    #[arg(long, hide = true, value_name = "ADDR")]
    pub guest_stall: Option<String>,
    /// With --guest-stall: the daemons' pids (one each), pinned away from the stalled CPU.
    #[arg(long, hide = true, value_name = "PID")]
    pub guest_stall_pid: Vec<u32>,
}

/// The kernels whose guests run the stall (`stall::GUEST_PLAN`): x86_64 without the fair server
/// (before 6.12 an RT spinner with throttling off starves a normal task for as long as it spins).
pub const STALL_KERNELS: [&str; 2] = ["5.10", "6.1"];
/// The guests that run the throttle scene beside a busy neighbour too (`vmt.beside=1`): one per
/// source of the throttled part — the throttle hooks as fexit programs (5.10, 6.1), as kprobes
/// (arm64 6.1), the group's own clock (6.12) — in its 2-vCPU guest.
pub const BESIDE_KERNELS: [&str; 4] = ["5.10", "6.1", "6.1-arm64", "6.12"];

/// The default report folder.
pub fn default_out() -> PathBuf {
    crate::workspace_root().join("vmtest-report")
}

/// The ids asked for, `arm64` standing for every arm64 kernel and `all` for every kernel; all
/// x86_64 ones when none are.
fn kernel_ids(asked: &[String]) -> Vec<String> {
    if asked.is_empty() {
        return kernels::default_ids();
    }
    let mut ids = Vec::new();
    for id in asked {
        let more = match id.as_str() {
            "arm64" => kernels::ids_of(Arch::Arm64),
            "all" => kernels::SPECS.iter().map(|s| s.id.to_owned()).collect(),
            _ => vec![id.clone()],
        };
        for one in more {
            if !ids.contains(&one) {
                ids.push(one);
            }
        }
    }
    ids
}

/// A guest's host-side deadline. Measured under TCG with 2 vCPUs: x86_64 25–45 s; more vCPUs
/// share the same 2 host CPUs; arm64 is emulated instruction by instruction on both.
fn deadline(arch: Arch, cpus: u32, smoke: bool) -> Duration {
    let x86 = if smoke { 60 } else { 120 + 20 * u64::from(cpus.saturating_sub(2)) };
    Duration::from_secs(if arch.is_host() { x86 } else { 3 * x86 })
}

/// `--fetch-only`: every download and unpacking a run of `args` would start with, into the cache.
/// The qemu-user of an emulated arm64 load is left to the run: with `cargo xtask dist
/// --guest-tools` there is none.
pub fn fetch(args: &Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let ids = kernel_ids(&args.kernels);
    let cache = apt::cache_dir();
    println!("vmtest: fetching {} kernels into {}", ids.len(), cache.display());
    let kernels = kernels::fetch(&ids, &cache)?;
    let mut archs: Vec<Arch> = kernels.iter().map(|k| k.arch).collect();
    archs.sort_by_key(|a| !a.is_host());
    archs.dedup();
    for arch in archs {
        unpacked::busybox(arch, &cache)?;
    }
    if args.deb {
        let deb_kernel = kernels::fetch(&[systemd::KERNEL.to_owned()], &cache)?;
        let kernel = deb_kernel.first().context("kernel 5.10 was fetched")?;
        let (tarball, made) = systemd::root_tarball(kernel, &cache)?;
        let made = made.map_or_else(|| "cached".to_owned(), |s| format!("bootstrapped in {s:.0} s"));
        println!("vmtest: the .deb's root: {} ({made})", tarball.display());
    }
    println!("vmtest: fetched in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

pub fn run(args: &Args, daemon: &Path, xtask: &Path) -> anyhow::Result<()> {
    // Ctrl-C unwinds through the guards: no QEMU outlives us.
    let _signals = crate::guard::catch_signals();
    let started = Instant::now();
    let ids = kernel_ids(&args.kernels);
    let cache = apt::cache_dir();
    println!("vmtest: {} kernels, cache {}", ids.len(), cache.display());
    let kernels = kernels::fetch(&ids, &cache)?;
    let fetched = started.elapsed();

    let scratch = Scratch::new("runqlat-vmtest")?;
    let init = include_str!("init.sh");
    let arm64_bins = if args.arm64_bins.is_empty() {
        let target = crate::workspace_root().join("target");
        vec![target.join("dist"), target.join("dist-tools")]
    } else {
        args.arm64_bins.clone()
    };
    let mut archs: Vec<Arch> = kernels.iter().map(|k| k.arch).collect();
    archs.sort_by_key(|a| !a.is_host());
    archs.dedup();
    // Per architecture, the host's first: its initramfs and accelerator.
    let mut setups: Vec<(Arch, PathBuf, qemu::Accel, binaries::Binaries)> = Vec::new();
    for arch in archs {
        let binaries = if args.smoke {
            binaries::Binaries::default()
        } else {
            binaries::for_arch(arch, [daemon, xtask], &arm64_bins, &cache)?
        };
        let busybox = unpacked::busybox(arch, &cache)?;
        let path = scratch.join(&format!("initramfs-{arch}.cpio"));
        let contents = initramfs::Contents { arch, busybox: &busybox, binaries: &binaries, init };
        let bytes = initramfs::build(&contents, &path)?;
        let names: Vec<String> = std::iter::once("busybox".to_owned())
            .chain(binaries.files.iter().map(|(n, p)| format!("{n} ({})", p.display())))
            .chain(binaries.scripts.iter().map(|(n, _)| format!("{n} (a script)")))
            .collect();
        println!("vmtest: {arch} initramfs {:.1} MB: {}", bytes as f64 / 1e6, names.join(", "));
        let newest = kernels.iter().filter(|k| k.arch == arch).max_by_key(|k| kernels::natural(&k.release));
        let chosen = qemu::choose_accel(newest.context("no kernel to boot")?, &path, scratch.path())?;
        println!("vmtest: {arch}: accelerator {}: {}", chosen.name, chosen.why);
        setups.push((arch, path, chosen, binaries));
    }

    let out = args.out.clone().unwrap_or_else(default_out);
    let guests_dir = out.join("guests");
    let _ = std::fs::remove_dir_all(&guests_dir);
    let newest_host = kernels.iter().filter(|k| k.arch.is_host()).max_by_key(|k| kernels::natural(&k.release));
    let wide = newest_host.filter(|_| args.wide > 0 && !args.smoke);
    // A kernel with a scene of its own at --cpus keeps that guest, and the wide one comes after.
    let scenes_of_its_own =
        |k: &kernels::Kernel| STALL_KERNELS.contains(&k.id.as_str()) || BESIDE_KERNELS.contains(&k.id.as_str());
    let widened = wide.filter(|k| !scenes_of_its_own(k));
    let mut plan: Vec<(&kernels::Kernel, u32)> = kernels
        .iter()
        .map(|k| (k, if widened.is_some_and(|w| std::ptr::eq(w, k)) { args.wide } else { args.cpus }))
        .collect();
    if let Some(wide) = wide.filter(|_| widened.is_none()) {
        plan.push((wide, args.wide));
    }
    let matrix = Instant::now();
    let mut results: Vec<GuestResult> = Vec::new();
    for (n, (kernel, cpus)) in plan.iter().enumerate() {
        let label = format!("{} ({} vCPUs)", kernel.id, cpus);
        println!("vmtest: [{}/{}] {label}: {} {}", n + 1, plan.len(), kernel.package, kernel.version);
        let (_, initramfs, accel, binaries) =
            setups.iter().find(|setup| setup.0 == kernel.arch).context("every architecture was set up")?;
        // The stall needs a second vCPU: the daemon and the watcher run on CPU 0.
        let paired = !args.smoke && *cpus >= 2 && *cpus == args.cpus;
        let stall = paired && STALL_KERNELS.contains(&kernel.id.as_str());
        // The throttle scenes' loop is pinned to CPU 1: every guest with a second vCPU runs them
        // (≈ 10 s of guest), the wide one too; the throttled part from the group's own clock
        // (6.8+) or the throttle hooks' (before).
        let throttle = !args.smoke && *cpus >= 2;
        let beside = throttle && paired && BESIDE_KERNELS.contains(&kernel.id.as_str());
        let guest = Guest {
            kernel,
            initramfs,
            cpus: *cpus,
            accel: &accel.name,
            append: format!(
                "vmt.secs={}{}{}{}{}",
                args.secs,
                if args.smoke { " vmt.smoke=1" } else { "" },
                if stall { " vmt.stall=1" } else { "" },
                if throttle { " vmt.throttle=1" } else { "" },
                if beside { " vmt.beside=1" } else { "" }
            ),
            dir: guests_dir.join(format!("{}-{cpus}cpu", kernel.id)),
            deadline: deadline(kernel.arch, *cpus, args.smoke),
            done: "@@ done",
        };
        let mut result = guest::run(&guest, args.smoke, binaries.emulated, &mut |t, line| {
            println!("vmtest:   {t:6.1} s  {}", line.trim_start_matches("@@ "));
        })?;
        result.load.clone_from(&binaries.load);
        result.daemon.clone_from(&binaries.daemon);
        println!("vmtest:   {}", report::one_line(&result));
        results.push(result);
    }
    // The report's accelerator is the host architecture's when it booted any (the table's
    // column says each guest's own).
    let matrix_s = matrix.elapsed().as_secs_f64();
    let (first_arch, accel) = setups.into_iter().next().map(|setup| (setup.0, setup.2)).context("no guest booted")?;
    let (deb, bare) = if args.deb {
        let accel = if first_arch.is_host() { accel.name.as_str() } else { "tcg" };
        let file = args.deb_file.as_deref().context("--deb: no .deb given (cargo xtask vmtest names target/dist's)")?;
        let release = args
            .bare_release
            .as_ref()
            .context("--deb: no release files given (cargo xtask vmtest names target/dist's)")?;
        let deb = systemd_guest(args, systemd::Route::Deb(file), &cache, accel, &out)?;
        (Some(deb), Some(systemd_guest(args, systemd::Route::Bare(release), &cache, accel, &out)?))
    } else {
        (None, None)
    };
    let report = report::Report {
        accel,
        cpus: args.cpus,
        secs: args.secs,
        smoke: args.smoke,
        fetch_s: fetched.as_secs_f64(),
        matrix_s,
        guests: results,
        deb,
        bare,
    };
    report::write(&report, &out)?;
    if args.out.is_none() && !args.smoke {
        report::update_readme(&report, &crate::workspace_root().join("docs/kernels.md"))?;
    }
    println!(
        "vmtest: matrix {:.0} s ({} guests), {:.0} s in all; report in {}",
        report.matrix_s,
        report.guests.len(),
        started.elapsed().as_secs_f64(),
        out.join("report.md").display()
    );
    let mut failed: Vec<String> = report.guests.iter().filter(|g| !g.ok).map(report::label).collect();
    for systemd in [&report.deb, &report.bare].into_iter().flatten().filter(|d| !d.ok) {
        failed.push(format!("{} under systemd ({})", systemd.route, systemd::KERNEL));
    }
    if !failed.is_empty() {
        bail!("failed on {}; see {}", failed.join(", "), out.join("report.md").display());
    }
    Ok(())
}

/// One of `--deb`'s guests: `route` on kernel 5.10 under systemd, its progress printed like the
/// matrix's; its console goes to `out`/guests/deb-5.10 (the .deb) or bare-5.10.
fn systemd_guest(
    args: &Args,
    route: systemd::Route<'_>,
    cache: &Path,
    accel: &str,
    out: &Path,
) -> anyhow::Result<systemd::DebResult> {
    let kernels = kernels::fetch(&[systemd::KERNEL.to_owned()], cache)?;
    let kernel = kernels.first().context("kernel 5.10 was fetched")?;
    let (tag, what) = match route {
        systemd::Route::Deb(file) => ("deb", file.display().to_string()),
        systemd::Route::Bare(release) => ("bare", format!("{} by docs/install.md", release.binary.display())),
    };
    println!("vmtest: [{tag}] {what} on {} {} under systemd", kernel.package, kernel.version);
    let deb = systemd::Deb {
        kernel,
        route,
        accel,
        cpus: args.cpus,
        cache,
        dir: out.join("guests").join(format!("{tag}-{}", systemd::KERNEL)),
    };
    let result = systemd::run(&deb, &mut |t, line| {
        println!("vmtest:   {t:6.1} s  {}", line.trim_start_matches("@@ "));
    })?;
    println!("vmtest:   {}", systemd::one_line(&result));
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arm64_names_both_and_nothing_twice() {
        let asked = |list: &[&str]| kernel_ids(&list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        assert_eq!(asked(&[]), kernels::default_ids());
        assert_eq!(asked(&["6.1", "arm64", "6.12-arm64"]), ["6.1", "6.1-arm64", "6.12-arm64"]);
        let all = asked(&["all"]);
        assert_eq!(all.len(), kernels::SPECS.len());
        assert!(all.contains(&"5.10".to_owned()) && all.contains(&"6.12-arm64".to_owned()), "{all:?}");
    }
}
