//! Text in, logfmt out: a value quoted and escaped so that it stays inside its key, a key made of
//! safe characters, and any serializable record flattened to `key=value` pairs (nested keys joined
//! by `.`, list items by their index). The logger (`cmd::logger`) and the alert log sink both
//! write through these, so every line of the log is escaped the same way.
use std::fmt::{self, Write as _};

use serde::Serialize;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// A logfmt value: bare when it is a non-empty run of printable characters without space, `=`,
/// `"` or `\`; otherwise quoted, with `\`, `"` and control characters escaped, so a hostile task or
/// cgroup name can neither split the line nor forge a key.
pub fn value(s: &str) -> String {
    let bare = !s.is_empty() && s.chars().all(|c| c > ' ' && c != '=' && c != '"' && c != '\\' && !c.is_control());
    if bare {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A logfmt key: letters, digits, `_`, `.`, `-`; anything else becomes `_`.
pub fn key(s: &str) -> String {
    let key: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '_' }).collect();
    if key.is_empty() { "_".to_owned() } else { key }
}

/// `record`'s JSON form as one logfmt line, its fields in their serialization order: an object's
/// fields as `parent.child=…`, a list's items as `parent.0=…`, `parent.1.child=…`; `null`, `true`,
/// `false`, numbers, and an empty list or object (`[]`, `{}`) bare, as JSON writes them; strings
/// through [`value`]. No trailing newline.
pub fn line<T: Serialize + ?Sized>(record: &T) -> Result<String, serde_json::Error> {
    // Through JSON text, because its parser hands an object's fields over in the order they were
    // written, where a `serde_json::Value` would sort them.
    let json = serde_json::to_string(record)?;
    let mut out = String::with_capacity(json.len());
    let mut de = serde_json::Deserializer::from_str(&json);
    Flatten { path: String::new(), out: &mut out }.deserialize(&mut de)?;
    de.end()?;
    Ok(out)
}

/// Writes the value at `path` (and everything under it) to `out`.
struct Flatten<'a> {
    path: String,
    out: &'a mut String,
}

impl Flatten<'_> {
    fn leaf(self, text: &str) {
        if !self.out.is_empty() {
            self.out.push(' ');
        }
        let _ = write!(self.out, "{}={text}", key(&self.path));
    }

    fn child(&mut self, name: &str) -> Flatten<'_> {
        let path = if self.path.is_empty() { name.to_owned() } else { format!("{}.{name}", self.path) };
        Flatten { path, out: self.out }
    }
}

impl<'de> DeserializeSeed<'de> for Flatten<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Flatten<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<(), E> {
        self.leaf(if b { "true" } else { "false" });
        Ok(())
    }

    fn visit_i64<E>(self, n: i64) -> Result<(), E> {
        self.leaf(&n.to_string());
        Ok(())
    }

    fn visit_u64<E>(self, n: u64) -> Result<(), E> {
        self.leaf(&n.to_string());
        Ok(())
    }

    fn visit_f64<E>(self, n: f64) -> Result<(), E> {
        // JSON has no NaN or infinity, so a parsed float always has a JSON spelling.
        self.leaf(&serde_json::Number::from_f64(n).map_or_else(|| "null".to_owned(), |n| n.to_string()));
        Ok(())
    }

    fn visit_str<E>(self, s: &str) -> Result<(), E> {
        self.leaf(&value(s));
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.leaf("null");
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        self.leaf("null");
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut items: A) -> Result<(), A::Error> {
        let mut n = 0usize;
        while items.next_element_seed(self.child(&n.to_string()))?.is_some() {
            n += 1;
        }
        if n == 0 {
            self.leaf("[]");
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut fields: A) -> Result<(), A::Error> {
        let mut any = false;
        while let Some(name) = fields.next_key::<String>()? {
            fields.next_value_seed(self.child(&name))?;
            any = true;
        }
        if !any {
            self.leaf("{}");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use latency_lab::logs;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_record_flattens_in_its_own_order() {
        #[derive(Serialize)]
        struct Inner {
            b: u32,
            a: Option<u32>,
        }
        #[derive(Serialize)]
        struct Record {
            zeta: &'static str,
            inner: Inner,
            list: Vec<Inner>,
            none: Vec<u8>,
            map: std::collections::BTreeMap<String, i32>,
            neg: i64,
            half: f64,
            on: bool,
        }
        let r = Record {
            zeta: "first",
            inner: Inner { b: 2, a: None },
            list: vec![Inner { b: 3, a: Some(4) }, Inner { b: 5, a: None }],
            none: Vec::new(),
            map: Default::default(),
            neg: -7,
            half: 0.5,
            on: true,
        };
        assert_eq!(
            line(&r).unwrap(),
            "zeta=first inner.b=2 inner.a=null list.0.b=3 list.0.a=4 list.1.b=5 list.1.a=null none=[] map={} \
             neg=-7 half=0.5 on=true"
        );
    }

    #[test]
    fn hostile_keys_and_values_stay_one_pair_each() {
        let evil = "a\" b=c\nlevel=error \u{0}\u{1b}]0;t\u{7}\\ \u{fffd}";
        let l = line(&json!({"msg": evil, "bad key=x": [evil]})).unwrap();
        assert!(!l.contains('\n') && !l.contains('\u{1b}') && !l.contains('\u{0}'), "{l}");
        let pairs = logs::logfmt(&l).unwrap_or_else(|e| panic!("{e:#}"));
        let keys: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["bad_key_x.0", "msg"], "{l}");
        assert_eq!(logs::get(&pairs, "msg"), Some(evil), "{l}");
        assert_eq!(logs::get(&pairs, "bad_key_x.0"), Some(evil), "{l}");
    }

    #[test]
    fn values_bare_only_when_safe() {
        assert_eq!(value("plain/path:1"), "plain/path:1");
        assert_eq!(value(""), "\"\"");
        assert_eq!(value("a b"), "\"a b\"");
        assert_eq!(value("a=b"), "\"a=b\"");
        assert_eq!(value("a\\b"), "\"a\\\\b\"");
        assert_eq!(value("\u{7f}"), "\"\\u007f\"");
        assert_eq!(key(""), "_");
        assert_eq!(key("a.b-c_d"), "a.b-c_d");
    }
}
