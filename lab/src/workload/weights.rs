//! The kernel's CFS load weights (`sched_prio_to_weight`, kernel/sched/core.c): in, a nice
//! level; out, its weight. Each step is ≈ ×1.25, so a nice-0 task gets ≈ 10 % more CPU than a
//! nice-1 one beside it.
pub const SCHED_PRIO_TO_WEIGHT: [u64; 40] = [
    /* -20 */ 88761, 71755, 56483, 46273, 36291, //
    /* -15 */ 29154, 23254, 18705, 14949, 11916, //
    /* -10 */ 9548, 7620, 6100, 4904, 3906, //
    /*  -5 */ 3121, 2501, 1991, 1586, 1277, //
    /*   0 */ 1024, 820, 655, 526, 423, //
    /*   5 */ 335, 272, 215, 172, 137, //
    /*  10 */ 110, 87, 70, 56, 45, //
    /*  15 */ 36, 29, 23, 18, 15,
];

/// The weight of `nice` (clamped to −20…19, as the kernel clamps it).
pub fn weight(nice: i32) -> u64 {
    SCHED_PRIO_TO_WEIGHT[(nice.clamp(-20, 19) + 20) as usize]
}

/// `se.load.weight` from `/proc/<tid>/sched`, unscaled: 64-bit kernels show it with 10 extra bits
/// of resolution (`scale_load`), and no unscaled weight is 1024 × another table entry.
pub fn parse_sched_weight(sched: &str) -> Option<u64> {
    let raw = parse_sched_field(sched, "se.load.weight")?;
    let scaled = raw.is_multiple_of(1024) && SCHED_PRIO_TO_WEIGHT.contains(&(raw / 1024));
    Some(if scaled { raw / 1024 } else { raw })
}

/// An integer field of `/proc/<tid>/sched` (`name   :   value`).
pub fn parse_sched_field(sched: &str, name: &str) -> Option<u64> {
    let line = sched.lines().find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))?;
    line.rsplit(':').next()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_the_kernels_anchors() {
        assert_eq!((weight(-10), weight(0), weight(10), weight(19)), (9548, 1024, 110, 15));
        assert_eq!((weight(-99), weight(99)), (88761, 15));
        // Every step is close to ×1.25 (the kernel's "10 % per nice level" rule).
        for pair in SCHED_PRIO_TO_WEIGHT.windows(2) {
            let step = pair[0] as f64 / pair[1] as f64;
            assert!((1.2..1.3).contains(&step), "{pair:?}");
        }
    }

    #[test]
    fn sched_weight_is_unscaled() {
        let sched = |v: &str| format!("se.vruntime   :   1.0\nse.load.weight                               :   {v}\n");
        assert_eq!(parse_sched_weight(&sched("1048576")), Some(1024));
        assert_eq!(parse_sched_weight(&sched("112640")), Some(110));
        assert_eq!(parse_sched_weight(&sched("15360")), Some(15));
        assert_eq!(parse_sched_weight(&sched("1024")), Some(1024));
        assert_eq!(parse_sched_weight(&sched("18705")), Some(18705));
        assert_eq!(parse_sched_weight("nothing"), None);
    }
}
