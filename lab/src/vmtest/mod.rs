//! `cargo xtask vmtest`: the daemon on the kernels fleets run. In: kernel ids, vCPUs, the
//! daemon and xtask binaries; out: each kernel booted under QEMU with every configuration
//! attached and judged (`guest`), `vmtest-report/` (report.md, report.json, each guest's console
//! and data port) and docs/kernels.md's table, or the first thing that kept a guest from passing.
//!
//! `kernels` fetches and caches the images (through `apt`, unpacked by `vmlinux`), `initramfs`
//! packs the guest (its /init is `init.sh`), `qemu` boots one guest under a deadline, `checks`
//! judges what came back, `report` writes it down.
mod apt;
mod checks;
mod guest;
mod initramfs;
mod kernels;
mod qemu;
mod report;
mod vmlinux;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

pub use self::apt::{Apt, Mirrors, source_line};
use self::guest::GuestResult;
use self::qemu::Guest;
use crate::guard::Scratch;

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Kernels to boot, comma-separated (default: all): 5.10, 5.10-rt, 6.1, 6.1-rt, 6.1-cloud,
    /// 6.12 (bookworm-security), 6.12-trixie, 6.12-bpo (bookworm-backports).
    #[arg(long, value_delimiter = ',')]
    pub kernels: Vec<String>,
    /// vCPUs of each guest.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub cpus: u32,
    /// One more guest on the newest kernel with this many vCPUs (0: none).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub wide: u32,
    /// Seconds of load in each guest.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=60))]
    pub secs: u32,
    /// Where the report goes. The default, vmtest-report/ at the workspace root, also rewrites
    /// docs/kernels.md's table from it; any other folder leaves docs/kernels.md alone.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Where kernels and apt indexes are kept between runs (never under target/, which `cargo
/// clean` empties): $XDG_CACHE_HOME/runqlat-vmtest, else /var/cache/runqlat-vmtest.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("runqlat-vmtest"),
        _ => PathBuf::from("/var/cache/runqlat-vmtest"),
    }
}

/// The default report folder.
pub fn default_out() -> PathBuf {
    crate::workspace_root().join("vmtest-report")
}

pub fn run(args: &Args, daemon: &Path, xtask: &Path) -> anyhow::Result<()> {
    // Ctrl-C unwinds through the guards: no QEMU outlives us.
    let _signals = crate::guard::catch_signals();
    let started = Instant::now();
    let ids: Vec<String> = if args.kernels.is_empty() {
        kernels::SPECS.iter().map(|s| s.id.to_owned()).collect()
    } else {
        args.kernels.clone()
    };
    let cache = cache_dir();
    println!("vmtest: {} kernels, cache {}", ids.len(), cache.display());
    let kernels = kernels::fetch(&ids, &cache)?;
    let fetched = started.elapsed();

    let scratch = Scratch::new("runqlat-vmtest")?;
    let initramfs = scratch.join("initramfs.cpio");
    let init = include_str!("init.sh");
    let bytes = initramfs::build(&initramfs::Contents { daemon, xtask, init }, &initramfs)?;
    println!("vmtest: initramfs {:.1} MB (busybox, latency-daemon, xtask, their libraries)", bytes as f64 / 1e6);

    let newest = kernels.iter().max_by_key(|k| kernels::natural(&k.release)).context("no kernel to boot")?;
    let accel = qemu::choose_accel(newest, &initramfs, scratch.path())?;
    println!("vmtest: accelerator {}: {}", accel.name, accel.why);

    let out = args.out.clone().unwrap_or_else(default_out);
    let guests_dir = out.join("guests");
    let _ = std::fs::remove_dir_all(&guests_dir);
    let mut plan: Vec<(&kernels::Kernel, u32)> = kernels.iter().map(|k| (k, args.cpus)).collect();
    if args.wide > 0 {
        plan.push((newest, args.wide));
    }
    let matrix = Instant::now();
    let mut results: Vec<GuestResult> = Vec::new();
    for (n, (kernel, cpus)) in plan.iter().enumerate() {
        let label = format!("{} ({} vCPUs)", kernel.id, cpus);
        println!("vmtest: [{}/{}] {label}: {} {}", n + 1, plan.len(), kernel.package, kernel.version);
        let guest = Guest {
            kernel,
            initramfs: &initramfs,
            cpus: *cpus,
            accel: &accel.name,
            append: format!("vmt.secs={}", args.secs),
            dir: guests_dir.join(format!("{}-{cpus}cpu", kernel.id)),
            // Measured: 25–45 s for 2 vCPUs under TCG; more vCPUs share the same 2 host CPUs.
            deadline: Duration::from_secs(120 + 20 * u64::from(cpus.saturating_sub(2))),
            done: "@@ done",
        };
        let result =
            guest::run(&guest, &mut |t, line| println!("vmtest:   {t:6.1} s  {}", line.trim_start_matches("@@ ")))?;
        println!("vmtest:   {}", report::one_line(&result));
        results.push(result);
    }
    let report = report::Report {
        accel,
        cpus: args.cpus,
        secs: args.secs,
        fetch_s: fetched.as_secs_f64(),
        matrix_s: matrix.elapsed().as_secs_f64(),
        guests: results,
    };
    report::write(&report, &out)?;
    if args.out.is_none() {
        report::update_readme(&report, &crate::workspace_root().join("docs/kernels.md"))?;
    }
    println!(
        "vmtest: matrix {:.0} s ({} guests), {:.0} s in all; report in {}",
        report.matrix_s,
        report.guests.len(),
        started.elapsed().as_secs_f64(),
        out.join("report.md").display()
    );
    let failed: Vec<String> = report.guests.iter().filter(|g| !g.ok).map(report::label).collect();
    if !failed.is_empty() {
        bail!("failed on {}; see {}", failed.join(", "), out.join("report.md").display());
    }
    Ok(())
}
