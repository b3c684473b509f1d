//! Answering requests from what the drain loop published: `routes` answers each endpoint (the
//! metrics it encodes with `metrics::Metrics`), `view` draws the live page (and the heatmap
//! `record --svg` writes), and `http` is the hardened HTTP/1.1 transport underneath.
pub mod http;
pub mod routes;
pub mod view;
