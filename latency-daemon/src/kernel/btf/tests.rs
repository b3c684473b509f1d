//! Unit tests: synthetic blobs (layout, lookups, every malformation an error, never a panic),
//! then the running kernel's BTF against `bpftool` (skipped when either is absent).

mod blob;
mod bpftool;

use std::path::Path;
use std::time::Instant;

use super::*;
use blob::{ARRAY, Blob, PTR, STRUCT, TYPEDEF, sample};
use bpftool::{bpftool, parse_dump};

fn parse_sample() -> Btf {
    Btf::parse(&sample()).unwrap_or_else(|e| panic!("sample BTF must parse: {e}"))
}

fn member(btf: &Btf, s: &str, path: &str) -> Member {
    btf.member(s, path).unwrap_or_else(|e| panic!("{s}.{path}: {e}"))
}

#[test]
fn finds_members_in_anonymous_unions_and_structs() {
    let btf = parse_sample();
    assert_eq!(member(&btf, "task_struct", "pid"), Member { offset: 12, size: 4 });
    assert_eq!(member(&btf, "task_struct", "alias"), Member { offset: 12, size: 4 });
    assert_eq!(member(&btf, "task_struct", "__state"), Member { offset: 4, size: 4 });
    assert_eq!(member(&btf, "task_struct", "prio"), Member { offset: 8, size: 4 });
    assert_eq!(member(&btf, "task_struct", "comm"), Member { offset: 20, size: 16 });
    assert_eq!(member(&btf, "task_struct", "ptr"), Member { offset: 64, size: 8 });
    // In a kind_flag struct a plain member has bitfield_size 0 and is fine.
    assert_eq!(member(&btf, "task_struct", "whole"), Member { offset: 60, size: 4 });
}

#[test]
fn nested_path_through_typedef() {
    let btf = parse_sample();
    assert_eq!(member(&btf, "task_struct", "se"), Member { offset: 40, size: 16 });
    assert_eq!(member(&btf, "task_struct", "se.sum_exec_runtime"), Member { offset: 48, size: 8 });
}

#[test]
fn typedef_member_size() {
    let btf = parse_sample();
    assert_eq!(member(&btf, "task_struct", "tgid"), Member { offset: 16, size: 4 });
}

#[test]
fn bitfields_are_errors_in_both_encodings() {
    let btf = parse_sample();
    let err = btf.member("task_struct", "flag").err();
    assert!(matches!(err, Some(BtfError::Bitfield { bits: 3, .. })), "{err:?}");
    let err = btf.member("old_bits", "narrow").err();
    assert!(matches!(err, Some(BtfError::Bitfield { bits: 3, .. })), "{err:?}");
}

#[test]
fn lookup_errors_name_what_is_missing() {
    let btf = parse_sample();
    let msg = |r: Result<Member, BtfError>| r.err().map(|e| e.to_string()).unwrap_or_default();
    assert_eq!(
        msg(btf.member("task_struct", "se.nope")),
        "struct task_struct has no member `se.nope` (looking up `se.nope`)"
    );
    assert_eq!(msg(btf.member("mm_struct", "pgd")), "kernel BTF has no struct or union named `mm_struct`");
    assert_eq!(
        msg(btf.member("task_struct", "prio.x")),
        "task_struct.prio has BTF kind INT, not STRUCT or UNION, so it has no member `x`"
    );
    assert!(matches!(btf.member("task_struct", ""), Err(BtfError::MemberNotFound { .. })));
    assert!(matches!(btf.member("task_struct", "se."), Err(BtfError::MemberNotFound { .. })));
}

#[test]
fn tracepoint_arity_skips_data_pointer() {
    let btf = parse_sample();
    assert_eq!(btf.tracepoint_arity("sched_switch").ok(), Some(4));
    assert_eq!(btf.tracepoint_arity("sched_wakeup").ok(), Some(1));
    assert!(matches!(btf.tracepoint_arity("sched_nope"), Err(BtfError::TracepointNotFound { .. })));
    assert!(matches!(btf.tracepoint_arity("pid"), Err(BtfError::TracepointNotFound { .. })));
}

#[test]
fn functions_are_found_by_name() {
    let btf = parse_sample();
    assert!(btf.function("f").is_ok());
    assert!(matches!(btf.function("tg_throttle_down"), Err(BtfError::FunctionNotFound { .. })));
    // A struct or a typedef of that name is not a function.
    assert!(btf.function("task_struct").is_err() && btf.function("btf_trace_sched_switch").is_err());
}

#[test]
fn task_layout_on_sample() {
    let layout = parse_sample().task_layout().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(layout.pid.offset, 12);
    assert_eq!(layout.state, Member { offset: 4, size: 4 });
    assert!(layout.switch_has_prev_state);
}

/// A flat `task_struct` with chosen `state` member and `prio` size, and a 3-argument
/// (pre-5.18) `sched_switch`.
fn flat_task(state: &str, state_size: u32, prio_size: u32) -> Result<TaskLayout, BtfError> {
    let mut b = Blob::new();
    let int = b.int("int", 4, 32);
    let state_ty = b.int("state_t", state_size, state_size * 8);
    let prio_ty = b.int("prio_t", prio_size, prio_size * 8);
    let char_ = b.int("char", 1, 8);
    let comm = b.raw("", ARRAY, false, 0, 0, &[char_, int, 16]);
    let members =
        [(state, state_ty, 0), ("prio", prio_ty, 64), ("pid", int, 96), ("tgid", int, 128), ("comm", comm, 160)];
    let task = b.composite(STRUCT, "task_struct", 64, false, &members);
    let task_ptr = b.raw("", PTR, false, 0, task, &[]);
    b.tracepoint("sched_switch", &[char_, task_ptr, task_ptr]);
    Btf::parse(&b.bytes())?.task_layout()
}

#[test]
fn legacy_long_state_and_wrong_sizes() {
    // Before 5.14: `volatile long state`; before 5.18: no prev_state argument.
    let layout = flat_task("state", 8, 4).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(layout.state, Member { offset: 0, size: 8 });
    assert!(!layout.switch_has_prev_state);

    let err = |r: Result<TaskLayout, BtfError>| r.err().map(|e| e.to_string());
    assert_eq!(err(flat_task("__state", 4, 2)).as_deref(), Some("task_struct.prio is 2 bytes, expected 4"));
    assert_eq!(err(flat_task("__state", 8, 4)).as_deref(), Some("task_struct.__state is 8 bytes, expected 4"));
    assert_eq!(
        err(flat_task("status", 4, 4)).as_deref(),
        Some("struct task_struct has no member `state` (looking up `state`)")
    );
}

#[test]
fn header_errors() {
    let good = sample();
    let msg = |bytes: &[u8]| Btf::parse(bytes).err().map(|e| e.to_string()).unwrap_or_default();
    let mut bad = good.clone();
    bad[0] = 0;
    assert_eq!(msg(&bad), "not BTF: magic at byte offset 0 is 0xeb00, expected 0xeb9f");
    bad[..2].copy_from_slice(&[0xeb, 0x9f]);
    assert!(msg(&bad).contains("big-endian"));
    let mut bad = good.clone();
    bad[2] = 2;
    assert!(msg(&bad).contains("version 2"));
    let mut bad = good.clone();
    bad[4] = 8;
    assert!(msg(&bad).contains("shorter than the 24-byte header"));
    assert!(msg(&good[..good.len() - 1]).contains("string section at byte offset"));
    assert_eq!(msg(&good[..10]), "BTF is truncated or garbled: header at byte offset 8 needs 4 bytes, only 2 remain");
    // A type section 4 bytes short cuts the last type (a 12-byte TYPEDEF) in its header.
    let mut bad = good.clone();
    let type_len = u32::from_le_bytes([bad[12], bad[13], bad[14], bad[15]]);
    bad[12..16].copy_from_slice(&(type_len - 4).to_le_bytes());
    assert_eq!(
        msg(&bad),
        format!(
            "BTF is truncated or garbled: type at byte offset {} needs 12 bytes, only 8 remain",
            24 + type_len - 12
        )
    );
    let mut bad = good.clone();
    bad[24 + 7] = 20; // first type's kind byte
    assert_eq!(msg(&bad), "BTF type [1] at byte offset 24 has unknown kind 20");
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let good = sample();
    for len in 0..good.len() {
        assert!(Btf::parse(&good[..len]).is_err(), "prefix of {len} bytes parsed");
    }
}

#[test]
fn corrupted_bytes_never_panic() {
    // xorshift: deterministic, no dev-dependency.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let good = sample();
    for _ in 0..20_000 {
        let mut bytes = good.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % bytes.len() as u64) as usize;
            bytes[at] = next() as u8;
        }
        if let Ok(btf) = Btf::parse(&bytes) {
            for path in ["pid", "comm", "se.sum_exec_runtime", "flag", "ptr"] {
                let _ = btf.member("task_struct", path);
            }
            let _ = btf.task_layout();
            let _ = btf.tracepoint_arity("sched_wakeup");
        }
    }
}

#[test]
fn cycles_are_errors_not_hangs() {
    let mut b = Blob::new();
    // typedef a → typedef b → typedef a
    b.raw("a", TYPEDEF, false, 0, 2, &[]);
    b.raw("b", TYPEDEF, false, 0, 1, &[]);
    // an anonymous struct member whose type is the struct itself
    b.composite(STRUCT, "loop", 4, false, &[("", 3, 0)]);
    b.composite(STRUCT, "holder", 4, false, &[("x", 1, 0)]);
    let arr = b.raw("", ARRAY, false, 0, 0, &[5, 0, 2]); // [5], an array of itself
    b.composite(STRUCT, "arr", 4, false, &[("x", arr, 0)]);
    let btf = Btf::parse(&b.bytes()).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(btf.member("loop", "x"), Err(BtfError::TooDeep { .. })));
    assert!(matches!(btf.member("holder", "x"), Err(BtfError::TooDeep { .. })));
    assert!(matches!(btf.member("arr", "x"), Err(BtfError::TooDeep { .. })));
}

#[test]
fn missing_file_explains_config() {
    let err = Btf::from_file(Path::new("/nonexistent/vmlinux")).err().map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some(
            "the kernel has no BTF at /nonexistent/vmlinux: the monitor needs a kernel built with CONFIG_DEBUG_INFO_BTF=y"
        )
    );
}

// ---- against the running kernel ----

fn kernel() -> Option<Btf> {
    if !Path::new(VMLINUX).exists() {
        eprintln!("note: {VMLINUX} absent, skipping kernel BTF test");
        return None;
    }
    let start = Instant::now();
    let btf = Btf::from_sys_fs().unwrap_or_else(|e| panic!("parsing {VMLINUX}: {e}"));
    eprintln!("parsed {btf:?} in {:?}", start.elapsed());
    Some(btf)
}

#[test]
fn kernel_task_layout() {
    let Some(btf) = kernel() else { return };
    let start = Instant::now();
    let layout = btf.task_layout().unwrap_or_else(|e| panic!("task_layout: {e}"));
    eprintln!("task_layout in {:?}: {layout:?}", start.elapsed());
    assert!(layout.switch_has_prev_state, "kernel 5.18+ passes prev_state");
    assert_eq!(btf.tracepoint_arity("sched_wakeup").ok(), Some(1));
    assert_eq!(btf.tracepoint_arity("sched_switch").ok(), Some(4));
}

/// 6.8+ keeps the group throttle clock itself: the throttle hooks are not needed (and say so),
/// though the functions they would follow are there.
#[test]
fn kernel_throttle_hooks_not_needed_with_the_self_clock() {
    use crate::kernel::feature::{throttle_hooks, throttle_split};
    let Some(btf) = kernel() else { return };
    if throttle_split::layout(&btf).is_err() {
        eprintln!("note: this kernel has no cfs_rq.throttled_clock_self, skipping");
        return;
    }
    assert!(matches!(throttle_hooks::layout(&btf), Err(BtfError::SelfThrottleClock)));
    assert!(btf.function("tg_throttle_down").is_ok() && btf.function("tg_unthrottle_up").is_ok());
}

#[test]
fn kernel_offsets_match_bpftool() {
    let Some(btf) = kernel() else { return };
    let Some(text) = bpftool() else { return };
    let dump = parse_dump(&text);
    let task = dump.struct_id("task_struct");
    let mut members = Vec::new();
    dump.flatten(task, 0, &mut members);
    let anonymous = dump.get(task).members.iter().filter(|m| m.0 == "(anon)").count();
    eprintln!(
        "task_struct: {} direct members ({anonymous} anonymous), {} reachable by name",
        dump.get(task).members.len(),
        members.len()
    );

    let layout = btf.task_layout().unwrap_or_else(|e| panic!("task_layout: {e}"));
    let oracle = |name: &str| {
        let (_, bits, ty, _) =
            members.iter().find(|m| m.0 == name).unwrap_or_else(|| panic!("bpftool: no task_struct.{name}"));
        assert_eq!(bits % 8, 0, "{name} not byte-aligned in bpftool");
        Member { offset: (bits / 8) as u32, size: dump.size(*ty) }
    };
    assert_eq!(layout.pid, oracle("pid"));
    assert_eq!(layout.tgid, oracle("tgid"));
    assert_eq!(layout.comm, oracle("comm"));
    assert_eq!(layout.prio, oracle("prio"));
    assert_eq!(layout.state, oracle("__state"));

    // Every other member too, which exercises anonymous descent wherever this kernel has it.
    let mut checked = 0;
    for (name, bits, ty, bitfield) in &members {
        let got = btf.member("task_struct", name);
        if *bitfield != 0 {
            assert!(matches!(got, Err(BtfError::Bitfield { .. })), "{name}: {got:?}");
            continue;
        }
        let got = got.unwrap_or_else(|e| panic!("task_struct.{name}: {e}"));
        assert_eq!(u64::from(got.offset) * 8, *bits, "task_struct.{name} offset");
        if let "STRUCT" | "UNION" | "INT" | "ARRAY" | "PTR" | "ENUM" = dump.get(dump.resolve(*ty)).kind.as_str() {
            assert_eq!(got.size, dump.size(*ty), "task_struct.{name} size");
        }
        checked += 1;
    }
    eprintln!("{checked} task_struct members agree with bpftool");

    let se = oracle("se");
    let inner = dump.resolve(members.iter().find(|m| m.0 == "se").map(|m| m.2).unwrap_or_default());
    let mut se_members = Vec::new();
    dump.flatten(inner, 0, &mut se_members);
    let (_, bits, _, _) =
        se_members.iter().find(|m| m.0 == "sum_exec_runtime").unwrap_or_else(|| panic!("no se.sum_exec_runtime"));
    let nested = btf.member("task_struct", "se.sum_exec_runtime").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(u64::from(nested.offset), u64::from(se.offset) + bits / 8);
}

#[test]
fn parse_time() {
    let Ok(bytes) = std::fs::read(VMLINUX) else {
        return;
    };
    let mut times = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let btf = Btf::parse(&bytes).unwrap_or_else(|e| panic!("{e}"));
        let layout = btf.task_layout();
        times.push(start.elapsed());
        assert!(layout.is_ok());
    }
    times.sort();
    eprintln!(
        "parse + task_layout of {} bytes: median {:?} (min {:?}, max {:?})",
        bytes.len(),
        times[2],
        times[0],
        times[4]
    );
}
