// PromQL over runqlat_delay_seconds in whichever form Prometheus stored it: the native histogram
// (protobuf with native histograms on), the classic `le` buckets with _count and _sum (text or
// OpenMetrics, or native histograms off), or both (2.45+ with scrape_classic_histograms, 3.x with
// always_scrape_classic_histograms). Each expression prefers the native form and falls back to
// the classic one with `or`. Both sides aggregate to the same labels, so where both forms exist
// `or` keeps the native result and drops the classic one: nothing is counted twice. Every
// function used exists in Prometheus 2.42 (histogram_quantile, histogram_count, histogram_sum and
// histogram_fraction on native histograms arrived in 2.40).
{
  // `rate(NAME{selector}[range])`; `selector` is the inside of `{…}`.
  local rate(name, selector, range) = 'rate(%s{%s}[%s])' % [name, selector, range],

  // The q-quantile per `by` (a comma-separated label list, may be empty).
  quantile(q, name, selector, by, range)::
    local le = if by == '' then 'le' else by + ', le';
    'histogram_quantile(%s, sum by (%s) (%s))\nor\nhistogram_quantile(%s, sum by (%s) (%s))' % [
      q,
      by,
      rate(name, selector, range),
      q,
      le,
      rate(name + '_bucket', selector, range),
    ],

  // Observations per second per `by`.
  count(name, selector, by, range)::
    'histogram_count(sum by (%s) (%s))\nor\nsum by (%s) (%s)' % [
      by,
      rate(name, selector, range),
      by,
      rate(name + '_count', selector, range),
    ],

  // Sum of the observed values per second per `by`.
  sum(name, selector, by, range)::
    'histogram_sum(sum by (%s) (%s))\nor\nsum by (%s) (%s)' % [
      by,
      rate(name, selector, range),
      by,
      rate(name + '_sum', selector, range),
    ],

  // Observations above `le` (a bucket bound, as the classic `le` label spells it) per second per
  // `by`. Native: count × (1 − fraction up to le); where there were no observations that is NaN,
  // so it is kept only where it is a number (`>= 0`; clamp_min keeps a rounding error below 0 from
  // dropping it) and 0 stands in where the count is 0.
  // Classic: count − bucket{le}.
  above(le, name, selector, by, range)::
    local h = 'sum by (%s) (%s)' % [by, rate(name, selector, range)];
    '(\n  clamp_min(histogram_count(%(h)s) * (1 - histogram_fraction(0, %(le)s, %(h)s)), 0) >= 0\n  or\n  histogram_count(%(h)s) == 0\n)\nor\n(\n  sum by (%(by)s) (%(count)s)\n  -\n  sum by (%(by)s) (%(bucket)s)\n)' % {
      h: h,
      le: le,
      by: by,
      count: rate(name + '_count', selector, range),
      bucket: rate(name + '_bucket', selector + ', le="%s"' % le, range),
    },

  // The fraction of observations above `le` per `by`; NaN where there were none.
  fractionAbove(le, name, selector, by, range)::
    local h = 'sum by (%s) (%s)' % [by, rate(name, selector, range)];
    '1 - histogram_fraction(0, %(le)s, %(h)s)\nor\n(sum by (%(by)s) (%(count)s) - sum by (%(by)s) (%(bucket)s)) / sum by (%(by)s) (%(count)s)' % {
      h: h,
      le: le,
      by: by,
      count: rate(name + '_count', selector, range),
      bucket: rate(name + '_bucket', selector + ', le="%s"' % le, range),
    },

  // Per-bucket rates for a heatmap: the native histogram summed over everything when there is
  // one, else the classic buckets summed by `le` (dropped wherever a native result exists).
  heatmap(name, selector, range)::
    local native = 'sum(%s)' % rate(name, selector, range);
    '%s\nor\n(sum by (le) (%s) unless on () %s)' % [native, rate(name + '_bucket', selector, range), native],
}
