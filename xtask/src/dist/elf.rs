//! What an ELF executable needs to start: in, its bytes; out, its machine and whether it asks
//! for a program interpreter (`PT_INTERP`) or shared libraries (`DT_NEEDED`). A binary with
//! neither runs on any Linux userland, or none.
use anyhow::{Context as _, bail};

/// What `readelf -h -l -d` would say about the points above.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elf {
    pub machine: u16,
    pub interpreter: bool,
    pub needed: usize,
}

impl Elf {
    /// Parses a 64-bit little-endian ELF file (both our architectures).
    pub fn parse(bytes: &[u8]) -> anyhow::Result<Elf> {
        if bytes.get(..6) != Some(b"\x7fELF\x02\x01") {
            bail!("not a 64-bit little-endian ELF file");
        }
        let machine = u16_at(bytes, 18)?;
        let (phoff, phentsize, phnum) = (u64_at(bytes, 32)?, u16_at(bytes, 54)?, u16_at(bytes, 56)?);
        let (mut interpreter, mut needed) = (false, 0);
        for i in 0..u64::from(phnum) {
            let header = usize::try_from(phoff + i * u64::from(phentsize)).context("program header offset")?;
            const PT_DYNAMIC: u32 = 2;
            const PT_INTERP: u32 = 3;
            match u32_at(bytes, header)? {
                PT_INTERP => interpreter = true,
                PT_DYNAMIC => {
                    let (offset, size) = (u64_at(bytes, header + 8)?, u64_at(bytes, header + 32)?);
                    needed += count_needed(bytes, offset, size)?;
                }
                _ => {}
            }
        }
        Ok(Elf { machine, interpreter, needed })
    }

    /// Neither a loader nor a library: a static (or static-pie) executable.
    pub fn is_static(&self) -> bool {
        !self.interpreter && self.needed == 0
    }
}

/// `DT_NEEDED` entries (16-byte tag/value pairs) in the dynamic section at `offset`.
fn count_needed(bytes: &[u8], offset: u64, size: u64) -> anyhow::Result<usize> {
    const DT_NULL: u64 = 0;
    const DT_NEEDED: u64 = 1;
    let mut count = 0;
    for at in (offset..offset + size).step_by(16) {
        match u64_at(bytes, usize::try_from(at).context("dynamic entry offset")?)? {
            DT_NULL => break,
            DT_NEEDED => count += 1,
            _ => {}
        }
    }
    Ok(count)
}

fn field<const N: usize>(bytes: &[u8], at: usize) -> anyhow::Result<[u8; N]> {
    let slice = bytes.get(at..at + N).with_context(|| format!("truncated ELF file (offset {at})"))?;
    Ok(slice.try_into()?)
}

fn u16_at(bytes: &[u8], at: usize) -> anyhow::Result<u16> {
    field(bytes, at).map(u16::from_le_bytes)
}

fn u32_at(bytes: &[u8], at: usize) -> anyhow::Result<u32> {
    field(bytes, at).map(u32::from_le_bytes)
}

fn u64_at(bytes: &[u8], at: usize) -> anyhow::Result<u64> {
    field(bytes, at).map(u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::Elf;

    #[test]
    fn a_dynamic_host_program_needs_a_loader_and_libraries() {
        let sh = std::fs::read("/bin/sh").unwrap_or_else(|e| panic!("/bin/sh: {e}"));
        let elf = Elf::parse(&sh).unwrap_or_else(|e| panic!("/bin/sh: {e:#}"));
        assert!(elf.interpreter && elf.needed > 0 && !elf.is_static(), "{elf:?}");
    }

    #[test]
    fn a_hand_made_static_executable() {
        // Header only: 64-bit LE, x86_64, one PT_LOAD program header, no dynamic section.
        let mut bytes = vec![0u8; 64 + 56];
        bytes[..6].copy_from_slice(b"\x7fELF\x02\x01");
        bytes[18..20].copy_from_slice(&62u16.to_le_bytes());
        bytes[32..40].copy_from_slice(&64u64.to_le_bytes());
        bytes[54..56].copy_from_slice(&56u16.to_le_bytes());
        bytes[56..58].copy_from_slice(&1u16.to_le_bytes());
        bytes[64..68].copy_from_slice(&1u32.to_le_bytes());
        let elf = Elf::parse(&bytes).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(elf, Elf { machine: 62, interpreter: false, needed: 0 });
        assert!(elf.is_static());
        assert!(Elf::parse(&bytes[..40]).is_err(), "truncated");
        assert!(Elf::parse(b"#!/bin/sh\n").is_err());
    }
}
