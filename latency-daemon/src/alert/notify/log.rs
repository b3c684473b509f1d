//! The log sink: transitions in, one line each out on a writer (stderr in the daemon), in the
//! log's format (logfmt or JSON).
//! Async, so a stalled stderr (a full pipe to a stuck journald) parks this task, not the runtime.
use std::sync::Arc;

use tokio::io::{AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;

use super::LogFormat;
use super::payload::log_line;
use crate::alert::Transition;
use crate::metrics::instruments::notify::{NotifyStats, Sink};
use crate::model::wall::now_unix_ns;

/// Lines waiting for the writer; beyond this the dispatcher drops them (counted).
pub const QUEUE: usize = 256;

pub async fn run<W: AsyncWrite + Unpin>(
    mut rx: mpsc::Receiver<(Transition, LogFormat)>,
    mut out: W,
    stats: Arc<NotifyStats>,
) {
    while let Some((t, format)) = rx.recv().await {
        let Ok(mut line) = log_line(&t, now_unix_ns(), format) else {
            stats.failed(Sink::Log);
            continue;
        };
        line.push('\n');
        // tokio's stderr hands writes to a blocking thread and holds them until flushed.
        let written = async {
            out.write_all(line.as_bytes()).await?;
            out.flush().await
        };
        match written.await {
            Ok(()) => stats.sent(Sink::Log),
            Err(_) => stats.failed(Sink::Log),
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt as _;

    use super::*;
    use crate::alert::notify::text::tests::alert;

    #[tokio::test]
    async fn one_line_per_transition() {
        let (writer, mut reader) = tokio::io::duplex(1 << 16);
        let (tx, rx) = mpsc::channel(4);
        let stats = Arc::new(NotifyStats::default());
        let task = tokio::spawn(run(rx, writer, Arc::clone(&stats)));
        tx.send((Transition::Fired(alert()), LogFormat::Json)).await.unwrap();
        // A reload switched the log to logfmt.
        tx.send((Transition::Updated(alert()), LogFormat::Logfmt)).await.unwrap();
        tx.send((Transition::Resolved(alert()), LogFormat::Logfmt)).await.unwrap();
        drop(tx);
        task.await.unwrap();
        let mut out = String::new();
        reader.read_to_string(&mut out).await.unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        let fired: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        let mut events = vec![fired["event"].as_str().unwrap().to_owned()];
        for l in &lines[1..] {
            let pairs = latency_lab::logs::logfmt(l).unwrap_or_else(|e| panic!("{e:#}"));
            events.push(latency_lab::logs::get(&pairs, "event").unwrap().to_owned());
        }
        assert_eq!(events, ["fired", "updated", "resolved"]);
        assert_eq!(stats.snapshot()[2], ("log", 3, 0, 0));
    }
}
