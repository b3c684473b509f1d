//! `--web.config.file`: exporter-toolkit's YAML (the file every Prometheus exporter reads) in, a
//! validated [`WebConfig`] out — the rustls server configuration built (so an expired or
//! mismatched certificate is a configuration error), the bcrypt hashes checked, the headers
//! allowed — or one line naming what is wrong. Relative paths are relative to the file, as in
//! exporter-toolkit. Read again on every SIGHUP.
mod der;
mod tls;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

pub use self::tls::TlsError;

/// The file's schema (exporter-toolkit's `web.Config`); unknown keys are errors, as in promtool.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    http_server_config: HttpFile,
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct TlsFile {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Vec<String>,
    curve_preferences: Vec<String>,
    prefer_server_cipher_suites: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct HttpFile {
    /// Accepted for compatibility; we serve HTTP/1.1 only.
    http2: Option<bool>,
    headers: BTreeMap<String, String>,
}

/// Headers exporter-toolkit lets a web config set, with the values it allows (None: any).
const HEADERS: [(&str, Option<&[&str]>); 5] = [
    ("Strict-Transport-Security", None),
    ("X-Content-Type-Options", Some(&["nosniff"])),
    ("X-Frame-Options", Some(&["deny", "sameorigin"])),
    ("X-XSS-Protection", None),
    ("Content-Security-Policy", None),
];

/// What the web config file asks for, ready to serve.
#[derive(Clone)]
pub struct WebConfig {
    /// The file read, for messages.
    pub path: PathBuf,
    /// TLS on every connection; None: plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Whether clients must present a certificate (shown on the landing page).
    pub client_auth: &'static str,
    /// User → bcrypt hash; empty: no authentication.
    pub users: BTreeMap<String, String>,
    /// Added to every response.
    pub headers: Vec<(String, String)>,
    /// The file's text: two configs are equal when read from equal texts.
    source: String,
}

impl fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebConfig")
            .field("path", &self.path)
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

impl PartialEq for WebConfig {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.source == other.source
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("{0}")]
    File(#[from] super::file::FileError),
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}

impl WebConfig {
    /// Reads and checks `path` (and the files it names).
    pub fn load(path: &Path) -> Result<WebConfig, WebError> {
        let text = super::file::read(path)?;
        let invalid = |message: String| WebError::Invalid { path: path.to_owned(), message };
        // An empty file would mean no TLS and no auth: a file caught mid-write, or truncated by
        // mistake, must not open the endpoints (at a reload, the running configuration stays).
        if text.trim().is_empty() {
            return Err(invalid("is empty; a web configuration must name what it configures".to_owned()));
        }
        let file: File = serde_norway::from_str(&text).map_err(|e| invalid(parse_error(&e)))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let (tls, client_auth) = match &file.tls_server_config {
            Some(t) => {
                let (config, client_auth) =
                    tls::server_config(&tls_settings(t, dir)?).map_err(|e| invalid(e.to_string()))?;
                (Some(Arc::new(config)), client_auth)
            }
            None => (None, "none"),
        };
        for (user, hash) in &file.basic_auth_users {
            if user.contains(':') || user.chars().any(char::is_control) {
                return Err(invalid(format!(
                    "basic_auth_users: user {user:?} may not contain ':' or control characters"
                )));
            }
            let Ok(parts) = hash.parse::<bcrypt::HashParts>() else {
                return Err(invalid(format!("basic_auth_users: {user}'s password is not a bcrypt hash")));
            };
            // bcrypt's parser takes any number; `verify` refuses costs outside 4–31, so such a
            // user could never log in (and an unknown user is checked at the users' cost).
            if !(4..=31).contains(&parts.get_cost()) {
                return Err(invalid(format!(
                    "basic_auth_users: {user}'s bcrypt hash has cost {}; bcrypt computes 4 to 31",
                    parts.get_cost()
                )));
            }
        }
        let mut headers = Vec::new();
        for (name, value) in &file.http_server_config.headers {
            let Some((canonical, allowed)) = HEADERS.iter().find(|(h, _)| h.eq_ignore_ascii_case(name)) else {
                let names: Vec<&str> = HEADERS.iter().map(|(h, _)| *h).collect();
                return Err(invalid(format!(
                    "http_server_config.headers: {name:?} cannot be set (only {})",
                    names.join(", ")
                )));
            };
            if let Some(allowed) = allowed
                && !allowed.iter().any(|a| a.eq_ignore_ascii_case(value))
            {
                return Err(invalid(format!(
                    "http_server_config.headers: {canonical} must be one of {}",
                    allowed.join(", ")
                )));
            }
            if value.chars().any(char::is_control) {
                return Err(invalid(format!("http_server_config.headers: {canonical} contains control characters")));
            }
            headers.push(((*canonical).to_owned(), value.clone()));
        }
        let _ = file.http_server_config.http2;
        Ok(WebConfig { path: path.to_owned(), tls, client_auth, users: file.basic_auth_users, headers, source: text })
    }
}

/// The TLS section with its files read (relative to the web config's directory).
fn tls_settings(t: &TlsFile, dir: &Path) -> Result<tls::Settings, WebError> {
    let read = |key: &str, p: &Option<PathBuf>| -> Result<Option<String>, WebError> {
        match p {
            None => Ok(None),
            Some(p) => super::file::read(&dir.join(p))
                .map(Some)
                .map_err(|e| WebError::Invalid { path: dir.join(p), message: format!("tls_server_config.{key}: {e}") }),
        }
    };
    Ok(tls::Settings {
        cert_pem: read("cert_file", &t.cert_file)?,
        key_pem: read("key_file", &t.key_file)?,
        client_auth_type: t.client_auth_type.clone().unwrap_or_else(|| "NoClientCert".into()),
        client_ca_pem: read("client_ca_file", &t.client_ca_file)?,
        min_version: t.min_version.clone(),
        max_version: t.max_version.clone(),
        cipher_suites: t.cipher_suites.clone(),
        curves: t.curve_preferences.clone(),
        prefer_server_cipher_suites: t.prefer_server_cipher_suites.unwrap_or(true),
    })
}

/// The file's keys, which error messages may name (anything else quoted in them is hidden).
const KEYS: [&str; 14] = [
    "tls_server_config",
    "http_server_config",
    "basic_auth_users",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "min_version",
    "max_version",
    "cipher_suites",
    "curve_preferences",
    "prefer_server_cipher_suites",
    "http2",
    "headers",
];

/// The YAML parser's message (its path of keys, then "at line L column C") in one line, with every
/// quoted value hidden: the file holds bcrypt hashes, and a path symlinked by mistake may be
/// another file whose text must not reach the log.
fn parse_error(e: &serde_norway::Error) -> String {
    super::redact::hide_values(&e.to_string(), |s| KEYS.contains(&s))
}

#[cfg(test)]
mod tests;
