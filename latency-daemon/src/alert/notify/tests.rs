//! `Notifier` end to end over loopback: transitions in, requests received by fake servers
//! (raw TcpListeners) and counters out.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::text::tests::alert;
use super::*;

/// Every wait in these tests is bounded by this, so a bug fails a test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug)]
enum Behaviour {
    /// 200 to everything.
    Answer,
    /// Accepts, reads the request, never answers, never closes.
    Hang,
    /// 500 to the first n requests, then 200.
    FailFirst(usize),
}

/// A request the fake server answered with 200.
#[derive(Debug)]
struct Received {
    at: Instant,
    path: String,
    body: Value,
}

struct Fake {
    url: HttpUrl,
    received: UnboundedReceiver<Received>,
    requests: Arc<AtomicUsize>,
}

impl Fake {
    async fn next(&mut self) -> Received {
        tokio::time::timeout(PATIENCE, self.received.recv()).await.expect("no request in time").expect("server gone")
    }

    /// Nothing more arrives within `d`.
    async fn quiet_for(&mut self, d: Duration) {
        if let Ok(Some(r)) = tokio::time::timeout(d, self.received.recv()).await {
            panic!("unexpected request: {r:?}");
        }
    }
}

async fn fake(behaviour: Behaviour, path: &str) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = HttpUrl {
        tls: false,
        host: "127.0.0.1".into(),
        port: listener.local_addr().unwrap().port(),
        path: path.into(),
        userinfo: None,
    };
    let (tx, received) = unbounded_channel();
    let requests = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&requests);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let n = count.fetch_add(1, Ordering::SeqCst);
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut stream = stream;
                let (path, body) = read_request(&mut stream).await;
                let ok = match behaviour {
                    Behaviour::Answer => true,
                    Behaviour::FailFirst(k) => n >= k,
                    Behaviour::Hang => {
                        // Holding the stream keeps the connection open: the client must time out.
                        std::future::pending::<()>().await;
                        unreachable!()
                    }
                };
                let status = if ok { "200 OK" } else { "500 Internal Server Error" };
                let _ = stream.write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes()).await;
                if ok {
                    let body = serde_json::from_slice(&body).unwrap();
                    let _ = tx.send(Received { at: Instant::now(), path, body });
                }
            });
        }
    });
    Fake { url, received, requests }
}

/// The request path and its body (by Content-Length).
async fn read_request(s: &mut TcpStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "client closed mid-head");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
        .expect("no Content-Length");
    while buf.len() < head_end + length {
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "client closed mid-body");
        buf.extend_from_slice(&chunk[..n]);
    }
    let path = head.split(' ').nth(1).unwrap().to_string();
    (path, buf[head_end..head_end + length].to_vec())
}

fn config() -> SinkConfig {
    SinkConfig { instance: "node1".into(), generator_url: "http://node1:9954/".into(), ..SinkConfig::default() }
}

fn fast() -> Timing {
    Timing { attempt: Duration::from_millis(100), backoff: vec![Duration::from_millis(10)] }
}

/// A port nothing listens on.
async fn closed_port() -> HttpUrl {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    HttpUrl { tls: false, host: "127.0.0.1".into(), port, path: "/".into(), userinfo: None }
}

fn row(stats: &NotifyStats, sink: &str) -> (u64, u64, u64) {
    let (_, s, f, d) = stats.snapshot().into_iter().find(|r| r.0 == sink).unwrap();
    (s, f, d)
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < PATIENCE, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn alertmanager_gets_fired_at_once_then_resends_then_resolved_once() {
    let mut am = fake(Behaviour::Answer, "/am/").await;
    let stats = Arc::new(NotifyStats::default());
    let resend = Duration::from_millis(200);
    let n = Notifier::spawn(SinkConfig { alertmanagers: vec![am.url.clone()], resend, ..config() }, Arc::clone(&stats));

    let sent = Instant::now();
    n.send(Transition::Fired(alert()));
    let first = am.next().await;
    assert!(first.at - sent < resend, "not sent at once: {:?}", first.at - sent);
    assert_eq!(first.path, "/am/api/v2/alerts");
    let a = &first.body[0];
    assert_eq!(first.body.as_array().unwrap().len(), 1);
    assert_eq!(a["labels"]["alertname"], "RunQueueDelayHigh");
    assert_eq!(a["labels"]["instance"], "node1");
    assert_eq!(a["labels"]["severity"], "warning");
    assert_eq!(a["labels"]["reason"], "preempt");
    assert_eq!(a["labels"]["cgroup"], "/app.slice");
    assert_eq!(a["annotations"]["queue_depth"], "unknown");
    assert_eq!(a["annotations"]["culprits"], "hog:99 ran 11.8 ms; kworker/1:0:23 ran 200.0 µs; (and more, not kept)");
    assert_eq!(a["generatorURL"], "http://node1:9954/");
    assert_eq!(a["startsAt"], text::rfc3339(alert().since_unix_ns));
    let ends = humantime::parse_rfc3339(a["endsAt"].as_str().unwrap()).unwrap();
    let ahead = ends.duration_since(std::time::SystemTime::now()).expect("endsAt of an active alert is in the future");
    assert!(ahead > 3 * resend && ahead <= 4 * resend, "{ahead:?}");

    let again = am.next().await;
    let gap = again.at - first.at;
    assert!(gap >= resend - Duration::from_millis(20) && gap < 4 * resend, "re-sent after {gap:?}");
    assert_eq!(again.body[0]["labels"], a["labels"]);

    let mut resolved = alert();
    resolved.resolved_unix_ns = Some(1_700_000_060_000_000_000);
    n.send(Transition::Resolved(resolved));
    // A re-send may have been in flight; the resolution is the first body without the active alert.
    let mut last = am.next().await;
    while last.body[0]["endsAt"] != "2023-11-14T22:14:20.000Z" {
        last = am.next().await;
    }
    assert_eq!(last.body.as_array().unwrap().len(), 1, "{}", last.body);
    am.quiet_for(3 * resend).await;
    let (sent, failed, dropped) = row(&stats, "alertmanager");
    assert!(sent >= 3 && failed == 0 && dropped == 0, "{sent} {failed} {dropped}");
}

#[tokio::test]
async fn a_wait_that_finally_ran_is_sent_as_an_update_at_once() {
    let mut am = fake(Behaviour::Answer, "/").await;
    let mut hook = fake(Behaviour::Answer, "/hook").await;
    let stats = Arc::new(NotifyStats::default());
    let cfg = SinkConfig { alertmanagers: vec![am.url.clone()], webhooks: vec![hook.url.clone()], ..config() };
    let n = Notifier::spawn_with(cfg, Arc::clone(&stats), fast());
    let mut a = alert();
    a.worst.waiting = true;
    n.send(Transition::Fired(a.clone()));
    assert_eq!(am.next().await.body[0]["annotations"]["still_waiting"], "true");
    assert_eq!(hook.next().await.body["event"], "fired");

    a.worst.waiting = false;
    a.worst.delay_ns = 1_900_000_000;
    a.ran_after_waiting = true;
    n.send(Transition::Updated(a));
    let got = am.next().await;
    assert_eq!(got.body.as_array().unwrap().len(), 1, "the same alert, replaced: {}", got.body);
    assert_eq!(got.body[0]["annotations"]["still_waiting"], "false");
    assert_eq!(got.body[0]["annotations"]["delay"], "1.90 s");
    let got = hook.next().await;
    assert_eq!((got.body["event"].as_str(), got.body["worst"].get("waiting")), (Some("updated"), None));
}

#[tokio::test]
async fn a_dead_alertmanager_does_not_delay_a_live_one() {
    let mut live = fake(Behaviour::Answer, "/").await;
    let hung = fake(Behaviour::Hang, "/").await;
    let closed = closed_port().await;
    let stats = Arc::new(NotifyStats::default());
    // The real 5 s attempt timeout: the live one must not wait for the hung one's.
    let cfg = SinkConfig { alertmanagers: vec![closed, hung.url.clone(), live.url.clone()], ..config() };
    let n = Notifier::spawn(cfg, Arc::clone(&stats));
    let sent = Instant::now();
    n.send(Transition::Fired(alert()));
    let got = live.next().await;
    assert!(got.at - sent < Duration::from_secs(1), "{:?}", got.at - sent);
    eventually("the closed port's failure is counted", || row(&stats, "alertmanager").1 >= 1).await;
    assert_eq!(hung.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_hung_webhook_never_blocks_send_and_its_queue_stays_bounded() {
    let hung = fake(Behaviour::Hang, "/hook").await;
    let stats = Arc::new(NotifyStats::default());
    let n =
        Notifier::spawn_with(SinkConfig { webhooks: vec![hung.url.clone()], ..config() }, Arc::clone(&stats), fast());
    let events = 1000;

    // From a plain thread, as the drain loop does.
    let sender = n.clone();
    let took = std::thread::spawn(move || {
        let t = Transition::Fired(alert());
        let start = Instant::now();
        for _ in 0..events {
            sender.send(t.clone());
        }
        start.elapsed()
    })
    .join()
    .unwrap();
    assert!(took < Duration::from_millis(50), "1000 sends took {took:?}");

    // Every event is dropped (channel or webhook queue), failed, or still held: at most the
    // queue plus the one in flight. So once the channel is drained, that bound shows up here.
    let held = (webhook::QUEUE + 1) as u64;
    eventually("the channel drains", || {
        let (_, f, d) = row(&stats, "webhook");
        f + d >= events - held
    })
    .await;
    eventually("a timed-out event is counted failed", || row(&stats, "webhook").1 >= 1).await;
    let (sent, failed, dropped) = row(&stats, "webhook");
    assert_eq!(sent, 0);
    assert!(failed + dropped <= events, "{failed} {dropped}");
    assert!(dropped >= events - held - failed, "{failed} {dropped}");
}

#[tokio::test]
async fn a_webhook_failing_twice_is_delivered_once_after_retries() {
    let mut hook = fake(Behaviour::FailFirst(2), "/hook?k=1").await;
    let stats = Arc::new(NotifyStats::default());
    let timing = Timing { attempt: Duration::from_secs(1), backoff: vec![Duration::from_millis(20); 3] };
    let n =
        Notifier::spawn_with(SinkConfig { webhooks: vec![hook.url.clone()], ..config() }, Arc::clone(&stats), timing);
    n.send(Transition::Fired(alert()));
    let got = hook.next().await;
    assert_eq!(got.path, "/hook?k=1");
    assert_eq!(got.body["event"], "fired");
    assert_eq!(got.body["worst"]["victim_comm"], "myapp");
    hook.quiet_for(Duration::from_millis(300)).await;
    assert_eq!(hook.requests.load(Ordering::SeqCst), 3);
    assert_eq!(row(&stats, "webhook"), (1, 0, 0));
}

#[tokio::test]
async fn a_webhook_failing_every_attempt_is_given_up_and_counted_once() {
    let hook = fake(Behaviour::FailFirst(usize::MAX), "/").await;
    let stats = Arc::new(NotifyStats::default());
    let n =
        Notifier::spawn_with(SinkConfig { webhooks: vec![hook.url.clone()], ..config() }, Arc::clone(&stats), fast());
    n.send(Transition::Fired(alert()));
    eventually("given up", || row(&stats, "webhook").1 == 1).await;
    assert_eq!(hook.requests.load(Ordering::SeqCst), fast().backoff.len() + 1);
    assert_eq!(row(&stats, "webhook"), (0, 1, 0));
}

#[tokio::test]
async fn a_full_channel_counts_a_drop_per_destination() {
    let stats = Arc::new(NotifyStats::default());
    let a = closed_port().await;
    // Another path: the OS may hand out the same free port twice.
    let b = HttpUrl { path: "/b".into(), ..a.clone() };
    let cfg = SinkConfig { webhooks: vec![a.clone(), b], alertmanagers: vec![a], log: true, ..config() };
    let n = Notifier::spawn_with(cfg, Arc::clone(&stats), fast());
    // On this single-threaded runtime nothing else runs until we await: the channel fills.
    for _ in 0..CHANNEL + 10 {
        n.send(Transition::Fired(alert()));
    }
    assert_eq!(row(&stats, "webhook").2, 20);
    assert_eq!(row(&stats, "alertmanager").2, 10);
    assert_eq!(row(&stats, "log").2, 10);
}

#[tokio::test]
async fn reconfigure_brings_active_alerts_to_a_new_alertmanager_and_stops_old_ones() {
    let mut old = fake(Behaviour::Answer, "/").await;
    let mut new = fake(Behaviour::Answer, "/").await;
    let stats = Arc::new(NotifyStats::default());
    let n = Notifier::spawn(SinkConfig { alertmanagers: vec![old.url.clone()], ..config() }, Arc::clone(&stats));
    n.send(Transition::Fired(alert()));
    old.next().await;

    n.reconfigure(SinkConfig {
        alertmanagers: vec![new.url.clone(), new.url.clone()],
        instance: "renamed".into(),
        ..config()
    });
    let got = new.next().await;
    assert_eq!(got.body[0]["labels"]["instance"], "renamed");
    assert_eq!(got.body[0]["labels"]["reason"], "preempt");
    new.quiet_for(Duration::from_millis(200)).await;

    n.send(Transition::Resolved(alert()));
    assert_eq!(new.next().await.body.as_array().unwrap().len(), 1);
    old.quiet_for(Duration::from_millis(200)).await;
}
