// Settings of the runqlat mixin. Override any of them when importing it:
//   (import 'mixin.libsonnet') + { _config+:: { runqlatSelector: 'job="latency"' } }
{
  _config+:: {
    // The two jobs of deploy/prometheus/scrape.yml: `runqlat` negotiates protobuf (native
    // histograms with --enable-feature=native-histograms), `runqlat_classic` asks for text
    // (?format=text) and so stores the classic `le` buckets. Every query picks exactly one job, so
    // nothing is counted twice when both scrape the same daemon.
    runqlatSelector: 'job="runqlat"',
    classicSelector: 'job="runqlat_classic"',

    // RunQueueDelayHigh in deploy/prometheus/rules.yml fires on the window max above this (a test
    // keeps the two equal).
    windowMaxAlertSeconds: 0.010,
    // "Delays above" threshold: 2^-7 s = 7.8125 ms, a kernel bucket bound and a classic `le` the
    // daemon exports by default, so the bucket difference is exact, not an interpolation.
    overSeconds: 0.0078125,
    overLe: '0.0078125',
    overLabel: '2⁻⁷ s (7.8 ms)',

    // Every alert of deploy/prometheus/rules.yml (a test keeps the lists equal).
    alertNames: [
      'RunQueueDelayHigh',
      'RunQueueDelayP99High',
      'RunqlatDown',
      'RunqlatAbsent',
      'RunqlatNotDraining',
      'RunqlatLosingData',
      'RunqlatDrainErrors',
    ],

    dashboardUid: 'runqlat-overview',
    dashboardTitle: 'Run-queue latency',
    dashboardTags: ['runqlat', 'scheduler', 'latency'],
    refresh: '30s',
    timeFrom: 'now-1h',
    // Top cgroups shown.
    topCgroups: 10,
  },
}
