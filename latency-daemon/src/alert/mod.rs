//! Alerting: the `engine` decides (rules + attributed incidents and waits in progress in,
//! `Transition`s out; pure), and `notify` delivers (transitions in, a log line, Alertmanager and
//! webhook requests out, sent through `net`). The pipeline uses the engine alone (the layering
//! rule's one seam): it decides, `cmd` delivers.
pub mod engine;
pub mod notify;

pub use self::engine::{Alert, AlertKey, Engine, Ran, Rules, Transition};
