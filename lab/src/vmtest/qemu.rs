//! One guest under QEMU: in, a kernel (of either `Arch`), the initramfs, vCPUs and an
//! accelerator; out, its console
//! lines time-stamped from QEMU's start, the data port's text and how it ended — within a
//! host-side deadline, after which our QEMU (and only ours) is killed. Also: whether KVM really
//! works here (having /dev/kvm is not enough: kvm_pvm accepts `-accel kvm`, crawls, then pauses
//! the guest forever on an emulation failure).
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::kernels::Kernel;
use crate::guard::{Lines, Proc, check_interrupted};

/// The accelerator the matrix uses, and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Accel {
    /// `kvm` or `tcg`.
    pub name: String,
    pub why: String,
}

/// A guest to boot.
#[derive(Debug)]
pub struct Guest<'a> {
    pub kernel: &'a Kernel,
    pub initramfs: &'a Path,
    pub cpus: u32,
    pub accel: &'a str,
    /// Extra kernel command-line words.
    pub append: String,
    /// Where the data port's file goes.
    pub dir: PathBuf,
    pub deadline: Duration,
    /// The console line that means the guest did its work (its absence is a failure).
    pub done: &'static str,
}

/// What a boot produced.
#[derive(Debug, Default)]
pub struct Boot {
    /// (seconds since QEMU started, line), carriage returns removed.
    pub console: Vec<(f64, String)>,
    /// The second serial port's text.
    pub data: String,
    pub wall_s: f64,
    pub timed_out: bool,
    /// The guest kernel panicked or oopsed fatally (worth one retry under TCG).
    pub panicked: bool,
    /// The `done` line appeared.
    pub finished: bool,
}

impl Boot {
    /// When the console first showed a line containing `needle`.
    pub fn at(&self, needle: &str) -> Option<f64> {
        self.console.iter().find(|(_, l)| l.contains(needle)).map(|(t, _)| *t)
    }
}

/// Boots `guest` and reads its console until QEMU exits or the deadline passes; `progress` sees
/// each `@@` marker line as it comes.
pub fn boot(guest: &Guest<'_>, progress: &mut dyn FnMut(f64, &str)) -> anyhow::Result<Boot> {
    std::fs::create_dir_all(&guest.dir).with_context(|| format!("creating {}", guest.dir.display()))?;
    let arch = guest.kernel.arch;
    let (console, port) = arch.ports();
    let data = guest.dir.join(format!("{port}.txt"));
    let memory = 1024 + 128 * guest.cpus;
    let mut qemu = Command::new(arch.qemu());
    qemu.args(["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"])
        .args(arch.machine(guest.accel))
        .args(["-accel", guest.accel])
        .args(["-smp", &guest.cpus.to_string(), "-m", &memory.to_string()])
        .arg("-kernel")
        .arg(guest.kernel.image())
        .arg("-initrd")
        .arg(guest.initramfs)
        // noirqdebug: a PREEMPT_RT guest under TCG on a busy host once took the data port's
        // interrupts for unhandled (its threaded 8250 handler ran late), disabled IRQ 3 ("nobody
        // cared") and cut the results short after ~300 KB, both attempts of both RT kernels.
        .args([
            "-append",
            &format!("console={console} panic=-1 oops=panic loglevel=4 noirqdebug vmt.port={port} {}", guest.append),
        ])
        .args(["-serial", "stdio", "-serial"])
        .arg(format!("file:{}", data.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut proc = Proc::spawn(&mut qemu, "qemu")?;
    let stdout = proc.take_stdout().context("qemu's stdout")?;
    let stderr = proc.take_stderr().context("qemu's stderr")?;
    let mut lines = Lines::read(stdout);
    let errors = Lines::read(stderr);
    let mut boot = Boot::default();
    let deadline = started + guest.deadline;
    loop {
        check_interrupted()?;
        match lines.next(Duration::from_millis(100)) {
            Ok(Some(line)) => {
                let t = started.elapsed().as_secs_f64();
                let line = line.trim_end_matches('\r').to_owned();
                if line.starts_with("@@ ") {
                    progress(t, &line);
                }
                boot.panicked |= line.contains("Kernel panic") || line.contains("KVM internal error");
                boot.finished |= line.contains(guest.done);
                boot.console.push((t, line));
            }
            Ok(None) => {}
            // QEMU closed its stdout: it exited (or is about to).
            Err(_) => break,
        }
        if boot.finished {
            break;
        }
        if Instant::now() > deadline {
            boot.timed_out = true;
            break;
        }
        // A guest stopped after an emulation failure never exits by itself.
        if boot.panicked && boot.console.last().is_some_and(|(t, _)| started.elapsed().as_secs_f64() > t + 2.0) {
            break;
        }
    }
    let _ = proc.stop(0, Duration::from_secs(if boot.timed_out || boot.panicked { 0 } else { 5 }));
    drop(proc);
    boot.wall_s = started.elapsed().as_secs_f64();
    for line in errors.rest() {
        boot.console.push((boot.wall_s, format!("qemu: {line}")));
    }
    boot.data = std::fs::read_to_string(&data).unwrap_or_default().replace('\r', "");
    Ok(boot)
}

/// KVM when the CPU offers hardware virtualisation and a test boot of `kernel` reaches init in
/// 30 s; TCG otherwise, and always for another architecture's kernel.
pub fn choose_accel(kernel: &Kernel, initramfs: &Path, dir: &Path) -> anyhow::Result<Accel> {
    if !kernel.arch.is_host() {
        return Ok(Accel { name: "tcg".into(), why: format!("{} guests on this host: emulated", kernel.arch) });
    }
    if !Path::new("/dev/kvm").exists() {
        return Ok(Accel { name: "tcg".into(), why: "no /dev/kvm".into() });
    }
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").context("reading /proc/cpuinfo")?;
    let flags = cpuinfo.lines().find(|l| l.starts_with("flags")).unwrap_or("");
    if !flags.split_whitespace().any(|f| f == "vmx" || f == "svm") {
        let module = if Path::new("/sys/module/kvm_pvm").exists() { " (it is kvm_pvm)" } else { "" };
        let why =
            format!("/dev/kvm exists{module} but the CPU has no vmx/svm flag, so a stock kernel cannot run under it");
        return Ok(Accel { name: "tcg".into(), why });
    }
    let guest = Guest {
        kernel,
        initramfs,
        cpus: 1,
        accel: "kvm",
        append: "vmt.probe=1".into(),
        dir: dir.join("kvm-probe"),
        deadline: Duration::from_secs(30),
        done: "@@ init",
    };
    let boot = boot(&guest, &mut |_, _| {})?;
    Ok(match boot.at("@@ init") {
        Some(t) => Accel { name: "kvm".into(), why: format!("a test boot under KVM reached init in {t:.1} s") },
        None => Accel { name: "tcg".into(), why: "a test boot under KVM did not reach init within 30 s".into() },
    })
}
