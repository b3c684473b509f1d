//! The drain/encode pipeline benchmark (`cargo bench -p latency-daemon --bench pipeline -- [--json]`;
//! `cargo xtask bench` runs it): synthetic per-CPU map contents for N CPUs in, the median time of
//! each user-space stage of a drain out — sum the per-CPU values, close a window through the
//! daemon's own `Pipeline` (report, cgroup series and names, timeline) and publish it, encode
//! /metrics as text and as protobuf. The map reads themselves are syscalls copying CPUs × value
//! size; `cargo xtask bench` times them on the real maps.
use std::{
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use latency_common::{
    CpuStats, Histogram, Reason,
    buckets::{BUCKETS, OVERFLOW_BUCKET},
    knobs::Clock,
    maps::{CGROUP_BUCKETS, CgroupHist},
};
use serde::Serialize;
use tokio::sync::watch;

use clap::Parser as _;
use latency_daemon::{
    cmd::run::pipeline_settings,
    config::Config,
    export::otlp,
    metrics::{Format, Instruments, Metrics},
    model::{
        container::ContainerLabels,
        exposition::Exposition,
        report::Meta,
        snapshot::{Snapshot, sum_cgroup, sum_histograms},
        wall::WallClock,
    },
    pipeline::{Names, Pipeline, Settings},
};

/// Time the user-space pipeline (sum per-CPU values, close a window, encode) on synthetic maps of
/// any CPU count.
#[derive(Debug, clap::Parser)]
#[command(name = "pipeline")]
struct Args {
    /// CPU counts to simulate.
    #[arg(long, value_delimiter = ',', default_value = "2,64,256")]
    cpus: Vec<usize>,
    /// Cgroups with delays in every window.
    #[arg(long, default_value_t = 200)]
    cgroups: usize,
    /// Cgroups with a series of their own (the rest add up in "other"); the default's 20 unless given.
    #[arg(long)]
    top_cgroups: Option<usize>,
    /// Timed repetitions per CPU count (the median is reported).
    #[arg(long, default_value_t = 101)]
    iterations: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let rows = run(&args);
    if args.json {
        match serde_json::to_string_pretty(&rows) {
            Ok(j) => println!("{j}"),
            Err(e) => {
                eprintln!("pipeline: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", table(&rows));
    }
    ExitCode::SUCCESS
}

#[derive(Debug, Serialize)]
struct Row {
    cpus: usize,
    cgroups: usize,
    /// Median µs per stage.
    sum_us: f64,
    window_us: f64,
    encode_text_us: f64,
    encode_protobuf_us: f64,
    total_us: f64,
    text_bytes: usize,
    protobuf_bytes: usize,
    /// One OTLP push: the scrape's families translated, encoded and gzipped (µs), and its body.
    otlp_us: f64,
    otlp_bytes: usize,
    otlp_raw_bytes: usize,
}

/// A deterministic pseudo-random generator (xorshift): the same synthetic maps every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Per reason the per-CPU histograms, the per-CPU counters, and per cgroup its per-CPU values.
type Maps = (Vec<Vec<Histogram>>, Vec<CpuStats>, Vec<(u64, Vec<CgroupHist>)>);

/// Per-CPU maps as a busy machine would hold them: every regular bucket non-empty.
fn synthetic(cpus: usize, cgroups: usize, rng: &mut Rng) -> Maps {
    let hist = |rng: &mut Rng| {
        let mut h = Histogram::ZERO;
        for b in h.buckets.iter_mut().take(OVERFLOW_BUCKET) {
            *b = rng.next() % 1000;
        }
        h.sum_ns = rng.next() % 1_000_000_000_000;
        h
    };
    let per_reason = Reason::ALL.iter().map(|_| (0..cpus).map(|_| hist(rng)).collect()).collect();
    let stats = (0..cpus)
        .map(|_| CpuStats { switches: rng.next() % 1_000_000, voluntary: 10, involuntary: 20, ..CpuStats::default() })
        .collect();
    let groups = (0..cgroups as u64)
        .map(|id| {
            let per_cpu = (0..cpus)
                .map(|_| {
                    let mut c = CgroupHist::ZERO;
                    for b in c.buckets.iter_mut().take(CGROUP_BUCKETS - 1) {
                        *b = rng.next() % 100;
                    }
                    c.sum_ns = rng.next() % 1_000_000_000;
                    c
                })
                .collect();
            (id + 2, per_cpu)
        })
        .collect();
    (per_reason, stats, groups)
}

fn median_us(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

/// Every cgroup named as a pod's, none a container the runtimes know, no process looked up (the
/// bench does not attribute): what the daemon's lookups return from their caches.
struct Synthetic;

impl Names for Synthetic {
    fn path(&mut self, id: u64) -> Option<String> {
        Some(format!("/kubepods/pod{id}"))
    }

    fn label(&mut self, id: u64) -> Option<String> {
        self.path(id)
    }

    fn containers(&mut self, _: &str) -> ContainerLabels {
        ContainerLabels::default()
    }

    fn process(&mut self, _: u32) -> Option<(String, ContainerLabels)> {
        None
    }

    fn forget(&mut self, _: &str) {}
}

/// The maps' counters after `k` windows of the same activity: cumulative, as the kernel keeps
/// them, so each window's deltas are the synthetic maps' values.
fn after_windows(mut s: Snapshot, k: u64) -> Snapshot {
    for h in &mut s.histograms {
        h.sum_ns *= k;
        h.buckets.iter_mut().for_each(|b| *b *= k);
    }
    for c in &mut s.cpus {
        (c.switches, c.voluntary, c.involuntary) = (c.switches * k, c.voluntary * k, c.involuntary * k);
    }
    for (_, h) in &mut s.cgroups {
        (h.sum_ns, h.held_others_ns) = (h.sum_ns * k, h.held_others_ns * k);
        h.buckets.iter_mut().chain(h.waited_ns.iter_mut()).for_each(|b| *b *= k);
    }
    s
}

fn run(args: &Args) -> Vec<Row> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // The daemon's settings from its default configuration; every drain closes a window.
    let d = Config::default();
    let settings = Settings {
        intervals_per_window: 1,
        top_cgroups: args.top_cgroups.unwrap_or(d.top_cgroups),
        ..pipeline_settings(&d, true)
    };
    let meta = Meta { kernel: "bench".into(), wall: WallClock::new(0, 0), filter: Vec::new(), clock: Clock::Monotonic };
    let mut rows = Vec::new();
    for &cpus in &args.cpus {
        let (per_reason, stats, groups) = synthetic(cpus, args.cgroups, &mut rng);
        let first = Exposition { version: "bench", kernel: "bench".into(), ..Exposition::default() };
        let (published, latest) = watch::channel(Arc::new(first.clone()));
        let metrics = Metrics::new(latest, &Instruments::default(), || None);
        let mut pipeline = Pipeline::new(settings.clone(), meta.clone(), Snapshot::empty(0, cpus), first);
        let (mut sum, mut window, mut text, mut proto, mut otlp) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut text_bytes, mut protobuf_bytes, mut otlp_bytes, mut otlp_raw_bytes) = (0, 0, 0, 0);
        for i in 0..args.iterations.max(1) {
            let t = Instant::now();
            let mut histograms = [Histogram::ZERO; Reason::COUNT];
            for (reason, per_cpu) in per_reason.iter().enumerate() {
                histograms[reason] = sum_histograms(per_cpu);
            }
            let cgroups: Vec<(u64, CgroupHist)> =
                groups.iter().map(|(id, per_cpu)| (*id, sum_cgroup(per_cpu))).collect();
            let now = Snapshot {
                taken_ns: 15_000_000_000 * (i as u64 + 1),
                cpus: stats.clone(),
                histograms,
                tasks: Vec::new(),
                cgroups,
                irq_ns: None,
                steal_ns: None,
            };
            sum.push(t.elapsed());
            let now = after_windows(now, i as u64 + 1);

            let t = Instant::now();
            let closed = pipeline.begin().map(|closing| pipeline.slot_read(&closing, Vec::new()));
            // The default configuration alerts on nothing: no transitions to send.
            pipeline.end(now, closed, &mut Synthetic);
            published.send_replace(Arc::new(pipeline.exposition().clone()));
            window.push(t.elapsed());

            let t = Instant::now();
            let body = metrics.encode(Format::Text).map(|(_, b)| b).unwrap_or_default();
            text.push(t.elapsed());
            text_bytes = body.len();
            let t = Instant::now();
            let body = metrics.encode(Format::Protobuf).map(|(_, b)| b).unwrap_or_default();
            proto.push(t.elapsed());
            protobuf_bytes = body.len();

            let e = latest_of(&published);
            let t = Instant::now();
            let body = otlp::body(&metrics, &e, Vec::new(), 0, None, true).unwrap_or_default();
            otlp.push(t.elapsed());
            otlp_bytes = body.len();
            otlp_raw_bytes = otlp::body(&metrics, &e, Vec::new(), 0, None, false).map(|b| b.len()).unwrap_or_default();
        }
        let (s, w, t, p) = (median_us(sum), median_us(window), median_us(text), median_us(proto));
        let o = median_us(otlp);
        rows.push(Row {
            cpus,
            cgroups: args.cgroups,
            sum_us: s,
            window_us: w,
            encode_text_us: t,
            encode_protobuf_us: p,
            total_us: s + w + t.max(p),
            text_bytes,
            protobuf_bytes,
            otlp_us: o,
            otlp_bytes,
            otlp_raw_bytes,
        });
    }
    rows
}

fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:>5} {:>8} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
        "cpus",
        "cgroups",
        "sum µs",
        "window µs",
        "text µs",
        "proto µs",
        "text KiB",
        "proto KiB",
        "otlp µs",
        "otlp KiB",
        "gzip KiB"
    );
    for r in rows {
        out.push_str(&format!(
            "{:>5} {:>8} {:>12.1} {:>12.1} {:>12.1} {:>12.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}\n",
            r.cpus,
            r.cgroups,
            r.sum_us,
            r.window_us,
            r.encode_text_us,
            r.encode_protobuf_us,
            r.text_bytes as f64 / 1024.0,
            r.protobuf_bytes as f64 / 1024.0,
            r.otlp_us,
            r.otlp_raw_bytes as f64 / 1024.0,
            r.otlp_bytes as f64 / 1024.0
        ));
    }
    out.push_str(&format!(
        "(medians; {} buckets per reason, {} per cgroup; map reads not included)\n",
        BUCKETS, CGROUP_BUCKETS
    ));
    out
}

/// What the drain loop published last.
fn latest_of(published: &watch::Sender<Arc<Exposition>>) -> Arc<Exposition> {
    published.borrow().clone()
}
