// Alerts for a fleet of latency-daemon exporters, rendered with the recording rules
// (rules/rules.libsonnet) by `cargo xtask mixin`.
//
// Why these alert on delay (the window max, p99) and never on context switches: a switch count
// says nothing about waiting. In the perf-sched experiment that the tests replay
// (latency-daemon/tests/record_oracles.rs), the `io` phase (1 ms sleepers) switched the most and
// waited the least, and the `compete` phase (4 spinners per CPU) switched the least and waited the
// most (the test asserts an average delay at least 10x the sleepers'). A node can switch
// 100 000 times/s with no one waiting, or a few hundred times/s while every runnable task waits a
// full tick. So runqlat_context_switches_total is good for graphs and useless as an alert.
//
// runqlat_discarded_total gets no alert. Those are delays that failed the believability checks (a
// future stamp, over --ceiling), and a few of them are expected. Graph them with
// rate(runqlat_discarded_total[5m]).
{
  prometheusAlerts+:: {
    local c = $._config,
    local sel = c.selector,
    // Each alert's runbook: its section of docs/runbooks.md (the alert's name in lower case).
    local withRunbook(rule) = rule { annotations+: { runbook_url: c.runbookURL + std.asciiLower(rule.alert) } },
    groups+: [{
      name: 'runqlat.alerts',
      rules: std.map(withRunbook, [
        // The fleet-level backstop. Each daemon can run its own alerting ([alert] in its
        // configuration), which it evaluates on every closed window in the kernel's attributed
        // incidents. Those notifications name the victim task, its cgroup and CPU, and the
        // culprits that ran while it waited. This rule knows none of that. It only says that some
        // node's exact worst delay stayed above the threshold for a minute. It still fires when
        // the daemon's own notifier is off, misconfigured or cannot reach Alertmanager, and it
        // puts every node under one threshold. The window max is exact (no bucket
        // interpolation), and a single slow wakeup is what a latency-sensitive service notices,
        // so no average or quantile can stand in. `for: 1m` wants about 4 consecutive 15 s
        // windows above the threshold (one spike only goes pending).
        {
          alert: 'RunQueueDelayHigh',
          expr: 'instance:runqlat_delay_window_max_seconds:max > %s' % c.windowMaxAlertSeconds,
          'for': '1m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Run-queue delay {{ $value | humanizeDuration }} on {{ $labels.instance }}',
            description: "A runnable task on {{ $labels.instance }} waited {{ $value | humanizeDuration }} for a CPU in the last window, and the window max has stayed above %gms for 1m. The daemon's own alerts and /api/v1/snapshot on that node name the victim and the culprits." % (c.windowMaxAlertSeconds * 1000),
          },
        },

        // The tail rather than the worst case: 1 delay in 100 over the last 5 minutes waited
        // more than the threshold, for 10 minutes on end. That is a node short of CPU, not one
        // unlucky wakeup.
        {
          alert: 'RunQueueDelayP99High',
          expr: 'instance:runqlat_delay_seconds:p99_rate5m > %s' % c.p99AlertSeconds,
          'for': '10m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Run-queue delay p99 {{ $value | humanizeDuration }} on {{ $labels.instance }}',
            description: 'Over the last 5m, 1%% of the delays on {{ $labels.instance }} exceeded {{ $value | humanizeDuration }} (from the native histogram, within 9%%, or from the classic buckets, up to 2x off), and the p99 has stayed above %gms for 10m.' % (c.p99AlertSeconds * 1000),
          },
        },

        // A stall while it lasts. The two rules above see a wait only once it has ended: its delay
        // reaches the histogram and the window max when the task finally runs, so a task that
        // waits a minute is invisible for that minute (and one that never runs, for ever). Each
        // drain, the daemon also scans the tasks that are runnable but have not run yet, and
        // runqlat_wait_in_progress_seconds is the age of the oldest per reason (0 when none).
        // Per node and reason, like the window max, so the alert names both.
        //  - The threshold, 0.5 s, is a stall by any standard and clear of what a busy but
        //    healthy node does: 50 times RunQueueDelayHigh's, and 5 of the default 100 ms CFS
        //    bandwidth periods (a throttled cgroup's tasks count as waiting until its quota
        //    refills, within one period). It still catches a SCHED_FIFO/RR hog under the kernel's
        //    default RT throttling, which leaves fair tasks waiting up to 0.95 s of every second.
        //    SCHED_IDLE and heavily niced tasks can legitimately wait this long on a saturated
        //    node; raise it there.
        //  - `for` is short because the gauge is continuous evidence: its value is itself a
        //    duration (a reading of 2 s is a task that has waited 2 s), so `for` need not prove
        //    that the problem lasts, as `for: 1m` does for the window max. 15 s is one evaluation
        //    (at the usual 15 s to 1 m interval): it wants the stall seen twice in a row, so a wait
        //    that one scan caught just before it ended, which RunQueueDelayHigh reports anyway,
        //    goes pending and does not page and resolve in turn.
        // With the wait scan off or unavailable (runqlat_feature_info{feature="wait_scan"}) the
        // gauge is absent and this stays silent; the two rules above still work.
        {
          alert: 'RunQueueStallInProgress',
          expr: 'max by (instance, reason) (runqlat_wait_in_progress_seconds{%s}) > %s' % [sel, c.stallAlertSeconds],
          'for': '15s',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Run-queue stall on {{ $labels.instance }}: a task waiting {{ $value | humanizeDuration }} so far ({{ $labels.reason }})',
            description: "A task on {{ $labels.instance }} has been runnable for {{ $value | humanizeDuration }} without getting a CPU and is still waiting (reason {{ $labels.reason }}; the longest wait in progress at the daemon's last scan), and the node has had a wait over %gms in progress for 15s. Its delay reaches the histogram and the window max only when it ends. On that node, the daemon's live view (/) and /api/v1/waits name the waiting task, its cgroup and CPU, and what runs on that CPU now." % (c.stallAlertSeconds * 1000),
          },
        },

        // A cgroup (a pod's container) kept waiting by its own CPU limit, the grounded form of
        // kubernetes-mixin's CPUThrottlingHigh. That alert counts throttled CFS periods
        // (container_cpu_cfs_throttled_periods_total over _periods_total above 25 %), and a
        // throttled period says nothing about whether any task waited, or for how long: a
        // service throttled for the last millisecond of many periods trips it with no delay
        // worth a page, and a pod starved by its neighbours never does. This asks both
        // questions of the waits themselves (docs/causes.md):
        //  - why: most (more than throttledShareAlert, 50 %) of the time its tasks waited for a
        //    CPU over 5 minutes was throttled time, measured per wait by the kernel's throttle
        //    clock of the task's group (runqlat_cgroup_wait_cause_seconds_total{cause="throttled"};
        //    the daemon counts an ancestor's throttling too, so a pod-level limit counts);
        //  - how much: its 5-minute p99 delay is above throttledP99AlertSeconds (2^-6 s, a
        //    per-cgroup bucket bound, so: more than 1 % of its delays were longer than 15.6 ms).
        // Both must hold: a high share of small waits is CPUThrottlingHigh's false alarm, and a
        // long delay of which the limit is a small part is a neighbour's doing (cause="other";
        // the dashboard's "Who took the CPU" names it). `for: 15m` as CPUThrottlingHigh's, so
        // switching from one to the other does not change when a page comes. On kernels before
        // 6.8 the throttled part is not measured (runqlat_feature_info{feature="throttle_split",
        // state="unavailable"}): the share stays 0 and this stays silent, as it does where the
        // daemon runs with wait_causes off. The description reads the p99 from its recording
        // rule, since an alert has one value and this one's is the share.
        {
          alert: 'RunQueueDelayFromCPULimit',
          expr: 'instance_cgroup:runqlat_cgroup_wait_throttled:ratio_rate5m > %s\nand on (instance, cgroup)\ninstance_cgroup:runqlat_cgroup_delay_seconds:p99_rate5m > %s' % [c.throttledShareAlert, c.throttledP99AlertSeconds],
          'for': '15m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'CPU limit delays {{ if $labels.pod }}{{ $labels.namespace }}/{{ $labels.pod }} ({{ $labels.container }}){{ else }}{{ $labels.cgroup }}{{ end }} on {{ $labels.instance }}: {{ $value | humanizePercentage }} of its run-queue wait throttled',
            description: 'The tasks of cgroup {{ $labels.cgroup }} on {{ $labels.instance }} are delayed by their own CPU limit: over the last 5m, {{ $value | humanizePercentage }} of the time they waited for a CPU they were throttled by the CFS bandwidth limit of their cgroup or an ancestor (a container limit or the pod\'s), and their p99 run-queue delay is {{ with printf "instance_cgroup:runqlat_cgroup_delay_seconds:p99_rate5m{instance=%%q, cgroup=%%q}" $labels.instance $labels.cgroup | query }}{{ . | first | value | humanizeDuration }}{{ end }}; both have stayed above %g%% and %gms for 15m. Neighbours are not the cause, so a less busy node would not help: a higher limit (or none) would.' % [c.throttledShareAlert * 100, c.throttledP99AlertSeconds * 1000],
          },
        },

        // The only rules that look at `up`, and so the reason the selector exists: on a bare
        // `up == 0` every down target in Prometheus would page as a latency-daemon. One scrape
        // per node, so one `up` series per daemon.
        {
          alert: 'RunqlatDown',
          expr: 'up{%s} == 0' % sel,
          'for': '2m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'latency-daemon on {{ $labels.instance }} is down',
            description: 'Prometheus could not scrape {{ $labels.instance }} (job {{ $labels.job }}) for 2m. Run-queue delay on that node is unmonitored. Check the latency-daemon service and its /healthz.',
          },
        },
        // No target matches the selector at all (service discovery lost them, the job was
        // renamed, or the selector does not match how Prometheus labels the targets). Then `up`
        // has no series and RunqlatDown cannot fire.
        {
          alert: 'RunqlatAbsent',
          expr: 'absent(up{%s})' % sel,
          'for': '5m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'No latency-daemon targets',
            description: "Prometheus has had no target matching {%s} for 5m, so no node's run-queue delay is monitored." % sel,
          },
        },

        // The daemon answers scrapes, but its drain thread has stopped. HTTP keeps serving the
        // last published values, so `up` stays 1 and the delay series freeze. Two signals:
        //  - the last successful drain is more than 30 s older than the scrape that reported it.
        //    timestamp() is the scrape time, so neither the scrape interval nor rule evaluation
        //    lag matters. The 30 s assumes --interval ≤ 10 s (default 1 s). It fires within
        //    ~1.5 min, but a node clock more than 30 s behind Prometheus's also trips it.
        //  - no drain counted in 2 minutes. This uses no clocks at all (it catches a node clock
        //    far ahead), needs scrapes at most 1 min apart, and survives restarts (rate handles
        //    the reset).
        // Failed drains advance neither (RunqlatDrainErrors counts them). A target that stops
        // answering loses its series to staleness, so this stays quiet and RunqlatDown fires.
        {
          alert: 'RunqlatNotDraining',
          expr: 'max by (instance) (timestamp(runqlat_last_drain_timestamp_seconds{%(sel)s}) - runqlat_last_drain_timestamp_seconds{%(sel)s}) > 30\nor\nmax by (instance) (rate(runqlat_drains_total{%(sel)s}[2m])) == 0' % { sel: sel },
          'for': '1m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'latency-daemon on {{ $labels.instance }} is not draining',
            description: 'latency-daemon on {{ $labels.instance }} answers scrapes but has completed no drain of the kernel maps in over 30s, so its metrics are frozen. Check its /healthz and log.',
          },
        },

        // A full map (tasks, cgroups), a tid beyond the stamp array (stamps), or a maximum
        // written after its window was read (window_max). Each of these means delays or
        // attributions the monitor did not keep. There is no `for`: the 10-minute increase keeps
        // the alert up for 10 minutes after the last loss. increase() handles a daemon restart's
        // counter reset.
        {
          alert: 'RunqlatLosingData',
          expr: 'max by (instance, map) (increase(runqlat_lost_total{%s}[10m])) > 0' % sel,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'latency-daemon on {{ $labels.instance }} is losing {{ $labels.map }} entries',
            description: 'runqlat_lost_total{map="{{ $labels.map }}"} increased on {{ $labels.instance }} in the last 10m. Some delays or attributions were not recorded. stamps: kernel.pid_max was raised after the daemon started (restart it); tasks/cgroups: raise max_tasks/max_cgroups; window_max: a maximum arrived after its window was read, so that window\'s max may be low.',
          },
        },

        // Drains that fail keep the previous values published. One failure is noise. Failures
        // that keep coming back (within every 5 minutes, for 10 minutes) mean broken maps or a
        // permissions problem. If every drain fails, RunqlatNotDraining fires as well.
        {
          alert: 'RunqlatDrainErrors',
          expr: 'max by (instance) (increase(runqlat_drain_errors_total{%s}[5m])) > 0' % sel,
          'for': '10m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'latency-daemon on {{ $labels.instance }} keeps failing to drain',
            description: 'Drains of the kernel maps on {{ $labels.instance }} have kept failing for 10m. The log says why ("drain failed: …").',
          },
        },
      ]),
    }],
  },
}
