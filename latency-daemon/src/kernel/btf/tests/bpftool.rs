//! Test oracle: `bpftool btf dump ... format raw` text in; types by id, sizes and flattened
//! member offsets out, to compare the reader against on the running kernel.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use crate::kernel::btf::VMLINUX;

/// `bpftool btf dump format raw`, indexed by id: kind, name, `key=value` fields, members.
pub(super) struct Dump {
    types: HashMap<u32, DumpType>,
}

pub(super) struct DumpType {
    pub(super) kind: String,
    name: String,
    fields: HashMap<String, String>,
    /// (name, type_id, bits_offset, bitfield_size)
    pub(super) members: Vec<(String, u32, u64, u32)>,
}

pub(super) fn bpftool() -> Option<String> {
    let found = ["/usr/sbin/bpftool", "/usr/bin/bpftool", "/sbin/bpftool"].into_iter().find(|p| Path::new(p).exists());
    if found.is_none() {
        eprintln!("note: bpftool not installed; skipping the bpftool comparison");
    }
    let out = Command::new(found?)
        .args(["btf", "dump", "file", VMLINUX, "format", "raw"])
        .output()
        .unwrap_or_else(|e| panic!("running bpftool: {e}"));
    assert!(out.status.success(), "bpftool failed: {}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8(out.stdout).unwrap_or_else(|e| panic!("bpftool output: {e}")))
}

fn quoted(s: &str) -> (String, &str) {
    let s = s.trim_start().trim_start_matches('\'');
    let end = s.find('\'').unwrap_or_else(|| panic!("unterminated name in {s}"));
    (s[..end].to_owned(), &s[end + 1..])
}

fn fields(s: &str) -> HashMap<String, String> {
    s.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

pub(super) fn parse_dump(text: &str) -> Dump {
    let mut types = HashMap::new();
    let mut current: Option<u32> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix('[') {
            let (id, rest) = rest.split_once("] ").unwrap_or_else(|| panic!("bad line {line}"));
            let id: u32 = id.parse().unwrap_or_else(|e| panic!("bad id in {line}: {e}"));
            let (kind, rest) = rest.split_once(' ').unwrap_or_else(|| panic!("bad line {line}"));
            let (name, rest) = quoted(rest);
            let t = DumpType { kind: kind.to_owned(), name, fields: fields(rest), members: Vec::new() };
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
            let num = |k: &str| f.get(k).map(|v| v.parse::<u64>().unwrap_or_else(|e| panic!("{k} in {line}: {e}")));
            let ty = num("type_id").unwrap_or_else(|| panic!("no type_id in {line}")) as u32;
            let bits = num("bits_offset").unwrap_or_else(|| panic!("no bits_offset in {line}"));
            t.members.push((name, ty, bits, num("bitfield_size").unwrap_or(0) as u32));
        }
    }
    Dump { types }
}

impl Dump {
    pub(super) fn get(&self, id: u32) -> &DumpType {
        self.types.get(&id).unwrap_or_else(|| panic!("bpftool dump has no [{id}]"))
    }

    fn field(&self, id: u32, key: &str) -> u32 {
        let t = self.get(id);
        let v = t.fields.get(key).unwrap_or_else(|| panic!("[{id}] {} has no {key}", t.kind));
        v.parse().unwrap_or_else(|e| panic!("[{id}] {key}={v}: {e}"))
    }

    pub(super) fn resolve(&self, mut id: u32) -> u32 {
        while matches!(self.get(id).kind.as_str(), "TYPEDEF" | "CONST" | "VOLATILE" | "RESTRICT" | "TYPE_TAG") {
            id = self.field(id, "type_id");
        }
        id
    }

    pub(super) fn size(&self, id: u32) -> u32 {
        let id = self.resolve(id);
        match self.get(id).kind.as_str() {
            "ARRAY" => self.size(self.field(id, "type_id")) * self.field(id, "nr_elems"),
            "PTR" => 8,
            _ => self.field(id, "size"),
        }
    }

    /// Every named member reachable from `id` through anonymous members, with its absolute
    /// bit offset: (name, bits, type_id, bitfield_size).
    pub(super) fn flatten(&self, id: u32, base: u64, out: &mut Vec<(String, u64, u32, u32)>) {
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

    pub(super) fn struct_id(&self, name: &str) -> u32 {
        let mut ids: Vec<_> = self
            .types
            .iter()
            .filter(|(_, t)| t.kind == "STRUCT" && t.name == name && !t.members.is_empty())
            .map(|(&id, _)| id)
            .collect();
        ids.sort();
        *ids.first().unwrap_or_else(|| panic!("bpftool shows no STRUCT '{name}'"))
    }
}
