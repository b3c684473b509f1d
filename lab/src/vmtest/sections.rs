//! What a guest wrote on its data port (the second serial port): in, its text; out, its
//! `@@begin NAME` … `@@end NAME RC` sections by name, each with the exit code written after it.
use std::collections::BTreeMap;

/// `@@begin NAME` … `@@end NAME RC` sections of the data port.
#[derive(Debug, Default)]
pub struct Sections(BTreeMap<String, (String, Option<i32>)>);

impl Sections {
    pub fn parse(data: &str) -> Sections {
        let mut found = BTreeMap::new();
        let mut current: Option<(String, String)> = None;
        for line in data.lines() {
            if let Some(name) = line.strip_prefix("@@begin ") {
                current = Some((name.trim().to_owned(), String::new()));
            } else if let Some(rest) = line.strip_prefix("@@end ") {
                let rc = rest.split_whitespace().nth(1).and_then(|rc| rc.parse().ok());
                if let Some((name, text)) = current.take() {
                    found.insert(name, (text, rc));
                }
            } else if let Some((_, text)) = current.as_mut() {
                text.push_str(line);
                text.push('\n');
            }
        }
        Sections(found)
    }

    pub fn text(&self, name: &str) -> &str {
        self.0.get(name).map_or("", |(t, _)| t.as_str())
    }

    /// The exit code the guest wrote after the section, if any.
    pub fn rc(&self, name: &str) -> Option<i32> {
        self.0.get(name).and_then(|(_, rc)| *rc)
    }
}
