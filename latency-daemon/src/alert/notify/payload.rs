//! Alerts in, the bytes sinks send out: the Alertmanager v2 `PostableAlert` array and the log
//! sink's line (logfmt or JSON, as the daemon's log). (The webhook body is the `Transition`'s own
//! serde form.)
use std::collections::BTreeMap;

use serde::Serialize;

use super::{LogFormat, text};
use crate::alert::{Alert, Transition};
use crate::model::logfmt;

pub const ALERTNAME: &str = "RunQueueDelayHigh";

/// The labels and link every alert from this daemon carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub instance: String,
    pub severity: String,
    pub generator_url: String,
}

/// Alertmanager API v2 `PostableAlert`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PostableAlert {
    labels: BTreeMap<&'static str, String>,
    annotations: BTreeMap<&'static str, String>,
    starts_at: String,
    ends_at: String,
    #[serde(rename = "generatorURL")]
    generator_url: String,
}

fn postable(alert: &Alert, origin: &Origin, ends_at_unix_ns: u64) -> PostableAlert {
    let a = &alert.worst;
    let mut labels = BTreeMap::from([
        ("alertname", ALERTNAME.to_string()),
        ("severity", origin.severity.clone()),
        ("instance", origin.instance.clone()),
        ("reason", alert.key.reason.name().to_string()),
        ("cgroup", alert.key.cgroup.clone()),
    ]);
    // The victim's pod, as its series are labelled (left out when empty, as Prometheus would).
    let names = &a.names;
    for (k, v) in [("namespace", &names.namespace), ("pod", &names.pod), ("container", &names.container)] {
        if !v.is_empty() {
            labels.insert(k, v.clone());
        }
    }
    let mut annotations = BTreeMap::from([
        ("summary", text::summary(alert)),
        ("description", text::description(alert)),
        ("victim", text::victim(a)),
        ("culprit_pods", text::culprit_pods(a)),
        ("delay", text::duration(a.delay_ns)),
        // The parts of `delay` the victim's own CPU limit throttled it and its CPU was in IRQ or
        // steal ("0 ns": none, or not split); the rest it waited behind `culprits`.
        ("throttled", text::duration(a.throttled_ns)),
        ("irq_steal", text::duration(a.irq_steal_ns)),
        ("threshold", text::duration(alert.threshold_ns)),
        ("cpu", a.cpu.to_string()),
        ("queue_depth", text::queue_depth(a)),
        ("culprits", text::culprits(a)),
        ("at", text::rfc3339(a.end_unix_ns)),
        // "true": `delay` is a wait so far and `at` when it was seen; the task had not run yet.
        ("still_waiting", a.waiting.to_string()),
    ]);
    // The CPUs' last scheduler events when it fired, on the daemon that sent it: absolute, at the
    // address `generatorURL` gives it, for a receiver that knows no other.
    if let Some(capture) = &alert.capture {
        let at = |path: &str| format!("{}{path}", origin.generator_url.trim_end_matches('/'));
        annotations.insert("capture", at(capture));
        annotations.insert("capture_picture", at(&crate::model::capture::picture(capture)));
    }
    PostableAlert {
        labels,
        annotations,
        starts_at: text::rfc3339(alert.since_unix_ns),
        ends_at: text::rfc3339(ends_at_unix_ns),
        generator_url: origin.generator_url.clone(),
    }
}

/// One POST body: every active alert with `endsAt` = `active_until_unix_ns` (so Alertmanager
/// keeps it firing between re-sends), and every resolved one with `endsAt` = when it resolved.
pub fn alertmanager_body<'a>(
    active: impl IntoIterator<Item = &'a Alert>,
    resolved: impl IntoIterator<Item = &'a Alert>,
    origin: &Origin,
    active_until_unix_ns: u64,
    now_unix_ns: u64,
) -> Result<Vec<u8>, serde_json::Error> {
    let alerts: Vec<PostableAlert> = active
        .into_iter()
        .map(|a| postable(a, origin, active_until_unix_ns))
        .chain(resolved.into_iter().map(|a| postable(a, origin, a.resolved_unix_ns.unwrap_or(now_unix_ns))))
        .collect();
    serde_json::to_vec(&alerts)
}

#[derive(Serialize)]
struct LogLine<'a> {
    time: String,
    level: &'static str,
    msg: &'static str,
    event: &'static str,
    #[serde(flatten)]
    alert: &'a Alert,
    /// The words for a reader of the log: still waiting, finally ran after, or waited.
    summary: String,
}

/// One event for the log, no trailing newline: `time`, `level` (`warn` when fired, else `info`),
/// `msg` (`alert fired`|`alert updated`|`alert resolved`), `event` (`fired`|`updated`|`resolved`),
/// the Alert's fields, and `summary`, in `format` as the logger writes its own events. JSON nests
/// the Alert's data (`{"time":…,"key":{"reason":…},"worst":{…}}`); logfmt writes the same keys
/// flattened (`key.reason=… worst.culprits.0.comm=…`), every value escaped by the logger's own
/// rules. Either way a hostile comm or cgroup name stays inside its value, on one line.
pub fn log_line(t: &Transition, now_unix_ns: u64, format: LogFormat) -> Result<String, serde_json::Error> {
    let (event, level, msg, alert) = match t {
        Transition::Fired(a) => ("fired", "warn", "alert fired", a),
        Transition::Updated(a) => ("updated", "info", "alert updated", a),
        Transition::Resolved(a) => ("resolved", "info", "alert resolved", a),
        // Never logged (the dispatcher keeps it from the log), named for completeness.
        Transition::Grown(a) => ("grown", "info", "alert grown", a),
    };
    let summary = text::summary(alert);
    let line = LogLine { time: text::rfc3339(now_unix_ns), level, msg, event, alert, summary };
    match format {
        LogFormat::Json => serde_json::to_string(&line),
        LogFormat::Logfmt => logfmt::line(&line),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::alert::notify::text::tests::alert;

    const NOW: u64 = 1_700_000_100_000_000_000;

    fn origin() -> Origin {
        Origin { instance: "node1".into(), severity: "warning".into(), generator_url: "http://node1:9954/".into() }
    }

    #[test]
    fn alertmanager_shape() {
        let firing = alert();
        let mut resolved = alert();
        resolved.key.reason = latency_common::Reason::Wakeup;
        resolved.resolved_unix_ns = Some(NOW - 1_000_000_000);
        let body = alertmanager_body([&firing], [&resolved], &origin(), NOW + 120_000_000_000, NOW).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        let alerts = v.as_array().unwrap();
        assert_eq!(alerts.len(), 2);
        let a = &alerts[0];
        assert_eq!(
            a["labels"],
            json!({"alertname": "RunQueueDelayHigh", "severity": "warning", "instance": "node1",
                   "reason": "preempt", "cgroup": "/app.slice"})
        );
        assert_eq!(a["startsAt"], "2023-11-14T22:13:20.000Z");
        assert_eq!(a["endsAt"], "2023-11-14T22:17:00.000Z");
        assert_eq!(a["generatorURL"], "http://node1:9954/");
        let ann = &a["annotations"];
        assert_eq!(ann["victim"], "myapp (tid 1234, pid 1200)");
        assert_eq!(ann["delay"], "12.3 ms");
        assert_eq!(ann["threshold"], "10.0 ms");
        assert_eq!(ann["cpu"], "1");
        assert_eq!(ann["queue_depth"], "unknown");
        assert_eq!(ann["culprits"], "hog:99 ran 11.8 ms; kworker/1:0:23 ran 200.0 µs; (and more, not kept)");
        assert_eq!(ann["at"], "2023-11-14T22:13:19.500Z");
        assert!(
            ann["summary"].as_str().unwrap().starts_with("preempt delay 12.3 ms on cpu 1: myapp (tid 1234) waited")
        );
        assert!(ann["description"].as_str().unwrap().lines().count() > 3);

        assert_eq!(ann["culprit_pods"], "none recorded");
        assert_eq!((&ann["throttled"], &ann["irq_steal"]), (&json!("0 ns"), &json!("0 ns")));
        assert_eq!(ann["still_waiting"], "false");
        assert!(ann.get("capture").is_none(), "no capture, no link: {ann}");
        assert_eq!(alerts[1]["labels"]["reason"], "wakeup");
        assert_eq!(alerts[1]["endsAt"], "2023-11-14T22:14:59.000Z", "a resolved alert ends when it resolved");
    }

    #[test]
    fn a_capture_is_linked_at_the_daemons_own_address() {
        let mut a = alert();
        a.capture = Some("/api/v1/captures/capture-1700000000000-cpu1-tid7.pftrace".into());
        let body = alertmanager_body([&a], [], &origin(), NOW, NOW).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        let ann = &v[0]["annotations"];
        assert_eq!(ann["capture"], "http://node1:9954/api/v1/captures/capture-1700000000000-cpu1-tid7.pftrace");
        assert_eq!(ann["capture_picture"], "http://node1:9954/api/v1/captures/capture-1700000000000-cpu1-tid7.svg");
    }

    #[test]
    fn the_victims_pod_is_a_label_and_the_culprits_pods_an_annotation() {
        use crate::model::container::ContainerLabels;

        let mut a = alert();
        a.worst.names = ContainerLabels {
            namespace: "web".into(),
            pod: "front-1".into(),
            container: String::new(),
            container_id: "c0ffee".into(),
        };
        a.worst.culprits[0].cgroup = "/kubepods/pod1/x".into();
        a.worst.culprits[0].names.namespace = "batch".into();
        a.worst.culprits[0].names.pod = "hog-7".into();
        let body = alertmanager_body([&a], [], &origin(), NOW, NOW).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        let labels = &v[0]["labels"];
        assert_eq!((&labels["namespace"], &labels["pod"]), (&json!("web"), &json!("front-1")));
        assert!(labels.get("container").is_none() && labels.get("container_id").is_none(), "{labels}");
        assert_eq!(v[0]["annotations"]["culprit_pods"], "pod batch/hog-7 11.8 ms");
        // The webhook and log sinks send the Transition itself: the names sit in `worst` and its culprits.
        let t = serde_json::to_value(Transition::Fired(a)).unwrap();
        assert_eq!(t["worst"]["pod"], "front-1");
        assert_eq!(t["worst"]["container_id"], "c0ffee");
        assert_eq!(t["worst"]["culprits"][0]["pod"], "hog-7");
        assert_eq!(t["worst"]["culprits"][0]["cgroup"], "/kubepods/pod1/x");
    }

    #[test]
    fn the_split_of_the_delay_in_every_sink() {
        let mut a = alert();
        a.worst.throttled_ns = 9_000_000;
        a.worst.irq_steal_ns = 1_000_000;
        let body = alertmanager_body([&a], [], &origin(), NOW, NOW).unwrap();
        let ann = &serde_json::from_slice::<Value>(&body).unwrap()[0]["annotations"];
        assert_eq!((&ann["throttled"], &ann["irq_steal"]), (&json!("9.0 ms"), &json!("1.0 ms")));
        let summary = ann["summary"].as_str().unwrap();
        assert!(
            summary.contains("waited 12.3 ms: 9.0 ms throttled by the CPU limit of cgroup /app.slice, 1.0 ms in IRQ or steal, 2.3 ms behind hog (tid 99)"),
            "{summary}"
        );
        assert!(ann["description"].as_str().unwrap().contains("Of that delay: 9.0 ms throttled"), "{ann}");
        // Webhook and log: the Transition, its ns beside `delay_ns`.
        let hook = serde_json::to_value(Transition::Fired(a.clone())).unwrap();
        assert_eq!(
            (&hook["worst"]["throttled_ns"], &hook["worst"]["irq_steal_ns"]),
            (&json!(9_000_000), &json!(1_000_000))
        );
        let log: Value = serde_json::from_str(&log_line(&Transition::Fired(a), NOW, LogFormat::Json).unwrap()).unwrap();
        assert_eq!(log["worst"]["throttled_ns"], 9_000_000);
        assert!(log["summary"].as_str().unwrap().contains("9.0 ms throttled"), "{log}");
    }

    #[test]
    fn log_line_puts_the_event_first_and_survives_hostile_names() {
        let mut a = alert();
        a.worst.victim_comm = "x\"\n\u{0}\u{1b}]0;pwned\u{7}".into();
        let line = log_line(&Transition::Resolved(a.clone()), NOW, LogFormat::Json).unwrap();
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.starts_with(
                r#"{"time":"2023-11-14T22:15:00.000Z","level":"info","msg":"alert resolved","event":"resolved","key":"#
            ),
            "{line}"
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["worst"]["victim_comm"], a.worst.victim_comm.as_str());
        assert_eq!(v["key"]["cgroup"], "/app.slice");
        assert!(log_line(&Transition::Fired(a), NOW, LogFormat::Json).unwrap().contains(r#""event":"fired""#));
    }

    /// Every leaf of the JSON event, at its dotted path, with its text.
    fn leaves(v: &Value, path: &str, out: &mut Vec<(String, String)>) {
        let at = |k: &str| if path.is_empty() { k.to_owned() } else { format!("{path}.{k}") };
        match v {
            Value::Object(m) if !m.is_empty() => m.iter().for_each(|(k, v)| leaves(v, &at(k), out)),
            Value::Array(a) if !a.is_empty() => {
                a.iter().enumerate().for_each(|(i, v)| leaves(v, &at(&i.to_string()), out))
            }
            Value::String(s) => out.push((path.to_owned(), s.clone())),
            other => out.push((path.to_owned(), other.to_string())),
        }
    }

    #[test]
    fn the_logfmt_line_carries_every_field_of_the_json_one_and_survives_hostile_names() {
        use crate::model::container::ContainerLabels;

        let mut a = alert();
        // A comm may be any bytes but NUL (the kernel's `comm` read lossily), a cgroup any but `/`.
        a.worst.victim_comm = "x\" level=error\n\u{1b}]0;t\u{7}\u{fffd}\\".into();
        a.key.cgroup = "/evil= \"slice\"\r\t".into();
        a.worst.cgroup = a.key.cgroup.clone();
        a.worst.names = ContainerLabels {
            namespace: "ns".into(),
            pod: "p od".into(),
            container: "c=1".into(),
            container_id: "ab".repeat(32),
        };
        a.worst.culprits[1].cgroup = "unknown".into();
        a.worst.culprits[1].comm = "forged=1 msg=\"x\"".into();
        a.worst.queue_depth = Some(3);
        a.capture = Some("/api/v1/captures/1700000000-cpu1.pftrace".into());
        a.resolved_unix_ns = Some(NOW);
        for t in [Transition::Fired(a.clone()), Transition::Resolved(a)] {
            let json = log_line(&t, NOW, LogFormat::Json).unwrap();
            let line = log_line(&t, NOW, LogFormat::Logfmt).unwrap();
            assert!(!line.contains('\n') && !line.contains('\u{1b}') && !line.contains('\r'), "{line}");
            let pairs = latency_lab::logs::logfmt(&line).unwrap_or_else(|e| panic!("{e:#}: {line}"));
            let mut want = Vec::new();
            leaves(&serde_json::from_str(&json).unwrap(), "", &mut want);
            let mut got = pairs.clone();
            want.sort();
            got.sort();
            assert_eq!(got, want, "{line}");
            let keys: Vec<&str> = pairs.iter().take(6).map(|(k, _)| k.as_str()).collect();
            assert_eq!(keys, ["time", "level", "msg", "event", "key.reason", "key.cgroup"], "{line}");
        }
        let line = log_line(&Transition::Fired(alert()), NOW, LogFormat::Logfmt).unwrap();
        assert!(
            line.starts_with(
                "time=2023-11-14T22:15:00.000Z level=warn msg=\"alert fired\" event=fired key.reason=preempt \
                 key.cgroup=/app.slice threshold_ns=10000000 since_unix_ns=1700000000000000000 worst.reason=preempt"
            ),
            "{line}"
        );
        assert!(line.contains(" worst.queue_depth=null worst.culprits.0.tid=99 "), "{line}");
        assert!(
            line.contains(" worst.culprits_truncated=true resolved_unix_ns=null summary=\"preempt delay"),
            "{line}"
        );
    }

    #[test]
    fn a_wait_in_progress_and_its_end_in_every_sink() {
        let mut waiting = alert();
        waiting.worst.delay_ns = 1_200_000_000;
        waiting.worst.waiting = true;
        let mut ran = waiting.clone();
        ran.worst.delay_ns = 1_900_000_000;
        ran.worst.waiting = false;
        ran.ran_after_waiting = true;

        // Alertmanager: a re-send carries the alert as last fired or updated.
        let body = alertmanager_body([&waiting], [], &origin(), NOW, NOW).unwrap();
        let ann = &serde_json::from_slice::<Value>(&body).unwrap()[0]["annotations"];
        assert_eq!((&ann["still_waiting"], &ann["delay"]), (&json!("true"), &json!("1.20 s")));
        assert!(ann["summary"].as_str().unwrap().contains("has waited 1.20 s so far and has not run yet"), "{ann}");
        let body = alertmanager_body([&ran], [], &origin(), NOW, NOW).unwrap();
        let ann = &serde_json::from_slice::<Value>(&body).unwrap()[0]["annotations"];
        assert_eq!((&ann["still_waiting"], &ann["delay"]), (&json!("false"), &json!("1.90 s")));
        assert!(ann["summary"].as_str().unwrap().contains("myapp (tid 1234) finally ran after 1.90 s"), "{ann}");

        // Log: the event, and the words.
        let fired: Value =
            serde_json::from_str(&log_line(&Transition::Fired(waiting.clone()), NOW, LogFormat::Json).unwrap())
                .unwrap();
        assert_eq!((&fired["event"], &fired["worst"]["waiting"]), (&json!("fired"), &json!(true)));
        assert!(fired["summary"].as_str().unwrap().contains("has not run yet"), "{fired}");
        let line = log_line(&Transition::Updated(ran.clone()), NOW, LogFormat::Json).unwrap();
        assert!(line.contains(r#""level":"info","msg":"alert updated","event":"updated""#), "{line}");
        let updated: Value = serde_json::from_str(&line).unwrap();
        assert!(updated["worst"].get("waiting").is_none() && updated["ran_after_waiting"] == true, "{updated}");
        assert!(updated["summary"].as_str().unwrap().contains("finally ran after 1.90 s"), "{updated}");

        // Webhook: the Transition itself.
        let hook = serde_json::to_value(Transition::Updated(ran)).unwrap();
        assert_eq!((&hook["event"], &hook["worst"]["delay_ns"]), (&json!("updated"), &json!(1_900_000_000u64)));
        let hook = serde_json::to_value(Transition::Fired(waiting)).unwrap();
        assert_eq!((&hook["worst"]["waiting"], hook.get("ran_after_waiting")), (&json!(true), None));
    }
}
