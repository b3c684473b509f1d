//! The live view in a real browser: headless Chromium loads `/` from a daemon under load (spinners
//! in a cgroup with a hostile name, alerting at 5 ms); the rendered DOM must hold a heatmap with
//! non-empty cells whose last column is the last window, figures equal to `/api/v1/snapshot`'s for
//! the same window, and the cgroup's name only escaped. A screenshot is taken along the way.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use latency_lab::{browser, daemon::Daemon, oracle::bpftool, services::TestCgroup, workload::cpus};
use serde_json::Value;

const DAEMON: &str = env!("CARGO_BIN_EXE_latency-daemon");
const HOSTILE: &str = "<b>live</b> \"view\" & 'co'";

/// The value of `attr="…"` in the first tag after `marker` in `dom`.
fn attr_after<'a>(dom: &'a str, marker: &str, attr: &str) -> Option<&'a str> {
    let rest = &dom[dom.find(marker)?..];
    let tag = &rest[..rest.find('>')?];
    let start = tag.find(&format!("{attr}=\""))? + attr.len() + 2;
    tag[start..].split('"').next()
}

/// `data-value` of the cell `data-field="field"`, if it has one.
fn field(dom: &str, field: &str) -> Option<u64> {
    attr_after(dom, &format!("data-field=\"{field}\""), "data-value")?.parse().ok()
}

/// Every `data-n` inside `part` (heatmap cells), summed, and how many there are.
fn cells(part: &str) -> (u64, usize) {
    let counts: Vec<u64> = part.split("data-n=\"").skip(1).filter_map(|s| s.split('"').next()?.parse().ok()).collect();
    (counts.iter().sum(), counts.len())
}

#[test]
fn chromium_renders_the_heatmap_and_the_snapshot_s_numbers() {
    let cg = TestCgroup::new(HOSTILE).expect("a test cgroup");
    let daemon = Daemon::start(DAEMON, &["--interval", "1s", "--window", "3s", "--alert-max-delay", "5ms"])
        .expect("latency-daemon run");
    let _spinners: Vec<_> =
        (0..2 * cpus()).map(|_| cg.spawn(&["sh", "-c", "while :; do :; done"]).expect("a spinner")).collect();
    std::thread::sleep(Duration::from_secs(10));
    let url = format!("http://{}/", daemon.addr);
    let snapshot = || -> Value {
        let r = daemon.get("/api/v1/snapshot").expect("GET /api/v1/snapshot");
        assert_eq!(r.status, 200);
        serde_json::from_slice(&r.body).expect("snapshot JSON")
    };

    // A window may close between the page and the snapshot: match them by the window's start.
    let mut matched = None;
    for _ in 0..3 {
        let before = snapshot();
        let dom = browser::dump_dom(&url, (1200, 1800)).expect("chromium --dump-dom");
        let after = snapshot();
        let start = attr_after(&dom, "id=\"last-window\"", "data-start-unix-ns").expect("the last-window table");
        let start: u64 = start.parse().expect("a number");
        let same = [before, after].into_iter().find(|s| s["start_unix_ns"].as_u64() == Some(start));
        if let Some(s) = same {
            matched = Some((dom, s));
            break;
        }
    }
    let (dom, snap) = matched.expect("the page and /api/v1/snapshot never showed the same window");

    for reason in ["wakeup", "preempt"] {
        let h = &snap["histograms"][reason];
        assert_eq!(field(&dom, &format!("{reason}.count")), h["count"].as_u64(), "{reason} count");
        for q in ["p50_ns", "p99_ns", "p999_ns", "max_ns"] {
            assert_eq!(field(&dom, &format!("{reason}.{q}")), h[q].as_u64(), "{reason} {q}");
        }
        assert_eq!(field(&dom, &format!("{reason}.threshold_ns")), Some(5_000_000));
    }
    // Why it waited: six causes, the snapshot's, adding up to both reasons' delay time.
    let delay_time = snap["histograms"]["wakeup"]["sum_ns"].as_u64().unwrap()
        + snap["histograms"]["preempt"]["sum_ns"].as_u64().unwrap();
    let mut causes = 0;
    for cause in ["throttled", "irq_steal", "same", "other", "kernel", "idle"] {
        let shown = field(&dom, &format!("cause.{cause}_ns")).unwrap_or_else(|| panic!("cause {cause} not shown"));
        assert_eq!(Some(shown), snap["waited_by_cause_ns"][cause].as_u64(), "cause {cause}");
        causes += shown;
    }
    assert!(delay_time > 0 && causes == delay_time, "causes add up to {causes} ns, the delays to {delay_time} ns");
    assert_eq!(field(&dom, "cause.total_ns"), Some(delay_time));
    // Each cgroup of the snapshot, and each on the page, splits exactly its own time waited.
    for c in snap["cgroups"].as_array().unwrap() {
        let split: u64 = c["waited_by_cause_ns"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(split, c["sum_ns"].as_u64().unwrap(), "{c}");
    }
    let top = dom.split("id=\"top-cgroups\"").nth(1).expect("the top cgroups").split("</table>").next().unwrap();
    let rows: Vec<&str> = top.split("<tr>").skip(2).collect();
    assert!(!rows.is_empty(), "no cgroup rows");
    for row in rows {
        let bar = row.split("class=\"causes\"").nth(1).unwrap_or_else(|| panic!("no causes bar: {row}"));
        let parts: u64 =
            bar.split("data-value=\"").skip(1).filter_map(|s| s.split('"').next()?.parse::<u64>().ok()).sum();
        let waited: u64 =
            row.split("<td data-value=\"").nth(2).and_then(|s| s.split('"').next()?.parse().ok()).unwrap();
        assert_eq!(parts, waited, "a cgroup's causes and its time waited: {row}");
    }

    let total = snap["histograms"]["wakeup"]["count"].as_u64().unwrap()
        + snap["histograms"]["preempt"]["count"].as_u64().unwrap();
    assert!(total > 0);

    // The heatmap: columns of non-empty cells, the last one exactly the last window.
    let heatmap = dom.split("class=\"heatmap\"").nth(1).expect("the heatmap SVG").split("</svg>").next().unwrap();
    let columns: Vec<&str> = heatmap.split("class=\"column\"").skip(1).collect();
    assert!(columns.len() >= 3, "{} columns after 10 s of 3 s windows", columns.len());
    let (all, n) = cells(heatmap);
    assert!(n > 0 && all > 0, "no non-empty cells");
    let last = columns.last().unwrap().split("</g>").next().unwrap();
    assert_eq!(
        attr_after(dom.as_str(), "id=\"last-window\"", "data-start-unix-ns"),
        attr_after(columns.last().unwrap(), "", "data-start-unix-ns")
    );
    assert_eq!(cells(last).0, total, "the last column holds the last window's delays");
    assert!(dom.contains("class=\"threshold\""), "no alert threshold line");

    // The cgroup that waited most is ours, its name only ever escaped.
    let escaped = cg.path.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    assert!(dom.contains(&escaped), "cgroup {:?} not on the page", cg.path);
    assert!(!dom.contains("<b>live</b>"), "a cgroup name became markup");

    let png = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("live-view.png");
    browser::screenshot(&url, &png, (1200, 1800)).expect("chromium --screenshot");
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(size > 20_000, "a {size}-byte screenshot is blank");
    eprintln!("screenshot: {}", png.display());

    assert!(daemon.stop().expect("SIGTERM") < Duration::from_secs(2));
    bpftool::nothing_loaded().unwrap_or_else(|e| panic!("{e:#}"));
}
