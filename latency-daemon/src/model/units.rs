//! Nanoseconds in; short human-readable text out ("2.057 ms"), shared by `record`'s tables and
//! the live view.

/// A duration in the unit that keeps 3–4 significant digits.
pub fn fmt_ns(ns: u64) -> String {
    let v = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{} µs", sig(v / 1e3))
    } else if ns < 1_000_000_000 {
        format!("{} ms", sig(v / 1e6))
    } else {
        format!("{} s", sig(v / 1e9))
    }
}

/// Up to four significant digits, no trailing zeros.
pub fn sig(v: f64) -> String {
    let decimals = if v >= 1000.0 {
        0
    } else if v >= 100.0 {
        1
    } else if v >= 10.0 {
        2
    } else {
        3
    };
    let s = format!("{v:.decimals$}");
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(fmt_ns(999), "999 ns");
        assert_eq!(fmt_ns(4_100), "4.1 µs");
        assert_eq!(fmt_ns(181_000), "181 µs");
        assert_eq!(fmt_ns(2_057_000), "2.057 ms");
        assert_eq!(fmt_ns(148_114_000), "148.1 ms");
        assert_eq!(fmt_ns(3_100_000_000), "3.1 s");
    }
}
