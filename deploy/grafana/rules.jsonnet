// Entry point: the recording rules and alerts as one rules file's JSON (`groups`), which
// `cargo xtask mixin` writes as deploy/prometheus/rules.yml and as the spec of the
// prometheus-operator component's PrometheusRule.
local mixin = import 'mixin.libsonnet';

{ groups: mixin.prometheusRules.groups + mixin.prometheusAlerts.groups }
