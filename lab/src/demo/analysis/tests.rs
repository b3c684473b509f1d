//! The demo's rules on synthetic measurements: each tolerance, the run_delay allowance, ordering.
use super::*;

#[test]
fn run_delay_tolerance_is_2_percent_2us_per_delay_and_1ms() {
    let none = Unseen::default();
    let gap = run_delay_gap(1_000_000_000, 100, 1_000_000_000, none);
    assert_eq!((gap.diff_ns, gap.tolerance_ns), (0, 20_000_000 + 200_000 + 1_000_000));
    let gap = run_delay_gap(0, 0, 1_000_000, none);
    assert_eq!((gap.diff_ns, gap.tolerance_ns), (-1_000_000, 1_020_000));
}

#[test]
fn sleeps_after_migrations_widen_only_the_kernel_side() {
    let io = Unseen { migrations: 4, longest_sleep_ns: 1_100_000, ..Unseen::default() };
    // The kernel counting 4.8 ms more than us over 1500 delays: inside, with 4 migrations…
    let gap = run_delay_gap(6_100_000, 1_500, 10_900_000, io);
    assert_eq!(gap.allowance_ns, 1_000_000 + 4_400_000);
    assert!(gap.diff_ns.unsigned_abs() <= gap.tolerance_ns);
    // …outside without them,
    let gap = run_delay_gap(6_100_000, 1_500, 10_900_000, Unseen { migrations: 0, ..io });
    assert!(gap.diff_ns.unsigned_abs() > gap.tolerance_ns);
    // and us counting more is never excused by sleeps.
    let gap = run_delay_gap(10_900_000, 1_500, 6_100_000, io);
    assert_eq!(gap.allowance_ns, 1_000_000);
    assert!(gap.diff_ns.unsigned_abs() > gap.tolerance_ns);
}

#[test]
fn an_untraced_switch_may_hide_any_wait_but_never_excuses_counting_more() {
    let spinner = Unseen { untraced: 2, ..Unseen::default() };
    // cpu/0 as seen in CI: 0.76 ms of its own delays, run_delay 9.6 ms, two untraced switches.
    let gap = run_delay_gap(747_220, 4, 9_623_833, spinner);
    assert_eq!(gap.allowance_ns, 1_000_000 + 8_876_613);
    assert!(gap.diff_ns.unsigned_abs() <= gap.tolerance_ns);
    // Counting more than the kernel is never excused by untraced switches,
    let gap = run_delay_gap(9_623_833 + 1_500_000, 4, 9_623_833, spinner);
    assert_eq!(gap.allowance_ns, 1_000_000);
    assert!(gap.diff_ns.unsigned_abs() > gap.tolerance_ns);
    // and without one, 60 ms missing of 1.5 s is out.
    let gap = run_delay_gap(1_447_000_000, 130, 1_507_000_000, Unseen::default());
    assert!(gap.diff_ns.unsigned_abs() > gap.tolerance_ns);
}

#[test]
fn perf_tolerance_is_5_percent_plus_5us() {
    assert!(within_perf_tolerance(24.001, 24.001));
    assert!(within_perf_tolerance(105.0, 100.0));
    assert!(!within_perf_tolerance(105.1, 100.0));
    // A 20 µs max: 5 % is 1 µs, the 5 µs carries it.
    assert!(within_perf_tolerance(0.025, 0.020));
    assert!(!within_perf_tolerance(0.027, 0.020));
}
