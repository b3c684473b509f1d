//! The web config file's checks, with real certificates (latency-lab's) in a scratch directory.
use latency_lab::tls::Certs;

use super::*;

/// Loads `yaml` at once, without waiting for the file to stand still (config::file's tests are
/// about that; these, about what the file says).
fn load(certs: &Certs, yaml: &str) -> Result<WebConfig, String> {
    crate::config::file::settle_here(std::time::Duration::ZERO);
    let path = certs.path("web.yml");
    std::fs::write(&path, yaml).unwrap();
    WebConfig::load(&path).map_err(|e| e.to_string())
}

fn tls(extra: &str) -> String {
    format!("tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n{extra}")
}

#[test]
fn tls_auth_and_headers_with_paths_relative_to_the_file() {
    let certs = Certs::new().unwrap();
    let hash = bcrypt::hash("pw", 4).unwrap();
    let yaml = format!(
        "{}http_server_config:\n  http2: true\n  headers:\n    x-frame-options: DENY\nbasic_auth_users:\n  alice: '{hash}'\n",
        tls(
            "  min_version: TLS13\n  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n  curve_preferences: [X25519]\n"
        )
    );
    let w = load(&certs, &yaml).unwrap();
    assert!(w.tls.is_some());
    assert_eq!(w.headers, [("X-Frame-Options".to_owned(), "DENY".to_owned())]);
    assert_eq!(w.users.keys().collect::<Vec<_>>(), ["alice"]);
    assert!(!format!("{w:?}").contains(&hash), "hashes are not shown");
    let mtls = tls("  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n");
    assert_eq!(load(&certs, &mtls).unwrap().client_auth, "required and verified");
    assert!(load(&certs, "basic_auth_users: {}\n").unwrap().tls.is_none());
}

#[test]
fn every_mistake_is_one_line_naming_it() {
    let certs = Certs::new().unwrap();
    let cases = [
        (tls("  min_version: TLS10\n"), "min_version TLS10: only TLS12 and TLS13 are supported"),
        (tls("  min_version: TLS13\n  max_version: TLS12\n"), "min_version is above max_version"),
        (tls("  client_auth_type: RequireAnyClientCert\n"), "authenticates nobody"),
        (tls("  client_auth_type: VerifyClientCertIfGiven\n"), "needs client_ca_file"),
        (tls("  client_ca_file: ca.pem\n"), "client_ca_file is set but client_auth_type is NoClientCert"),
        (tls("  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n"), "TLS_RSA_WITH_AES_128_CBC_SHA is not available"),
        (tls("  curve_preferences: [CurveP521]\n"), "CurveP521 is not one of"),
        (tls("  bogus: 1\n"), "tls_server_config: unknown field `…`, expected one of `cert_file`"),
        ("tls_server_config:\n  cert_file: server.pem\n".into(), "cert_file and key_file are both required"),
        ("tls_server_config:\n  cert_file: server.pem\n  key_file: other.key\n".into(), "do not go together"),
        ("tls_server_config:\n  cert_file: expired.pem\n  key_file: expired.key\n".into(), "the certificate expired"),
        ("tls_server_config:\n  cert_file: nope.pem\n  key_file: server.key\n".into(), "cert_file: cannot read"),
        ("basic_auth_users:\n  alice: plaintext\n".into(), "alice's password is not a bcrypt hash"),
        (
            format!("basic_auth_users:\n  alice: '$2b$99${}'\n", ".".repeat(53)),
            "alice's bcrypt hash has cost 99; bcrypt computes 4 to 31",
        ),
        ("http_server_config:\n  headers:\n    Server: x\n".into(), "\"Server\" cannot be set"),
        ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n".into(), "must be one of deny, sameorigin"),
        ("[not a map".into(), "web.yml"),
    ];
    for (yaml, want) in cases {
        let e = load(&certs, &yaml).unwrap_err();
        assert!(e.contains(want), "{yaml}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn an_empty_file_is_refused_rather_than_taken_for_no_tls_and_no_auth() {
    let certs = Certs::new().unwrap();
    for yaml in ["", "\n  \n"] {
        let err = load(&certs, yaml).unwrap_err();
        assert!(err.contains("web.yml") && err.contains("is empty"), "{err}");
    }
}

#[test]
fn a_mistake_never_echoes_a_value() {
    let certs = Certs::new().unwrap();
    let cases = [
        "basic_auth_users: '$2y$10$SECRETHASH'\n",
        "basic_auth_users:\n  alice: [ '$2y$10$SECRETHASH' ]\n  bob: {SECRETHASH: 1}\n",
        "root:SECRETHASH:19000:0:99999:7:::\n",
        "http_server_config:\n  headers: SECRETHASH\n",
        "http_server_config:\n  http2: SECRETHASH\n",
        "basic_auth_users:\n  alice: '$2y$10$SECRETHASH'\n  - x\n",
    ];
    for yaml in cases {
        let e = load(&certs, yaml).unwrap_err();
        assert!(e.contains("web.yml"), "{yaml}: {e}");
        assert!(!e.contains("SECRETHASH") && !e.contains('\n'), "{yaml}: {e}");
    }
}
