//! The report's findings in prose: in, the `Report`; out, its stall and nice sections, the short
//! answers to the experiment's questions and the tolerances with why each is what it is.
use std::fmt::Write as _;

use super::{Report, ns, signed_ns};
use crate::demo::analysis::{PERF_MIN_DELAYS, Summary, ThreadRow};
use crate::demo::histogram::STAMP_SLACK_NS;
use crate::workload::Mode;

pub(super) fn stall(out: &mut String, report: &Report) {
    let Some(summary) = report.summary(Mode::Stall) else { return };
    let Some(st) = summary.stall.as_ref() else { return };
    let secs: Vec<String> = st
        .seconds
        .iter()
        .map(|g| match g.gaps_over_10ms {
            0 => ns(g.largest_gap_ns as f64),
            n => format!("{} ({n} > 10 ms)", ns(g.largest_gap_ns as f64)),
        })
        .collect();
    let apart = st.largest_gap_end_ns as i64 - st.our_max_at_ns as i64;
    let same = apart.unsigned_abs() < 1_000_000;
    let _ = writeln!(
        out,
        "A thread reads CLOCK_MONOTONIC in a tight loop beside 2×CPUs spinners (the 2005 report's `lat3`, without \
         its 1 ms sleep, so every gap is a preemption). Largest gap per second: {}.\n\n\
         | largest gap of the loop | our max delay of that thread | reason | difference | tolerance (10 % or one \
         tick) |\n\
         |---|---|---|---|---|\n| {} | {} | {} | {} | {} |\n\n{}",
        secs.join(", "),
        ns(st.largest_gap_ns as f64),
        ns(st.our_max_ns as f64),
        st.our_max_reason.as_deref().unwrap_or("—"),
        ns(st.largest_gap_ns.abs_diff(st.our_max_ns) as f64),
        ns(st.tolerance_ns as f64),
        if same {
            format!(
                "Same event: the largest gap ended {} from the end of our largest delay (both CLOCK_MONOTONIC); the \
                 gap is the delay plus the switch out before it and the way back to user space after it.",
                signed_ns(apart)
            )
        } else {
            format!(
                "Not the same event: the largest gap ended {:.3} s {} our largest delay. A gap also holds interrupt \
                 work and time the hypervisor gave our vCPU to someone else (steal: {} over all CPUs during this \
                 mode), which no run queue sees.",
                apart.unsigned_abs() as f64 / 1e9,
                if apart > 0 { "after" } else { "before" },
                ns(summary.steal_ns as f64)
            )
        }
    );
}

pub(super) fn nice(out: &mut String, report: &Report) {
    let Some(n) = report.summary(Mode::Nice).and_then(|s| s.nice.as_ref()) else { return };
    let total: u64 = n.groups.iter().map(|g| g.cpu_ns).sum();
    out.push_str(
        "| group | nice | threads | weight (table / kernel's se.load.weight) | CPU time (own clocks) | share | \
         runtime (ours) | delays | avg delay | max delay |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for g in &n.groups {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} / {} | {} | {:.1} % | {} | {} | {} | {} |",
            g.group,
            g.nice,
            g.threads,
            g.table_weight,
            g.kernel_weight.map_or("?".to_owned(), |w| w.to_string()),
            ns(g.cpu_ns as f64),
            100.0 * g.cpu_ns as f64 / total.max(1) as f64,
            ns(g.runtime_ns as f64),
            g.delays,
            ns(g.avg_ns),
            ns(g.max_ns as f64)
        );
    }
    if let [a, b] = n.groups.as_slice() {
        let _ = writeln!(
            out,
            "\nCPU-time ratio {} : {} = **{:.2}**; the kernel's weight ratio {} / {} = **{:.2}** \
             (`sched_prio_to_weight`, kernel/sched/core.c: `vruntime += delta_exec × 1024 / weight`). The low-weight \
             group's delays are what this monitor shows: {} on average, up to {}, against {} for nice {}.",
            a.group,
            b.group,
            n.cpu_ratio,
            a.table_weight,
            b.table_weight,
            n.weight_ratio,
            ns(b.avg_ns),
            ns(b.max_ns as f64),
            ns(a.avg_ns),
            a.nice
        );
    }
}

/// The mode's worst attributed delay: how long, who waited, what ran on that CPU meanwhile.
fn worst(s: &Summary) -> String {
    let Some(w) = s.worst.as_ref() else { return String::new() };
    let ran: Vec<String> = w.culprits.iter().take(4).map(|c| format!("{} {}", c.comm, ns(c.ran_ns as f64))).collect();
    format!(
        "the worst, {} ({}, cpu {}, {} other task(s) queued when it was), ran after these on that CPU, latest \
         first: {}{}",
        ns(w.delay_ns as f64),
        w.victim_comm,
        w.cpu,
        w.queue_depth.map_or("?".to_owned(), |d| d.to_string()),
        ran.join(", "),
        if w.culprits_truncated || w.culprits.len() > 4 { ", …" } else { "" }
    )
}

pub(super) fn answers(out: &mut String, report: &Report) {
    let (Some(cpu), Some(io), Some(compete)) =
        (report.summary(Mode::Cpu), report.summary(Mode::Io), report.summary(Mode::Compete))
    else {
        return;
    };
    let tick = 1e9 / report.hz as f64;
    let _ = writeln!(
        out,
        "- **CPU-bound threads, fewer than the CPUs** (`cpu`, {} spinner(s) on {} CPUs): {} delays in {} s, avg {}, \
         max {}; \
         {:.0} % idle. They run almost undisturbed: a delay is the time another task woken on their CPU (a kernel \
         thread, a watcher) runs before them; {}.",
        cpu.threads,
        cpu.cpus,
        cpu.delays,
        cpu.secs,
        ns(cpu.avg_ns),
        ns(cpu.max_ns as f64),
        cpu.idle_pct,
        worst(cpu)
    );
    let io_wake: u64 = io.rows.iter().map(|r| r.wakeup).sum();
    let _ = writeln!(
        out,
        "- **1 ms sleepers** (`io`): the most switches ({}, {} voluntary) and the least waiting: avg {}, max {}; {} \
         of {} \
         delays are wakeups, {:.0} % idle. A sleeper wakes to an idle or nearly idle CPU: the wait is the wakeup path \
         and leaving idle, microseconds; {}.",
        io.voluntary + io.involuntary,
        io.voluntary,
        ns(io.avg_ns),
        ns(io.max_ns as f64),
        io_wake,
        io.delays,
        io.idle_pct,
        worst(io)
    );
    let _ = writeln!(
        out,
        "- **4× oversubscription** (`compete`, {} spinners on {} CPUs): fewer switches than `io` ({} vs {}) yet \
         the longest waits: avg {} ({:.0}× `cpu`, {:.0}× `io`), max {} ({}); {} of them involuntary; {:.1} % \
         idle. Delay follows queue length: with 4 runnable per CPU each waits for ~3 others' slices, and slices end \
         at the {:.0} ms tick. Alert on the max delay, not on switch counts.",
        compete.threads,
        compete.cpus,
        compete.voluntary + compete.involuntary,
        io.voluntary + io.involuntary,
        ns(compete.avg_ns),
        compete.avg_ns / cpu.avg_ns.max(1.0),
        compete.avg_ns / io.avg_ns.max(1.0),
        ns(compete.max_ns as f64),
        compete.max_thread,
        compete.involuntary,
        compete.idle_pct,
        tick / 1e6
    );
    let perf_mb = compete.perf_data_bytes as f64 / 1e6;
    let worst = match worst(compete) {
        w if w.is_empty() => String::new(),
        w => format!(" In `compete` {w}."),
    };
    let example = compete
        .rows
        .iter()
        .filter(|r| r.perf.as_ref().is_some_and(|p| p.skipped.is_none()))
        .max_by_key(|r| r.max_ns)
        .and_then(|r| {
            let p = r.perf.as_ref()?;
            Some(format!(
                " — here {}: {} delays, avg {}, max {} vs perf's {}, {:.3} ms, {:.3} ms",
                r.name,
                r.delays,
                ns(r.avg_ns),
                ns(r.max_ns as f64),
                p.delays,
                p.avg_ms,
                p.max_ms
            ))
        })
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "- **Which of our outputs answers what perf sched answers:**\n\n\
         | perf sched | question | ours |\n|---|---|---|\n\
         | `record` | capture every scheduler event to a file ({:.1} MB for {} s of `compete` here) | \
         nothing to capture: the kernel program aggregates; `record` (one-shot) or `run` (always on) read \
         fixed-size maps |\n\
         | `latency` | per task: delays, avg, max, when | \
         `record`'s Tasks table and `--json` `tasks[]` (`delay_count`, `delay_avg_ns`, `delay_max_ns`, \
         `delay_max_at_ns`), plus exact histograms per reason{example} |\n\
         | `timehist` (-s, -V) | per event: wait, sch delay, run time, who ran | \
         per task runtime and vol/inv switches; `max delay at`; the worst delay per CPU attributed to the runs \
         that filled it (`attributed`).{worst} timehist's *wait time* is sleep, not delay |\n\
         | `map` | which task is on which CPU over time | \
         no timeline; per CPU the worst delay with `prev` and the last 8 runs; switches and idle per CPU |",
        perf_mb, compete.secs
    );
}

/// What perf's own trace says about the events it holds while CPUs idle (the `io` run).
fn perf_idle_finding(report: &Report) -> String {
    let Some(io) = report.summary(Mode::Io) else { return String::new() };
    if io.perf_idle_switches.is_empty() {
        return format!(
            "perf's trace of the `io` run was not inspected this time ({:.0} MB: something else filled it).",
            io.perf_data_bytes as f64 / 1e6
        );
    }
    let counts: Vec<String> = io
        .perf_idle_switches
        .iter()
        .map(|(cpu, into, out)| format!("CPU {cpu}: {into} switches into the idle task, {out} out of it"))
        .collect();
    let lossy = io.perf_idle_switches.iter().any(|(_, into, out)| out * 10 < into * 9);
    if lossy {
        format!(
            "Why perf sees so few of the sleepers' delays: its trace of the `io` run has {}. Every switch into \
             idle is followed by one out of it, so the trace lacks events raised while that CPU's idle task is \
             current (ftrace's ring buffer shows the same on this VM; the BPF programs — ours, runqlat — do run \
             there): the timer wakeup of a sleeper on an idle CPU and its switch in are missing, and `perf sched \
             latency` cannot rebuild those delays.",
            counts.join("; ")
        )
    } else {
        format!("perf's trace of the `io` run holds its idle transitions ({}).", counts.join("; "))
    }
}

/// How many threads needed the artifact allowance, and the largest such use.
fn allowance_used(report: &Report) -> String {
    let rows: Vec<(&str, &ThreadRow)> =
        report.summaries.iter().flat_map(|s| s.rows.iter().map(move |r| (s.mode.name(), r))).collect();
    let over: Vec<(&str, &ThreadRow, u64)> = rows
        .iter()
        .filter_map(|&(mode, r)| {
            let base = r.run_delay_tolerance_ns.saturating_sub(r.run_delay_allowance_ns);
            let excess = r.run_delay_diff_ns.unsigned_abs().checked_sub(base)?;
            (excess > 0).then_some((mode, r, excess))
        })
        .collect();
    match over.iter().max_by_key(|o| o.2) {
        None => format!("In this run no thread needed it ({} threads).", rows.len()),
        Some((mode, r, excess)) => format!(
            "In this run {} of {} threads needed it; the largest use: {mode} {}, {} beyond 2 % + 2 µs per delay.",
            over.len(),
            rows.len(),
            r.name,
            ns(*excess as f64)
        ),
    }
}

pub(super) fn tolerances(out: &mut String, report: &Report) {
    let _ = writeln!(
        out,
        "- **run_delay** (`/proc/<tid>/schedstat`, read by each thread as its last act): the kernel charges the \
         time on \
         the run queue's clock `rq->clock`, which the scheduler does not update between a wakeup that preempts and the \
         switch that follows. The `run_delay` column is therefore compared with our second recorder, \
         `record --clock run-queue`, which reads that same clock; our default monotonic sum is shown beside it (for \
         sleepers it is larger: that is the real wait). Tolerance: 2 % + 2 µs per delay (the issue's), **plus an \
         allowance** for a kernel artifact: with EEVDF's delayed dequeue a task that blocks stays queued, and if it is \
         migrated while asleep the migration re-stamps its `last_queued` and the wakeup keeps that stamp, so the rest \
         of that sleep is counted as run delay — no sched_wakeup/sched_switch shows that stretch as waiting (perf and \
         both our clocks agree). Each migration can add at most one sleep. And this kernel now and then switches \
         tasks without raising `sched_switch` at all (‡ above): the delay around such a switch is in run_delay and \
         in no tracer. So where `run_delay` exceeds our sum the allowance is 1 ms + the thread's migrations \
         (`se.nr_migrations`) × its longest sleep (only `io` threads sleep; spinners keep 1 ms for a rare block) + \
         its untraced switches × its largest delay; where ours exceeds `run_delay` it is 1 ms. {} The per-thread \
         table shows every difference.\n\
         - **perf sched latency** (`-p`, per tid): compared for threads with ≥ {PERF_MIN_DELAYS} delays in both views, \
         within 5 % + 5 µs (perf prints ms with 3 decimals and stamps the same tracepoints a few µs apart from our \
         program); where perf rebuilt fewer delays than we saw, a delay it missed may be the maximum, so ours may \
         then only be larger. {}\n\
         - **runqlat**: total delays within 1 % + 5 (the two attach ~0.1 s apart while the workload's main thread \
         waits on a pipe). Per slot, runqlat's count must lie in our (min–max) range with each delay allowed {} µs \
         either way: programs on one tracepoint run one after the other (in the order they attached: perf, our \
         run-queue recorder, runqlat, our monotonic recorder) and each reads the clock when it runs, so runqlat's \
         delay differs from ours by what its program spends at the switch minus at the wakeup — up to ~2 µs on \
         a CPU leaving idle \
         here, which moves some of the sleepers' 4–16 µs delays across a slot bound. At most 1 % + 5 delays may \
         remain outside that range.\n\
         - **stall**: the loop's largest gap vs our largest delay of that thread, within 10 % or one tick ({:.0} ms at \
         HZ={}, from {}): a gap also holds interrupt time on that CPU, which is not run-queue delay; and the gap may \
         be longer by up to the hypervisor's steal during the mode (a stolen vCPU leaves its thread \"running\" \
         without progress, and no scheduler event shows it).",
        allowance_used(report),
        perf_idle_finding(report),
        STAMP_SLACK_NS / 1000,
        1e3 / report.hz as f64,
        report.hz,
        report.hz_source
    );
}
