//! Test input: a description of types in, a little-endian BTF blob out; plus `sample()`, a
//! miniature kernel that exercises every kind.

use crate::kernel::btf::raw::{HEADER_LEN, MAGIC};

const INT: u32 = 1;
pub(super) const PTR: u32 = 2;
pub(super) const ARRAY: u32 = 3;
pub(super) const STRUCT: u32 = 4;
const UNION: u32 = 5;
pub(super) const TYPEDEF: u32 = 8;
const FUNC_PROTO: u32 = 13;

/// Assembles a little-endian BTF blob type by type; each method returns the new type id.
pub(super) struct Blob {
    types: Vec<u8>,
    strings: Vec<u8>,
    next_id: u32,
}

impl Blob {
    pub(super) fn new() -> Blob {
        Blob { types: Vec::new(), strings: vec![0], next_id: 1 }
    }

    fn name(&mut self, name: &str) -> u32 {
        if name.is_empty() {
            return 0;
        }
        let off = self.strings.len() as u32;
        self.strings.extend_from_slice(name.as_bytes());
        self.strings.push(0);
        off
    }

    pub(super) fn raw(
        &mut self,
        name: &str,
        kind: u32,
        kind_flag: bool,
        vlen: u32,
        size_or_type: u32,
        tail: &[u32],
    ) -> u32 {
        let name_off = self.name(name);
        let info = vlen | kind << 24 | u32::from(kind_flag) << 31;
        for word in [name_off, info, size_or_type].iter().chain(tail) {
            self.types.extend_from_slice(&word.to_le_bytes());
        }
        self.next_id += 1;
        self.next_id - 1
    }

    pub(super) fn int(&mut self, name: &str, size: u32, bits: u32) -> u32 {
        self.raw(name, INT, false, 0, size, &[bits])
    }

    pub(super) fn composite(
        &mut self,
        kind: u32,
        name: &str,
        size: u32,
        kind_flag: bool,
        members: &[(&str, u32, u32)],
    ) -> u32 {
        let mut tail = Vec::new();
        for &(member, ty, offset) in members {
            tail.extend([self.name(member), ty, offset]);
        }
        self.raw(name, kind, kind_flag, members.len() as u32, size, &tail)
    }

    /// `typedef void (*btf_trace_<tp>)(void *__data, <args>)`
    pub(super) fn tracepoint(&mut self, tp: &str, args: &[u32]) -> u32 {
        let void_ptr = self.raw("", PTR, false, 0, 0, &[]);
        let mut tail = vec![0, void_ptr];
        for &arg in args {
            tail.extend([0, arg]);
        }
        let proto = self.raw("", FUNC_PROTO, false, args.len() as u32 + 1, 0, &tail);
        let ptr = self.raw("", PTR, false, 0, proto, &[]);
        self.raw(&format!("btf_trace_{tp}"), TYPEDEF, false, 0, ptr, &[])
    }

    pub(super) fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&[1, 0]);
        let (types, strings) = (self.types.len() as u32, self.strings.len() as u32);
        for word in [HEADER_LEN, 0, types, types, strings] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.extend_from_slice(&self.types);
        out.extend_from_slice(&self.strings);
        out
    }
}

/// A miniature kernel: every kind once (so a wrong trailing length would shift all later
/// types), a `task_struct` with `pid`/`__state` inside an anonymous union/struct, a nested
/// named struct, a typedef'd member, bitfields in both encodings, and two tracepoints.
pub(super) fn sample() -> Vec<u8> {
    let mut b = Blob::new();
    let int = b.int("int", 4, 32);
    let long = b.int("long int", 8, 64);
    let char_ = b.int("char", 1, 8);
    b.raw("e", 6, false, 2, 4, &[b.strings.len() as u32, 0, 0, 1]); // ENUM, 2 values
    b.raw("fwd", 7, false, 0, 0, &[]); // FWD
    b.raw("", 9, false, 0, int, &[]); // VOLATILE
    b.raw("f", 12, false, 0, 0, &[]); // FUNC
    b.raw("v", 14, false, 0, int, &[1]); // VAR
    b.raw(".data", 15, false, 1, 8, &[0, 0, 4]); // DATASEC, 1 var
    b.raw("double", 16, false, 0, 8, &[]); // FLOAT
    b.raw("tag", 17, false, 0, int, &[u32::MAX]); // DECL_TAG
    b.raw("user", 18, false, 0, int, &[]); // TYPE_TAG
    b.raw("e64", 19, false, 1, 8, &[0, 1, 2]); // ENUM64, 1 value
    let pid_t = b.raw("pid_t", TYPEDEF, false, 0, int, &[]);
    let const_pid = b.raw("", 10, false, 0, pid_t, &[]); // CONST
    let comm = b.raw("", ARRAY, false, 0, 0, &[char_, int, 16]);
    let ids = b.composite(UNION, "", 4, false, &[("pid", const_pid, 0), ("alias", int, 0)]);
    let anon_state = b.composite(STRUCT, "", 8, false, &[("pad", int, 0), ("__state", int, 32)]);
    let inner = b.composite(STRUCT, "sched_entity", 16, false, &[("weight", int, 0), ("sum_exec_runtime", long, 64)]);
    let se_t = b.raw("se_t", TYPEDEF, false, 0, inner, &[]);
    let bits3 = b.int("int", 4, 3); // old-style bitfield: INT narrower than its size
    let task = b.composite(
        STRUCT,
        "task_struct",
        96,
        true,
        &[
            ("", anon_state, 0),
            ("prio", int, 64),
            ("", ids, 96),
            ("tgid", pid_t, 128),
            ("comm", comm, 160),
            ("se", se_t, 320),
            ("flag", int, 3 << 24 | 448),
            ("whole", int, 480),
            ("ptr", b.next_id + 1, 512), // the PTR defined right after this struct
        ],
    );
    b.raw("", PTR, false, 0, task, &[]);
    b.composite(STRUCT, "old_bits", 4, false, &[("narrow", bits3, 0)]);
    let task_ptr = b.raw("", PTR, false, 0, task, &[]);
    b.tracepoint("sched_switch", &[char_, task_ptr, task_ptr, int]);
    b.tracepoint("sched_wakeup", &[task_ptr]);
    b.bytes()
}
