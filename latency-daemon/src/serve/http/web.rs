//! The web configuration as the transport uses it: `config::web::WebConfig` in; a TLS acceptor,
//! the basic-auth users and the extra headers out, swapped whole on SIGHUP ([`WebSlot`]) and read
//! once per connection.
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use hyper::header::{HeaderName, HeaderValue};
use tokio_rustls::TlsAcceptor;

use crate::config::web::WebConfig;

/// What one connection is served with.
#[derive(Default)]
pub struct WebState {
    pub(super) tls: Option<TlsAcceptor>,
    /// User → bcrypt hash; empty: no authentication.
    pub(super) users: BTreeMap<String, String>,
    pub(super) headers: Vec<(HeaderName, HeaderValue)>,
}

impl fmt::Debug for WebState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebState")
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.len())
            .field("headers", &self.headers)
            .finish()
    }
}

impl WebState {
    /// From a checked web config (None: plain HTTP, no auth, no extra headers).
    pub fn new(config: Option<&WebConfig>) -> WebState {
        let Some(c) = config else { return WebState::default() };
        let headers = c
            .headers
            .iter()
            // Checked by config::web (names from a fixed list, values without control characters).
            .filter_map(|(n, v)| Some((HeaderName::from_bytes(n.as_bytes()).ok()?, HeaderValue::from_str(v).ok()?)))
            .collect();
        WebState { tls: c.tls.clone().map(TlsAcceptor::from), users: c.users.clone(), headers }
    }
}

/// The current [`WebState`]; SIGHUP replaces it, connections already open keep theirs.
#[derive(Debug, Default)]
pub struct WebSlot(RwLock<Arc<WebState>>);

impl WebSlot {
    pub fn new(state: WebState) -> WebSlot {
        WebSlot(RwLock::new(Arc::new(state)))
    }

    pub fn get(&self) -> Arc<WebState> {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    pub fn set(&self, state: WebState) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(state);
    }
}
