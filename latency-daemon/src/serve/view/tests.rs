use std::{sync::Arc, time::Duration};

use latency_common::buckets::bucket_of;

use super::*;
use crate::model::{
    attribution::{Attribution, Culprit},
    causes::Causes,
    container::ContainerLabels,
    timeline::{CgroupSummary, Timeline},
};

const HOSTILE: &str = "/<script>alert(\"x\")</script>&'";

/// A pod whose names came from annotations anyone creating a pod may write.
fn pod() -> ContainerLabels {
    ContainerLabels {
        namespace: "ns<i>".into(),
        pod: "web-\"1\"".into(),
        container: "app&co".into(),
        container_id: "x".into(),
    }
}

fn summary(start: u64, wakeups: &[u64]) -> WindowSummary {
    let mut reasons: [ReasonSummary; Reason::COUNT] = Default::default();
    let w = &mut reasons[Reason::Wakeup as usize];
    for &d in wakeups {
        w.count += 1;
        w.sum_ns += d;
        let k = bucket_of(d) as u8;
        match w.buckets.iter_mut().find(|b| b.0 == k) {
            Some(b) => b.1 += 1,
            None => w.buckets.push((k, 1)),
        }
    }
    w.buckets.sort();
    w.max_ns = wakeups.iter().copied().max();
    w.p99_ns = w.max_ns;
    // The wakeups' time: 1 µs throttled, 2 µs IRQ or steal, the rest behind another cgroup.
    let total: u64 = wakeups.iter().sum();
    let causes = Causes([1_000, 2_000, 0, total - 3_000, 0, 0]);
    WindowSummary {
        start_unix_ns: start,
        duration_ns: 2_000_000_000,
        reasons,
        causes,
        top_cgroups: vec![
            CgroupSummary {
                cgroup: HOSTILE.into(),
                names: ContainerLabels::default(),
                count: 3,
                sum_ns: 1_000_000,
                causes: Causes([600_000, 0, 0, 400_000, 0, 0]),
            },
            CgroupSummary {
                cgroup: "/libpod_parent/libpod-x".into(),
                names: pod(),
                count: 2,
                sum_ns: 500_000,
                causes: Causes([0, 0, 500_000, 0, 0, 0]),
            },
        ],
    }
}

fn exposition() -> Exposition {
    let mut timeline = Timeline::with_capacity(4);
    for n in 0..6u64 {
        timeline.push(summary(n * 2_000_000_000, &[5_000, 6_000, 7_000_000 + n]));
    }
    let worst = Attribution {
        reason: Reason::Wakeup,
        delay_ns: 7_000_005,
        throttled_ns: 5_000_000,
        irq_steal_ns: 5,
        unknown_ns: 0,
        cpu: 1,
        victim_tid: 42,
        victim_pid: 42,
        victim_comm: "<b>victim</b>".into(),
        victim_prio: 120,
        cgroup: HOSTILE.into(),
        names: pod(),
        end_ns: 0,
        end_unix_ns: 0,
        queue_depth: Some(3),
        culprits: vec![
            Culprit {
                tid: 7,
                pid: 7,
                comm: "hog\"&".into(),
                ran_ns: 4_000_000,
                cgroup: "/libpod_parent/libpod-h".into(),
                names: ContainerLabels {
                    pod: "hog-pod".into(),
                    namespace: "batch".into(),
                    ..ContainerLabels::default()
                },
            },
            Culprit { tid: 8, pid: 8, comm: "gone".into(), ran_ns: 1, cgroup: "unknown".into(), ..Culprit::default() },
        ],
        culprits_truncated: false,
        waiting: false,
    };
    Exposition {
        version: "test",
        kernel: "6.18".into(),
        window_seconds: 2.0,
        timeline: Arc::new(timeline),
        last_alert: Some(Arc::new(LastAlert {
            threshold_ns: 5_000_000,
            fired_unix_ns: 4_000_000_000,
            resolved_unix_ns: None,
            worst,
        })),
        alerts_active: vec![(Reason::Wakeup, HOSTILE.into())],
        ..Exposition::default()
    }
}

fn config() -> Config {
    let mut c = Config::default();
    c.alert.max_delay = Some(Duration::from_millis(5));
    c
}

#[test]
fn the_page_shows_the_last_window_exactly() {
    let html = page(&exposition(), &config(), "{\"window\": \"2s\"}", None);
    assert!(html.starts_with("<!doctype html>") && html.ends_with("</html>\n"));
    assert!(html.contains("<meta http-equiv=\"refresh\" content=\"2\">"));
    // The ring kept the 4 newest windows; the table is the newest.
    assert!(html.contains("data-start-unix-ns=\"10000000000\" data-duration-ns=\"2000000000\""), "{html}");
    assert!(html.contains("data-field=\"wakeup.count\" data-value=\"3\""));
    assert!(html.contains("data-field=\"wakeup.max_ns\" data-value=\"7000005\""));
    assert!(html.contains("data-field=\"wakeup.threshold_ns\" data-value=\"5000000\""));
    assert_eq!(html.matches("class=\"column\"").count(), 4);
    // 5 µs, 6 µs and 7 ms fall in three different buckets.
    assert_eq!(html.matches("class=\"cell\"").count(), 4 * 3);
    assert_eq!(html.matches("class=\"threshold\"").count(), 1, "both reasons share alert_max_delay");
    // No script, no external resource.
    assert!(!html.contains("<script") && !html.contains("src=") && !html.contains("href=\"http"));
    // The configuration stays reachable and readable.
    assert!(html.contains("<pre>{\"window\": \"2s\"}</pre>"));
}

/// `data-value` of the element whose attributes contain `marker`.
fn value_after(html: &str, marker: &str) -> Option<u64> {
    let rest = &html[html.find(marker)?..];
    rest.split("data-value=\"").nth(1)?.split('"').next()?.parse().ok()
}

#[test]
fn why_it_waited_holds_six_causes_that_add_up_to_the_delays() {
    let html = page(&exposition(), &config(), "{}", None);
    let why = html.split("id=\"why-waited\"").nth(1).expect("the why-waited table").split("</table>").next().unwrap();
    let mut sum = 0;
    for cause in Cause::ALL {
        let v = value_after(why, &format!("data-field=\"cause.{}_ns\"", cause.name()));
        sum += v.unwrap_or_else(|| panic!("{} missing: {why}", cause.name()));
    }
    // The newest window's wakeups: 5 µs + 6 µs + 7 ms + 5 ns.
    let delays = 5_000 + 6_000 + 7_000_005;
    assert_eq!(sum, delays);
    assert_eq!(value_after(why, "data-field=\"cause.total_ns\""), Some(delays));
    // The stacked bar: a part per cause that waited, the same ns.
    let bar = html.split("<h2 id=\"why\">").nth(1).unwrap().split("</svg>").next().unwrap();
    let parts: Vec<u64> =
        bar.split("data-value=\"").skip(1).filter_map(|s| s.split('"').next()?.parse().ok()).collect();
    assert_eq!((parts.len(), parts.iter().sum::<u64>()), (3, delays), "{bar}");
    // Each top cgroup's bar adds up to its time waited.
    let top = html.split("id=\"top-cgroups\"").nth(1).unwrap().split("</table>").next().unwrap();
    for (row, want) in top.split("<tr>").skip(2).zip([1_000_000u64, 500_000]) {
        let bar = row.split("class=\"causes\"").nth(1).expect("a bar per cgroup");
        let sum: u64 =
            bar.split("data-value=\"").skip(1).filter_map(|s| s.split('"').next()?.parse::<u64>().ok()).sum();
        assert_eq!(sum, want, "{row}");
    }
    // The last alert says how much of its delay was throttled, and whose limit.
    assert!(html.contains("data-throttled-ns=\"5000000\" data-irq-steal-ns=\"5\" data-held-ns=\"2000000\""), "{html}");
    assert!(html.contains("5 ms throttled by the CPU limit of <span title=\"/&lt;script&gt;"), "{html}");
}

#[test]
fn hostile_names_are_escaped_everywhere() {
    let html = page(&exposition(), &config(), "</pre><script>", None);
    assert!(!html.contains("<script>"), "{html}");
    assert!(!html.contains("<b>victim"));
    assert!(html.contains("/&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;"));
    assert!(html.contains("&lt;b&gt;victim&lt;/b&gt;"));
    assert!(html.contains("hog&quot;&amp;"));
    assert!(!html.contains("<i>") && !html.contains("web-\"1\""), "{html}");
}

#[test]
fn pods_are_named_where_known_and_paths_shown_otherwise() {
    let html = page(&exposition(), &config(), "{}", None);
    // The top cgroups: the pod by name (its path in the tooltip), a plain cgroup by its path.
    assert!(
        html.contains(
            "data-cgroup=\"/libpod_parent/libpod-x\" data-namespace=\"ns&lt;i&gt;\" data-pod=\"web-&quot;1&quot;\" \
             data-container=\"app&amp;co\" data-container-id=\"x\"><span title=\"/libpod_parent/libpod-x\">pod \
             ns&lt;i&gt;/web-&quot;1&quot;</span> <span class=\"note\">container app&amp;co</span>"
        ),
        "{html}"
    );
    assert!(html.contains("<code>/&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;</code>"), "{html}");
    // The last alert: the victim's pod, each culprit's pod, or its path, or "unknown".
    assert!(html.contains("data-pod=\"web-&quot;1&quot;\""), "{html}");
    assert!(html.contains("in <span title=\"/libpod_parent/libpod-h\">pod batch/hog-pod</span>"), "{html}");
    assert!(html.contains("in <code>unknown</code>"), "{html}");
}

#[test]
fn before_the_first_window_and_without_alerting() {
    let e = Exposition { version: "test", ..Exposition::default() };
    let html = page(&e, &Config::default(), "{}", None);
    assert!(html.contains("id=\"waiting\""));
    assert!(html.contains("0 drains, none yet."));
    assert!(html.contains("Alerting is off"));
    assert!(!html.contains("class=\"cell\""));
}

#[test]
fn the_status_line_says_what_fires_first_and_colours_what_crossed_its_threshold() {
    // An alert firing: red, the count, the reason and where (escaped), a link to the alerts.
    let html = page(&exposition(), &config(), "{}", None);
    let status = html.split("<p id=\"status\"").nth(1).and_then(|s| s.split("</p>").next()).expect("a status line");
    assert!(status.starts_with(" class=\"firing\" data-alerts=\"1\">1 alert firing: wakeup in "), "{status}");
    assert!(status.contains("href=\"#alerts\"") && !status.contains("<script>"), "{status}");
    assert!(html.find("id=\"status\"") < html.find("id=\"last-window\""), "the status line is not at the top");
    // The 7 ms wakeup maximum is over the 5 ms threshold: coloured; the preemptions' is not.
    assert!(html.contains("<td class=\"over\" data-field=\"wakeup.max_ns\""), "{html}");
    assert!(!html.contains("<td class=\"over\" data-field=\"preempt.max_ns\""));
    // Nothing firing: green, naming the window's worst delay.
    let quiet = Exposition { alerts_active: Vec::new(), ..exposition() };
    let html = page(&quiet, &config(), "{}", None);
    assert!(html.contains(
        "<p id=\"status\" class=\"ok\" data-alerts=\"0\">OK: no alert firing; the last window's worst delay"
    ));
    // Alerting off: grey, and no cell coloured.
    let html = page(&quiet, &Config::default(), "{}", None);
    assert!(html.contains("<p id=\"status\" class=\"off\" data-alerts=\"0\">Alerting is off"), "{html}");
    assert!(!html.contains("class=\"over\""));
}

#[test]
fn where_the_kernel_keeps_no_throttle_clock_the_page_says_cause_unknown() {
    // `throttle_unknown` on: the throttled slot holds the waits a throttle overlapped, whole.
    crate::model::causes::set_throttled_unknown(true);
    let mut e = exposition();
    let last = e.last_alert.as_deref().cloned().expect("the sample's last alert");
    let worst = Attribution { throttled_ns: 0, unknown_ns: 5_000_000, ..last.worst.clone() };
    e.last_alert = Some(Arc::new(LastAlert { worst, ..last }));
    let html = page(&e, &config(), "{}", None);
    crate::model::causes::set_throttled_unknown(false);
    let why = html.split("id=\"why-waited\"").nth(1).expect("the why-waited table").split("</table>").next().unwrap();
    assert!(why.contains("cause unknown on this kernel: a CPU-limit throttle overlapped the wait"), "{why}");
    assert!(why.contains("data-field=\"cause.unknown_ns\" data-value=\"1000\""), "{why}");
    assert!(!why.contains("throttled:") && !why.contains("cause.throttled_ns"), "{why}");
    assert!(html.contains("data-cause=\"unknown\""), "the bar names the slot");
    // The last alert's split: the unknown part, never a throttled one, and the rest by holder.
    assert!(html.contains("5 ms cause unknown on this kernel (a CPU-limit throttle overlapped it)"), "{html}");
    assert!(!html.contains("throttled by the CPU limit of"), "{html}");
    // And back: the same page with the clock names it throttled.
    let html = page(&exposition(), &config(), "{}", None);
    assert!(!html.contains("cause unknown on this kernel") && html.contains("cause.throttled_ns"));
}
