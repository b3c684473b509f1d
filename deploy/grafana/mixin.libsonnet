// The runqlat monitoring mixin: Grafana dashboards for latency-daemon, in the shape of
// node-mixin. Its alerts and recording rules are deploy/prometheus/rules.yml (one source; the
// dashboard's alert panels list them by name). Build: `cargo xtask dashboard`.
(import 'config.libsonnet') +
(import 'dashboards/runqlat.libsonnet')
