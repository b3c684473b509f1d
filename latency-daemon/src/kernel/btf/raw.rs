//! BTF wire format: blob bytes in; header constants, bounds-checked little-endian reads, and
//! one decoded [`Type`] header per type (kind, name, size or referred type, data offset) out.

use std::ops::Range;

use super::BtfError;

pub(super) const MAGIC: u16 = 0xeb9f;
pub(super) const HEADER_LEN: u32 = 24;
const TYPE_HEADER_LEN: usize = 12;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
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
            Int, Ptr, Array, Struct, Union, Enum, Fwd, Typedef, Volatile, Const, Restrict, Func, FuncProto, Var,
            Datasec, Float, DeclTag, TypeTag, Enum64,
        ];
        // Kind numbers are 1-based (0 is BTF_KIND_UNKN).
        KINDS.get(usize::try_from(raw.checked_sub(1)?).ok()?).copied()
    }

    pub(super) fn name(self) -> &'static str {
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
    pub(super) fn is_alias(self) -> bool {
        matches!(self, Kind::Typedef | Kind::Volatile | Kind::Const | Kind::Restrict | Kind::TypeTag)
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Type {
    pub(super) name_off: u32,
    pub(super) kind: Kind,
    pub(super) kind_flag: bool,
    pub(super) vlen: u16,
    /// `size` for INT/STRUCT/UNION/ENUM/FLOAT, `type` for the referring kinds.
    pub(super) size_or_type: u32,
    /// Absolute offset of the kind-specific data in `Btf::bytes`.
    pub(super) data: usize,
}

/// One `btf_member`, decoded.
pub(super) struct RawMember {
    pub(super) name_off: u32,
    pub(super) ty: u32,
    pub(super) bit_offset: u32,
    pub(super) bitfield_size: u32,
}

pub(super) fn read_u32(bytes: &[u8], offset: usize, what: &'static str) -> Result<u32, BtfError> {
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
pub(super) fn section(
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

/// Walks the type section once, checking that each type's trailing data fits.
pub(super) fn decode_types(bytes: &[u8], range: Range<usize>) -> Result<Vec<Type>, BtfError> {
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
        let kind = Kind::from_raw(raw_kind).ok_or(BtfError::UnknownKind { id, kind: raw_kind, offset: pos })?;
        let vlen = (info & 0xffff) as u16; // the mask makes the cast lossless
        let trailing = kind.trailing_len(usize::from(vlen));
        let end = data + trailing;
        if end > range.end {
            return Err(truncated(TYPE_HEADER_LEN + trailing));
        }
        types.push(Type { name_off, kind, kind_flag: info >> 31 == 1, vlen, size_or_type, data });
        pos = end;
    }
    Ok(types)
}
