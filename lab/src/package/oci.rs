//! The container image: in, one `latency-daemon` binary per architecture and the release's facts;
//! out, an OCI image layout written by hand — per architecture a one-layer image (the binary at
//! /latency-daemon, that architecture's seccomp profile, the copyright file) with its config and
//! manifest, and one image index naming both platforms — and the same layout as an `oci-archive`
//! tar, which `podman load` and containerd's `ctr images import` take.
//!
//! Blobs are content-addressed and every byte is reproducible (sorted tars, fixed times, `gzip -n`,
//! JSON with sorted keys), so one commit gives one index digest. The config runs the binary as
//! nobody (65534) by default; the DaemonSet runs it as uid 0 with two capabilities (its comment
//! says why).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::{Arch, Binary, Release};
use crate::guard::Scratch;

/// The image's name (the DaemonSet's `image:` without its tag).
pub const NAME: &str = "localhost/latency-daemon";
/// Where the binary and the profile are in the image.
pub const ENTRYPOINT: &str = "/latency-daemon";
pub const SECCOMP_IN_IMAGE: &str = "/usr/share/latency-daemon/seccomp.json";
const COPYRIGHT_IN_IMAGE: &str = "/usr/share/doc/latency-daemon/copyright";

pub const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";
pub const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// The image's licence: user space and the embedded kernel program (README, "Licence").
pub const LICENSES: &str = "(MIT OR Apache-2.0) AND (MIT OR GPL-2.0-only)";

/// What was built.
#[derive(Debug, Clone)]
pub struct Image {
    /// The OCI image layout directory.
    pub layout: PathBuf,
    /// The same layout as a tar (`oci-archive`).
    pub archive: PathBuf,
    /// `sha256:…` of the image index (what a registry would call the multi-arch image).
    pub index: String,
    /// Each architecture's manifest digest.
    pub manifests: Vec<(Arch, String)>,
    /// `localhost/latency-daemon:<version>`.
    pub reference: String,
}

/// The `org.opencontainers.image.*` annotations (also the config's labels).
pub fn annotations(release: &Release) -> BTreeMap<String, String> {
    let mut a: BTreeMap<String, String> = [
        ("created", release.created()),
        ("revision", release.revision.clone()),
        ("version", release.version.clone()),
        ("licenses", LICENSES.to_owned()),
        ("title", "latency-daemon".to_owned()),
        ("description", "Run-queue latency monitor (eBPF): /metrics on :9954".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (format!("org.opencontainers.image.{k}"), v))
    .collect();
    // Where it comes from, its home and its manual: the repository, and its docs at this version.
    if let Some(source) = &release.source {
        let source = source.trim_end_matches('/');
        a.insert("org.opencontainers.image.source".to_owned(), source.to_owned());
        a.insert("org.opencontainers.image.url".to_owned(), source.to_owned());
        a.insert(
            "org.opencontainers.image.documentation".to_owned(),
            format!("{source}/tree/v{}/docs", release.version),
        );
    }
    a
}

/// Builds the layout `latency-daemon-<version>.oci/` and its archive `latency-daemon-<version>.oci.tar`
/// in `out_dir` from `binaries` (one per architecture; the repository's files from `root`).
pub fn build(out_dir: &Path, binaries: &[Binary], release: &Release, root: &Path) -> anyhow::Result<Image> {
    let mut arches: Vec<Arch> = binaries.iter().map(|b| b.arch).collect();
    arches.sort();
    arches.dedup();
    if arches.len() != binaries.len() || binaries.is_empty() {
        bail!(
            "one binary per architecture, at least one: got {:?}",
            binaries.iter().map(|b| b.arch).collect::<Vec<_>>()
        );
    }
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let stem = format!("latency-daemon-{}", release.version);
    let layout = out_dir.join(format!("{stem}.oci"));
    let _ = std::fs::remove_dir_all(&layout);
    std::fs::create_dir_all(layout.join("blobs/sha256")).with_context(|| format!("creating {}", layout.display()))?;
    let blobs = Blobs { dir: layout.join("blobs/sha256") };
    let labels = annotations(release);

    let mut manifests = Vec::new();
    let mut index_entries = Vec::new();
    for binary in binaries {
        let manifest = image(&blobs, binary, release, root, &labels)?;
        let mut platform = json!({ "architecture": binary.arch.debian(), "os": "linux" });
        if let Some(variant) = binary.arch.oci_variant() {
            platform["variant"] = json!(variant);
        }
        index_entries.push(json!({
            "mediaType": MANIFEST_TYPE, "digest": manifest.0, "size": manifest.1, "platform": platform,
        }));
        manifests.push((binary.arch, manifest.0));
    }
    let index =
        json!({ "schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": index_entries, "annotations": labels });
    let (index_digest, index_size) = blobs.put_json(&index)?;
    let reference = format!("{NAME}:{}", release.version);
    let top = json!({
        "schemaVersion": 2,
        "mediaType": INDEX_TYPE,
        "manifests": [{
            "mediaType": INDEX_TYPE,
            "digest": index_digest,
            "size": index_size,
            "annotations": {
                // The tag, as the image-layout spec's ref.name grammar allows (no `:` or host);
                // containerd reads the full name from its own annotation.
                "org.opencontainers.image.ref.name": release.version,
                "io.containerd.image.name": reference,
            },
        }],
    });
    std::fs::write(layout.join("index.json"), serde_json::to_vec(&top)?).context("writing index.json")?;
    std::fs::write(layout.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).context("writing oci-layout")?;
    super::touch_tree(&layout, release.epoch)?;
    let archive = out_dir.join(format!("{stem}.oci.tar"));
    super::tar_dir(&layout, release.epoch, &archive, false)?;
    Ok(Image { layout, archive, index: index_digest, manifests, reference })
}

/// One architecture's layer, config and manifest into `blobs`; out, the manifest's digest and size.
fn image(
    blobs: &Blobs,
    binary: &Binary,
    release: &Release,
    root: &Path,
    labels: &BTreeMap<String, String>,
) -> anyhow::Result<(String, u64)> {
    use std::os::unix::fs::PermissionsExt as _;
    let scratch = Scratch::new("runqlat-oci")?;
    let rootfs = scratch.join("rootfs");
    let files: [(&str, PathBuf, u32); 3] = [
        (ENTRYPOINT, binary.path.clone(), 0o755),
        (SECCOMP_IN_IMAGE, super::seccomp::profile_path(root, binary.arch), 0o644),
        (COPYRIGHT_IN_IMAGE, root.join("deploy/debian/copyright"), 0o644),
    ];
    for (to, from, mode) in files {
        let to = rootfs.join(to.trim_start_matches('/'));
        let dir = to.parent().context("a path with a parent")?;
        std::fs::create_dir_all(dir)?;
        std::fs::copy(&from, &to).with_context(|| format!("copying {}", from.display()))?;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode))?;
    }
    let mut chmod = std::process::Command::new("find");
    chmod.arg(&rootfs).args(["-type", "d", "-exec", "chmod", "0755", "{}", "+"]);
    crate::cmd::stdout(&mut chmod)?;
    super::touch_tree(&rootfs, release.epoch)?;
    let tar = scratch.join("layer.tar");
    super::tar_dir(&rootfs, release.epoch, &tar, false)?;
    let diff_id = format!("sha256:{}", super::sha256_file(&tar)?);
    let gz = super::gzip_bytes(&std::fs::read(&tar).context("reading the layer")?)?;
    let (layer, layer_size) = blobs.put(&gz)?;

    let mut config = json!({
        "created": release.created(),
        "architecture": binary.arch.debian(),
        "os": "linux",
        "config": {
            "User": "65534:65534",
            "ExposedPorts": { "9954/tcp": {} },
            "Entrypoint": [ENTRYPOINT],
            "Cmd": ["run"],
            "Labels": labels,
        },
        "rootfs": { "type": "layers", "diff_ids": [diff_id] },
        "history": [{ "created": release.created(), "created_by": "latency-lab package::oci (no shell: files copied)" }],
    });
    if let Some(variant) = binary.arch.oci_variant() {
        config["variant"] = json!(variant);
    }
    let (config_digest, config_size) = blobs.put_json(&config)?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": { "mediaType": CONFIG_TYPE, "digest": config_digest, "size": config_size },
        "layers": [{ "mediaType": LAYER_TYPE, "digest": layer, "size": layer_size }],
        "annotations": labels,
    });
    blobs.put_json(&manifest)
}

/// blobs/sha256 of a layout.
struct Blobs {
    dir: PathBuf,
}

impl Blobs {
    /// Stores `bytes` under their digest; out, `sha256:…` and the size.
    fn put(&self, bytes: &[u8]) -> anyhow::Result<(String, u64)> {
        let tmp = self.dir.join(".incoming");
        std::fs::write(&tmp, bytes).context("writing a blob")?;
        let hex = super::sha256_file(&tmp)?;
        std::fs::rename(&tmp, self.dir.join(&hex)).context("naming a blob")?;
        Ok((format!("sha256:{hex}"), bytes.len() as u64))
    }

    fn put_json(&self, value: &Value) -> anyhow::Result<(String, u64)> {
        self.put(&serde_json::to_vec(value)?)
    }
}

/// A blob of a layout by digest (`sha256:…`), as JSON.
pub fn read_json(layout: &Path, digest: &str) -> anyhow::Result<Value> {
    let hex = digest.strip_prefix("sha256:").with_context(|| format!("{digest} is not a sha256 digest"))?;
    let path = layout.join("blobs/sha256").join(hex);
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    if super::sha256_file(&path)? != hex {
        bail!("{} does not hash to its name", path.display());
    }
    serde_json::from_slice(&bytes).with_context(|| format!("{digest} is not JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotations_name_the_release() {
        let release = Release {
            version: "1.2.3".into(),
            revision: "abc".into(),
            epoch: 0,
            maintainer: "m <m@example.org>".into(),
            source: None,
        };
        let a = annotations(&release);
        assert_eq!(a["org.opencontainers.image.version"], "1.2.3");
        assert_eq!(a["org.opencontainers.image.created"], "1970-01-01T00:00:00Z");
        assert!(!a.contains_key("org.opencontainers.image.source") && !a.contains_key("org.opencontainers.image.url"));
        let with_source = Release { source: Some("https://src/".into()), ..release };
        let a = annotations(&with_source);
        assert_eq!(a["org.opencontainers.image.source"], "https://src");
        assert_eq!(a["org.opencontainers.image.url"], "https://src");
        assert_eq!(a["org.opencontainers.image.documentation"], "https://src/tree/v1.2.3/docs");
    }
}
