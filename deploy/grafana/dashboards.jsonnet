// Entry point: one JSON file per dashboard, written by
//   jsonnet -J deploy/grafana -m deploy/grafana/dashboards_out deploy/grafana/dashboards.jsonnet
// (`cargo xtask mixin`); the output is committed and a test keeps it from drifting.
local mixin = import 'mixin.libsonnet';

{
  [name]: mixin.grafanaDashboards[name]
  for name in std.objectFields(mixin.grafanaDashboards)
}
