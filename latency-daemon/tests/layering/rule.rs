//! docs/layering.toml, the one place the layering rule is written: its text in, the crates' rules
//! out, and the Markdown docs/design.md shows of them (between [`BEGIN`] and [`END`]).
use std::fmt::Write as _;

use serde::Deserialize;

pub const BEGIN: &str = "<!-- layers: rendered from docs/layering.toml (regenerate: UPDATE_GOLDEN=1 cargo test -p latency-daemon --test layering) -->";
pub const END: &str = "<!-- end of layers -->";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(rename = "crate")]
    pub crates: Vec<Crate>,
}

/// One crate's rule (the file's header says what each field means).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Crate {
    pub name: String,
    pub src: String,
    #[serde(default)]
    pub roots: Vec<String>,
    #[serde(default)]
    pub complete: bool,
    #[serde(default)]
    pub drivers: Vec<String>,
    #[serde(default)]
    pub drivers_named_by: Vec<String>,
    #[serde(default, rename = "layer")]
    pub layers: Vec<Layer>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    pub name: String,
    pub may: Vec<String>,
    pub folder: Option<String>,
    pub what: Option<String>,
    pub crates: Option<String>,
    pub why: Option<String>,
}

impl Crate {
    /// How the crate is named in another crate's paths (`latency_lab`).
    pub fn ident(&self) -> String {
        self.name.replace("-", "_")
    }

    pub fn layer(&self, name: &str) -> Option<&Layer> {
        self.layers.iter().find(|l| l.name == name)
    }
}

impl Layer {
    /// Whether a path (segments after the crate's name) is one this layer may name.
    pub fn allows(&self, path: &[String]) -> bool {
        self.may.iter().any(|a| {
            let a: Vec<&str> = a.split("::").collect();
            a == ["*"] || (path.len() >= a.len() && path.iter().zip(&a).all(|(p, a)| p == a))
        })
    }

    /// `may` for a reader: "`model`, `host`", "anything", "nothing".
    pub fn may_text(&self) -> String {
        match self.may.as_slice() {
            [] => "nothing".to_owned(),
            [all] if all == "*" => "anything".to_owned(),
            may => may.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", "),
        }
    }
}

pub fn load(text: &str) -> Rule {
    toml::from_str(text).unwrap_or_else(|e| panic!("docs/layering.toml: {e}"))
}

/// What docs/design.md shows of the rule: a table per crate whose layers are complete, then one
/// line per crate.
pub fn markdown(rule: &Rule) -> String {
    let mut out = String::new();
    for c in rule.crates.iter().filter(|c| c.complete) {
        let _ = writeln!(out, "`{}` by layer:\n\n| folder | what | may import |\n|---|---|---|", c.src);
        for l in &c.layers {
            let mut may = l.crates.iter().cloned().collect::<Vec<_>>();
            if !l.may.is_empty() || l.crates.is_none() {
                may.push(l.may_text());
            }
            let mut may = may.join(", ");
            if let Some(why) = &l.why {
                let _ = write!(may, " ({why})");
            }
            let folder = l.folder.as_deref().unwrap_or(&l.name);
            let _ = writeln!(out, "| `{folder}` | {} | {may} |", l.what.as_deref().unwrap_or(""));
        }
        out.push('\n');
    }
    out.push_str("In every crate, no two files import each other, directly or around a loop (a module and its\nchildren count as one). Per crate:\n\n");
    for c in &rule.crates {
        let mut parts = Vec::new();
        if c.complete {
            parts.push("the table above".to_owned());
        } else {
            parts.extend(c.layers.iter().map(|l| format!("`{}` → {}", l.name, l.may_text())));
        }
        if !c.drivers.is_empty() {
            let drivers: Vec<String> = c.drivers.iter().map(|d| format!("`{d}`")).collect();
            let by: Vec<String> = c.drivers_named_by.iter().map(|f| format!("`{f}`")).collect();
            parts.push(format!(
                "{} are drivers, named by nothing else in the workspace but {}",
                drivers.join(", "),
                if by.is_empty() { "themselves".to_owned() } else { by.join(", ") }
            ));
        }
        if parts.is_empty() {
            parts.push("no cycles".to_owned());
        }
        let _ = writeln!(out, "- `{}` ({}): {}.", c.name, c.src, parts.join("; "));
    }
    out
}

/// `doc` with what stands between [`BEGIN`] and [`END`] replaced by `block`; None without them.
pub fn with_block(doc: &str, block: &str) -> Option<String> {
    let start = doc.find(BEGIN)? + BEGIN.len();
    let end = start + doc[start..].find(END)?;
    Some(format!("{}\n{block}{}", &doc[..start], &doc[end..]))
}
