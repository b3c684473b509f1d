//! The log sink: transitions in, one JSON line each out on a writer (stderr in the daemon).
//! Async, so a stalled stderr (a full pipe to a stuck journald) parks this task, not the runtime.
use std::sync::Arc;

use tokio::io::{AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;

use super::payload::log_line;
use crate::alert::Transition;
use crate::metrics::instruments::notify::{NotifyStats, Sink};
use crate::model::wall::now_unix_ns;

/// Lines waiting for the writer; beyond this the dispatcher drops them (counted).
pub const QUEUE: usize = 256;

pub async fn run<W: AsyncWrite + Unpin>(mut rx: mpsc::Receiver<Transition>, mut out: W, stats: Arc<NotifyStats>) {
    while let Some(t) = rx.recv().await {
        let Ok(mut line) = log_line(&t, now_unix_ns()) else {
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
        tx.send(Transition::Fired(alert())).await.unwrap();
        tx.send(Transition::Updated(alert())).await.unwrap();
        tx.send(Transition::Resolved(alert())).await.unwrap();
        drop(tx);
        task.await.unwrap();
        let mut out = String::new();
        reader.read_to_string(&mut out).await.unwrap();
        let events: Vec<String> = out
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(events, ["fired", "updated", "resolved"]);
        assert_eq!(stats.snapshot()[2], ("log", 3, 0, 0));
    }
}
