//! Raw kernel BTF (`/sys/kernel/btf/vmlinux`) in; struct member offsets/sizes and tracepoint
//! arities out, so the kernel program can read `task_struct` on any kernel without recompiling.
//!
//! A small reader of our own: aya does not expose member lookups, and we need only three things
//! (walk members, size a type, count prototype arguments). Every read is bounds-checked because the
//! bytes come from a file; a malformed blob is an error, never a panic.

mod layout;
mod raw;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use raw::{HEADER_LEN, Kind, MAGIC, RawMember, Type, decode_types, read_u32, section};

pub use layout::TaskLayout;

/// Where the running kernel publishes its own BTF (`CONFIG_DEBUG_INFO_BTF=y`), under the sysfs
/// (`--path.sysfs`).
pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// [`VMLINUX`] under the sysfs in force (`host::paths`).
pub fn vmlinux() -> PathBuf {
    crate::host::paths::sys("kernel/btf/vmlinux")
}

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
    /// FUNC by name: the kernel functions a BPF trampoline (fentry/fexit) can attach to.
    functions: HashMap<Box<str>, u32>,
    /// BTF has no pointer size of its own; like libbpf we take the size of `long`.
    pointer_size: u32,
}

/// A member's byte offset from the start of the outer struct, and its size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    pub offset: u32,
    pub size: u32,
}

/// Why BTF could not be read or a lookup failed: one line naming the byte offset, type, struct or
/// member at fault.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("the kernel has no BTF at {path}: the monitor needs a kernel built with CONFIG_DEBUG_INFO_BTF=y")]
    NoBtf { path: PathBuf },
    #[error("cannot read BTF from {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error(
        "BTF is truncated or garbled: {what} at byte offset {offset} needs {needed} bytes, only {available} remain"
    )]
    Truncated { what: &'static str, offset: u64, needed: u64, available: u64 },
    #[error("not BTF: magic at byte offset 0 is {found:#06x}, expected 0xeb9f")]
    BadMagic { found: u16 },
    #[error("BTF at byte offset 0 is big-endian (magic bytes eb 9f); only little-endian BTF is supported")]
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
    MemberNotFound { struct_name: String, path: String, missing: String },
    #[error(
        "this kernel accounts neither IRQ time (CONFIG_IRQ_TIME_ACCOUNTING) nor steal \
         (CONFIG_PARAVIRT_TIME_ACCOUNTING): struct rq has no prev_irq_time or prev_steal_time_rq"
    )]
    NotAccounted,
    #[error(
        "this kernel accounts IRQ time itself (CONFIG_IRQ_TIME_ACCOUNTING): the irq_steal part holds it \
         without the tracepoints"
    )]
    IrqAccounted,
    #[error("{struct_name}.{path} has BTF kind {kind}, not STRUCT or UNION, so it has no member `{next}`")]
    NotComposite { struct_name: String, path: String, kind: &'static str, next: String },
    #[error("{struct_name}.{path} is a {bits}-bit bitfield; only whole-byte members can be read")]
    Bitfield { struct_name: String, path: String, bits: u32 },
    #[error("{struct_name}.{path} starts at bit {bit_offset}, not on a byte boundary")]
    Unaligned { struct_name: String, path: String, bit_offset: u64 },
    #[error("BTF type [{id}] has kind {kind}, which has no size")]
    NoSize { id: u32, kind: &'static str },
    #[error("size of BTF type [{id}] overflows u32")]
    SizeOverflow { id: u32 },
    #[error("{struct_name}.{member} is {found} bytes, expected {expected}")]
    SizeMismatch { struct_name: String, member: String, expected: u32, found: u32 },
    #[error("kernel BTF has no function {function} (FUNC) to attach to")]
    FunctionNotFound { function: String },
    #[error(
        "not needed: this kernel keeps each group's throttle clock itself (cfs_rq.throttled_clock_self, \
         6.8+), which throttle_split reads"
    )]
    SelfThrottleClock,
    #[error("kernel BTF has no typedef btf_trace_{tracepoint}: no such raw tracepoint")]
    TracepointNotFound { tracepoint: String },
    #[error("btf_trace_{tracepoint} is not a pointer to a prototype starting with `void *__data` ({found})")]
    NotTracepointProto { tracepoint: String, found: &'static str },
}

impl Btf {
    /// Reads the running kernel's BTF from [`vmlinux`].
    pub fn from_sys_fs() -> Result<Btf, BtfError> {
        Btf::from_file(&vmlinux())
    }

    pub fn from_file(path: &Path) -> Result<Btf, BtfError> {
        let bytes = std::fs::read(path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => BtfError::NoBtf { path: path.to_owned() },
            _ => BtfError::Read { path: path.to_owned(), source },
        })?;
        Btf::parse_owned(bytes)
    }

    /// Parse BTF from memory (the tests build blobs; the daemon reads the kernel's file).
    #[cfg(test)]
    pub fn parse(bytes: &[u8]) -> Result<Btf, BtfError> {
        Btf::parse_owned(bytes.to_vec())
    }

    fn parse_owned(bytes: Vec<u8>) -> Result<Btf, BtfError> {
        let magic =
            bytes.get(0..2).and_then(|b| b.try_into().ok()).map(u16::from_le_bytes).ok_or(BtfError::Truncated {
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
        let [type_off, type_len, str_off, str_len] = [8, 12, 16, 20].map(|at| read_u32(&bytes, at, "header"));
        let type_range = section(&bytes, hdr_len, type_off?, type_len?, "type section")?;
        let strings = section(&bytes, hdr_len, str_off?, str_len?, "string section")?;
        let types = decode_types(&bytes, type_range)?;

        let mut btf = Btf {
            bytes,
            types,
            strings,
            composites: HashMap::new(),
            typedefs: HashMap::new(),
            functions: HashMap::new(),
            pointer_size: DEFAULT_POINTER_SIZE,
        };
        btf.index()?;
        Ok(btf)
    }

    /// Fills the name maps and the pointer size in one pass over the decoded types.
    fn index(&mut self) -> Result<(), BtfError> {
        let mut composites = HashMap::new();
        let mut typedefs = HashMap::new();
        let mut functions = HashMap::new();
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
                    typedefs.entry(Box::from(self.str_at(t.name_off)?)).or_insert(id);
                }
                Kind::Func => {
                    functions.entry(Box::from(self.str_at(t.name_off)?)).or_insert(id);
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
        self.functions = functions;
        Ok(())
    }

    /// Byte offset (from the start of the outer struct) and size of a member. `path` is
    /// dot-separated named members, e.g. "pid" or "se.sum_exec_runtime"; members inside anonymous
    /// structs/unions are found transparently, and typedefs/const/volatile are resolved both for
    /// sizes and for descending. A bitfield member is an error (the kernel side does byte loads).
    pub fn member(&self, struct_name: &str, path: &str) -> Result<Member, BtfError> {
        let mut container = *self
            .composites
            .get(struct_name)
            .ok_or_else(|| BtfError::StructNotFound { name: struct_name.to_owned() })?;
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
        let unaligned =
            |bit_offset| BtfError::Unaligned { struct_name: struct_name.to_owned(), path: path.to_owned(), bit_offset };
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
        let not_proto = |found| BtfError::NotTracepointProto { tracepoint: tracepoint.to_owned(), found };
        let id = *self
            .typedefs
            .get(format!("btf_trace_{tracepoint}").as_str())
            .ok_or_else(|| BtfError::TracepointNotFound { tracepoint: tracepoint.to_owned() })?;
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
        usize::from(proto.vlen).checked_sub(1).ok_or(not_proto("prototype with no arguments"))
    }

    /// Whether BTF describes the kernel function `name` (a FUNC), which a BPF trampoline (fentry,
    /// fexit) can then attach to where the kernel traces it.
    pub fn function(&self, name: &str) -> Result<(), BtfError> {
        if self.functions.contains_key(name) {
            Ok(())
        } else {
            Err(BtfError::FunctionNotFound { function: name.to_owned() })
        }
    }

    /// Depth-first search for `name` in a struct/union, descending into anonymous members.
    /// Returns the bit offset from the start of `id` and the member itself.
    fn find(&self, id: u32, name: &str, depth: usize) -> Result<Option<(u64, RawMember)>, BtfError> {
        if depth > MAX_DEPTH {
            return Err(BtfError::TooDeep { id });
        }
        let t = self.ty(id)?;
        for i in 0..usize::from(t.vlen) {
            let m = self.raw_member(t, i)?;
            let member_name = if m.name_off == 0 { "" } else { self.str_at(m.name_off)? };
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
        let (bit_offset, bitfield_size) = if t.kind_flag { (offset & 0x00ff_ffff, offset >> 24) } else { (offset, 0) };
        Ok(RawMember { name_off, ty, bit_offset, bitfield_size })
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
            Kind::Int | Kind::Struct | Kind::Union | Kind::Enum | Kind::Enum64 | Kind::Float => Ok(t.size_or_type),
            Kind::Ptr => Ok(self.pointer_size),
            Kind::Array => {
                let elem = read_u32(&self.bytes, t.data, "ARRAY")?;
                let nelems = read_u32(&self.bytes, t.data + 8, "ARRAY")?;
                self.size_of(elem, depth + 1)?.checked_mul(nelems).ok_or(BtfError::SizeOverflow { id: rid })
            }
            kind => Err(BtfError::NoSize { id: rid, kind: kind.name() }),
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
            .ok_or(BtfError::BadTypeId { id, count: self.types.len() })
    }

    fn str_at(&self, offset: u32) -> Result<&str, BtfError> {
        let bad = |problem| BtfError::BadString { offset, problem };
        let start = usize::try_from(offset)
            .ok()
            .and_then(|o| self.strings.start.checked_add(o))
            .filter(|&s| s < self.strings.end)
            .ok_or(bad("past the end of the string section"))?;
        let tail = self.bytes.get(start..self.strings.end).ok_or(bad("past the end of the blob"))?;
        let len = tail.iter().position(|&b| b == 0).ok_or(bad("not NUL-terminated"))?;
        let raw = tail.get(..len).ok_or(bad("not NUL-terminated"))?;
        std::str::from_utf8(raw).map_err(|_| bad("not UTF-8"))
    }
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
