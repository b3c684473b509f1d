//! What a guest wrote on its data port (the second serial port): in, its text; out, its
//! `@@begin NAME` … `@@end NAME RC` sections by name, each with the exit code written after it.
//! A section opened `@@begin NAME gzip` holds its text gzipped, then in base64 (an emulated UART
//! carries a few hundred KB/s, and a guest's sections are most of a megabyte of JSON and
//! exposition text); a body that does not decode is kept as the text `(undecodable: …)`.
use std::collections::BTreeMap;
use std::io::Read as _;

use base64::Engine as _;

/// `@@begin NAME` … `@@end NAME RC` sections of the data port: each one's text, exit code, and,
/// when it came gzipped, its bytes as they were (a binary file among them).
#[derive(Debug, Default)]
pub struct Sections(BTreeMap<String, Section>);

/// One section: its text, the exit code after it, its bytes when it came gzipped.
#[derive(Debug, Default)]
struct Section(String, Option<i32>, Option<Vec<u8>>);

impl Sections {
    pub fn parse(data: &str) -> Sections {
        let mut found = BTreeMap::new();
        // (name, gzipped, body)
        let mut current: Option<(String, bool, String)> = None;
        for line in data.lines() {
            if let Some(rest) = line.strip_prefix("@@begin ") {
                let mut words = rest.split_whitespace();
                let name = words.next().unwrap_or("").to_owned();
                current = Some((name, words.next() == Some("gzip"), String::new()));
            } else if let Some(rest) = line.strip_prefix("@@end ") {
                let rc = rest.split_whitespace().nth(1).and_then(|rc| rc.parse().ok());
                if let Some((name, gzipped, body)) = current.take() {
                    let (text, bytes) = if gzipped {
                        match gunzip_base64(&body) {
                            Ok(bytes) => (String::from_utf8_lossy(&bytes).into_owned(), Some(bytes)),
                            Err(why) => (why, None),
                        }
                    } else {
                        (body, None)
                    };
                    found.insert(name, Section(text, rc, bytes));
                }
            } else if let Some((_, gzipped, body)) = current.as_mut() {
                if *gzipped {
                    body.push_str(line.trim());
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
        Sections(found)
    }

    /// Every section as plain text (`@@begin NAME` … `@@end NAME RC`), for the report's folder.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, Section(text, rc, bytes)) in &self.0 {
            let rc = rc.map(|rc| format!(" {rc}")).unwrap_or_default();
            let text = match bytes {
                Some(b) if std::str::from_utf8(b).is_err() => format!("({} bytes, not text)\n", b.len()),
                _ => text.clone(),
            };
            out.push_str(&format!("@@begin {name}\n{text}@@end {name}{rc}\n"));
        }
        out
    }

    pub fn text(&self, name: &str) -> &str {
        self.0.get(name).map_or("", |s| s.0.as_str())
    }

    /// A gzipped section's bytes as the guest's file held them; None for a plain section (whose
    /// text is all there is) or one that did not decode.
    pub fn bytes(&self, name: &str) -> Option<&[u8]> {
        self.0.get(name).and_then(|s| s.2.as_deref())
    }

    /// The exit code the guest wrote after the section, if any.
    pub fn rc(&self, name: &str) -> Option<i32> {
        self.0.get(name).and_then(|s| s.1)
    }
}

/// The bytes gzipped and written in base64 (`gzip -c FILE | base64`), or, as text, what went wrong.
fn gunzip_base64(body: &str) -> Result<Vec<u8>, String> {
    if body.is_empty() {
        return Ok(Vec::new());
    }
    let gz = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|err| format!("(undecodable: base64: {err})\n"))?;
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice())
        .read_to_end(&mut bytes)
        .map_err(|err| format!("(undecodable: gzip: {err})\n"))?;
    Ok(bytes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::Write as _;

    use super::*;

    #[test]
    fn plain_and_gzipped_sections_read_alike() {
        let text = "line one\nline two\n";
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(text.as_bytes()).unwrap();
        let encoded = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
        // base64(1) wraps at 76 columns; the serial port may add carriage returns.
        let wrapped: Vec<&str> = encoded.as_bytes().chunks(76).map(|c| std::str::from_utf8(c).unwrap()).collect();
        let data = format!(
            "noise\n@@begin a\n{text}@@end a 0\n@@begin b gzip\n{}\r\n@@end b 3\n@@begin c gzip\n!!\n@@end c\n@@begin d gzip\n@@end d 0\n",
            wrapped.join("\r\n")
        );
        let s = Sections::parse(&data);
        assert_eq!(s.text("a"), text);
        assert_eq!(s.text("b"), text);
        assert_eq!((s.rc("a"), s.rc("b")), (Some(0), Some(3)));
        assert_eq!((s.text("d"), s.rc("d")), ("", Some(0)), "an empty file is an empty section");
        assert!(s.text("c").starts_with("(undecodable: base64"), "{}", s.text("c"));
        assert!(s.render().contains("@@begin b\nline one\nline two\n@@end b 3\n"));
        assert_eq!((s.bytes("a"), s.bytes("b")), (None, Some(text.as_bytes())), "bytes of a gzipped section");
    }
}
