//! A Debian `vmlinuz` (bzImage) in, the ELF `vmlinux` inside it out, so QEMU can boot it through
//! its PVH note: under TCG that skips SeaBIOS, real mode and the emulated decompressor (≈5 s per
//! boot). The payload is found through the setup header, not by scanning for magic bytes.
//! arm64's `vmlinuz` is the kernel's `Image` itself (gzip'd in some releases): out, the raw
//! Image, checked by its header's magic, which QEMU loads and enters directly.
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

/// How a payload is compressed, by its first bytes, and the tool that undoes it.
fn decompressor(payload: &[u8]) -> Option<(&'static str, &'static str)> {
    const KINDS: [(&[u8], &str, &str); 4] = [
        (&[0x1f, 0x8b], "gzip", "gzip"),
        (&[0xfd, b'7', b'z', b'X', b'Z', 0], "xz", "xz"),
        (&[0x28, 0xb5, 0x2f, 0xfd], "zstd", "zstd"),
        // The lz4 "legacy" frame the kernel's build writes (the cloud flavour uses it).
        (&[0x02, 0x21, 0x4c, 0x18], "lz4", "lz4"),
    ];
    KINDS.iter().find(|(magic, _, _)| payload.starts_with(magic)).map(|&(_, name, tool)| (name, tool))
}

/// The compressed kernel inside a bzImage: `payload_offset`/`payload_length` of the setup
/// header (boot protocol ≥ 2.08), counted from the protected-mode code after the setup sectors.
/// The build appends the uncompressed size (4 bytes) to the stream; it is cut off here.
pub fn payload(bzimage: &[u8]) -> anyhow::Result<&[u8]> {
    let u32_at = |at: usize| bzimage.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    if bzimage.get(0x202..0x206) != Some(b"HdrS") {
        bail!("not a bzImage (no HdrS signature at 0x202)");
    }
    let version = bzimage.get(0x206..0x208).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
    if version < 0x208 {
        bail!("boot protocol {version:#x} has no payload fields (needs 2.08)");
    }
    let setup_sects = match bzimage.get(0x1f1) {
        Some(0) => 4,
        Some(&n) => usize::from(n),
        None => bail!("bzImage truncated before its setup header"),
    };
    let (offset, length) = (u32_at(0x248).context("no payload_offset")?, u32_at(0x24c).context("no payload_length")?);
    let start = (setup_sects + 1) * 512 + offset as usize;
    let end = start + (length as usize).saturating_sub(4);
    bzimage.get(start..end).with_context(|| format!("payload {start}..{end} lies outside the {} bytes", bzimage.len()))
}

/// Extracts `vmlinuz` into the ELF file `out`; returns the compression's name.
pub fn extract(vmlinuz: &Path, out: &Path) -> anyhow::Result<&'static str> {
    let image = std::fs::read(vmlinuz).with_context(|| format!("reading {}", vmlinuz.display()))?;
    let payload = payload(&image).with_context(|| vmlinuz.display().to_string())?;
    let Some((name, tool)) = decompressor(payload) else {
        bail!("{}: unknown compression (first bytes {:02x?})", vmlinuz.display(), &payload[..payload.len().min(6)]);
    };
    let compressed = out.with_extension("payload");
    std::fs::write(&compressed, payload).with_context(|| format!("writing {}", compressed.display()))?;
    let target = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    // Exit status aside: some tools complain about what follows the stream; the ELF check decides.
    let status = Command::new(tool)
        .args(["-d", "-c"])
        .arg(&compressed)
        .stdout(target)
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("could not run {tool} (cargo xtask setup installs it)"));
    let _ = std::fs::remove_file(&compressed);
    status?;
    let head = std::fs::read(out).map(|b| b.get(..4).map(<[u8]>::to_vec)).unwrap_or_default();
    if head.as_deref() != Some(b"\x7fELF") {
        let _ = std::fs::remove_file(out);
        bail!("{}: the {name} payload did not decompress to an ELF vmlinux", vmlinuz.display());
    }
    Ok(name)
}

/// arm64's Image header: `ARM\x64` at offset 0x38.
fn is_arm64_image(bytes: &[u8]) -> bool {
    bytes.get(0x38..0x3c) == Some(b"ARM\x64")
}

/// Writes the raw arm64 `Image` in `vmlinuz` (itself, or gunzipped) to `out`; returns how it was
/// compressed.
pub fn arm64_image(vmlinuz: &Path, out: &Path) -> anyhow::Result<&'static str> {
    let image = std::fs::read(vmlinuz).with_context(|| format!("reading {}", vmlinuz.display()))?;
    if is_arm64_image(&image) {
        std::fs::write(out, &image).with_context(|| format!("writing {}", out.display()))?;
        return Ok("none");
    }
    let Some((name, tool)) = decompressor(&image) else {
        bail!("{}: neither an arm64 Image nor a compressed one we know", vmlinuz.display());
    };
    let target = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let status = Command::new(tool).args(["-d", "-c"]).arg(vmlinuz).stdout(target).stderr(Stdio::null()).status();
    status.with_context(|| format!("could not run {tool} (cargo xtask setup installs it)"))?;
    let head = std::fs::read(out).map(|b| b.get(..0x40).map(<[u8]>::to_vec)).unwrap_or_default();
    if !head.as_deref().is_some_and(is_arm64_image) {
        let _ = std::fs::remove_file(out);
        bail!("{}: the {name} stream did not decompress to an arm64 Image", vmlinuz.display());
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake bzImage: 1 setup sector + the boot sector, then `offset` bytes, the payload, size.
    fn image(setup_sects: u8, offset: u32, payload: &[u8]) -> Vec<u8> {
        let mut image = vec![0u8; (usize::from(setup_sects.max(4)) + 1) * 512];
        image[0x1f1] = setup_sects;
        image[0x202..0x206].copy_from_slice(b"HdrS");
        image[0x206..0x208].copy_from_slice(&0x20fu16.to_le_bytes());
        image[0x248..0x24c].copy_from_slice(&offset.to_le_bytes());
        image[0x24c..0x250].copy_from_slice(&(payload.len() as u32 + 4).to_le_bytes());
        image.resize(image.len() + offset as usize, 0xaa);
        image.extend_from_slice(payload);
        image.extend_from_slice(&1234u32.to_le_bytes());
        image
    }

    #[test]
    fn the_payload_comes_from_the_setup_header() {
        let zstd = [0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3];
        let img = image(0, 100, &zstd);
        let found = payload(&img).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(found, zstd);
        assert_eq!(decompressor(found).map(|d| d.0), Some("zstd"));
        let lz4 = [0x02, 0x21, 0x4c, 0x18, 9];
        assert_eq!(decompressor(payload(&image(6, 0, &lz4)).unwrap_or_default()).map(|d| d.0), Some("lz4"));
    }

    #[test]
    fn not_a_bzimage() {
        assert!(payload(&[0u8; 1024]).is_err());
        let mut img = image(0, 0, b"x");
        img.truncate(700);
        assert!(payload(&img).is_err());
        assert_eq!(decompressor(b"\x42\x5a\x68"), None);
    }

    #[test]
    fn a_real_gzip_payload_decompresses_to_its_elf() {
        let scratch = crate::guard::Scratch::new("runqlat-vmlinux-test").unwrap_or_else(|e| panic!("{e:#}"));
        let elf = b"\x7fELF fake kernel".to_vec();
        std::fs::write(scratch.join("elf"), &elf).unwrap_or_else(|e| panic!("{e}"));
        let gz = Command::new("gzip").arg("-c").arg(scratch.join("elf")).output().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(scratch.join("vmlinuz"), image(0, 64, &gz.stdout)).unwrap_or_else(|e| panic!("{e}"));
        let kind = extract(&scratch.join("vmlinuz"), &scratch.join("vmlinux")).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(kind, "gzip");
        assert_eq!(std::fs::read(scratch.join("vmlinux")).unwrap_or_default(), elf);
    }

    #[test]
    fn arm64_images_plain_or_gzipped() {
        let scratch = crate::guard::Scratch::new("runqlat-image-test").unwrap_or_else(|e| panic!("{e:#}"));
        let mut image = vec![0u8; 0x100];
        image[0x38..0x3c].copy_from_slice(b"ARM\x64");
        std::fs::write(scratch.join("plain"), &image).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(arm64_image(&scratch.join("plain"), &scratch.join("out")).ok(), Some("none"));
        assert_eq!(std::fs::read(scratch.join("out")).unwrap_or_default(), image);
        let gz = Command::new("gzip").arg("-c").arg(scratch.join("plain")).output().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(scratch.join("gz"), &gz.stdout).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(arm64_image(&scratch.join("gz"), &scratch.join("out2")).ok(), Some("gzip"));
        assert_eq!(std::fs::read(scratch.join("out2")).unwrap_or_default(), image);
        std::fs::write(scratch.join("junk"), [0u8; 0x100]).unwrap_or_else(|e| panic!("{e}"));
        assert!(arm64_image(&scratch.join("junk"), &scratch.join("out3")).is_err());
    }
}
