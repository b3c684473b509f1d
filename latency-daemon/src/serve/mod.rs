//! Serving what the drain loop published: `metrics` names and encodes every metric family,
//! `encode` turns the registry into a scrape body, `routes` answers each endpoint, and `http` is
//! the hardened HTTP/1.1 transport underneath.
pub mod encode;
pub mod http;
pub mod metrics;
pub mod routes;
