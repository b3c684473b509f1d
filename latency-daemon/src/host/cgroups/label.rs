//! A cgroup path → the name every output carries (the `cgroup` label, the snapshot JSON, alerts),
//! bounded in length. cgroup paths have no length limit; a label value of kilobytes costs every
//! sample that carries it (and Prometheus's `label_value_length_limit` rejects whole scrapes over
//! it), so a path longer than `MAX_BYTES` keeps its start and its end (where the container id is)
//! and replaces the middle with a hash of the whole path, so distinct paths stay distinct:
//! `<first 256 bytes>…<16 hex digits>…<last 512 bytes>`.

/// Paths up to this length are labels as they are. Kubernetes paths are under 300 bytes.
pub const MAX_BYTES: usize = 1024;
const HEAD: usize = 256;
const TAIL: usize = 512;
/// U+2026, which no path the kernel makes contains unless a name has it.
const MARK: char = '…';

/// `path` itself when at most `MAX_BYTES` long, else its bounded form (at most 256 + 512 + 22
/// bytes, cut at character boundaries).
pub fn bounded(path: &str) -> String {
    if path.len() <= MAX_BYTES {
        return path.to_string();
    }
    let mut head_end = HEAD;
    while !path.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = path.len() - TAIL;
    while !path.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    format!("{}{MARK}{:016x}{MARK}{}", &path[..head_end], fnv1a(path.as_bytes()), &path[tail_start..])
}

/// FNV-1a, 64 bits: stable across runs and versions (a label must not change on restart), and
/// 2⁻⁶⁴ per pair of paths sharing head and tail is collision-free in practice.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_paths_stay_as_they_are() {
        let at_limit = format!("/{}", "a".repeat(MAX_BYTES - 1));
        assert_eq!(bounded(&at_limit), at_limit);
        assert_eq!(bounded("/kubepods/pod1/abc"), "/kubepods/pod1/abc");
    }

    #[test]
    fn long_paths_keep_head_and_tail_and_stay_distinct() {
        let middle = |c: &str| format!("/start{}/{}/end-container-id", "x".repeat(300), c.repeat(5000));
        let (a, b) = (bounded(&middle("a")), bounded(&middle("b")));
        assert_ne!(a, b, "same head and tail, different middles");
        for label in [&a, &b] {
            assert!(label.len() <= HEAD + TAIL + 2 * MARK.len_utf8() + 16, "{}", label.len());
            assert!(label.starts_with("/startxxx"));
            assert!(label.ends_with("/end-container-id"));
            assert_eq!(label.matches(MARK).count(), 2);
        }
        assert_eq!(bounded(&middle("a")), a, "stable");
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn cuts_at_character_boundaries() {
        let path = format!("/{}", "ü".repeat(2000));
        let label = bounded(&path);
        assert!(label.len() <= MAX_BYTES);
        assert!(label.starts_with("/ü"));
        assert!(label.ends_with('ü'));
    }
}
