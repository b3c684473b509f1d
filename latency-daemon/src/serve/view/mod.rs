//! The live view at `/`: the latest published `Exposition` and the running `Config` in; one
//! self-contained HTML page out (server-rendered SVG, no script, no external resource, refreshed by
//! `<meta http-equiv="refresh">`): the last windows as a heatmap of exact kernel buckets, p99 and
//! max per reason against the alert thresholds, the last window's figures and top cgroups, the last
//! alert with its attribution, then the links and the effective configuration. Every value that
//! comes from the machine (cgroup paths, thread names) is HTML-escaped.
pub mod capture;
pub mod chart;

use std::fmt::Write as _;

use latency_common::{Reason, maps::Cause};

use crate::{
    config::Config,
    model::capture::Listed,
    model::{
        attribution::Attribution,
        causes::{self, Causes},
        clock_name,
        container::ContainerLabels,
        exposition::Exposition,
        timeline::{LastAlert, ReasonSummary, WindowSummary},
        units::fmt_ns,
    },
};

/// Escape for HTML text and attribute values alike.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escape for element content only (`<pre>`), where quotes need none: the configuration's JSON
/// stays readable in the page's source.
pub fn escape_text(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Each reason's alert threshold for a task in no particular cgroup (the reason's own, else the
/// global one); None when it has none.
pub fn thresholds(config: &Config) -> [Option<u64>; Reason::COUNT] {
    let rules = config.alert.rules();
    Reason::ALL.map(|r| rules.per_reason_ns[r as usize].or(rules.max_delay_ns))
}

const STYLE: &str = "body{font-family:sans-serif;margin:16px;color:#222;max-width:1100px}\
h1{font-size:20px}h2{font-size:16px;margin-top:24px}table{border-collapse:collapse}\
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}td.name,th.name{text-align:left}\
.note{color:#666;font-size:13px}pre{background:#f6f6f6;padding:8px;overflow:auto}\
#status{padding:8px 12px;border-radius:4px;font-weight:bold}#status.ok{background:#e3f4e3;color:#1a5e1a}\
#status.firing{background:#fbe3e3;color:#8b1a1a}#status.off{background:#f0f0f0;color:#555}\
td.over{background:#fbe3e3;color:#8b1a1a;font-weight:bold}";

/// The whole page; `capture`, the newest capture on the shelf, if any.
pub fn page(e: &Exposition, config: &Config, config_json: &str, capture: Option<&Listed>) -> String {
    let refresh = e.window_seconds.round().clamp(2.0, 30.0);
    let last_drain = if e.drains == 0 {
        "none yet".to_string()
    } else {
        format!("the last at {} UTC", chart::clock_utc((e.last_drain_unix * 1e9) as u64))
    };
    let mut out = String::with_capacity(128 * 1024);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{refresh}\"><title>latency-daemon: run-queue latency</title>\
         <style>{STYLE}</style></head><body>\n<h1>Run-queue latency — latency-daemon {}</h1>\n\
         <p class=\"note\">Kernel {}, {} clock; windows of {} s; {} drains, {last_drain}. This page \
         reloads every {refresh} s.</p>\n",
        escape(e.version),
        escape(&e.kernel),
        clock_name(e.clock),
        e.window_seconds,
        e.drains,
    );
    status(&mut out, e, config);
    let windows: Vec<&WindowSummary> = e.timeline.windows().collect();
    match e.timeline.last() {
        Some(last) => {
            last_window(&mut out, last, config);
            let since_start = e.snapshot.as_ref().map(|s| {
                let mut all = Causes::default();
                for cpu in &s.cpus {
                    all.add(&cpu.waited_ns);
                }
                all
            });
            why_waited(&mut out, last, since_start);
            let _ = write!(
                out,
                "<h2 id=\"heatmap\">Delays over the last {} windows</h2>\n{}",
                windows.len(),
                chart::heatmap(&windows)
            );
            let _ = write!(
                out,
                "<h2 id=\"lines\">p99 and max per reason</h2>\n{}",
                chart::lines(&windows, thresholds(config))
            );
            cgroups(&mut out, last);
        }
        None => out.push_str("<p id=\"waiting\">No window has closed yet; this page fills in when one does.</p>\n"),
    }
    waiting_now(&mut out, e);
    alerts(&mut out, e, config);
    if let Some(c) = capture {
        newest_capture(&mut out, c);
    }
    let _ = write!(
        out,
        "<h2 id=\"about\">Endpoints</h2>\n<ul><li><a href=\"/metrics\">/metrics</a></li>\
         <li><a href=\"/healthz\">/healthz</a></li><li><a href=\"/api/v1/snapshot\">/api/v1/snapshot</a> (the last \
         window, as <code>record --json</code>)</li><li><a href=\"/heatmap.svg\">/heatmap.svg</a> (the heatmap \
         alone)</li><li><a href=\"/api/v1/waits\">/api/v1/waits</a> (waits in progress at the last \
         drain)</li></ul>\n<h2>Effective configuration</h2>\n<pre>{}</pre>\n</body></html>\n",
        escape_text(config_json)
    );
    out
}

/// A figure cell: the human text, and the raw value in `data-value` for machines.
/// The line at the top: the alerts firing, in colour, naming the first; else whether the last
/// window stayed under the thresholds (its worst delay and the threshold it is held to); else
/// that alerting is off.
fn status(out: &mut String, e: &Exposition, config: &Config) {
    let worst = e.timeline.last().and_then(|w| {
        Reason::ALL.into_iter().filter_map(|r| Some((r, w.reasons[r as usize].max_ns?))).max_by_key(|(_, ns)| *ns)
    });
    let (class, text) = if let Some((reason, cgroup)) = e.alerts_active.first() {
        let names = e.containers.get(cgroup).cloned().unwrap_or_default();
        let more = match e.alerts_active.len() {
            1 => String::new(),
            n => format!(" and {} more", n - 1),
        };
        let n = e.alerts_active.len();
        (
            "firing",
            format!(
                "{n} alert{} firing: {} in {}{more} (<a href=\"#alerts\">alerts</a>)",
                if n == 1 { "" } else { "s" },
                reason.name(),
                who(cgroup, &names)
            ),
        )
    } else if !config.alert.enabled() {
        ("off", "Alerting is off: no threshold set (alert_max_delay or an override).".to_owned())
    } else {
        let worst = worst.map_or_else(
            || "no window has closed yet".to_owned(),
            |(r, ns)| format!("the last window's worst delay {} ({})", escape(&fmt_ns(ns)), r.name()),
        );
        ("ok", format!("OK: no alert firing; {worst}."))
    };
    let _ = writeln!(out, "<p id=\"status\" class=\"{class}\" data-alerts=\"{}\">{text}</p>", e.alerts_active.len());
}

fn cell(out: &mut String, field: &str, ns: Option<u64>) {
    cell_over(out, field, ns, false);
}

/// A cell of ns; `over`: coloured (at or above its threshold).
fn cell_over(out: &mut String, field: &str, ns: Option<u64>, over: bool) {
    let class = if over { " class=\"over\"" } else { "" };
    match ns {
        Some(v) => {
            let _ = write!(out, "<td{class} data-field=\"{field}\" data-value=\"{v}\">{}</td>", escape(&fmt_ns(v)));
        }
        None => {
            let _ = write!(out, "<td{class} data-field=\"{field}\">–</td>");
        }
    }
}

fn last_window(out: &mut String, w: &WindowSummary, config: &Config) {
    let _ = write!(
        out,
        "<h2>The last window</h2>\n<table id=\"last-window\" data-start-unix-ns=\"{}\" data-duration-ns=\"{}\">\
         <tr><th class=\"name\">reason</th><th>delays</th><th>p50</th><th>p99</th><th>p99.9</th><th>max (exact)\
         </th><th>alert threshold</th></tr>\n",
        w.start_unix_ns, w.duration_ns
    );
    let thresholds = thresholds(config);
    for reason in Reason::ALL {
        let r: &ReasonSummary = &w.reasons[reason as usize];
        let name = reason.name();
        let _ = write!(
            out,
            "<tr><td class=\"name\">{name}</td><td data-field=\"{name}.count\" data-value=\"{}\">{}</td>",
            r.count, r.count
        );
        cell(out, &format!("{name}.p50_ns"), r.p50_ns);
        cell(out, &format!("{name}.p99_ns"), r.p99_ns);
        cell(out, &format!("{name}.p999_ns"), r.p999_ns);
        // The maximum in colour where it is at or above the reason's threshold.
        let over = r.max_ns.zip(thresholds[reason as usize]).is_some_and(|(max, t)| max >= t);
        cell_over(out, &format!("{name}.max_ns"), r.max_ns, over);
        cell(out, &format!("{name}.threshold_ns"), thresholds[reason as usize]);
        out.push_str("</tr>\n");
    }
    let _ = writeln!(
        out,
        "</table>\n<p class=\"note\">Window from {} to {} UTC. The same figures as <a \
         href=\"/api/v1/snapshot\">/api/v1/snapshot</a>.</p>",
        chart::clock_utc(w.start_unix_ns),
        chart::clock_utc(w.start_unix_ns + w.duration_ns)
    );
}

/// Each cause's colour in the bars.
fn colour(cause: Cause) -> &'static str {
    match cause {
        // Where the throttled slot holds waits of unknown cause (`causes`): dark grey.
        Cause::Throttled if causes::throttled_is_unknown() => "#666666",
        Cause::Throttled => "#d62728",
        Cause::IrqSteal => "#9467bd",
        Cause::Same => "#ff7f0e",
        Cause::Other => "#1f77b4",
        Cause::Kernel => "#8c564b",
        Cause::Idle => "#aaaaaa",
    }
}

/// A horizontal bar `width` × `height` px stacked by cause, each part with its ns in `data-value`
/// and its share in a tooltip; an empty grey bar when nothing waited.
fn cause_bar(c: &Causes, width: u32, height: u32) -> String {
    let total = c.total();
    let mut out = format!(
        "<svg class=\"causes\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         data-total=\"{total}\"><rect width=\"{width}\" height=\"{height}\" fill=\"#f4f4f4\"/>"
    );
    let mut x = 0.0;
    for cause in Cause::ALL {
        let ns = c.get(cause);
        if ns == 0 {
            continue;
        }
        let w = f64::from(width) * ns as f64 / total as f64;
        let _ = write!(
            out,
            "<rect class=\"cause\" data-cause=\"{}\" data-value=\"{ns}\" x=\"{x:.1}\" width=\"{w:.1}\" \
             height=\"{height}\" fill=\"{}\"><title>{}: {} ({:.1} %)</title></rect>",
            causes::name(cause),
            colour(cause),
            causes::name(cause),
            escape(&fmt_ns(ns)),
            100.0 * ns as f64 / total as f64
        );
        x += w;
    }
    out.push_str("</svg>");
    out
}

/// "12.5 %" of `of` (a no-break space: it stays on one line); "–" when `of` is 0.
fn share(ns: u64, of: u64) -> String {
    if of == 0 { "–".to_string() } else { format!("{:.1}\u{a0}%", 100.0 * ns as f64 / of as f64) }
}

/// Why they waited: the last window's delay time by cause as a stacked bar and a table (time,
/// share, tasks waiting on average for that cause), and the shares since the program was loaded.
fn why_waited(out: &mut String, w: &WindowSummary, since_start: Option<Causes>) {
    let total = w.causes.total();
    let _ = write!(
        out,
        "<h2 id=\"why\">Why it waited</h2>\n<p>{}</p>\n<table id=\"why-waited\"><tr><th class=\"name\">cause</th>\
         <th>time waited (last window)</th><th>share</th><th>tasks waiting on average</th><th>share since start</th>\
         </tr>\n",
        cause_bar(&w.causes, 600, 22)
    );
    let since_total = since_start.map_or(0, |c| c.total());
    for cause in Cause::ALL {
        let ns = w.causes.get(cause);
        let since = since_start.map_or(0, |c| c.get(cause));
        let _ = writeln!(
            out,
            "<tr><td class=\"name\"><span style=\"color:{}\">■</span> {}</td><td data-field=\"cause.{}_ns\" \
             data-value=\"{ns}\">{}</td><td>{}</td><td>{:.3}</td><td data-value=\"{since}\">{}</td></tr>",
            colour(cause),
            escape(causes::describe(cause)),
            causes::name(cause),
            escape(&fmt_ns(ns)),
            share(ns, total),
            ns as f64 / w.duration_ns.max(1) as f64,
            share(since, since_total),
        );
    }
    let delays: u64 = w.reasons.iter().map(|r| r.sum_ns).sum();
    let _ = writeln!(
        out,
        "<tr><td class=\"name\">all causes</td><td data-field=\"cause.total_ns\" data-value=\"{total}\">{}</td>\
         <td></td><td>{:.3}</td><td></td></tr>\n</table>\n<p class=\"note\">The delay time of both reasons in the \
         last window ({}), split by the kernel: throttled and IRQ or steal from its own clocks over each wait, the \
         rest by who held the CPU when the wait ended. A task that migrated while it waited is counted whole under \
         who held the CPU.</p>",
        escape(&fmt_ns(total)),
        total as f64 / w.duration_ns.max(1) as f64,
        escape(&fmt_ns(delays)),
    );
}

fn cgroups(out: &mut String, w: &WindowSummary) {
    out.push_str("<h2 id=\"cgroups\">Top cgroups in the last window</h2>\n");
    if w.top_cgroups.is_empty() {
        out.push_str("<p class=\"note\">No per-cgroup delays (per_cgroup off, or no cgroup v2).</p>\n");
        return;
    }
    out.push_str(
        "<table id=\"top-cgroups\"><tr><th class=\"name\">pod or cgroup (of the task that waited)</th>\
         <th>delays</th><th>time waited</th><th>tasks waiting on average</th><th class=\"name\">why</th></tr>\n",
    );
    for c in &w.top_cgroups {
        let waiting = c.sum_ns as f64 / w.duration_ns.max(1) as f64;
        let _ = writeln!(
            out,
            "<tr><td class=\"name\" data-cgroup=\"{}\"{}>{}</td><td data-value=\"{n}\">{n}</td>\
             <td data-value=\"{s}\">{}</td><td>{waiting:.3}</td><td class=\"name\">{}</td></tr>",
            escape(&c.cgroup),
            name_attributes(&c.names),
            who(&c.cgroup, &c.names),
            escape(&fmt_ns(c.sum_ns)),
            cause_bar(&c.causes, 160, 12),
            n = c.count,
            s = c.sum_ns,
        );
    }
    out.push_str("</table>\n");
}

/// A cgroup for people: `namespace/pod` and the container where it is a container's (the path in a
/// tooltip), the path otherwise; escaped.
fn who(cgroup: &str, names: &ContainerLabels) -> String {
    match names.pod_name() {
        Some(pod) => {
            let container = if names.container.is_empty() {
                String::new()
            } else {
                format!(" <span class=\"note\">container {}</span>", escape(&names.container))
            };
            format!("<span title=\"{}\">pod {}</span>{container}", escape(cgroup), escape(&pod))
        }
        None if !names.container.is_empty() => {
            format!("<span title=\"{}\">container {}</span>", escape(cgroup), escape(&names.container))
        }
        None => format!("<code>{}</code>", escape(cgroup)),
    }
}

/// The names as data attributes, for machines (empty ones left out).
fn name_attributes(names: &ContainerLabels) -> String {
    let mut out = String::new();
    for (k, v) in [
        ("namespace", &names.namespace),
        ("pod", &names.pod),
        ("container", &names.container),
        ("container-id", &names.container_id),
    ] {
        if !v.is_empty() {
            let _ = write!(out, " data-{k}=\"{}\"", escape(v));
        }
    }
    out
}

/// The waits still in progress at the last drain: stalls while they happen.
fn waiting_now(out: &mut String, e: &Exposition) {
    let Some(w) = &e.waits else { return };
    out.push_str("<h2 id=\"waiting-now\">Waiting now</h2>\n");
    if w.longest.is_empty() {
        out.push_str("<p class=\"note\">No task was waiting for a CPU at the last drain.</p>\n");
        return;
    }
    let _ = write!(
        out,
        "<p class=\"note\">{} tasks were waiting for a CPU at the last drain; the longest:</p>\n<table id=\"waits\">\
         <tr><th class=\"name\">who</th><th class=\"name\">cgroup</th><th>CPU</th><th class=\"name\">reason</th>\
         <th>waited so far</th><th class=\"name\">on its CPU now</th></tr>\n",
        w.over.first().map_or(0, |(_, n)| *n)
    );
    for n in &w.longest {
        let holder = n
            .holder
            .as_ref()
            .map_or("idle or switching".to_string(), |h| format!("<code>{}</code> (tid {})", escape(&h.comm), h.tid));
        let _ = writeln!(
            out,
            "<tr data-tid=\"{}\"{}><td class=\"name\"><code>{}</code> (tid {}, pid {})</td><td class=\"name\">{}</td>\
             <td>{}</td><td class=\"name\">{}</td><td data-value=\"{}\">{}</td><td class=\"name\">{holder}</td></tr>",
            n.wait.tid,
            name_attributes(&n.names),
            escape(&n.wait.comm),
            n.wait.tid,
            n.wait.pid,
            who(&n.cgroup, &n.names),
            n.wait.cpu,
            n.wait.reason.name(),
            n.wait.waited_ns,
            escape(&fmt_ns(n.wait.waited_ns)),
        );
    }
    out.push_str("</table>\n");
}

/// The newest capture: its picture (served beside it, under the same authentication) and links.
fn newest_capture(out: &mut String, c: &Listed) {
    let _ = write!(
        out,
        "<h2 id=\"capture\">The newest capture</h2>\n<p><a href=\"{}\">{}</a> ({}; open it in \
         ui.perfetto.dev) · <a href=\"/api/v1/captures\">all captures</a></p>\n",
        escape(&c.url),
        escape(&c.name),
        escape(&format!("{} KiB", c.bytes.div_ceil(1024))),
    );
    if let Some(picture) = &c.picture_url {
        let _ = writeln!(
            out,
            "<p><a href=\"{0}\"><img id=\"capture-picture\" src=\"{0}\" alt=\"the timeline of capture {1}\" \
             style=\"max-width:100%\"></a></p>",
            escape(picture),
            escape(&c.name),
        );
    }
}

fn alerts(out: &mut String, e: &Exposition, config: &Config) {
    out.push_str("<h2 id=\"alerts\">Alerts</h2>\n");
    if !config.alert.enabled() {
        out.push_str("<p class=\"note\">Alerting is off (no alert_max_delay or override set).</p>\n");
    }
    if !e.alerts_active.is_empty() {
        out.push_str("<p>Firing now:</p><ul id=\"firing\">");
        for (reason, cgroup) in &e.alerts_active {
            let names = e.containers.get(cgroup).cloned().unwrap_or_default();
            let _ = write!(out, "<li>{} in {}</li>", reason.name(), who(cgroup, &names));
        }
        out.push_str("</ul>\n");
    }
    match &e.last_alert {
        Some(a) => last_alert(out, a),
        None if config.alert.enabled() => out.push_str("<p class=\"note\">No alert has fired since start.</p>\n"),
        None => {}
    }
}

/// "95 ms throttled by the CPU limit of pod shop/web-0, 5 ms in IRQ or steal, 20 ms behind who
/// ran", escaped; the parts that are 0 left out.
fn alert_split(w: &Attribution) -> String {
    let mut parts = Vec::new();
    if w.throttled_ns > 0 {
        parts.push(format!(
            "{} throttled by the CPU limit of {}",
            escape(&fmt_ns(w.throttled_ns)),
            who(&w.cgroup, &w.names)
        ));
    }
    if w.unknown_ns > 0 {
        parts.push(format!(
            "{} cause unknown on this kernel (a CPU-limit throttle overlapped it)",
            escape(&fmt_ns(w.unknown_ns))
        ));
    }
    if w.irq_steal_ns > 0 {
        parts.push(format!("{} in IRQ or steal", escape(&fmt_ns(w.irq_steal_ns))));
    }
    if parts.is_empty() {
        return "all of it behind who ran (not throttled, no IRQ or steal seen)".to_string();
    }
    if w.held_ns() > 0 {
        parts.push(format!("{} behind who ran", escape(&fmt_ns(w.held_ns()))));
    }
    parts.join(", ")
}

fn last_alert(out: &mut String, a: &LastAlert) {
    let w = &a.worst;
    let state = match a.resolved_unix_ns {
        Some(t) => format!("resolved at {} UTC", chart::clock_utc(t)),
        None => "firing".to_string(),
    };
    let _ = write!(
        out,
        "<table id=\"last-alert\"><tr><th class=\"name\" colspan=\"2\">The last alert: fired at {} UTC, {state}\
         </th></tr>\n<tr><td class=\"name\">reason, cgroup</td><td class=\"name\"{}>{}, {}</td></tr>\n\
         <tr><td class=\"name\">worst delay / threshold</td><td class=\"name\">{} / {}</td></tr>\n\
         <tr><td class=\"name\">who waited</td><td class=\"name\"><code>{}</code> (tid {}, pid {}, prio {}) on CPU {}, \
         queue depth {}</td></tr>\n<tr><td class=\"name\">why it waited</td><td class=\"name\" id=\"alert-split\" \
         data-throttled-ns=\"{}\" data-irq-steal-ns=\"{}\" data-held-ns=\"{}\">{}</td></tr>\n\
         <tr><td class=\"name\">who ran meanwhile</td><td class=\"name\">",
        chart::clock_utc(a.fired_unix_ns),
        name_attributes(&w.names),
        w.reason.name(),
        who(&w.cgroup, &w.names),
        escape(&fmt_ns(w.delay_ns)),
        escape(&fmt_ns(a.threshold_ns)),
        escape(&w.victim_comm),
        w.victim_tid,
        w.victim_pid,
        w.victim_prio,
        w.cpu,
        w.queue_depth.map_or("unknown".to_string(), |d| d.to_string()),
        w.throttled_ns,
        w.irq_steal_ns,
        w.held_ns(),
        alert_split(w),
    );
    if w.culprits.is_empty() {
        out.push_str("nothing recorded");
    }
    for c in &w.culprits {
        let _ = write!(out, "<code>{}</code> (tid {}) {}", escape(&c.comm), c.tid, escape(&fmt_ns(c.ran_ns)));
        if !c.cgroup.is_empty() {
            let _ = write!(
                out,
                " <span class=\"culprit\"{}>in {}</span>",
                name_attributes(&c.names),
                who(&c.cgroup, &c.names)
            );
        }
        out.push_str("<br>");
    }
    if w.culprits_truncated {
        out.push_str("… and more than the kernel keeps");
    }
    out.push_str("</td></tr></table>\n");
}

#[cfg(test)]
mod tests;
