//! The SBOM: in, a `latency-daemon` binary, its architecture and the workspace; out, a CycloneDX
//! 1.5 JSON document naming every crate compiled into that binary — the daemon's normal
//! dependencies for its musl target, and the kernel program's for `bpfel-unknown-none` (its object is
//! embedded in the binary) — each with its purl, licence and the SHA-256 of its `.crate` from
//! Cargo.lock, the dependency graph, and the binary itself, with its SHA-256, as the described
//! component.
//!
//! The crate sets are `cargo tree`'s for one package and target with normal edges and no
//! proc-macros: what is linked, with the features that package alone enables. A generic tool
//! (`cargo metadata`'s resolve, cargo-cyclonedx) unifies features across the workspace and either
//! counts build dependencies (aya-build, cargo_metadata: not in the binary) or drops them with the
//! kernel program, which reaches the binary through build.rs.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::{Binary, Release};
use crate::cmd;

/// The kernel program's crate and its target: its object is built by latency-daemon's build.rs and
/// embedded in the binary.
const KERNEL: (&str, &str) = ("latency-ebpf", "bpfel-unknown-none");
const DAEMON: &str = "latency-daemon";

/// One crate of the binary, as `cargo tree` prints it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Crate {
    pub name: String,
    pub version: String,
    /// The SPDX expression from its manifest (`MIT/Apache-2.0` normalised to `MIT OR Apache-2.0`).
    pub license: Option<String>,
    /// A workspace member (no registry source, no checksum).
    pub local: bool,
}

impl Crate {
    pub fn bom_ref(&self) -> String {
        self.purl()
    }

    /// `pkg:cargo/name@version`.
    pub fn purl(&self) -> String {
        format!("pkg:cargo/{}@{}", self.name, self.version)
    }
}

/// Crates and the edges between them (by bom-ref).
#[derive(Debug, Default)]
pub struct Graph {
    pub crates: BTreeSet<Crate>,
    pub edges: BTreeMap<String, BTreeSet<String>>,
}

/// The crates compiled into the daemon built for `target` (a Rust triple), the kernel program's
/// among them, read in the workspace at `root`.
pub fn crates(root: &Path, target: &str) -> anyhow::Result<Graph> {
    let mut graph = Graph::default();
    let daemon = tree(root, DAEMON, target, &mut graph)?;
    let kernel = tree(root, KERNEL.0, KERNEL.1, &mut graph)?;
    // build.rs embeds the object: the daemon depends on it though cargo calls it a build dependency.
    graph.edges.entry(daemon.bom_ref()).or_default().insert(kernel.bom_ref());
    Ok(graph)
}

/// Adds `cargo tree -p package --target target`'s crates and edges to `graph`; out, its root.
fn tree(root: &Path, package: &str, target: &str, graph: &mut Graph) -> anyhow::Result<Crate> {
    let mut c = Command::new("cargo");
    c.current_dir(root)
        .args(["tree", "--locked", "--offline", "-p", package, "-e", "normal,no-proc-macro", "--target", target])
        .args(["--prefix", "depth", "--format", "{p}|{l}|"]);
    let text = cmd::stdout(&mut c)?;
    parse_tree(&text, graph)?.with_context(|| format!("cargo tree -p {package} printed nothing"))
}

/// Lines of `--prefix depth --format '{p}|{l}|'` (`2name v1.0.0 (/path)|MIT|` and ` (*)` after a
/// crate already shown) → crates and parent → child edges; out, the first line's crate.
fn parse_tree(text: &str, graph: &mut Graph) -> anyhow::Result<Option<Crate>> {
    let mut stack: Vec<String> = Vec::new();
    let mut first = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let digits = line.find(|c: char| !c.is_ascii_digit()).unwrap_or(0);
        let depth: usize = line[..digits].parse().with_context(|| format!("cargo tree: no depth in {line:?}"))?;
        let mut fields = line[digits..].split('|');
        let (Some(package), Some(license)) = (fields.next(), fields.next()) else {
            bail!("cargo tree: unexpected line {line:?}");
        };
        let mut words = package.split_whitespace();
        let (Some(name), Some(version)) = (words.next(), words.next().and_then(|v| v.strip_prefix('v'))) else {
            bail!("cargo tree: no name and version in {line:?}");
        };
        let license = license.trim();
        let krate = Crate {
            name: name.to_owned(),
            version: version.to_owned(),
            license: (!license.is_empty()).then(|| license.replace('/', " OR ")),
            local: package.contains(" (/"),
        };
        stack.truncate(depth);
        if let Some(parent) = stack.last() {
            graph.edges.entry(parent.clone()).or_default().insert(krate.bom_ref());
        }
        graph.edges.entry(krate.bom_ref()).or_default();
        stack.push(krate.bom_ref());
        first.get_or_insert_with(|| krate.clone());
        graph.crates.insert(krate);
    }
    Ok(first)
}

/// `checksum`s of Cargo.lock's registry packages, by (name, version).
fn checksums(root: &Path) -> anyhow::Result<BTreeMap<(String, String), String>> {
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).context("reading Cargo.lock")?;
    let mut sums = BTreeMap::new();
    for stanza in lock.split("[[package]]").skip(1) {
        let field = |key: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(" = ").map(|v| v.trim_matches('"').to_owned()))
        };
        if let (Some(name), Some(version), Some(sum)) = (field("name"), field("version"), field("checksum")) {
            sums.insert((name, version), sum);
        }
    }
    Ok(sums)
}

/// The CycloneDX 1.5 document for `binary` (its crates from the workspace at `root`).
pub fn document(root: &Path, binary: &Binary, release: &Release) -> anyhow::Result<Value> {
    let graph = crates(root, &binary.arch.musl_target())?;
    let sums = checksums(root)?;
    let binary_sha = super::sha256_file(&binary.path)?;
    let daemon = graph.crates.iter().find(|c| c.name == DAEMON).context("the daemon is not in its own tree")?;
    let licenses = |c: &Crate| match &c.license {
        Some(expression) => json!([{ "expression": expression }]),
        None => json!([]),
    };
    let components: Vec<Value> = graph
        .crates
        .iter()
        .filter(|c| c.name != DAEMON)
        .map(|c| {
            let mut component = json!({
                "type": "library",
                "bom-ref": c.bom_ref(),
                "name": c.name,
                "version": c.version,
                "purl": c.purl(),
                "licenses": licenses(c),
            });
            if let Some(sum) = sums.get(&(c.name.clone(), c.version.clone())) {
                component["hashes"] = json!([{ "alg": "SHA-256", "content": sum }]);
            }
            if c.name == KERNEL.0 {
                component["description"] = json!("the kernel program (BPF), embedded in the binary");
            }
            component
        })
        .collect();
    let dependencies: Vec<Value> =
        graph.edges.iter().map(|(r, deps)| json!({ "ref": r, "dependsOn": deps.iter().collect::<Vec<_>>() })).collect();
    let mut described = json!({
        "type": "application",
        "bom-ref": daemon.bom_ref(),
        "name": DAEMON,
        "version": release.version,
        "purl": daemon.purl(),
        "licenses": licenses(daemon),
        "hashes": [{ "alg": "SHA-256", "content": binary_sha }],
        "properties": [
            { "name": "revision", "value": release.revision },
            { "name": "target", "value": binary.arch.musl_target() },
        ],
    });
    if let Some(source) = &release.source {
        described["externalReferences"] = json!([{ "type": "vcs", "url": source }]);
    }
    Ok(json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": serial_number(&binary_sha),
        "version": 1,
        "metadata": {
            "timestamp": release.created(),
            "tools": { "components": [{ "type": "application", "name": "latency-lab package::sbom", "version": release.version }] },
            "component": described,
        },
        "components": components,
        "dependencies": dependencies,
    }))
}

/// Writes `binary`'s SBOM to `out` (pretty JSON).
pub fn write(out: &Path, root: &Path, binary: &Binary, release: &Release) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(&document(root, binary, release)?)? + "\n";
    std::fs::write(out, text).with_context(|| format!("writing {}", out.display()))
}

/// A UUID-shaped serial number (version 5, RFC 4122 variant) from the binary's hash: one binary,
/// one serial number, so a rebuilt SBOM is byte for byte the same.
fn serial_number(sha: &str) -> String {
    let h = sha.as_bytes();
    let s = |a: usize, b: usize| std::str::from_utf8(&h[a..b]).unwrap_or("0");
    format!("urn:uuid:{}-{}-5{}-8{}-{}", s(0, 8), s(8, 12), s(13, 16), s(17, 20), s(20, 32))
}

/// What a consumer checks first: the format, the version, a described component with a SHA-256,
/// a purl on every component, every dependency ref defined. Out: the components' (name, version).
pub fn check(doc: &Value) -> anyhow::Result<BTreeSet<(String, String)>> {
    if doc["bomFormat"] != "CycloneDX" || doc["specVersion"] != "1.5" {
        bail!("not CycloneDX 1.5: bomFormat {}, specVersion {}", doc["bomFormat"], doc["specVersion"]);
    }
    let serial = doc["serialNumber"].as_str().unwrap_or_default();
    if !(serial.starts_with("urn:uuid:") && serial.len() == 45) {
        bail!("serialNumber {serial:?} is not a urn:uuid");
    }
    let top = &doc["metadata"]["component"];
    let sha = top["hashes"][0]["content"].as_str().unwrap_or_default();
    if top["type"] != "application" || sha.len() != 64 {
        bail!("metadata.component is not an application with a SHA-256: {top}");
    }
    let components = doc["components"].as_array().context("no components")?;
    let mut refs: BTreeSet<&str> = top["bom-ref"].as_str().into_iter().collect();
    let mut found = BTreeSet::new();
    for c in components {
        let (Some(name), Some(version), Some(purl)) = (c["name"].as_str(), c["version"].as_str(), c["purl"].as_str())
        else {
            bail!("a component without name, version or purl: {c}");
        };
        if purl != format!("pkg:cargo/{name}@{version}") {
            bail!("{name} {version}: purl {purl}");
        }
        if c["licenses"].as_array().is_none_or(Vec::is_empty) {
            bail!("{name} {version} has no licence");
        }
        refs.insert(c["bom-ref"].as_str().unwrap_or_default());
        found.insert((name.to_owned(), version.to_owned()));
    }
    for d in doc["dependencies"].as_array().context("no dependencies")? {
        let dangling = std::iter::once(&d["ref"])
            .chain(d["dependsOn"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .find(|r| !refs.contains(r));
        if let Some(r) = dangling {
            bail!("dependency ref {r} names no component");
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_becomes_crates_and_edges() {
        let text = "0app v0.1.0 (/w/app)|MIT OR Apache-2.0|\n1a v1.0.0|MIT/Apache-2.0|\n2c v3.0.0|Zlib|\n\
                    1b v2.0.0||\n2a v1.0.0|MIT/Apache-2.0| (*)\n";
        let mut graph = Graph::default();
        let root = parse_tree(text, &mut graph).unwrap_or_else(|e| panic!("{e:#}")).unwrap_or_else(|| panic!("root"));
        assert_eq!((root.name.as_str(), root.local), ("app", true));
        let a = graph.crates.iter().find(|c| c.name == "a").unwrap_or_else(|| panic!("a"));
        assert_eq!((a.license.as_deref(), a.local), (Some("MIT OR Apache-2.0"), false));
        assert_eq!(graph.crates.len(), 4);
        let deps = |r: &str| graph.edges[r].iter().cloned().collect::<Vec<_>>();
        assert_eq!(deps("pkg:cargo/app@0.1.0"), ["pkg:cargo/a@1.0.0", "pkg:cargo/b@2.0.0"]);
        assert_eq!(deps("pkg:cargo/b@2.0.0"), ["pkg:cargo/a@1.0.0"]);
        assert_eq!(deps("pkg:cargo/a@1.0.0"), ["pkg:cargo/c@3.0.0"]);
        assert!(deps("pkg:cargo/c@3.0.0").is_empty());
    }

    #[test]
    fn serial_numbers_are_uuid_shaped() {
        let sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(serial_number(sha), "urn:uuid:01234567-89ab-5def-8123-456789abcdef");
    }
}
