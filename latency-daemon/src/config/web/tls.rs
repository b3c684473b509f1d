//! `tls_server_config` with its files' text in; a rustls `ServerConfig` (ring provider, TLS 1.2
//! and 1.3) out, or why not in one line: a missing, expired or not-yet-valid certificate, a key
//! that does not match it, a client CA without a policy, a version or suite rustls does not have.
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rustls::crypto::{CryptoProvider, ring};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::der;

/// The section as read (file contents, not paths).
#[derive(Debug)]
pub(super) struct Settings {
    pub cert_pem: Option<String>,
    pub key_pem: Option<String>,
    pub client_auth_type: String,
    pub client_ca_pem: Option<String>,
    pub min_version: Option<String>,
    pub max_version: Option<String>,
    pub cipher_suites: Vec<String>,
    pub curves: Vec<String>,
    pub prefer_server_cipher_suites: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("tls_server_config: {0}")]
pub struct TlsError(String);

fn err<T>(message: impl Into<String>) -> Result<T, TlsError> {
    Err(TlsError(message.into()))
}

/// The server configuration and the client-auth policy's name for the landing page.
pub(super) fn server_config(s: &Settings) -> Result<(ServerConfig, &'static str), TlsError> {
    let (Some(cert_pem), Some(key_pem)) = (&s.cert_pem, &s.key_pem) else {
        return err("cert_file and key_file are both required");
    };
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError(format!("cert_file: bad PEM: {e}")))?;
    let Some(leaf) = certs.first() else { return err("cert_file holds no certificate") };
    check_validity(leaf)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| TlsError(format!("key_file: no private key: {e}")))?;

    let provider = Arc::new(provider(s)?);
    let versions = versions(s.min_version.as_deref(), s.max_version.as_deref())?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .map_err(|e| TlsError(format!("{e}")))?;

    let roots = || -> Result<Arc<RootCertStore>, TlsError> {
        let Some(pem) = &s.client_ca_pem else {
            return err(format!("client_auth_type {} needs client_ca_file", s.client_auth_type));
        };
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let cert = cert.map_err(|e| TlsError(format!("client_ca_file: bad PEM: {e}")))?;
            roots.add(cert).map_err(|e| TlsError(format!("client_ca_file: {e}")))?;
        }
        if roots.is_empty() {
            return err("client_ca_file holds no certificate");
        }
        Ok(Arc::new(roots))
    };
    let (builder, policy) = match s.client_auth_type.as_str() {
        "NoClientCert" | "" => {
            if s.client_ca_pem.is_some() {
                return err("client_ca_file is set but client_auth_type is NoClientCert");
            }
            (builder.with_no_client_auth(), "none")
        }
        "VerifyClientCertIfGiven" => {
            let verifier = WebPkiClientVerifier::builder_with_provider(roots()?, Arc::clone(&provider))
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError(format!("client_ca_file: {e}")))?;
            (builder.with_client_cert_verifier(verifier), "verified if given")
        }
        "RequireAndVerifyClientCert" => {
            let verifier = WebPkiClientVerifier::builder_with_provider(roots()?, Arc::clone(&provider))
                .build()
                .map_err(|e| TlsError(format!("client_ca_file: {e}")))?;
            (builder.with_client_cert_verifier(verifier), "required and verified")
        }
        "RequestClientCert" | "RequireAnyClientCert" => {
            return err(format!(
                "client_auth_type {} accepts certificates without verifying them, which authenticates \
                 nobody; use VerifyClientCertIfGiven or RequireAndVerifyClientCert",
                s.client_auth_type
            ));
        }
        other => {
            return err(format!(
                "client_auth_type {other:?} is not one of NoClientCert, VerifyClientCertIfGiven, \
                 RequireAndVerifyClientCert"
            ));
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError(format!("cert_file and key_file do not go together: {e}")))?;
    config.ignore_client_order = s.prefer_server_cipher_suites;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((config, policy))
}

/// Refuses a certificate outside its validity period now (rustls never checks its own).
fn check_validity(leaf: &CertificateDer<'_>) -> Result<(), TlsError> {
    let Some((not_before, not_after)) = der::validity(leaf) else {
        return err("cert_file: cannot read the certificate's validity period");
    };
    let now =
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    if now > not_after {
        return err(format!("cert_file: the certificate expired {} ago", ago(now - not_after)));
    }
    if now < not_before {
        return err(format!("cert_file: the certificate is not valid for another {}", ago(not_before - now)));
    }
    Ok(())
}

fn ago(seconds: i64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(u64::try_from(seconds).unwrap_or(0))).to_string()
}

/// TLS 1.2 and 1.3 only (rustls has nothing older); exporter-toolkit's default minimum is TLS12.
fn versions(min: Option<&str>, max: Option<&str>) -> Result<Vec<&'static SupportedProtocolVersion>, TlsError> {
    let rank = |key: &str, v: &str| match v {
        "TLS12" => Ok(12),
        "TLS13" => Ok(13),
        "TLS10" | "TLS11" => err(format!("{key} {v}: only TLS12 and TLS13 are supported (rustls)")),
        _ => err(format!("{key} {v:?} is not one of TLS12, TLS13")),
    };
    let lo = min.map_or(Ok(12), |v| rank("min_version", v))?;
    let hi = max.map_or(Ok(13), |v| rank("max_version", v))?;
    if lo > hi {
        return err("min_version is above max_version");
    }
    Ok([(12, &rustls::version::TLS12), (13, &rustls::version::TLS13)]
        .into_iter()
        .filter(|(v, _)| (lo..=hi).contains(v))
        .map(|(_, p)| p)
        .collect())
}

/// ring's provider narrowed to the configured suites (TLS 1.2 only, as in Go: TLS 1.3's are
/// fixed) and curves, by their Go names.
fn provider(s: &Settings) -> Result<CryptoProvider, TlsError> {
    let mut provider = ring::default_provider();
    if !s.cipher_suites.is_empty() {
        let mut wanted = Vec::new();
        for name in &s.cipher_suites {
            // Go's names drop the _SHA256 that IANA's CHACHA20 names carry.
            let iana = if name.ends_with("CHACHA20_POLY1305") { format!("{name}_SHA256") } else { name.clone() };
            let Some(suite) = provider.cipher_suites.iter().find(|c| format!("{:?}", c.suite()) == iana) else {
                return err(format!("cipher_suites: {name} is not available (TLS 1.2 AEAD suites with ECDHE only)"));
            };
            wanted.push(*suite);
        }
        provider.cipher_suites.retain(|c| c.tls13().is_some() || wanted.iter().any(|w| w.suite() == c.suite()));
    }
    if !s.curves.is_empty() {
        let mut groups = Vec::new();
        for name in &s.curves {
            let group = match name.as_str() {
                "X25519" => ring::kx_group::X25519,
                "CurveP256" => ring::kx_group::SECP256R1,
                "CurveP384" => ring::kx_group::SECP384R1,
                other => return err(format!("curve_preferences: {other} is not one of X25519, CurveP256, CurveP384")),
            };
            groups.push(group);
        }
        provider.kx_groups = groups;
    }
    Ok(provider)
}
