//! Outbound HTTP/1.1 over TCP or TLS, for whoever pushes or delivers (the alert sinks, the OTLP
//! exporter) and for `config`, which checks CA files and client identities with the same calls:
//! a URL, a [`Request`] and a [`Client`] (CA roots, client identity, [`credentials`]) in; a
//! status and any `Retry-After` out, within the given time whatever the server does.
mod client;
pub mod credentials;
mod post;

pub use self::client::{Client, ca_roots, client_identity, install_ring, parse_certs};
pub use self::post::{MAX_RETRY_AFTER, PostError, Request, Response, post, send};
