//! How requests connect: the trusted CAs (a file's PEM, else the system bundle) and the credentials
//! (basic auth or a bearer token, read from files by `config`) in; a [`Client`] out, with the
//! `Authorization` value for a URL and the rustls configuration for `https://`.
use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::credentials::Auth;
use crate::model::sink_url::HttpUrl;

/// Debian's (and most distributions') bundle of trusted CAs, used when no CA file is given.
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// What sinks need to connect and authenticate; built once per configuration.
#[derive(Clone)]
pub struct Client {
    tls: Arc<ClientConfig>,
    auth: Option<Auth>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").field("auth", &self.auth).finish_non_exhaustive()
    }
}

impl Client {
    /// `ca_pem`: the CA file's text (None: the system bundle, if readable). Fails with one line
    /// when the PEM holds no usable certificate.
    pub fn new(ca_pem: Option<&str>, auth: Option<Auth>) -> Result<Client, String> {
        Client::with_identity(ca_pem, None, auth)
    }

    /// The same, presenting a client certificate (`identity`: certificate chain and key, PEM) to
    /// servers that ask for one.
    pub fn with_identity(
        ca_pem: Option<&str>,
        identity: Option<(&str, &str)>,
        auth: Option<Auth>,
    ) -> Result<Client, String> {
        let roots = match ca_pem {
            Some(pem) => ca_roots(pem)?,
            None => system_roots(),
        };
        let builder = {
            install_ring();
            ClientConfig::builder().with_root_certificates(roots)
        };
        let tls = match identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let (chain, key) = client_identity(cert, key)?;
                builder.with_client_auth_cert(chain, key).map_err(|e| format!("client certificate: {e}"))?
            }
        };
        Ok(Client { tls: Arc::new(tls), auth })
    }

    pub fn tls(&self) -> Arc<ClientConfig> {
        Arc::clone(&self.tls)
    }

    /// The `Authorization` header's value for `url`, if any.
    pub fn authorization(&self, url: &HttpUrl) -> Option<String> {
        let basic = |user: &str, password: &str| {
            format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
        };
        if let Some(userinfo) = &url.userinfo {
            let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            return Some(basic(user, password));
        }
        match &self.auth {
            Some(Auth::Basic { user, password }) => Some(basic(user, &password.0)),
            Some(Auth::Bearer(token)) => Some(format!("Bearer {}", token.0)),
            None => None,
        }
    }
}

impl Default for Client {
    /// The system bundle, no credentials.
    fn default() -> Self {
        Client { tls: Arc::new(config(system_roots())), auth: None }
    }
}

fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    // No bundle (a minimal container): https then fails per attempt, counted and logged.
    if let Ok(pem) = std::fs::read(SYSTEM_BUNDLE) {
        roots.add_parsable_certificates(parse_certs(&pem).unwrap_or_default());
    }
    roots
}

fn config(roots: RootCertStore) -> ClientConfig {
    install_ring();
    ClientConfig::builder().with_root_certificates(roots).with_no_client_auth()
}

/// Makes ring the process's rustls provider (the only one we build), so rustls's infallible
/// builders can find it; idempotent.
pub fn install_ring() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err only if a provider is installed already, which is then the one to use.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

impl PartialEq for Client {
    /// Same credentials and the same configuration object (a reload builds a new one).
    fn eq(&self, other: &Self) -> bool {
        self.auth == other.auth && Arc::ptr_eq(&self.tls, &other.tls)
    }
}
impl Eq for Client {}

/// The trust anchors of a CA file's text: every PEM block parses, and at least one is usable.
/// Fails with one line (configuration checks it with this before any sink starts).
pub fn ca_roots(pem: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(parse_certs(pem.as_bytes())?);
    if added == 0 {
        return Err("the CA file holds no usable certificate".into());
    }
    Ok(roots)
}

/// A client certificate chain and its private key from their PEM texts; one line on what is
/// wrong (configuration checks it with this before the exporter starts).
pub fn client_identity(
    cert_pem: &str,
    key_pem: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let chain = parse_certs(cert_pem.as_bytes())?;
    if chain.is_empty() {
        return Err("the certificate file holds no certificate".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| format!("the key file holds no usable private key: {e}"))?;
    Ok((chain, key))
}

/// Every certificate in a PEM text; one line on the first that does not parse.
pub fn parse_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>().map_err(|e| format!("bad PEM: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::credentials::Secret;

    #[test]
    fn authorization_from_url_or_settings_never_in_debug() {
        let plain = HttpUrl::parse("http://h/").unwrap();
        let with_user = HttpUrl::parse("http://alice:pw@h/").unwrap();
        let bearer = Client::new(None, Some(Auth::Bearer(Secret("T0KEN".into())))).unwrap();
        assert_eq!(bearer.authorization(&plain).as_deref(), Some("Bearer T0KEN"));
        assert_eq!(bearer.authorization(&with_user).as_deref(), Some("Basic YWxpY2U6cHc="));
        let basic = Client::new(None, Some(Auth::Basic { user: "bob".into(), password: Secret("pw".into()) })).unwrap();
        assert_eq!(basic.authorization(&plain).as_deref(), Some("Basic Ym9iOnB3"));
        assert_eq!(Client::new(None, None).unwrap().authorization(&plain), None);
        assert!(!format!("{bearer:?}{basic:?}").contains("T0KEN"));
        assert!(!format!("{basic:?}").contains("pw\""));
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        assert!(Client::new(Some("not a certificate\n"), None).unwrap_err().contains("no usable certificate"));
    }
}
