// Recording rules for a fleet of latency-daemon exporters (one per node), rendered into
// deploy/prometheus/rules.yml and the PrometheusRule of the prometheus-operator component by
// `cargo xtask mixin`. Tests: deploy/prometheus/rules_test.yml (promtool) and the daemon's tests
// against real Prometheus versions (latency-daemon/tests/dashboard.rs).
//
// Labels assumed: `instance` tells the nodes apart (one scrape per node). Every series is taken
// through _config.selector, and every rule aggregates to `instance` (and `reason` where stated),
// so other target labels are dropped.
//
// Native, classic, or both. One scrape gives Prometheus the native histogram, the classic
// buckets, or both, depending on its version and flags (deploy/prometheus/scrape.yml says which).
// Each rule prefers the native form and falls back to the classic one with `or`
// (lib/histogram.libsonnet); both sides aggregate to the same labels, so where both are stored
// the classic result is dropped and nothing is counted twice.
//
// Thresholds. The classic `le` bounds are powers of two (2^-20 … 2^6 s, the daemon's default
// classic_buckets) and every one is a kernel bucket boundary, and so also a boundary of the
// native histogram (schema 3, 8 buckets per octave). So "delays above 2^-7 s" computed as
// `_count - _bucket{le="0.0078125"}` or from histogram_fraction(0, 0.0078125, …) is exact and
// not an interpolation. The classic bound must be exported under exactly that label value, which
// is how the daemon prints 2^-7 and 2^-6. If a node's classic_buckets leave one out, its
// classic over-threshold series are missing.
local h = import '../lib/histogram.libsonnet';

{
  prometheusRules+:: {
    local sel = $._config.selector,
    local delay = 'runqlat_delay_seconds',
    // The labels a per-cgroup rule keeps.
    local perCgroup = 'instance, cgroup, namespace, pod, container',
    groups+: [{
      name: 'runqlat.rules',
      rules: [
        // --- Quantiles over 5 minutes ---------------------------------------------------------
        // Native: interpolated inside one of the kernel's buckets (9 % wide), within one bucket
        // of the truth. Classic: inside a power-of-two bucket, so up to a factor of 2 off, exact
        // where a quantile lands on a bound; one that falls in the +Inf bucket reports the
        // highest finite bound (64 s). With no delays in 5 minutes the result is NaN, and a NaN
        // never passes a `>` threshold.
        {
          record: 'instance:runqlat_delay_seconds:p99_rate5m',
          expr: h.quantile('0.99', delay, sel, 'instance', '5m'),
        },
        {
          record: 'instance:runqlat_delay_seconds:p999_rate5m',
          expr: h.quantile('0.999', delay, sel, 'instance', '5m'),
        },
        {
          record: 'instance_reason:runqlat_delay_seconds:p99_rate5m',
          expr: h.quantile('0.99', delay, sel, 'instance, reason', '5m'),
        },
        {
          record: 'instance_reason:runqlat_delay_seconds:p999_rate5m',
          expr: h.quantile('0.999', delay, sel, 'instance, reason', '5m'),
        },

        // --- Delays per second, and those above 2^-7 s (7.8125 ms) and 2^-6 s (15.625 ms) ------
        // Exact in both forms because the bound is a kernel boundary (see the top). A node
        // without delays records 0 above the bounds.
        {
          record: 'instance:runqlat_delays:rate5m',
          expr: h.count(delay, sel, 'instance', '5m'),
        },
        {
          record: 'instance:runqlat_delays_over_7_8ms:rate5m',
          expr: h.above('0.0078125', delay, sel, 'instance', '5m'),
        },
        {
          record: 'instance:runqlat_delays_over_15_6ms:rate5m',
          expr: h.above('0.015625', delay, sel, 'instance', '5m'),
        },
        // The fraction of all delays above the threshold. NaN on a node without delays.
        {
          record: 'instance:runqlat_delays_over_7_8ms:ratio_rate5m',
          expr: 'instance:runqlat_delays_over_7_8ms:rate5m / instance:runqlat_delays:rate5m',
        },
        {
          record: 'instance:runqlat_delays_over_15_6ms:ratio_rate5m',
          expr: 'instance:runqlat_delays_over_15_6ms:rate5m / instance:runqlat_delays:rate5m',
        },

        // --- The exact worst delay of the last completed window (15 s by default), either reason
        {
          record: 'instance:runqlat_delay_window_max_seconds:max',
          expr: 'max by (instance) (runqlat_delay_window_max_seconds{%s})' % sel,
        },

        // --- Per cgroup: how much of its wait was its own CPU limit, and its tail ------------------
        // For RunQueueDelayFromCPULimit (alerts/alerts.libsonnet). One series per cgroup a node
        // exports (its top N), with the names of the pod and container where it is one
        // (container_id goes: it only repeats the cgroup). cgroup="other" is left out: it is the
        // rest of a node's cgroups summed, so no one limit is its own.
        // The throttled share of the time waited: the six causes add up to the wait, so this is
        // the part the cgroup (or an ancestor) spent throttled by its CPU limit on that CPU. 0 on
        // kernels before 6.8, which do not say (runqlat_feature_info{feature="throttle_split"});
        // NaN for a cgroup that did not wait in 5 minutes.
        {
          record: 'instance_cgroup:runqlat_cgroup_wait_throttled:ratio_rate5m',
          expr: '%s\n/\n%s' % [
            'sum by (%s) (rate(runqlat_cgroup_wait_cause_seconds_total{%s, cause="throttled", cgroup!="other"}[5m]))' % [perCgroup, sel],
            'sum by (%s) (rate(runqlat_cgroup_wait_cause_seconds_total{%s, cgroup!="other"}[5m]))' % [perCgroup, sel],
          ],
        },
        // The per-cgroup histogram is classic only, its bounds every other octave (2^-20, 2^-18,
        // …, 2^6 s by default): the p99 is interpolated inside a bucket 4x wide, exact where it
        // lands on a bound.
        {
          record: 'instance_cgroup:runqlat_cgroup_delay_seconds:p99_rate5m',
          expr: 'histogram_quantile(0.99, sum by (%s, le) (rate(runqlat_cgroup_delay_seconds_bucket{%s, cgroup!="other"}[5m])))' % [perCgroup, sel],
        },
      ],
    }],
  },
}
