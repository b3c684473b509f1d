//! Test certificates for the TLS tests, written to a scratch directory: a CA, a server
//! certificate for 127.0.0.1/localhost, a client certificate, an expired server certificate and a
//! key that matches none of them; plus bcrypt-free helpers for web config files.
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType};
use time::{Duration, OffsetDateTime};

use crate::guard::Scratch;

/// PEM files in a scratch directory, removed when dropped.
#[derive(Debug)]
pub struct Certs {
    pub dir: Scratch,
}

impl Certs {
    /// `ca.pem`; `server.pem`/`server.key` (127.0.0.1, localhost); `client.pem`/`client.key`;
    /// `expired.pem`/`expired.key`; `other.key` (matches nothing).
    pub fn new() -> anyhow::Result<Certs> {
        let dir = Scratch::new("runqlat-tls")?;
        let write = |name: &str, text: &str| -> anyhow::Result<()> {
            let path = dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
        };
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(rcgen::DnType::CommonName, "runqlat test CA");
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
        write("ca.pem", &ca.pem())?;

        let leaf = |name: &str, usage: ExtendedKeyUsagePurpose, expired: bool| -> anyhow::Result<()> {
            let mut p = CertificateParams::new(vec!["localhost".to_owned()])?;
            p.subject_alt_names.push(SanType::IpAddress("127.0.0.1".parse()?));
            p.extended_key_usages = vec![usage];
            let now = OffsetDateTime::now_utc();
            if expired {
                p.not_before = now - Duration::days(30);
                p.not_after = now - Duration::days(1);
            } else {
                p.not_before = now - Duration::days(1);
                p.not_after = now + Duration::days(30);
            }
            let key = KeyPair::generate()?;
            let cert = p.signed_by(&key, &ca)?;
            write(&format!("{name}.pem"), &cert.pem())?;
            write(&format!("{name}.key"), &key.serialize_pem())
        };
        leaf("server", ExtendedKeyUsagePurpose::ServerAuth, false)?;
        leaf("client", ExtendedKeyUsagePurpose::ClientAuth, false)?;
        leaf("expired", ExtendedKeyUsagePurpose::ServerAuth, true)?;
        write("other.key", &KeyPair::generate()?.serialize_pem())?;
        Ok(Certs { dir })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
