//! Histogram bounds in seconds in, rungs of a ladder of kernel bucket boundaries out; a value off
//! the ladder is reported with its two neighbours, written precisely enough to paste back.

use latency_common::buckets::{NATIVE_OFFSET, OVERFLOW_BUCKET, ZERO_NATIVE_INDEX};

use super::Problem;
use crate::model::distribution::{CGROUP_STEP, native_bound};

/// Bounds `2^((first + step·r)/8)` s for rungs `r` in `0..rungs`. All are boundaries of the
/// kernel's buckets (Prometheus native schema 3), so a cumulative count at any of them is an exact
/// sum of kernel buckets, never an interpolation.
#[derive(Debug)]
pub(super) struct Ladder {
    /// Native index of rung 0.
    pub first: i32,
    /// Native indices from one rung to the next.
    pub step: i32,
    pub rungs: i32,
    /// What a value must be, for messages.
    pub what: &'static str,
}

/// Native index of the top kernel bucket's bound, 2^(94/8) s ≈ 57 min.
const TOP_NATIVE_INDEX: i32 = OVERFLOW_BUCKET as i32 - 1 + NATIVE_OFFSET;

/// Every kernel boundary, from the zero bucket's threshold 2^-20 s to the top bucket's bound.
pub(super) const CLASSIC: Ladder = Ladder {
    first: ZERO_NATIVE_INDEX,
    step: 1,
    rungs: TOP_NATIVE_INDEX - ZERO_NATIVE_INDEX + 1,
    what: "a bucket boundary 2^(i/8) s",
};

/// The per-cgroup histograms' bounds: every other octave, 2^-20 s … 2^6 s (the kernel keeps 14
/// coarse buckets per cgroup to stay small per CPU).
pub(super) const CGROUP: Ladder =
    Ladder { first: ZERO_NATIVE_INDEX, step: CGROUP_STEP, rungs: 14, what: "one of 2^-20, 2^-18, …, 2^6 s" };

/// Relative distance within which a value is taken as the boundary: far below any difference a
/// person means, far above the rounding in a decimal written with 10 significant digits.
const TOLERANCE: f64 = 1e-9;

impl Ladder {
    /// Rung `r` in seconds.
    pub fn bound(&self, rung: i32) -> f64 {
        native_bound(self.first + self.step * rung)
    }

    /// The rung at `seconds`, or why there is none.
    fn rung(&self, seconds: f64) -> Result<i32, String> {
        let v = seconds;
        if !(v > 0.0 && v.is_finite()) {
            return Err(format!("{v} is not a positive number of seconds"));
        }
        let last = self.rungs - 1;
        // Position on the ladder, fractional between rungs.
        let x = (8.0 * v.log2() - f64::from(self.first)) / f64::from(self.step);
        let nearest = x.round();
        if (0.0..=f64::from(last)).contains(&nearest) {
            // Whole and within 0..=last, just checked.
            let r = nearest as i32;
            if (v - self.bound(r)).abs() <= TOLERANCE * v {
                return Ok(r);
            }
        }
        if x < 0.0 {
            return Err(format!("{v} is below the smallest bound {}", show(self.bound(0))));
        }
        if x > f64::from(last) {
            return Err(format!("{v} is above the largest bound {}", show(self.bound(last))));
        }
        let below = (x.floor() as i32).min(last - 1);
        Err(format!(
            "{v} is not {}; the nearest are {} and {}",
            self.what,
            show(self.bound(below)),
            show(self.bound(below + 1))
        ))
    }

    /// The values' rungs, ascending, duplicates dropped; or one problem per invalid value.
    pub fn rungs_of(&self, field: &str, seconds: &[f64]) -> Result<Vec<i32>, Vec<Problem>> {
        let (mut rungs, mut problems) = (Vec::with_capacity(seconds.len()), Vec::new());
        for &v in seconds {
            match self.rung(v) {
                Ok(r) => rungs.push(r),
                Err(message) => problems.push(Problem::new(field, message)),
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        rungs.sort_unstable();
        rungs.dedup();
        Ok(rungs)
    }
}

/// A bound in seconds to 10 significant digits (close enough to pass [`TOLERANCE`] when pasted
/// back), then roughly in a readable unit.
fn show(seconds: f64) -> String {
    let pasteable: f64 = format!("{seconds:.9e}").parse().unwrap_or(seconds);
    let (x, unit) = match seconds {
        s if s < 1e-6 => (s * 1e9, "ns"),
        s if s < 1e-3 => (s * 1e6, "µs"),
        s if s < 1.0 => (s * 1e3, "ms"),
        s => (s, "s"),
    };
    let decimals = match x {
        x if x >= 1000.0 => 0,
        x if x >= 100.0 => 1,
        x if x >= 10.0 => 2,
        _ => 3,
    };
    let rough = format!("{x:.decimals$}");
    let rough = rough.trim_end_matches('0').trim_end_matches('.');
    format!("{pasteable} ({rough}{unit})")
}

#[cfg(test)]
mod tests {
    use latency_common::buckets::UPPER_NS;

    use super::*;

    fn rungs(ladder: &Ladder, values: &[f64]) -> (Vec<i32>, Vec<String>) {
        match ladder.rungs_of("f", values) {
            Ok(rungs) => (rungs, vec![]),
            Err(problems) => (vec![], problems.iter().map(Problem::to_string).collect()),
        }
    }

    #[test]
    fn classic_ladder_is_the_kernel_table() {
        assert_eq!((CLASSIC.first, TOP_NATIVE_INDEX, CLASSIC.rungs), (-160, 94, 255));
        for r in 0..CLASSIC.rungs {
            // UPPER_NS[k] = floor(1e9 · 2^((k - 160)/8)) for k = r.
            assert_eq!((CLASSIC.bound(r) * 1e9).floor() as u64, UPPER_NS[r as usize], "rung {r}");
            assert_eq!(CLASSIC.rung(CLASSIC.bound(r)), Ok(r));
        }
    }

    #[test]
    fn powers_of_two_are_exact() {
        for octave in -20..=11 {
            assert_eq!(CLASSIC.bound(8 * octave + 160), 2f64.powi(octave));
        }
        for m in 0..CGROUP.rungs {
            assert_eq!(CGROUP.bound(m), 2f64.powi(-20 + 2 * m));
        }
    }

    #[test]
    fn shown_bounds_can_be_pasted_back() {
        for r in 0..CLASSIC.rungs {
            let shown = show(CLASSIC.bound(r));
            let pasted: f64 = shown.split(' ').next().unwrap().parse().unwrap();
            assert_eq!(CLASSIC.rung(pasted), Ok(r), "{shown}");
        }
        assert_eq!(show(2f64.powi(-20)), "0.0000009536743164 (953.7ns)");
        assert_eq!(show(64.0), "64 (64s)");
        // Decimals as people write them, within the tolerance of 2^-10 and 2^6.
        assert_eq!(CLASSIC.rung(0.0009765625), Ok(80));
        assert_eq!(CLASSIC.rung(64.000000001), Ok(208));
    }

    #[test]
    fn off_ladder_values_name_their_neighbours() {
        let (_, problems) = rungs(&CLASSIC, &[0.001]);
        assert_eq!(
            problems,
            [
                "f: 0.001 is not a bucket boundary 2^(i/8) s; the nearest are 0.0009765625 (976.6µs) and 0.001064948958 (1.065ms)"
            ]
        );
        let (_, problems) = rungs(&CGROUP, &[0.001, 2f64.powi(-19)]);
        assert_eq!(
            problems[0],
            "f: 0.001 is not one of 2^-20, 2^-18, …, 2^6 s; the nearest are 0.0009765625 (976.6µs) and 0.00390625 (3.906ms)"
        );
        assert!(
            problems[1].contains("the nearest are 0.0000009536743164 (953.7ns) and 0.000003814697266 (3.815µs)"),
            "{problems:?}"
        );
    }

    #[test]
    fn out_of_range_and_nonsense() {
        let (ok, problems) = rungs(&CLASSIC, &[1e-7, 1e5, 0.0, -1.0, f64::NAN, f64::INFINITY]);
        assert!(ok.is_empty());
        assert_eq!(
            problems,
            [
                "f: 0.0000001 is below the smallest bound 0.0000009536743164 (953.7ns)",
                "f: 100000 is above the largest bound 3444.311717 (3444s)",
                "f: 0 is not a positive number of seconds",
                "f: -1 is not a positive number of seconds",
                "f: NaN is not a positive number of seconds",
                "f: inf is not a positive number of seconds",
            ]
        );
        let (_, problems) = rungs(&CGROUP, &[128.0]);
        assert_eq!(problems, ["f: 128 is above the largest bound 64 (64s)"]);
    }

    #[test]
    fn sorted_and_deduplicated() {
        let (ok, problems) = rungs(&CLASSIC, &[1.0, 0.5, 1.0, 0.0009765625]);
        assert!(problems.is_empty());
        assert_eq!(ok, [80, 152, 160]);
        let (ok, _) = rungs(&CGROUP, &[64.0, 2f64.powi(-20)]);
        assert_eq!(ok, [0, 13]);
    }
}
