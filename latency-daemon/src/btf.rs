//! Raw kernel BTF (`/sys/kernel/btf/vmlinux`) in; struct member offsets/sizes and tracepoint
//! arities out, so the kernel program can read `task_struct` on any kernel without recompiling.
//!
//! A small reader of our own: aya does not expose member lookups, and we need only three things
//! (walk members, size a type, count prototype arguments). Every read is bounds-checked because the
//! bytes come from a file; a malformed blob is an error, never a panic.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Where the running kernel publishes its own BTF (`CONFIG_DEBUG_INFO_BTF=y`).
pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

const MAGIC: u16 = 0xeb9f;
const HEADER_LEN: u32 = 24;
const TYPE_HEADER_LEN: usize = 12;
/// Bound on modifier/typedef chains and anonymous-member nesting. Real kernels stay in single
/// digits; the bound turns a hostile cycle into an error instead of a hang or a stack overflow.
const MAX_DEPTH: usize = 64;
/// Used when BTF has no `long` to measure; the daemon only runs on 64-bit kernels in practice.
const DEFAULT_POINTER_SIZE: u32 = 8;

/// Parsed BTF: the raw bytes plus a decoded header per type and a name index.
pub struct Btf {
    bytes: Vec<u8>,
    /// Index `id - 1`; id 0 is `void` and has no entry.
    types: Vec<Type>,
    strings: Range<usize>,
    /// STRUCT/UNION by name (first non-empty definition wins; dedup leaves duplicates rare).
    composites: HashMap<Box<str>, u32>,
    typedefs: HashMap<Box<str>, u32>,
    /// BTF has no pointer size of its own; like libbpf we take the size of `long`.
    pointer_size: u32,
}

/// A member's byte offset from the start of the outer struct, and its size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    pub offset: u32,
    pub size: u32,
}

/// Offsets of what the kernel program reads from `struct task_struct`, and tracepoint shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskLayout {
    pub pid: Member,
    pub tgid: Member,
    pub comm: Member,
    pub prio: Member,
    /// `__state` (5.14+) or `state` (older kernels)
    pub state: Member,
    /// true when the sched_switch tracepoint passes `prev_state` (4 args: preempt, prev, next,
    /// prev_state; since 5.18)
    pub switch_has_prev_state: bool,
}

/// The pointer chain from a task to its run queue's clock (`rq->clock`, what the kernel's own
/// `run_delay` accounting reads): `task->se.cfs_rq->rq->clock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RqClockLayout {
    pub task_se_cfs_rq: Member,
    pub cfs_rq_rq: Member,
    pub rq_clock: Member,
}

/// Why BTF could not be read or a lookup failed: one line naming the byte offset, type, struct or
/// member at fault.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error(
        "the kernel has no BTF at {path}: the monitor needs a kernel built with CONFIG_DEBUG_INFO_BTF=y"
    )]
    NoBtf { path: PathBuf },
    #[error("cannot read BTF from {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "BTF is truncated or garbled: {what} at byte offset {offset} needs {needed} bytes, only {available} remain"
    )]
    Truncated {
        what: &'static str,
        offset: u64,
        needed: u64,
        available: u64,
    },
    #[error("not BTF: magic at byte offset 0 is {found:#06x}, expected 0xeb9f")]
    BadMagic { found: u16 },
    #[error(
        "BTF at byte offset 0 is big-endian (magic bytes eb 9f); only little-endian BTF is supported"
    )]
    ForeignEndian,
    #[error("unsupported BTF version {version} at byte offset 2 (only version 1 is known)")]
    UnsupportedVersion { version: u8 },
    #[error("BTF header length {hdr_len} at byte offset 4 is shorter than the 24-byte header")]
    ShortHeader { hdr_len: u32 },
    #[error("BTF type [{id}] at byte offset {offset} has unknown kind {kind}")]
    UnknownKind { id: u32, kind: u32, offset: usize },
    #[error("BTF string at string-section offset {offset} is {problem}")]
    BadString { offset: u32, problem: &'static str },
    #[error("BTF refers to type id {id}, outside this blob's 1..={count}")]
    BadTypeId { id: u32, count: usize },
    #[error("BTF types starting at [{id}] nest or chain deeper than {MAX_DEPTH} (a cycle?)")]
    TooDeep { id: u32 },
    #[error("kernel BTF has no struct or union named `{name}`")]
    StructNotFound { name: String },
    #[error("struct {struct_name} has no member `{missing}` (looking up `{path}`)")]
    MemberNotFound {
        struct_name: String,
        path: String,
        missing: String,
    },
    #[error(
        "{struct_name}.{path} has BTF kind {kind}, not STRUCT or UNION, so it has no member `{next}`"
    )]
    NotComposite {
        struct_name: String,
        path: String,
        kind: &'static str,
        next: String,
    },
    #[error("{struct_name}.{path} is a {bits}-bit bitfield; only whole-byte members can be read")]
    Bitfield {
        struct_name: String,
        path: String,
        bits: u32,
    },
    #[error("{struct_name}.{path} starts at bit {bit_offset}, not on a byte boundary")]
    Unaligned {
        struct_name: String,
        path: String,
        bit_offset: u64,
    },
    #[error("BTF type [{id}] has kind {kind}, which has no size")]
    NoSize { id: u32, kind: &'static str },
    #[error("size of BTF type [{id}] overflows u32")]
    SizeOverflow { id: u32 },
    #[error("{struct_name}.{member} is {found} bytes, expected {expected}")]
    SizeMismatch {
        struct_name: String,
        member: String,
        expected: u32,
        found: u32,
    },
    #[error("kernel BTF has no typedef btf_trace_{tracepoint}: no such raw tracepoint")]
    TracepointNotFound { tracepoint: String },
    #[error(
        "btf_trace_{tracepoint} is not a pointer to a prototype starting with `void *__data` ({found})"
    )]
    NotTracepointProto {
        tracepoint: String,
        found: &'static str,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Int,
    Ptr,
    Array,
    Struct,
    Union,
    Enum,
    Fwd,
    Typedef,
    Volatile,
    Const,
    Restrict,
    Func,
    FuncProto,
    Var,
    Datasec,
    Float,
    DeclTag,
    TypeTag,
    Enum64,
}

impl Kind {
    fn from_raw(raw: u32) -> Option<Kind> {
        use Kind::*;
        const KINDS: [Kind; 19] = [
            Int, Ptr, Array, Struct, Union, Enum, Fwd, Typedef, Volatile, Const, Restrict, Func,
            FuncProto, Var, Datasec, Float, DeclTag, TypeTag, Enum64,
        ];
        // Kind numbers are 1-based (0 is BTF_KIND_UNKN).
        KINDS
            .get(usize::try_from(raw.checked_sub(1)?).ok()?)
            .copied()
    }

    fn name(self) -> &'static str {
        use Kind::*;
        match self {
            Int => "INT",
            Ptr => "PTR",
            Array => "ARRAY",
            Struct => "STRUCT",
            Union => "UNION",
            Enum => "ENUM",
            Fwd => "FWD",
            Typedef => "TYPEDEF",
            Volatile => "VOLATILE",
            Const => "CONST",
            Restrict => "RESTRICT",
            Func => "FUNC",
            FuncProto => "FUNC_PROTO",
            Var => "VAR",
            Datasec => "DATASEC",
            Float => "FLOAT",
            DeclTag => "DECL_TAG",
            TypeTag => "TYPE_TAG",
            Enum64 => "ENUM64",
        }
    }

    /// Bytes of kind-specific data following the 12-byte `btf_type`.
    fn trailing_len(self, vlen: usize) -> usize {
        use Kind::*;
        match self {
            Int | Var | DeclTag => 4,
            Array => 12,
            Struct | Union | Datasec | Enum64 => 12 * vlen,
            Enum | FuncProto => 8 * vlen,
            Ptr | Fwd | Typedef | Volatile | Const | Restrict | Func | Float | TypeTag => 0,
        }
    }

    /// Kinds that only qualify or rename another type.
    fn is_alias(self) -> bool {
        matches!(
            self,
            Kind::Typedef | Kind::Volatile | Kind::Const | Kind::Restrict | Kind::TypeTag
        )
    }
}

#[derive(Clone, Copy, Debug)]
struct Type {
    name_off: u32,
    kind: Kind,
    kind_flag: bool,
    vlen: u16,
    /// `size` for INT/STRUCT/UNION/ENUM/FLOAT, `type` for the referring kinds.
    size_or_type: u32,
    /// Absolute offset of the kind-specific data in `Btf::bytes`.
    data: usize,
}

/// One `btf_member`, decoded.
struct RawMember {
    name_off: u32,
    ty: u32,
    bit_offset: u32,
    bitfield_size: u32,
}

fn read_u32(bytes: &[u8], offset: usize, what: &'static str) -> Result<u32, BtfError> {
    offset
        .checked_add(4)
        .and_then(|end| bytes.get(offset..end))
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or(BtfError::Truncated {
            what,
            offset: offset as u64,
            needed: 4,
            available: bytes.len().saturating_sub(offset) as u64,
        })
}

/// The byte range `hdr_len + off .. + len` of a section, checked against the blob.
fn section(
    bytes: &[u8],
    hdr_len: u32,
    off: u32,
    len: u32,
    what: &'static str,
) -> Result<Range<usize>, BtfError> {
    let start = u64::from(hdr_len) + u64::from(off);
    let end = start + u64::from(len);
    let truncated = BtfError::Truncated {
        what,
        offset: start,
        needed: u64::from(len),
        available: (bytes.len() as u64).saturating_sub(start),
    };
    if end > bytes.len() as u64 {
        return Err(truncated);
    }
    // Both fit in usize: they are at most bytes.len().
    match (usize::try_from(start), usize::try_from(end)) {
        (Ok(start), Ok(end)) => Ok(start..end),
        _ => Err(truncated),
    }
}

impl Btf {
    /// Reads the running kernel's BTF from [`VMLINUX`].
    pub fn from_sys_fs() -> Result<Btf, BtfError> {
        Btf::from_file(Path::new(VMLINUX))
    }

    pub fn from_file(path: &Path) -> Result<Btf, BtfError> {
        let bytes = std::fs::read(path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => BtfError::NoBtf {
                path: path.to_owned(),
            },
            _ => BtfError::Read {
                path: path.to_owned(),
                source,
            },
        })?;
        Btf::parse_owned(bytes)
    }

    pub fn parse(bytes: &[u8]) -> Result<Btf, BtfError> {
        Btf::parse_owned(bytes.to_vec())
    }

    fn parse_owned(bytes: Vec<u8>) -> Result<Btf, BtfError> {
        let magic = bytes
            .get(0..2)
            .and_then(|b| b.try_into().ok())
            .map(u16::from_le_bytes)
            .ok_or(BtfError::Truncated {
                what: "header",
                offset: 0,
                needed: u64::from(HEADER_LEN),
                available: bytes.len() as u64,
            })?;
        if magic != MAGIC {
            return Err(if magic.swap_bytes() == MAGIC {
                BtfError::ForeignEndian
            } else {
                BtfError::BadMagic { found: magic }
            });
        }
        match bytes.get(2) {
            Some(1) => {}
            Some(&version) => return Err(BtfError::UnsupportedVersion { version }),
            None => {
                return Err(BtfError::Truncated {
                    what: "header",
                    offset: 0,
                    needed: u64::from(HEADER_LEN),
                    available: bytes.len() as u64,
                });
            }
        }
        let hdr_len = read_u32(&bytes, 4, "header")?;
        if hdr_len < HEADER_LEN {
            return Err(BtfError::ShortHeader { hdr_len });
        }
        let [type_off, type_len, str_off, str_len] =
            [8, 12, 16, 20].map(|at| read_u32(&bytes, at, "header"));
        let type_range = section(&bytes, hdr_len, type_off?, type_len?, "type section")?;
        let strings = section(&bytes, hdr_len, str_off?, str_len?, "string section")?;
        let types = decode_types(&bytes, type_range)?;

        let mut btf = Btf {
            bytes,
            types,
            strings,
            composites: HashMap::new(),
            typedefs: HashMap::new(),
            pointer_size: DEFAULT_POINTER_SIZE,
        };
        btf.index()?;
        Ok(btf)
    }

    /// Fills the name maps and the pointer size in one pass over the decoded types.
    fn index(&mut self) -> Result<(), BtfError> {
        let mut composites = HashMap::new();
        let mut typedefs = HashMap::new();
        for (id, t) in (1u32..).zip(&self.types) {
            if t.name_off == 0 {
                continue;
            }
            match t.kind {
                Kind::Struct | Kind::Union => {
                    let name = self.str_at(t.name_off)?;
                    // Prefer a definition with members over an empty stub of the same name.
                    let replace = match composites.get(name) {
                        None => true,
                        Some(&old) => self.ty(old)?.vlen == 0 && t.vlen > 0,
                    };
                    if replace {
                        composites.insert(Box::from(name), id);
                    }
                }
                Kind::Typedef => {
                    typedefs
                        .entry(Box::from(self.str_at(t.name_off)?))
                        .or_insert(id);
                }
                Kind::Int => {
                    let name = self.str_at(t.name_off)?;
                    if matches!(name, "long int" | "long unsigned int") && t.size_or_type != 0 {
                        self.pointer_size = t.size_or_type;
                    }
                }
                _ => {}
            }
        }
        self.composites = composites;
        self.typedefs = typedefs;
        Ok(())
    }

    /// Byte offset (from the start of the outer struct) and size of a member. `path` is
    /// dot-separated named members, e.g. "pid" or "se.sum_exec_runtime"; members inside anonymous
    /// structs/unions are found transparently, and typedefs/const/volatile are resolved both for
    /// sizes and for descending. A bitfield member is an error (the kernel side does byte loads).
    pub fn member(&self, struct_name: &str, path: &str) -> Result<Member, BtfError> {
        let mut container =
            *self
                .composites
                .get(struct_name)
                .ok_or_else(|| BtfError::StructNotFound {
                    name: struct_name.to_owned(),
                })?;
        let mut bits: u64 = 0;
        let mut walked = String::new(); // the part of `path` resolved so far, for errors
        for name in path.split('.') {
            let (cid, ct) = self.resolve(container)?;
            if !matches!(ct.kind, Kind::Struct | Kind::Union) {
                return Err(BtfError::NotComposite {
                    struct_name: struct_name.to_owned(),
                    path: walked,
                    kind: ct.kind.name(),
                    next: name.to_owned(),
                });
            }
            if !walked.is_empty() {
                walked.push('.');
            }
            walked.push_str(name);
            let found = match name {
                "" => None,
                _ => self.find(cid, name, 0)?,
            };
            let (bit_offset, m) = found.ok_or_else(|| BtfError::MemberNotFound {
                struct_name: struct_name.to_owned(),
                path: path.to_owned(),
                missing: walked.clone(),
            })?;
            if m.bitfield_size != 0 {
                return Err(BtfError::Bitfield {
                    struct_name: struct_name.to_owned(),
                    path: walked,
                    bits: m.bitfield_size,
                });
            }
            bits += bit_offset;
            container = m.ty;
        }
        let unaligned = |bit_offset| BtfError::Unaligned {
            struct_name: struct_name.to_owned(),
            path: path.to_owned(),
            bit_offset,
        };
        if !bits.is_multiple_of(8) {
            return Err(unaligned(bits));
        }
        let offset = u32::try_from(bits / 8).map_err(|_| unaligned(bits))?;
        // Without kind_flag, a bitfield is encoded in the INT itself (fewer bits than its size).
        let (rid, rt) = self.resolve(container)?;
        if rt.kind == Kind::Int {
            let encoding = read_u32(&self.bytes, rt.data, "INT encoding")?;
            let (nr_bits, int_offset) = (encoding & 0xff, (encoding >> 16) & 0xff);
            if int_offset != 0 || u64::from(nr_bits) != u64::from(rt.size_or_type) * 8 {
                return Err(BtfError::Bitfield {
                    struct_name: struct_name.to_owned(),
                    path: path.to_owned(),
                    bits: nr_bits,
                });
            }
        }
        let size = self.size_of(rid, 0)?;
        Ok(Member { offset, size })
    }

    /// Number of tracepoint arguments, from the kernel's
    /// `typedef void (*btf_trace_<name>)(void *__data, ...)`, not counting `__data`.
    pub fn tracepoint_arity(&self, tracepoint: &str) -> Result<usize, BtfError> {
        let not_proto = |found| BtfError::NotTracepointProto {
            tracepoint: tracepoint.to_owned(),
            found,
        };
        let id = *self
            .typedefs
            .get(format!("btf_trace_{tracepoint}").as_str())
            .ok_or_else(|| BtfError::TracepointNotFound {
                tracepoint: tracepoint.to_owned(),
            })?;
        let (_, ptr) = self.resolve(id)?;
        if ptr.kind != Kind::Ptr {
            return Err(not_proto(ptr.kind.name()));
        }
        if ptr.size_or_type == 0 {
            return Err(not_proto("pointer to void"));
        }
        let (_, proto) = self.resolve(ptr.size_or_type)?;
        if proto.kind != Kind::FuncProto {
            return Err(not_proto(proto.kind.name()));
        }
        usize::from(proto.vlen)
            .checked_sub(1)
            .ok_or(not_proto("prototype with no arguments"))
    }

    /// Everything the kernel program needs from `task_struct`, with sizes checked against the
    /// loads it does: 4-byte pid/tgid/prio/state and the 16-byte comm (TASK_COMM_LEN).
    pub fn task_layout(&self) -> Result<TaskLayout, BtfError> {
        const TASK: &str = "task_struct";
        let sized = |member: &str, expected: u32| -> Result<Member, BtfError> {
            let m = self.member(TASK, member)?;
            check_size(TASK, member, m, &[expected])
        };
        let state = match self.member(TASK, "__state") {
            Ok(m) => check_size(TASK, "__state", m, &[4])?,
            // Before 5.14 it was `volatile long state`. Every state bit is in its low 4 bytes, and
            // on a little-endian kernel (the only BTF we accept) those come first, so the kernel
            // program's 4-byte load at this offset still reads the state.
            Err(BtfError::MemberNotFound { .. }) => {
                check_size(TASK, "state", self.member(TASK, "state")?, &[4, 8])?
            }
            Err(e) => return Err(e),
        };
        Ok(TaskLayout {
            pid: sized("pid", 4)?,
            tgid: sized("tgid", 4)?,
            comm: sized("comm", 16)?,
            prio: sized("prio", 4)?,
            state,
            switch_has_prev_state: self.tracepoint_arity("sched_switch")? >= 4,
        })
    }

    /// Offsets to reach `rq->clock` from a task; needs CONFIG_FAIR_GROUP_SCHED (`cfs_rq.rq`).
    pub fn rq_clock_layout(&self) -> Result<RqClockLayout, BtfError> {
        let ptr = |s: &str, member: &str| -> Result<Member, BtfError> {
            let m = self.member(s, member)?;
            check_size(s, member, m, &[8])
        };
        Ok(RqClockLayout {
            task_se_cfs_rq: ptr("task_struct", "se.cfs_rq")?,
            cfs_rq_rq: ptr("cfs_rq", "rq")?,
            rq_clock: ptr("rq", "clock")?,
        })
    }

    /// Depth-first search for `name` in a struct/union, descending into anonymous members.
    /// Returns the bit offset from the start of `id` and the member itself.
    fn find(
        &self,
        id: u32,
        name: &str,
        depth: usize,
    ) -> Result<Option<(u64, RawMember)>, BtfError> {
        if depth > MAX_DEPTH {
            return Err(BtfError::TooDeep { id });
        }
        let t = self.ty(id)?;
        for i in 0..usize::from(t.vlen) {
            let m = self.raw_member(t, i)?;
            let member_name = if m.name_off == 0 {
                ""
            } else {
                self.str_at(m.name_off)?
            };
            if member_name == name {
                return Ok(Some((u64::from(m.bit_offset), m)));
            }
            if !member_name.is_empty() {
                continue;
            }
            let (inner, it) = self.resolve(m.ty)?;
            if matches!(it.kind, Kind::Struct | Kind::Union)
                && let Some((bits, found)) = self.find(inner, name, depth + 1)?
            {
                return Ok(Some((bits + u64::from(m.bit_offset), found)));
            }
        }
        Ok(None)
    }

    fn raw_member(&self, t: &Type, i: usize) -> Result<RawMember, BtfError> {
        let at = t.data + i * 12;
        let name_off = read_u32(&self.bytes, at, "struct member")?;
        let ty = read_u32(&self.bytes, at + 4, "struct member")?;
        let offset = read_u32(&self.bytes, at + 8, "struct member")?;
        let (bit_offset, bitfield_size) = if t.kind_flag {
            (offset & 0x00ff_ffff, offset >> 24)
        } else {
            (offset, 0)
        };
        Ok(RawMember {
            name_off,
            ty,
            bit_offset,
            bitfield_size,
        })
    }

    /// Size in bytes of a type, through aliases and arrays.
    fn size_of(&self, id: u32, depth: usize) -> Result<u32, BtfError> {
        if depth > MAX_DEPTH {
            return Err(BtfError::TooDeep { id });
        }
        if id == 0 {
            return Err(BtfError::NoSize { id, kind: "void" });
        }
        let (rid, t) = self.resolve(id)?;
        match t.kind {
            Kind::Int | Kind::Struct | Kind::Union | Kind::Enum | Kind::Enum64 | Kind::Float => {
                Ok(t.size_or_type)
            }
            Kind::Ptr => Ok(self.pointer_size),
            Kind::Array => {
                let elem = read_u32(&self.bytes, t.data, "ARRAY")?;
                let nelems = read_u32(&self.bytes, t.data + 8, "ARRAY")?;
                self.size_of(elem, depth + 1)?
                    .checked_mul(nelems)
                    .ok_or(BtfError::SizeOverflow { id: rid })
            }
            kind => Err(BtfError::NoSize {
                id: rid,
                kind: kind.name(),
            }),
        }
    }

    /// Follows typedef/const/volatile/restrict/type_tag to the underlying type.
    fn resolve(&self, id: u32) -> Result<(u32, &Type), BtfError> {
        let mut current = id;
        for _ in 0..MAX_DEPTH {
            let t = self.ty(current)?;
            if !t.kind.is_alias() {
                return Ok((current, t));
            }
            current = t.size_or_type;
        }
        Err(BtfError::TooDeep { id })
    }

    fn ty(&self, id: u32) -> Result<&Type, BtfError> {
        usize::try_from(id)
            .ok()
            .and_then(|id| id.checked_sub(1))
            .and_then(|index| self.types.get(index))
            .ok_or(BtfError::BadTypeId {
                id,
                count: self.types.len(),
            })
    }

    fn str_at(&self, offset: u32) -> Result<&str, BtfError> {
        let bad = |problem| BtfError::BadString { offset, problem };
        let start = usize::try_from(offset)
            .ok()
            .and_then(|o| self.strings.start.checked_add(o))
            .filter(|&s| s < self.strings.end)
            .ok_or(bad("past the end of the string section"))?;
        let tail = self
            .bytes
            .get(start..self.strings.end)
            .ok_or(bad("past the end of the blob"))?;
        let len = tail
            .iter()
            .position(|&b| b == 0)
            .ok_or(bad("not NUL-terminated"))?;
        let raw = tail.get(..len).ok_or(bad("not NUL-terminated"))?;
        std::str::from_utf8(raw).map_err(|_| bad("not UTF-8"))
    }
}

/// Walks the type section once, checking that each type's trailing data fits.
fn decode_types(bytes: &[u8], range: Range<usize>) -> Result<Vec<Type>, BtfError> {
    // Most vmlinux types are small; this estimate avoids most regrowth without overshooting much.
    let mut types = Vec::with_capacity(range.len() / 24);
    let mut pos = range.start;
    while pos < range.end {
        // Only for error messages; a u32-sized section cannot hold 2^32 12-byte types.
        let id = u32::try_from(types.len() + 1).unwrap_or(u32::MAX);
        // Measured against the type section, not the blob: the strings follow it.
        let truncated = |needed: usize| BtfError::Truncated {
            what: "type",
            offset: pos as u64,
            needed: needed as u64,
            available: (range.end - pos) as u64,
        };
        let data = pos + TYPE_HEADER_LEN;
        if data > range.end {
            return Err(truncated(TYPE_HEADER_LEN));
        }
        let name_off = read_u32(bytes, pos, "type")?;
        let info = read_u32(bytes, pos + 4, "type")?;
        let size_or_type = read_u32(bytes, pos + 8, "type")?;
        let raw_kind = (info >> 24) & 0x1f;
        let kind = Kind::from_raw(raw_kind).ok_or(BtfError::UnknownKind {
            id,
            kind: raw_kind,
            offset: pos,
        })?;
        let vlen = (info & 0xffff) as u16; // the mask makes the cast lossless
        let trailing = kind.trailing_len(usize::from(vlen));
        let end = data + trailing;
        if end > range.end {
            return Err(truncated(TYPE_HEADER_LEN + trailing));
        }
        types.push(Type {
            name_off,
            kind,
            kind_flag: info >> 31 == 1,
            vlen,
            size_or_type,
            data,
        });
        pos = end;
    }
    Ok(types)
}

/// `allowed[0]` is the size current kernels use and the one an error reports as expected.
fn check_size(struct_name: &str, member: &str, m: Member, allowed: &[u32]) -> Result<Member, BtfError> {
    if allowed.contains(&m.size) {
        return Ok(m);
    }
    Err(BtfError::SizeMismatch {
        struct_name: struct_name.to_owned(),
        member: member.to_owned(),
        expected: allowed.first().copied().unwrap_or_default(),
        found: m.size,
    })
}

impl fmt::Debug for Btf {
    // The derived form would print every one of ~150k types.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Btf")
            .field("bytes", &self.bytes.len())
            .field("types", &self.types.len())
            .field("strings", &self.strings.len())
            .field("pointer_size", &self.pointer_size)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::Instant;

    const INT: u32 = 1;
    const PTR: u32 = 2;
    const ARRAY: u32 = 3;
    const STRUCT: u32 = 4;
    const UNION: u32 = 5;
    const TYPEDEF: u32 = 8;
    const FUNC_PROTO: u32 = 13;

    /// Assembles a little-endian BTF blob type by type; each method returns the new type id.
    struct Blob {
        types: Vec<u8>,
        strings: Vec<u8>,
        next_id: u32,
    }

    impl Blob {
        fn new() -> Blob {
            Blob {
                types: Vec::new(),
                strings: vec![0],
                next_id: 1,
            }
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

        fn raw(
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

        fn int(&mut self, name: &str, size: u32, bits: u32) -> u32 {
            self.raw(name, INT, false, 0, size, &[bits])
        }

        fn composite(
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
        fn tracepoint(&mut self, tp: &str, args: &[u32]) -> u32 {
            let void_ptr = self.raw("", PTR, false, 0, 0, &[]);
            let mut tail = vec![0, void_ptr];
            for &arg in args {
                tail.extend([0, arg]);
            }
            let proto = self.raw("", FUNC_PROTO, false, args.len() as u32 + 1, 0, &tail);
            let ptr = self.raw("", PTR, false, 0, proto, &[]);
            self.raw(&format!("btf_trace_{tp}"), TYPEDEF, false, 0, ptr, &[])
        }

        fn bytes(&self) -> Vec<u8> {
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
    fn sample() -> Vec<u8> {
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
        let ids = b.composite(
            UNION,
            "",
            4,
            false,
            &[("pid", const_pid, 0), ("alias", int, 0)],
        );
        let anon_state = b.composite(
            STRUCT,
            "",
            8,
            false,
            &[("pad", int, 0), ("__state", int, 32)],
        );
        let inner = b.composite(
            STRUCT,
            "sched_entity",
            16,
            false,
            &[("weight", int, 0), ("sum_exec_runtime", long, 64)],
        );
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

    fn parse_sample() -> Btf {
        Btf::parse(&sample()).unwrap_or_else(|e| panic!("sample BTF must parse: {e}"))
    }

    fn member(btf: &Btf, s: &str, path: &str) -> Member {
        btf.member(s, path)
            .unwrap_or_else(|e| panic!("{s}.{path}: {e}"))
    }

    #[test]
    fn finds_members_in_anonymous_unions_and_structs() {
        let btf = parse_sample();
        assert_eq!(
            member(&btf, "task_struct", "pid"),
            Member {
                offset: 12,
                size: 4
            }
        );
        assert_eq!(
            member(&btf, "task_struct", "alias"),
            Member {
                offset: 12,
                size: 4
            }
        );
        assert_eq!(
            member(&btf, "task_struct", "__state"),
            Member { offset: 4, size: 4 }
        );
        assert_eq!(
            member(&btf, "task_struct", "prio"),
            Member { offset: 8, size: 4 }
        );
        assert_eq!(
            member(&btf, "task_struct", "comm"),
            Member {
                offset: 20,
                size: 16
            }
        );
        assert_eq!(
            member(&btf, "task_struct", "ptr"),
            Member {
                offset: 64,
                size: 8
            }
        );
        // In a kind_flag struct a plain member has bitfield_size 0 and is fine.
        assert_eq!(
            member(&btf, "task_struct", "whole"),
            Member {
                offset: 60,
                size: 4
            }
        );
    }

    #[test]
    fn nested_path_through_typedef() {
        let btf = parse_sample();
        assert_eq!(
            member(&btf, "task_struct", "se"),
            Member {
                offset: 40,
                size: 16
            }
        );
        assert_eq!(
            member(&btf, "task_struct", "se.sum_exec_runtime"),
            Member {
                offset: 48,
                size: 8
            }
        );
    }

    #[test]
    fn typedef_member_size() {
        let btf = parse_sample();
        assert_eq!(
            member(&btf, "task_struct", "tgid"),
            Member {
                offset: 16,
                size: 4
            }
        );
    }

    #[test]
    fn bitfields_are_errors_in_both_encodings() {
        let btf = parse_sample();
        let err = btf.member("task_struct", "flag").err();
        assert!(
            matches!(err, Some(BtfError::Bitfield { bits: 3, .. })),
            "{err:?}"
        );
        let err = btf.member("old_bits", "narrow").err();
        assert!(
            matches!(err, Some(BtfError::Bitfield { bits: 3, .. })),
            "{err:?}"
        );
    }

    #[test]
    fn lookup_errors_name_what_is_missing() {
        let btf = parse_sample();
        let msg = |r: Result<Member, BtfError>| r.err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            msg(btf.member("task_struct", "se.nope")),
            "struct task_struct has no member `se.nope` (looking up `se.nope`)"
        );
        assert_eq!(
            msg(btf.member("mm_struct", "pgd")),
            "kernel BTF has no struct or union named `mm_struct`"
        );
        assert_eq!(
            msg(btf.member("task_struct", "prio.x")),
            "task_struct.prio has BTF kind INT, not STRUCT or UNION, so it has no member `x`"
        );
        assert!(matches!(
            btf.member("task_struct", ""),
            Err(BtfError::MemberNotFound { .. })
        ));
        assert!(matches!(
            btf.member("task_struct", "se."),
            Err(BtfError::MemberNotFound { .. })
        ));
    }

    #[test]
    fn tracepoint_arity_skips_data_pointer() {
        let btf = parse_sample();
        assert_eq!(btf.tracepoint_arity("sched_switch").ok(), Some(4));
        assert_eq!(btf.tracepoint_arity("sched_wakeup").ok(), Some(1));
        assert!(matches!(
            btf.tracepoint_arity("sched_nope"),
            Err(BtfError::TracepointNotFound { .. })
        ));
        assert!(matches!(
            btf.tracepoint_arity("pid"),
            Err(BtfError::TracepointNotFound { .. })
        ));
    }

    #[test]
    fn task_layout_on_sample() {
        let layout = parse_sample()
            .task_layout()
            .unwrap_or_else(|e| panic!("{e}"));
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
        let members = [
            (state, state_ty, 0),
            ("prio", prio_ty, 64),
            ("pid", int, 96),
            ("tgid", int, 128),
            ("comm", comm, 160),
        ];
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
        assert_eq!(
            err(flat_task("__state", 4, 2)).as_deref(),
            Some("task_struct.prio is 2 bytes, expected 4")
        );
        assert_eq!(
            err(flat_task("__state", 8, 4)).as_deref(),
            Some("task_struct.__state is 8 bytes, expected 4")
        );
        assert_eq!(
            err(flat_task("status", 4, 4)).as_deref(),
            Some("struct task_struct has no member `state` (looking up `state`)")
        );
    }

    #[test]
    fn header_errors() {
        let good = sample();
        let msg = |bytes: &[u8]| {
            Btf::parse(bytes)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let mut bad = good.clone();
        bad[0] = 0;
        assert_eq!(
            msg(&bad),
            "not BTF: magic at byte offset 0 is 0xeb00, expected 0xeb9f"
        );
        bad[..2].copy_from_slice(&[0xeb, 0x9f]);
        assert!(msg(&bad).contains("big-endian"));
        let mut bad = good.clone();
        bad[2] = 2;
        assert!(msg(&bad).contains("version 2"));
        let mut bad = good.clone();
        bad[4] = 8;
        assert!(msg(&bad).contains("shorter than the 24-byte header"));
        assert!(msg(&good[..good.len() - 1]).contains("string section at byte offset"));
        assert_eq!(
            msg(&good[..10]),
            "BTF is truncated or garbled: header at byte offset 8 needs 4 bytes, only 2 remain"
        );
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
        assert_eq!(
            msg(&bad),
            "BTF type [1] at byte offset 24 has unknown kind 20"
        );
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let good = sample();
        for len in 0..good.len() {
            assert!(
                Btf::parse(&good[..len]).is_err(),
                "prefix of {len} bytes parsed"
            );
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
        assert!(matches!(
            btf.member("loop", "x"),
            Err(BtfError::TooDeep { .. })
        ));
        assert!(matches!(
            btf.member("holder", "x"),
            Err(BtfError::TooDeep { .. })
        ));
        assert!(matches!(
            btf.member("arr", "x"),
            Err(BtfError::TooDeep { .. })
        ));
    }

    #[test]
    fn missing_file_explains_config() {
        let err = Btf::from_file(Path::new("/nonexistent/vmlinux"))
            .err()
            .map(|e| e.to_string());
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
        let layout = btf
            .task_layout()
            .unwrap_or_else(|e| panic!("task_layout: {e}"));
        eprintln!("task_layout in {:?}: {layout:?}", start.elapsed());
        assert!(
            layout.switch_has_prev_state,
            "kernel 5.18+ passes prev_state"
        );
        assert_eq!(btf.tracepoint_arity("sched_wakeup").ok(), Some(1));
        assert_eq!(btf.tracepoint_arity("sched_switch").ok(), Some(4));
    }

    /// `bpftool btf dump format raw`, indexed by id: kind, name, `key=value` fields, members.
    struct Dump {
        types: HashMap<u32, DumpType>,
    }

    struct DumpType {
        kind: String,
        name: String,
        fields: HashMap<String, String>,
        /// (name, type_id, bits_offset, bitfield_size)
        members: Vec<(String, u32, u64, u32)>,
    }

    fn bpftool() -> Option<String> {
        let found = ["/usr/sbin/bpftool", "/usr/bin/bpftool", "/sbin/bpftool"]
            .into_iter()
            .find(|p| Path::new(p).exists());
        if found.is_none() {
            eprintln!("note: bpftool not installed; skipping the bpftool comparison");
        }
        let out = Command::new(found?)
            .args(["btf", "dump", "file", VMLINUX, "format", "raw"])
            .output()
            .unwrap_or_else(|e| panic!("running bpftool: {e}"));
        assert!(
            out.status.success(),
            "bpftool failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(String::from_utf8(out.stdout).unwrap_or_else(|e| panic!("bpftool output: {e}")))
    }

    fn quoted(s: &str) -> (String, &str) {
        let s = s.trim_start().trim_start_matches('\'');
        let end = s
            .find('\'')
            .unwrap_or_else(|| panic!("unterminated name in {s}"));
        (s[..end].to_owned(), &s[end + 1..])
    }

    fn fields(s: &str) -> HashMap<String, String> {
        s.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    fn parse_dump(text: &str) -> Dump {
        let mut types = HashMap::new();
        let mut current: Option<u32> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix('[') {
                let (id, rest) = rest
                    .split_once("] ")
                    .unwrap_or_else(|| panic!("bad line {line}"));
                let id: u32 = id
                    .parse()
                    .unwrap_or_else(|e| panic!("bad id in {line}: {e}"));
                let (kind, rest) = rest
                    .split_once(' ')
                    .unwrap_or_else(|| panic!("bad line {line}"));
                let (name, rest) = quoted(rest);
                let t = DumpType {
                    kind: kind.to_owned(),
                    name,
                    fields: fields(rest),
                    members: Vec::new(),
                };
                types.insert(id, t);
                current = Some(id);
            } else if let Some(rest) = line.strip_prefix('\t') {
                let Some(t) = current.and_then(|id| types.get_mut(&id)) else {
                    continue;
                };
                if t.kind != "STRUCT" && t.kind != "UNION" {
                    continue;
                }
                let (name, rest) = quoted(rest);
                let f = fields(rest);
                let num = |k: &str| {
                    f.get(k).map(|v| {
                        v.parse::<u64>()
                            .unwrap_or_else(|e| panic!("{k} in {line}: {e}"))
                    })
                };
                let ty = num("type_id").unwrap_or_else(|| panic!("no type_id in {line}")) as u32;
                let bits = num("bits_offset").unwrap_or_else(|| panic!("no bits_offset in {line}"));
                t.members
                    .push((name, ty, bits, num("bitfield_size").unwrap_or(0) as u32));
            }
        }
        Dump { types }
    }

    impl Dump {
        fn get(&self, id: u32) -> &DumpType {
            self.types
                .get(&id)
                .unwrap_or_else(|| panic!("bpftool dump has no [{id}]"))
        }

        fn field(&self, id: u32, key: &str) -> u32 {
            let t = self.get(id);
            let v = t
                .fields
                .get(key)
                .unwrap_or_else(|| panic!("[{id}] {} has no {key}", t.kind));
            v.parse()
                .unwrap_or_else(|e| panic!("[{id}] {key}={v}: {e}"))
        }

        fn resolve(&self, mut id: u32) -> u32 {
            while matches!(
                self.get(id).kind.as_str(),
                "TYPEDEF" | "CONST" | "VOLATILE" | "RESTRICT" | "TYPE_TAG"
            ) {
                id = self.field(id, "type_id");
            }
            id
        }

        fn size(&self, id: u32) -> u32 {
            let id = self.resolve(id);
            match self.get(id).kind.as_str() {
                "ARRAY" => self.size(self.field(id, "type_id")) * self.field(id, "nr_elems"),
                "PTR" => 8,
                _ => self.field(id, "size"),
            }
        }

        /// Every named member reachable from `id` through anonymous members, with its absolute
        /// bit offset: (name, bits, type_id, bitfield_size).
        fn flatten(&self, id: u32, base: u64, out: &mut Vec<(String, u64, u32, u32)>) {
            for (name, ty, bits, bitfield) in &self.get(id).members {
                if name == "(anon)" {
                    let inner = self.resolve(*ty);
                    if matches!(self.get(inner).kind.as_str(), "STRUCT" | "UNION") {
                        self.flatten(inner, base + bits, out);
                    }
                } else {
                    out.push((name.clone(), base + bits, *ty, *bitfield));
                }
            }
        }

        fn struct_id(&self, name: &str) -> u32 {
            let mut ids: Vec<_> = self
                .types
                .iter()
                .filter(|(_, t)| t.kind == "STRUCT" && t.name == name && !t.members.is_empty())
                .map(|(&id, _)| id)
                .collect();
            ids.sort();
            *ids.first()
                .unwrap_or_else(|| panic!("bpftool shows no STRUCT '{name}'"))
        }
    }

    #[test]
    fn kernel_offsets_match_bpftool() {
        let Some(btf) = kernel() else { return };
        let Some(text) = bpftool() else { return };
        let dump = parse_dump(&text);
        let task = dump.struct_id("task_struct");
        let mut members = Vec::new();
        dump.flatten(task, 0, &mut members);
        let anonymous = dump
            .get(task)
            .members
            .iter()
            .filter(|m| m.0 == "(anon)")
            .count();
        eprintln!(
            "task_struct: {} direct members ({anonymous} anonymous), {} reachable by name",
            dump.get(task).members.len(),
            members.len()
        );

        let layout = btf
            .task_layout()
            .unwrap_or_else(|e| panic!("task_layout: {e}"));
        let oracle = |name: &str| {
            let (_, bits, ty, _) = members
                .iter()
                .find(|m| m.0 == name)
                .unwrap_or_else(|| panic!("bpftool: no task_struct.{name}"));
            assert_eq!(bits % 8, 0, "{name} not byte-aligned in bpftool");
            Member {
                offset: (bits / 8) as u32,
                size: dump.size(*ty),
            }
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
                assert!(
                    matches!(got, Err(BtfError::Bitfield { .. })),
                    "{name}: {got:?}"
                );
                continue;
            }
            let got = got.unwrap_or_else(|e| panic!("task_struct.{name}: {e}"));
            assert_eq!(
                u64::from(got.offset) * 8,
                *bits,
                "task_struct.{name} offset"
            );
            if let "STRUCT" | "UNION" | "INT" | "ARRAY" | "PTR" | "ENUM" =
                dump.get(dump.resolve(*ty)).kind.as_str()
            {
                assert_eq!(got.size, dump.size(*ty), "task_struct.{name} size");
            }
            checked += 1;
        }
        eprintln!("{checked} task_struct members agree with bpftool");

        let se = oracle("se");
        let inner = dump.resolve(
            members
                .iter()
                .find(|m| m.0 == "se")
                .map(|m| m.2)
                .unwrap_or_default(),
        );
        let mut se_members = Vec::new();
        dump.flatten(inner, 0, &mut se_members);
        let (_, bits, _, _) = se_members
            .iter()
            .find(|m| m.0 == "sum_exec_runtime")
            .unwrap_or_else(|| panic!("no se.sum_exec_runtime"));
        let nested = btf
            .member("task_struct", "se.sum_exec_runtime")
            .unwrap_or_else(|e| panic!("{e}"));
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
}
