// The runqlat monitoring mixin, in the shape of node-mixin: recording rules
// (prometheusRules), alerts (prometheusAlerts) and Grafana dashboards (grafanaDashboards) for
// latency-daemon, all selecting the daemon through _config.selector (config.libsonnet).
// `cargo xtask mixin` renders deploy/grafana/dashboards_out, deploy/prometheus/rules.yml and the
// prometheus-operator component's prometheusrule.yaml from it; a test fails when any is stale.
(import 'config.libsonnet') +
(import 'rules/rules.libsonnet') +
(import 'alerts/alerts.libsonnet') +
(import 'dashboards/runqlat.libsonnet')
