// The run-queue latency dashboard: the delay distribution as a heatmap,
// quantiles per node and reason, the exact window max against the alert threshold, the share of
// delays above 2^-7 s, the waits still in progress (stalls while they last), why tasks waited
// (the wait split by cause, per node and for the pods selected), who waits (top cgroups and their
// pods), who took the CPU (the cgroups that held others back), per-CPU switches and idle, what the monitor lost, the daemon's own health, and active alerts.
local h = import '../lib/histogram.libsonnet';
local p = import '../lib/panels.libsonnet';

{
  grafanaDashboards+:: {
    'runqlat.json':
      local c = $._config;
      // Every alert of the mixin, for the alerts panel.
      local alertNames = [r.alert for g in $.prometheusAlerts.groups for r in g.rules];
      // The inside of `{…}` for the daemons selected, plus `extra` matchers.
      local inside(extra='') = '%s, instance=~"$instance"%s' % [c.selector, extra];
      // Series of the daemons selected.
      local on(extra='') = '{%s}' % inside(extra);
      // runqlat_delay_seconds is stored native, classic or both (lib/histogram.libsonnet):
      // every query of it prefers the native form and falls back to the classic buckets.
      local delay = 'runqlat_delay_seconds';
      local range = '$__rate_interval';
      local reason = ', reason=~"$reason"';
      local pods = ', namespace=~"$namespace", pod=~"$pod"';
      local quantiles = [['0.5', 'p50'], ['0.99', 'p99'], ['0.999', 'p99.9']];
      local rate(series) = 'rate(%s[$__rate_interval])' % series;
      // The causes of a wait, in the order they are split off it (docs/causes.md): one query
      // each, so the stack keeps this order whatever order Prometheus returns series in.
      local causes = ['throttled', 'irq_steal', 'same', 'other', 'kernel', 'idle'];
      // On kernels that keep no throttle clock the monitor can read, "unknown" stands in the
      // throttled series' place: one query draws whichever the node has.
      local causeMatch(cause) = if cause == 'throttled' then 'cause=~"throttled|unknown"' else 'cause="%s"' % cause;
      local causeLegend(cause) = if cause == 'throttled' then '{{cause}}' else cause;
      local causeBy(cause) = if cause == 'throttled' then 'instance, cause' else 'instance';
      local causeHelp = "throttled (its cgroup or an ancestor was throttled by its CPU limit, CFS bandwidth; from the kernel's per-group throttle clock on 6.8+, from the monitor's throttle hooks on older kernels), irq_steal (the CPU was in hard or soft IRQ or taken by the hypervisor, as far as the kernel accounts them), then the rest by who held the CPU when the wait ended: same (a task of its own cgroup), other (another cgroup's task), kernel (a kernel thread), idle (nobody: the wakeup's own latency). The six add up to the time waited. On kernels that keep no throttle clock the monitor can read (runqlat_feature_info{feature=\"throttle_unknown\"} on), unknown stands in throttled's place: the whole of each wait a CPU-limit throttle overlapped (cause unknown on this kernel), never charged to a holder that was not there. runqlat_feature_info says which splits this kernel gives.";

      local distribution = [
        p.heatmap(
          'Delay heatmap',
          "Run-queue delays per second in each bucket, summed over the nodes and reasons selected: the kernel's own buckets (schema 3: 8 per octave, exact) where Prometheus stores the native histogram, else the classic `le` buckets (one per octave by default, all on kernel bucket bounds). Native histograms need a Grafana that draws them in the heatmap panel. The points are exemplars: each window's worst wait per node and reason, with the task's tid, comm and pod (Prometheus keeps them with --enable-feature=exemplar-storage).",
          [p.target(h.heatmap(delay, inside(reason), range), legend='{{le}}', format='heatmap', exemplar=true)],
        ),
      ];

      local quantilePanels = [
        p.timeseries(
          'Delay quantiles per node and reason',
          "p50, p99 and p99.9 of run-queue delay over the rate interval. From the native histogram: interpolated inside the kernel's buckets (9 % wide), within one bucket of the truth. From the classic buckets (powers of two), where Prometheus stores only those: up to a factor of 2 off, exact where a quantile lands on a bound. The points are exemplars: each window's worst wait, naming its task (tid, comm, pod) when Prometheus stores them (--enable-feature=exemplar-storage).",
          's',
          [
            p.target(h.quantile(q[0], delay, inside(reason), 'instance, reason', range), legend=q[1] + ' {{instance}} {{reason}}', exemplar=true)
            for q in quantiles
          ],
          log=true,
        ),
      ];

      local worstPanels = [
        p.timeseries(
          'Window max against the alert threshold',
          "The exact largest delay of the last completed window (15 s by default), from the kernel, per node and reason; the dashed line is the threshold of the RunQueueDelayHigh alert. The window's p99 estimate beside it.",
          's',
          [
            p.target('max by (instance, reason) (runqlat_delay_window_max_seconds%s)' % on(reason), legend='max {{instance}} {{reason}}'),
            p.target('max by (instance, reason) (runqlat_delay_window_seconds%s)' % on(reason + ', q="0.99"'), legend='window p99 {{instance}} {{reason}}'),
          ],
          log=true,
          thresholdLine=c.windowMaxAlertSeconds,
        ),
        p.timeseries(
          'Share of delays above ' + c.overLabel,
          'The fraction of delays longer than %s. Native: 1 − histogram_fraction(0, %s, …); classic: (_count − _bucket{le="%s"}) / _count. Exact either way, because the bound is a kernel bucket bound.' % [c.overLabel, c.overLe, c.overLe],
          'percentunit',
          [p.target(h.fractionAbove(c.overLe, delay, inside(reason), 'instance, reason', range), legend='{{instance}} {{reason}}')],
          max=1,
        ),
      ];

      // Waits still in progress at each drain, from the daemon's scan of runnable tasks that have
      // not run yet: a stall shows here while it lasts, not only once it ends.
      local stallPanels = [
        p.timeseries(
          'Waits in progress (stalls)',
          "The oldest wait still in progress at the daemon's last drain, per node and reason: how long a task runnable since its wakeup or preemption has gone without a CPU so far (0, not drawn on the log axis, when none waits). A stall grows here while it lasts; its delay reaches the panels above only once the task runs. The dashed line is the threshold of the RunQueueStallInProgress alert. Empty where the daemon's wait scan is off or unavailable (runqlat_feature_info{feature=\"wait_scan\"}).",
          's',
          [p.target('max by (instance, reason) (runqlat_wait_in_progress_seconds%s)' % on(reason), legend='{{instance}} {{reason}}')],
          log=true,
          thresholdLine=c.stallAlertSeconds,
        ) { width:: 10 },
        p.table(
          'Cgroups: longest wait in progress',
          "Over the dashboard's time range, the longest wait in progress seen in each cgroup (and namespace and pod where the daemon sets them), the %d longest: the cgroups whose tasks stalled. The same cgroups as runqlat_cgroup_delay_seconds (the daemon's top N, the rest in cgroup=\"other\"). Each value is a sample at a drain, so a wait that ended between two scrapes may be missed here and show only in the delay panels." % c.topCgroups,
          's',
          [p.target('topk(%d, max by (instance, namespace, pod, cgroup) (max_over_time(runqlat_cgroup_wait_in_progress_seconds%s[$__range])))' % [c.topCgroups, on(pods)])],
        ) { width:: 8 },
        p.timeseries(
          'Tasks waiting now',
          'Tasks waiting for a CPU at the last drain, per node: over 0 s counts every waiting task, the other lines those waiting longer than each alert threshold the daemon has configured (over_seconds). A count at the moment of the scan, where "Tasks waiting, on average" below is the mean over the interval.',
          'short',
          [p.target('max by (instance, over_seconds) (runqlat_waiting_tasks%s)' % on(), legend='{{instance}} over {{over_seconds}} s')],
        ) { width:: 6 },
      ];

      local volumePanels = [
        p.timeseries(
          'Delays per second',
          'How many times per second a task waited for a CPU (every wakeup or preemption that ended in a switch), per node and reason.',
          'short',
          [p.target(h.count(delay, inside(reason), 'instance, reason', range), legend='{{instance}} {{reason}}')],
        ),
        p.timeseries(
          'Tasks waiting, on average',
          "Seconds of waiting per second: the average number of runnable tasks that were waiting for a CPU (Little's law over the delays), per node and reason.",
          'short',
          [p.target(h.sum(delay, inside(reason), 'instance, reason', range), legend='{{instance}} {{reason}}')],
          stack=true,
        ),
      ];

      local causePanels = [
        p.timeseries(
          'Why it waited: per node',
          'Seconds waited per second on each node, all CPUs, split by cause: ' + causeHelp + ' The stack is the whole of "Tasks waiting, on average" (both reasons).',
          'suffix: s/s',
          [
            p.target('sum by (%s) (%s)' % [causeBy(cause), rate('runqlat_wait_cause_seconds_total' + on(', ' + causeMatch(cause)))], legend='{{instance}} ' + causeLegend(cause))
            for cause in causes
          ],
          stack=true,
        ),
        p.timeseries(
          'Why it waited: cgroups selected',
          'Seconds waited per second by the tasks of the cgroups (pods) the namespace and pod variables select, split by cause: ' + causeHelp + ' Throttled on top means their own CPU limit delays them; other means a neighbour does ("Who took the CPU" names it).',
          'suffix: s/s',
          [
            p.target('sum by (%s) (%s)' % [causeBy(cause), rate('runqlat_cgroup_wait_cause_seconds_total' + on(pods + ', ' + causeMatch(cause)))], legend='{{instance}} ' + causeLegend(cause))
            for cause in causes
          ],
          stack=true,
        ),
        p.timeseries(
          "Waited, beside the kernel's CPU pressure (PSI)",
          "Per pod the namespace and pod variables select: seconds its tasks waited for a CPU per second (ours: the sum over its tasks, so two tasks waiting at once count twice), and the kernel's CPU pressure of the pod's cgroup as the kubelet's cAdvisor serves it (container_pressure_cpu_waiting_seconds_total, PSI \"some\": the time at least one of its tasks waited, averaged over the CPUs it ran on; Kubernetes 1.34+, or earlier with the KubeletPSI feature gate). Where only one task at a time waits, the two agree; ours is higher by as many tasks as wait together. No PSI line: this Prometheus does not scrape the kubelet's cAdvisor endpoint, or the node's kernel has no PSI. docs/causes.md compares the two.",
          'suffix: s/s',
          [
            p.target('sum by (namespace, pod) (%s)' % rate('runqlat_cgroup_delay_seconds_sum' + on(pods)), legend='{{namespace}}/{{pod}} waited (runqlat)'),
            p.target('sum by (namespace, pod) (rate(container_pressure_cpu_waiting_seconds_total{%s, container="", namespace=~"$namespace", pod=~"$pod"}[$__rate_interval]))' % c.cadvisorSelector, legend='{{namespace}}/{{pod}} CPU pressure, some (PSI)'),
          ],
        ),
      ];

      local whoPanels = [
        p.timeseries(
          'Top cgroups by time waited',
          'Tasks of each cgroup waiting on average (seconds waited per second), the %d cgroups that waited most. The cgroup is the v2 path of the task that waited; the daemon keeps the top N per window and sums the rest in cgroup="other". The namespace and pod variables filter on the labels the daemon sets on the cgroup of a container (from the config of its runtime on the node); "All" (.*) also matches cgroups of no container.' % c.topCgroups,
          'short',
          [p.target('topk(%d, sum by (instance, namespace, pod, cgroup) (%s))' % [c.topCgroups, rate('runqlat_cgroup_delay_seconds_sum' + on(pods))], legend='{{instance}} {{namespace}} {{pod}} {{cgroup}}')],
        ) { width:: 14 },
        p.table(
          'Cgroups: time waited and p99',
          "Over the dashboard's time range: seconds waited per second (A) and the p99 delay from the per-cgroup buckets (B, every other octave, so up to a factor of 4 off), per cgroup (and namespace and pod where the daemon sets them).",
          's',
          [
            p.target('topk(%d, sum by (instance, namespace, pod, cgroup) (rate(runqlat_cgroup_delay_seconds_sum%s[$__range])))' % [c.topCgroups, on(pods)]),
            p.target('histogram_quantile(0.99, sum by (instance, namespace, pod, cgroup, le) (rate(runqlat_cgroup_delay_seconds_bucket%s[$__range])))' % on(pods)),
          ],
        ) { width:: 10 },
      ];

      local culpritPanels = [
        p.timeseries(
          'Who took the CPU: cgroups that held others back',
          "Seconds per second that other cgroups' tasks waited for a CPU, charged to the cgroup whose task held the CPU until each wait ended (it was switched out for the waiting task): the %d cgroups (and pods) that held others back most, on every node selected, whatever the namespace and pod variables. The noisy neighbours." % c.topCgroups,
          'short',
          [p.target('topk(%d, sum by (instance, namespace, pod, cgroup) (%s))' % [c.topCgroups, rate('runqlat_cgroup_held_others_seconds_total' + on())], legend='{{instance}} {{namespace}} {{pod}} {{cgroup}}')],
        ),
      ];

      local cpuPanels = [
        p.timeseries(
          'Context switches per CPU',
          'Switches per second on each CPU by the kind of the task switched out: voluntary (it blocked) or involuntary (preempted, still runnable). Not an alert signal: a node can switch often with no one waiting.',
          'short',
          [p.target('sum by (instance, cpu, kind) (%s)' % rate('runqlat_context_switches_total' + on()), legend='{{instance}} cpu {{cpu}} {{kind}}')],
        ),
        p.timeseries(
          'Idle per CPU',
          'The share of time each CPU ran its idle task. Delays while a CPU sits idle point at placement (affinity, cgroup limits), not at a shortage.',
          'percentunit',
          [p.target('sum by (instance, cpu) (%s)' % rate('runqlat_cpu_idle_seconds_total' + on()), legend='{{instance}} cpu {{cpu}}')],
          max=1,
        ),
      ];

      local lossPanels = [
        p.timeseries(
          'Lost, discarded, untraced and unsplit',
          'Per second: entries the monitor could not keep (lost, by map: a full map, a tid beyond the stamp array, a late window max), delays not believed (discarded, by why), context switches the kernel made without a tracepoint (untraced: the delay around each is missing from every tracer), and waits not split by cause because the task moved to another CPU while it waited (unsplit: each is counted whole by who held the CPU). Should stay at 0 apart from untraced and unsplit.',
          'short',
          [
            p.target('sum by (instance, map) (%s)' % rate('runqlat_lost_total' + on()), legend='lost {{instance}} {{map}}'),
            p.target('sum by (instance, why) (%s)' % rate('runqlat_discarded_total' + on()), legend='discarded {{instance}} {{why}}'),
            p.target('sum by (instance) (%s)' % rate('runqlat_untraced_switches_total' + on()), legend='untraced {{instance}}'),
            p.target('sum by (instance) (%s)' % rate('runqlat_wait_unsplit_total' + on()), legend='unsplit {{instance}}'),
          ],
        ),
      ];

      local healthPanels = [
        p.timeseries(
          'Drain: duration p99 and CPU',
          'How long one read of the kernel maps takes (p99 of runqlat_drain_duration_seconds, waiting for a CPU included) and the CPU it uses (runqlat_drain_cpu_seconds_total, seconds per second).',
          's',
          [
            p.target('histogram_quantile(0.99, sum by (instance, le) (%s))' % rate('runqlat_drain_duration_seconds_bucket' + on()), legend='drain p99 {{instance}}'),
            p.target('sum by (instance) (%s)' % rate('runqlat_drain_cpu_seconds_total' + on()), legend='drain CPU {{instance}}'),
          ],
          log=true,
        ),
        p.timeseries(
          'Scrape: encode p99 and duration',
          'Time to encode /metrics (p99 of runqlat_scrape_encode_duration_seconds) and the whole scrape as Prometheus saw it (scrape_duration_seconds).',
          's',
          [
            p.target('histogram_quantile(0.99, sum by (instance, le) (%s))' % rate('runqlat_scrape_encode_duration_seconds_bucket' + on()), legend='encode p99 {{instance}}'),
            p.target('max by (instance) (scrape_duration_seconds%s)' % on(), legend='scrape {{instance}}'),
          ],
          log=true,
        ),
        p.timeseries(
          'Daemon CPU and memory',
          "The daemon's own CPU (share of one core) and resident memory.",
          'percentunit',
          [
            p.target('sum by (instance) (%s)' % rate('process_cpu_seconds_total' + on()), legend='CPU {{instance}}'),
            p.target('max by (instance) (process_resident_memory_bytes%s)' % on(), legend='RSS {{instance}}'),
          ],
        ) {
          fieldConfig+: {
            overrides: [{
              matcher: { id: 'byFrameRefID', options: 'B' },
              properties: [{ id: 'unit', value: 'bytes' }, { id: 'custom.axisPlacement', value: 'right' }],
            }],
          },
        },
        p.stat(
          'Since the last drain',
          'Seconds since the daemon last read the kernel maps (it drains every --interval, 1 s by default); RunqlatNotDraining fires above 30 s.',
          's',
          [p.target('time() - max by (instance) (runqlat_last_drain_timestamp_seconds%s)' % on(), legend='{{instance}}')],
        ),
      ];

      local servingPanels = [
        p.timeseries(
          'Up, drains and failures',
          "Whether each daemon's scrape succeeds (up), drains per second, and drains that failed per second (the previous values stay published).",
          'short',
          [
            p.target('max by (instance) (up%s)' % on(), legend='up {{instance}}'),
            p.target('sum by (instance) (%s)' % rate('runqlat_drains_total' + on()), legend='drains/s {{instance}}'),
            p.target('sum by (instance) (%s)' % rate('runqlat_drain_errors_total' + on()), legend='failed drains/s {{instance}}'),
          ],
        ),
        p.timeseries(
          'HTTP requests by outcome',
          "Requests per second to the daemon's HTTP server by outcome: ok, not_found, unauthorized (wrong or missing password), throttled, busy (connection limit), timeout, too_large, malformed, …",
          'reqps',
          [p.target('sum by (instance, outcome) (%s)' % rate('runqlat_http_requests_total' + on()), legend='{{instance}} {{outcome}}')],
        ),
        p.table(
          'Build',
          'Version, commit, kernel object, kernel and clock of each daemon (runqlat_build_info).',
          'none',
          [p.target('max by (instance, version, revision, bpf, kernel, clock) (runqlat_build_info%s)' % on())],
          hide=['Value'],
        ),
      ];

      local alertPanels = [
        p.table(
          'Prometheus alerts',
          "Pending and firing alerts of this mixin's rules for the selected nodes (and RunqlatAbsent, which has no instance).",
          'none',
          [p.target('max by (alertname, alertstate, instance, reason, map, namespace, pod, cgroup) (ALERTS{alertname=~"%s", instance=~"$instance|"})' % std.join('|', alertNames))],
          hide=['Value'],
        ),
        p.table(
          'Daemon alerts firing now',
          "Alerts the daemon's own rules ([alert] in its configuration) are firing, by reason and cgroup of the task that waited. Its notifications, the log and its live view (/) name the victim and who ran meanwhile.",
          'none',
          // `without (job)`: labels the daemon may add to alerts later (namespace, pod) stay visible.
          [p.target('max without (job) (runqlat_alert_active%s)' % on(reason + pods))],
          hide=['Value'],
        ),
        p.timeseries(
          'Daemon alerts fired and suppressed',
          "Alerts fired per second by the daemon's own rules, per reason, and breaches that fell in a cooldown (suppressed).",
          'short',
          [
            p.target('sum by (instance, reason) (%s)' % rate('runqlat_alerts_total' + on(reason)), legend='fired {{instance}} {{reason}}'),
            p.target('sum by (instance) (%s)' % rate('runqlat_alerts_suppressed_total' + on()), legend='suppressed {{instance}}'),
          ],
        ),
      ];

      {
        uid: c.dashboardUid,
        title: c.dashboardTitle,
        description: "Run-queue latency (wakeup or preemption to running) measured in the kernel by latency-daemon: distribution, tails, exact worst case, who waits, and the monitor's own health.",
        tags: c.dashboardTags,
        editable: true,
        graphTooltip: 1,
        schemaVersion: 39,
        version: 1,
        refresh: c.refresh,
        time: { from: c.timeFrom, to: 'now' },
        timepicker: {},
        timezone: '',
        fiscalYearStartMonth: 0,
        liveNow: false,
        weekStart: '',
        links: [],
        annotations: {
          list: [{
            builtIn: 1,
            datasource: { type: 'grafana', uid: '-- Grafana --' },
            enable: true,
            hide: true,
            iconColor: 'rgba(0, 211, 255, 1)',
            name: 'Annotations & Alerts',
            type: 'dashboard',
          }],
        },
        templating: {
          list: [
            p.datasourceVariable,
            p.labelVariable(
              'instance',
              'Node',
              'label_values(runqlat_build_info{%s}, instance)' % c.selector,
              '.+',
              'The daemons (one per node) to show.',
            ),
            p.labelVariable(
              'reason',
              'Reason',
              'label_values(runqlat_delay_window_max_seconds{%s}, reason)' % inside(),
              '.+',
              'wakeup: the task was woken; preempt: it was preempted while runnable.',
            ),
            p.labelVariable(
              'namespace',
              'Namespace',
              'label_values(runqlat_cgroup_wait_cause_seconds_total{%s}, namespace)' % inside(),
              '.*',
              'Kubernetes namespace of the cgroup that waited, where the daemon labels cgroups with it; empty otherwise, and "All" (.*) then matches series without the label.',
            ),
            p.labelVariable(
              'pod',
              'Pod',
              'label_values(runqlat_cgroup_wait_cause_seconds_total{%s}, pod)' % inside(', namespace=~"$namespace"'),
              '.*',
              'Kubernetes pod of the cgroup that waited, where the daemon labels cgroups with it; empty otherwise, and "All" (.*) then matches series without the label.',
            ),
          ],
        },
        panels: p.layout([
          { title: 'Delay distribution', height: 9, panels: distribution },
          { title: 'Tails and the worst case', height: 8, panels: quantilePanels },
          { title: 'Thresholds', height: 8, panels: worstPanels },
          { title: 'Waits in progress (stalls)', height: 8, panels: stallPanels },
          { title: 'How much waiting', height: 7, panels: volumePanels },
          { title: 'Why it waited', height: 8, panels: causePanels },
          { title: 'Who waits', height: 9, panels: whoPanels },
          { title: 'Who took the CPU', height: 8, panels: culpritPanels },
          { title: 'CPUs', height: 7, panels: cpuPanels },
          { title: 'What the monitor could not see', height: 6, panels: lossPanels },
          { title: 'The daemon itself', height: 7, panels: healthPanels },
          { title: 'Serving', height: 7, panels: servingPanels },
          { title: 'Alerts', height: 7, panels: alertPanels },
        ]),
      },
  },
}
