//! Push exporters: what the drain loop published (the `Exposition`, encoded as a scrape would
//! see it by `metrics::Metrics`) in; requests to a receiver out. Never the kernel maps, and
//! never in the way of the drain or of scrapes: each exporter is its own tasks, with a bounded
//! queue whose drops are counted (`metrics::instruments::push`). `otlp`: OTLP/HTTP with protobuf bodies.
pub mod otlp;
