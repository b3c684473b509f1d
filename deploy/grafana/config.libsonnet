// Settings of the runqlat mixin. Override any of them when importing it, e.g. for a scrape job
// of another name:
//   (import 'mixin.libsonnet') + { _config+:: { selector: 'job="runqlat", cluster="eu-1"' } }
{
  _config+:: {
    // The label matchers that select latency-daemon's series, inside `{…}`: every recording
    // rule, alert and dashboard query uses them, and nothing else names a job. The default is
    // what every shipped way of scraping yields: deploy/prometheus/scrape.yml's job, and the
    // ServiceMonitor's and PodMonitor's jobLabel (app.kubernetes.io/name: latency-daemon).
    selector: 'job="latency-daemon"',
    // The label matchers that select the kubelet's cAdvisor series (the pods' CPU pressure,
    // PSI, drawn beside our waits), inside `{…}`: kube-prometheus's scrape of the kubelet's
    // /metrics/cadvisor. kubernetes-mixin users with a `job="cadvisor"` set that instead.
    cadvisorSelector: 'job="kubelet", metrics_path="/metrics/cadvisor"',

    // Each alert's `runbook_url` is this with the alert's name in lower case appended: the
    // alert's section of docs/runbooks.md. The project's address is a placeholder until it is
    // published; point it at the copy of the docs your on-call reads.
    runbookURL: 'https://example.org/latency-daemon/blob/main/docs/runbooks.md#',

    // RunQueueDelayHigh fires on the window max above this; the dashboard draws it as a line.
    windowMaxAlertSeconds: 0.010,
    // RunQueueDelayP99High fires on the 5-minute p99 above this.
    p99AlertSeconds: 0.005,
    // RunQueueStallInProgress fires on a wait still in progress older than this; the dashboard's
    // waits-in-progress panel draws it as a line. 2^-1 s, a classic bound like the others.
    stallAlertSeconds: 0.5,
    // RunQueueDelayFromCPULimit fires for a cgroup (a pod's container) when its CPU limit is
    // most of why it waits: the throttled part of its time waited above this share over 5m...
    throttledShareAlert: 0.5,
    // ...and its 5-minute p99 delay above this. 2^-6 s = 15.625 ms is a bound of the per-cgroup
    // buckets (every other octave), so "p99 above it" is exactly "more than 1 % of its delays
    // were longer", not an interpolation (where a node's cgroup_buckets leave it out, it is one).
    throttledP99AlertSeconds: 0.015625,
    // "Delays above" threshold: 2^-7 s = 7.8125 ms. It is a kernel bucket bound, so a boundary
    // of the native histogram (schema 3) and a classic `le` the daemon exports by default: both
    // histogram_fraction and the bucket difference are exact there, not interpolations.
    overSeconds: 0.0078125,
    overLe: '0.0078125',
    overLabel: '2⁻⁷ s (7.8 ms)',

    dashboardUid: 'runqlat-overview',
    dashboardTitle: 'Run-queue latency',
    dashboardTags: ['runqlat', 'scheduler', 'latency'],
    refresh: '30s',
    timeFrom: 'now-1h',
    // Top cgroups shown.
    topCgroups: 10,
  },
}
