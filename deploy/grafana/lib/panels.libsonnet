// Small builders for Grafana 10/11 dashboard JSON (schemaVersion 39): panels, targets, variables
// and a row layout. Only what the runqlat dashboards use; every panel gets a unit and a
// description (a test insists).
{
  // Every panel and variable reads the data source chosen in the `datasource` variable.
  datasource:: { type: 'prometheus', uid: '${datasource}' },

  // `exemplar`: also ask for the exemplars of the series the query reads (runqlat_delay_seconds
  // carries each window's worst wait, naming its task), drawn as points on the panel.
  target(expr, legend='', instant=false, format='time_series', exemplar=false):: {
    datasource: $.datasource,
    expr: expr,
    legendFormat: legend,
    range: !instant,
    instant: instant,
    format: format,
    editorMode: 'code',
    [if exemplar then 'exemplar']: true,
  },

  local withRefIds(targets) = [
    targets[i] { refId: std.char(std.codepoint('A') + i) }
    for i in std.range(0, std.length(targets) - 1)
  ],

  local base(type, title, description, targets) = {
    type: type,
    title: title,
    description: description,
    datasource: $.datasource,
    targets: withRefIds(targets),
  },

  // A time series panel. `thresholdLine`: a dashed red line at that value.
  timeseries(title, description, unit, targets, log=false, max=null, thresholdLine=null, stack=false)::
    base('timeseries', title, description, targets) {
      fieldConfig: {
        defaults: {
          unit: unit,
          min: 0,
          [if max != null then 'max']: max,
          custom: {
            drawStyle: 'line',
            lineWidth: 1,
            fillOpacity: if stack then 30 else 0,
            showPoints: 'never',
            spanNulls: false,
            stacking: { mode: if stack then 'normal' else 'none', group: 'A' },
            scaleDistribution: if log then { type: 'log', log: 2 } else { type: 'linear' },
            thresholdsStyle: { mode: if thresholdLine != null then 'dashed' else 'off' },
          },
          color: { mode: 'palette-classic' },
          thresholds: {
            mode: 'absolute',
            steps: [{ color: 'green', value: null }] +
                   (if thresholdLine != null then [{ color: 'red', value: thresholdLine }] else []),
          },
        },
        overrides: [],
      },
      options: {
        legend: { displayMode: 'table', placement: 'bottom', showLegend: true, calcs: ['mean', 'max', 'lastNotNull'] },
        tooltip: { mode: 'multi', sort: 'desc' },
      },
    },

  // A heatmap of pre-bucketed data (native histogram cells, or classic buckets by `le`).
  heatmap(title, description, targets, classic=false)::
    base('heatmap', title, description, targets) {
      fieldConfig: { defaults: { unit: 'short', custom: { scaleDistribution: { type: 'linear' } } }, overrides: [] },
      options: {
        calculate: false,
        cellGap: 0,
        color: { mode: 'scheme', scheme: 'YlOrRd', scale: 'exponential', exponent: 0.5, steps: 64, reverse: false },
        filterValues: { le: 1e-9 },
        rowsFrame: { layout: if classic then 'le' else 'auto' },
        yAxis: { axisPlacement: 'left', unit: 's', reverse: false },
        tooltip: { mode: 'single', yHistogram: true, showColorScale: true },
        legend: { show: true },
        showValue: 'never',
      },
    },

  // A table of instant queries, merged on their labels.
  table(title, description, unit, targets, hide=[])::
    base('table', title, description, [t { instant: true, range: false, format: 'table' } for t in targets]) {
      fieldConfig: { defaults: { unit: unit, custom: { align: 'auto' } }, overrides: [] },
      options: { showHeader: true, cellHeight: 'sm', footer: { show: false } },
      transformations: [
        { id: 'merge', options: {} },
        { id: 'organize', options: { excludeByName: { Time: true } + { [h]: true for h in hide } } },
      ],
    },

  // Big numbers, one per series.
  stat(title, description, unit, targets)::
    base('stat', title, description, targets) {
      fieldConfig: {
        defaults: {
          unit: unit,
          color: { mode: 'thresholds' },
          thresholds: { mode: 'absolute', steps: [{ color: 'green', value: null }] },
        },
        overrides: [],
      },
      options: {
        reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
        orientation: 'auto',
        textMode: 'value_and_name',
        colorMode: 'value',
        graphMode: 'area',
        justifyMode: 'auto',
      },
    },

  // Template variables.
  datasourceVariable:: {
    name: 'datasource',
    label: 'Data source',
    type: 'datasource',
    query: 'prometheus',
    regex: '',
    current: {},
    hide: 0,
    refresh: 1,
    includeAll: false,
    multi: false,
    options: [],
  },

  // A query variable of label values. `allValue`: the regex "All" stands for; '.*' also matches
  // series without the label, which is how a variable degrades when the label does not exist.
  labelVariable(name, label, query, allValue, description):: {
    name: name,
    label: label,
    description: description,
    type: 'query',
    datasource: $.datasource,
    query: query,
    definition: query,
    refresh: 2,
    regex: '',
    sort: 1,
    includeAll: true,
    allValue: allValue,
    multi: true,
    current: { selected: true, text: ['All'], value: ['$__all'] },
    options: [],
    hide: 0,
  },

  // Rows of panels, laid out left to right: [{ title, panels, height }]. A panel may carry a
  // hidden `width::` (of 24); the others share what is left. Ids are assigned in order.
  layout(rows)::
    local flat = std.foldl(
      function(acc, row)
        local width(p, otherwise) = if std.objectHasAll(p, 'width') then p.width else otherwise;
        local fixed = std.foldl(function(s, p) s + width(p, 0), row.panels, 0);
        local free = std.length([p for p in row.panels if !std.objectHasAll(p, 'width')]);
        local share = if free > 0 then std.floor((24 - fixed) / free) else 0;
        local widths = [width(p, share) for p in row.panels];
        local xs = std.foldl(function(a, w) a + [a[std.length(a) - 1] + w], widths, [0]);
        {
          y: acc.y + 1 + row.height,
          panels: acc.panels + [{ type: 'row', title: row.title, collapsed: false, panels: [], gridPos: { h: 1, w: 24, x: 0, y: acc.y } }] + [
            row.panels[i] { gridPos: { h: row.height, w: widths[i], x: xs[i], y: acc.y + 1 } }
            for i in std.range(0, std.length(row.panels) - 1)
          ],
        },
      rows,
      { y: 0, panels: [] }
    ).panels;
    [flat[i] { id: i + 1 } for i in std.range(0, std.length(flat) - 1)],
}
