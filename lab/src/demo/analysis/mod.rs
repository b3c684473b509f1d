//! What one mode's measurements say: in, `Measured` (ours, the oracles, the threads' own
//! accounts); out, a `Summary` — the experiment's table row, per-thread agreement with each
//! oracle, runqlat's histogram beside ours, the stall and nice findings — and a `Check` for
//! every figure that has a tolerance. Pure: no I/O, so every rule is unit-tested.
mod summary;

pub use self::summary::{Check, Nice, NiceGroup, PerfRow, Stall, Summary, ThreadRow};
use super::histogram::{self, SlotRow};
use super::session::Measured;
use crate::oracle::perf::PerfLatency;
use crate::oracle::run_delay::{Unseen, run_delay_gap};
use crate::recording::Task;
use crate::workload::{Done, Mode, STALL_LOOP, weights};

/// perf is compared on threads with at least this many delays (in both views): below it, one
/// delay perf rebuilds differently moves the average by more than the tolerance.
pub const PERF_MIN_DELAYS: u64 = 100;

pub fn summarize(m: &Measured, tick_ns: u64) -> Summary {
    let mut checks = Vec::new();
    let rows: Vec<ThreadRow> = m.threads.iter().map(|d| thread_row(m, d, &mut checks)).collect();
    let delays: u64 = rows.iter().map(|r| r.delays).sum();
    let sum: u64 = rows.iter().map(|r| r.sum_ns).sum();
    let worst_row = rows.iter().max_by_key(|r| r.max_ns);
    let histogram = histogram::side_by_side(&m.ours.buckets(), &m.runqlat);
    let histogram_unexplained = histogram::unexplained(&histogram);
    hist_checks(m, &histogram, histogram_unexplained, &mut checks);
    loss_checks(m, &mut checks);
    let stall = (m.mode == Mode::Stall).then(|| stall(m, tick_ns, &mut checks)).flatten();
    let nice = (m.mode == Mode::Nice).then(|| nice(&rows, &m.threads)).flatten();
    let tids: Vec<u32> = rows.iter().map(|r| r.tid).collect();
    Summary {
        mode: m.mode,
        threads: rows.len(),
        cpus: m.cpus,
        secs: m.secs,
        delays,
        voluntary: rows.iter().map(|r| r.voluntary).sum(),
        involuntary: rows.iter().map(|r| r.involuntary).sum(),
        avg_ns: sum as f64 / delays.max(1) as f64,
        max_ns: worst_row.map_or(0, |r| r.max_ns),
        max_thread: worst_row.map_or_else(String::new, |r| r.name.clone()),
        runtime_per_thread_ns: rows.iter().map(|r| r.runtime_ns).sum::<u64>() as f64 / rows.len().max(1) as f64,
        idle_pct: 100.0 * m.ours.idle_fraction(),
        others_pct: 100.0 * m.ours.others_fraction(),
        system_switches: m.ours.cpus.iter().map(|c| c.switches).sum(),
        recorded_ns: m.ours.duration_ns,
        workload_ns: m.workload_ns,
        steal_ns: m.steal_ns,
        rows,
        histogram,
        histogram_unexplained,
        buckets: m.ours.buckets(),
        worst: m.ours.attributed.iter().find(|a| tids.contains(&a.victim_tid)).cloned(),
        stall,
        nice,
        perf_data_bytes: m.perf.data_bytes,
        perf_idle_switches: m.perf.idle_switches.clone(),
        took_s: m.took.as_secs_f64(),
        checks,
    }
}

fn thread_row(m: &Measured, d: &Done, checks: &mut Vec<Check>) -> ThreadRow {
    let empty = Task::default();
    let t = m.ours.task(d.tid).unwrap_or(&empty);
    let rq = m.ours_rq.task(d.tid).unwrap_or(&empty);
    let unseen = Unseen {
        migrations: d.migrations.unwrap_or(0),
        longest_sleep_ns: d.longest_sleep_ns,
        untraced: t.untraced.max(rq.untraced),
    };
    let gap = run_delay_gap(rq.delay_sum_ns, rq.delay_count, d.run_delay_ns, unseen);
    let (diff, tolerance) = (gap.diff_ns, gap.tolerance_ns);
    checks.push(Check {
        item: "run_delay",
        subject: format!("{} {}", m.mode.name(), d.name),
        detail: format!(
            "ours (rq clock) {} ns, run_delay {} ns, diff {diff:+} ns, tolerance ±{tolerance} ns (of which {} ns \
             allowed for what no tracepoint shows: {} migrations × longest sleep {} ns, {} untraced switches: \
             any amount the kernel holds more){}",
            rq.delay_sum_ns,
            d.run_delay_ns,
            gap.allowance_ns,
            unseen.migrations,
            unseen.longest_sleep_ns,
            unseen.untraced,
            if rq.delay_count == 0 { " (not in our recording)" } else { "" }
        ),
        ok: rq.delay_count > 0 && diff.unsigned_abs() <= tolerance,
    });
    let avg_ns = t.delay_sum_ns as f64 / t.delay_count.max(1) as f64;
    let perf = m.perf.latency.get(&d.tid).map(|p| perf_row(m.mode, d, t, avg_ns, p, checks));
    ThreadRow {
        name: d.name.clone(),
        tid: d.tid,
        group: d.group.clone(),
        nice: d.nice,
        delays: t.delay_count,
        wakeup: t.delay_wakeup_count,
        preempt: t.delay_preempt_count,
        voluntary: t.voluntary,
        involuntary: t.involuntary,
        sum_ns: t.delay_sum_ns,
        avg_ns,
        max_ns: t.delay_max_ns,
        max_reason: t.delay_max_reason.clone(),
        runtime_ns: t.runtime_ns,
        cpu_ns: d.cpu_ns,
        rq_sum_ns: rq.delay_sum_ns,
        rq_delays: rq.delay_count,
        run_delay_ns: d.run_delay_ns,
        run_delay_diff_ns: diff,
        run_delay_tolerance_ns: tolerance,
        run_delay_allowance_ns: gap.allowance_ns,
        untraced: unseen.untraced,
        migrations: d.migrations,
        longest_sleep_ns: d.longest_sleep_ns,
        perf,
    }
}

/// Within 5 %, plus 5 µs: perf prints ms with 3 decimals, and its probe and ours stamp the same
/// tracepoints a few µs apart on a busy VM, which matters only for maxima of tens of µs.
pub fn within_perf_tolerance(ours_ms: f64, perf_ms: f64) -> bool {
    (ours_ms - perf_ms).abs() <= 0.05 * perf_ms + 0.005
}

fn perf_row(mode: Mode, d: &Done, t: &Task, avg_ns: f64, p: &PerfLatency, checks: &mut Vec<Check>) -> PerfRow {
    let (avg_ms, max_ms) = (avg_ns / 1e6, t.delay_max_ns as f64 / 1e6);
    let skipped = if t.delay_count < PERF_MIN_DELAYS || p.delays < PERF_MIN_DELAYS {
        Some(format!("perf rebuilt {} of our {} delays (< {PERF_MIN_DELAYS})", p.delays, t.delay_count))
    } else {
        None
    };
    if skipped.is_none() {
        // perf's trace now and then lacks events our program saw (it rebuilds fewer delays):
        // one it missed may be the maximum. Then ours can only be larger, never smaller.
        let perf_missed = p.delays < t.delay_count;
        for (item, ours, theirs) in [("perf avg", avg_ms, p.avg_ms), ("perf max", max_ms, p.max_ms)] {
            let one_sided = item == "perf max" && perf_missed && ours > theirs && !within_perf_tolerance(ours, theirs);
            checks.push(Check {
                item,
                subject: format!("{} {}", mode.name(), d.name),
                detail: format!(
                    "ours {ours:.3} ms ({} delays), perf {theirs:.3} ms ({} delays), tolerance 5 % + 5 µs{}",
                    t.delay_count,
                    p.delays,
                    if one_sided { "; perf rebuilt fewer delays than we saw, so ours may only be larger" } else { "" }
                ),
                ok: within_perf_tolerance(ours, theirs) || one_sided,
            });
        }
    }
    PerfRow {
        delays: p.delays,
        avg_ms: p.avg_ms,
        max_ms: p.max_ms,
        avg_ratio: avg_ms / p.avg_ms,
        max_ratio: max_ms / p.max_ms,
        skipped,
    }
}

fn hist_checks(m: &Measured, rows: &[SlotRow], unexplained: f64, checks: &mut Vec<Check>) {
    let (ours, theirs): (u64, u64) = rows.iter().fold((0, 0), |(a, b), r| (a + r.ours, b + r.runqlat));
    // The two programs attach ~0.1 s apart while the workload's main thread waits on a pipe:
    // a handful of its delays can fall in one and not the other.
    let allowed = theirs / 100 + 5;
    checks.push(Check {
        item: "runqlat count",
        subject: m.mode.name().to_owned(),
        detail: format!("ours {ours} delays, runqlat {theirs}, tolerance ±{allowed} (1 % + 5)"),
        ok: ours.abs_diff(theirs) <= allowed,
    });
    checks.push(Check {
        item: "runqlat shape",
        subject: m.mode.name().to_owned(),
        detail: format!(
            "{unexplained} delays in a log2 slot where our buckets put none (tolerance {allowed}: 1 % + 5)"
        ),
        ok: unexplained <= allowed as f64,
    });
}

fn loss_checks(m: &Measured, checks: &mut Vec<Check>) {
    for (name, r) in [("record", &m.ours), ("record --clock run-queue", &m.ours_rq)] {
        checks.push(Check {
            item: "nothing lost",
            subject: format!("{} {name}", m.mode.name()),
            detail: r.loss_detail(),
            ok: r.losses() == 0,
        });
    }
    checks.push(Check {
        item: "nothing lost",
        subject: format!("{} perf sched record", m.mode.name()),
        detail: m.perf.lost.clone().unwrap_or_else(|| "no lost events reported".to_owned()),
        ok: m.perf.lost.is_none(),
    });
}

fn stall(m: &Measured, tick_ns: u64, checks: &mut Vec<Check>) -> Option<Stall> {
    let loop_thread = m.threads.iter().find(|d| d.name == STALL_LOOP)?;
    let largest_gap_ns = loop_thread.largest_gap_ns.unwrap_or(0);
    let largest_gap_end_ns = loop_thread.largest_gap_end_ns.unwrap_or(0);
    let ours = m.ours.task(loop_thread.tid);
    let our_max_ns = ours.map_or(0, |t| t.delay_max_ns);
    let our_max_at_ns = ours.map_or(0, |t| t.delay_max_at_ns);
    let our_max_reason = ours.and_then(|t| t.delay_max_reason.clone());
    let tolerance_ns = (largest_gap_ns / 10).max(tick_ns);
    // A gap is longer than the wait when the hypervisor did not run our vCPU meanwhile: the
    // thread was "running" as far as the kernel knows. Steal over the mode bounds that.
    let longer_ns = largest_gap_ns.saturating_sub(our_max_ns);
    let shorter_ns = our_max_ns.saturating_sub(largest_gap_ns);
    let matched = our_max_reason.as_deref() == Some("preempt")
        && shorter_ns <= tolerance_ns
        && longer_ns <= tolerance_ns + m.steal_ns;
    // If the kernel switched the loop thread without a tracepoint, the largest gap may be a wait
    // no tracer saw. Then it must be in what the kernel's run_delay holds beyond our sum.
    let untraced = ours.map_or(0, |t| t.untraced);
    let hidden_ns =
        m.ours_rq.task(loop_thread.tid).map_or(0, |rq| loop_thread.run_delay_ns.saturating_sub(rq.delay_sum_ns));
    let hidden = !matched && untraced > 0 && our_max_ns < largest_gap_ns && hidden_ns + tolerance_ns >= largest_gap_ns;
    checks.push(Check {
        item: "stall",
        subject: STALL_LOOP.to_owned(),
        detail: format!(
            "largest loop gap {:.3} ms, our max {} delay {:.3} ms, tolerance ±{:.3} ms (10 % or one tick), the gap \
             longer by up to the hypervisor's steal during the mode too ({:.0} ms){}",
            largest_gap_ns as f64 / 1e6,
            our_max_reason.as_deref().unwrap_or("?"),
            our_max_ns as f64 / 1e6,
            tolerance_ns as f64 / 1e6,
            m.steal_ns as f64 / 1e6,
            if untraced > 0 {
                format!(
                    "; {untraced} untraced switch(es) of the loop thread, run_delay holds {:.3} ms beyond our sum{}",
                    hidden_ns as f64 / 1e6,
                    if hidden { ": the gap is a wait no tracepoint showed, and the kernel counted it" } else { "" }
                )
            } else {
                String::new()
            }
        ),
        ok: matched || hidden,
    });
    Some(Stall {
        largest_gap_ns,
        largest_gap_end_ns,
        seconds: m.gaps.clone(),
        our_max_ns,
        our_max_at_ns,
        our_max_reason,
        tolerance_ns,
    })
}

fn nice(rows: &[ThreadRow], threads: &[Done]) -> Option<Nice> {
    let mut groups: Vec<NiceGroup> = Vec::new();
    for r in rows {
        let at = match groups.iter().position(|g| g.group == r.group) {
            Some(at) => at,
            None => {
                groups.push(NiceGroup {
                    group: r.group.clone(),
                    nice: r.nice,
                    threads: 0,
                    table_weight: weights::weight(r.nice),
                    kernel_weight: threads.iter().find(|d| d.group == r.group).and_then(|d| d.weight),
                    cpu_ns: 0,
                    runtime_ns: 0,
                    delays: 0,
                    avg_ns: 0.0,
                    max_ns: 0,
                });
                groups.len() - 1
            }
        };
        let g = &mut groups[at];
        g.threads += 1;
        g.cpu_ns += r.cpu_ns;
        g.runtime_ns += r.runtime_ns;
        g.avg_ns = (g.avg_ns * g.delays as f64 + r.sum_ns as f64) / (g.delays + r.delays).max(1) as f64;
        g.delays += r.delays;
        g.max_ns = g.max_ns.max(r.max_ns);
    }
    let [a, b] = groups.as_slice() else { return None };
    let (cpu_ratio, weight_ratio) =
        (a.cpu_ns as f64 / b.cpu_ns.max(1) as f64, a.table_weight as f64 / b.table_weight as f64);
    Some(Nice { groups, cpu_ratio, weight_ratio })
}

/// The checks across modes: delays follow queue length (compete ≫ cpu), and 1 ms sleepers wait
/// microseconds.
pub fn ordering_checks(summaries: &[Summary]) -> Vec<Check> {
    let avg = |mode: Mode| summaries.iter().find(|s| s.mode == mode).map(|s| s.avg_ns);
    let others = |mode: Mode| summaries.iter().find(|s| s.mode == mode).map_or(0.0, |s| s.others_pct);
    let mut checks = Vec::new();
    if let (Some(compete), Some(cpu), Some(io)) = (avg(Mode::Compete), avg(Mode::Cpu), avg(Mode::Io)) {
        checks.push(Check {
            item: "ordering",
            subject: "compete ≫ cpu, io".to_owned(),
            detail: format!(
                "avg delay compete {:.3} ms = {:.0}× cpu's {:.1} µs and {:.0}× io's {:.1} µs (needs ≥ 10×); other \
                 tasks used {:.1} % / {:.1} % of the CPUs during cpu / io",
                compete / 1e6,
                compete / cpu.max(1.0),
                cpu / 1e3,
                compete / io.max(1.0),
                io / 1e3,
                others(Mode::Cpu),
                others(Mode::Io)
            ),
            ok: compete >= 10.0 * cpu && compete >= 10.0 * io,
        });
        checks.push(Check {
            item: "ordering",
            subject: "io in microseconds".to_owned(),
            detail: format!("avg delay of 1 ms sleepers {:.1} µs (needs < 100 µs)", io / 1e3),
            ok: io < 100_000.0,
        });
    }
    checks
}

#[cfg(test)]
mod tests;
