import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import type { ModelConfig } from '../config/model-config.js';
import type { ScheduledRequest } from '../scheduling/scheduler.js';
import { createLogger } from './logger.js';
import {
  BATCH_SIZE_HISTOGRAM,
  COMPUTE_HISTOGRAM,
  DEFAULT_LATENCY_BUCKETS_US,
  FIRST_RESPONSE_HISTOGRAM,
  HistogramSeries,
  QUEUE_HISTOGRAM,
  REQUEST_HISTOGRAM,
  ServerMetrics,
  normalizeBuckets,
  type MeteredVersion,
  type MetricsOptions,
} from './metrics.js';
import { ModelStatistics } from './model-statistics.js';

type MetricsConfig = Pick<ModelConfig, 'name' | 'max_batch_size' | 'metric_tags' | 'model_metrics'>;

/** A loaded version as the metrics see it, with statistics to feed by hand. */
class FakeVersion implements MeteredVersion {
  readonly name: string;
  readonly version: number;
  readonly config: MetricsConfig;
  readonly stats: ModelStatistics;
  readonly scheduler = { queuedCount: 0 };
  readonly loadDurationSecs = 0.25;
  histograms: MeteredVersion['histograms'];

  constructor(name: string, version: number, config: Partial<MetricsConfig> = {}) {
    this.name = name;
    this.version = version;
    this.config = { name, max_batch_size: 0, metric_tags: {}, ...config };
    this.stats = new ModelStatistics(name, version);
  }

  /** Records one request of `batchSize` through the statistics (as an instance runner does). */
  complete(opts: { requestNs: bigint; queueNs: bigint; computeNs: bigint; batchSize?: number; failure?: 'REJECTED' | 'CANCELED' | 'BACKEND' | 'OTHER' }): void {
    const start = 1_000_000n;
    const computeStart = start + opts.queueNs;
    const third = opts.computeNs / 3n;
    const request = {
      batchSize: opts.batchSize ?? 1,
      responses: [],
      completedAt: start + opts.requestNs,
      times: {
        request: start,
        queue: start,
        computeStart,
        computeInputEnd: computeStart + third,
        computeOutputStart: computeStart + 2n * third,
        computeEnd: computeStart + opts.computeNs,
      },
    } as unknown as ScheduledRequest;
    if (opts.failure === undefined) this.stats.onExecution([request], Math.max(1, request.batchSize));
    this.stats.onRequestComplete(request, opts.failure);
  }
}

/** `name{labels} value` lines of one family (samples only). */
function samples(text: string, family: string): string[] {
  return text.split('\n').filter((l) => l.startsWith(`${family}{`) || l.startsWith(`${family} `));
}

function value(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  assert.ok(line !== undefined, `no series ${series} in\n${text}`);
  return Number(line.slice(series.length + 1));
}

function metricsOf(versions: FakeVersion[], options: MetricsOptions = {}, logger = createLogger({ info: false, warning: false })): ServerMetrics {
  const metrics = new ServerMetrics(() => versions, { cpu: false, ...options }, logger);
  for (const v of versions) v.histograms = metrics.histogramsFor(v.config, v.stats);
  return metrics;
}

describe('HistogramSeries', () => {
  it('sorts bounds, drops duplicates and non-finite ones (+Inf is implicit)', () => {
    assert.deepEqual(normalizeBuckets([0.1, 1e-3, 0.5, 2.5, 10, 100, 0.5, Infinity, NaN]), [0.001, 0.1, 0.5, 2.5, 10, 100]);
    assert.deepEqual(new HistogramSeries([5, 1]).bounds, [1, 5]);
  });

  it('counts a value equal to a bound in that bucket (le is inclusive); cumulative counts end with the total', () => {
    const h = new HistogramSeries([1, 5, 10]);
    for (const v of [0, 1, 1.5, 5, 10, 11, 1000]) h.observe(v);
    assert.deepEqual(h.cumulative(), [2, 4, 5, 7]);
    assert.equal(h.count, 7);
    assert.equal(h.sum, 0 + 1 + 1.5 + 5 + 10 + 11 + 1000);
  });
});

describe('ServerMetrics: per-model counters and gauges read from the statistics', () => {
  it('writes counters under the bare family name, TYPE counter, no _total (protocol.md §5.1)', async () => {
    const v = new FakeVersion('simple', 1);
    const text = await metricsOf([v]).text();
    assert.match(text, /^# TYPE nv_inference_request_success counter$/m);
    assert.deepEqual(samples(text, 'nv_inference_request_success'), ['nv_inference_request_success{model="simple",version="1"} 0']);
    // Triton's families only: Nereid's own counters follow Prometheus's naming (`…_total`).
    assert.doesNotMatch(text, /^(# TYPE )?nv_\w*_total/m);
  });

  it('counts preemptions per version and kind in nereid_inference_preemptions_total, both kinds from the start', async () => {
    const v = new FakeVersion('m', 2);
    const before = await metricsOf([v]).text();
    assert.match(before, /^# TYPE nereid_inference_preemptions_total counter$/m);
    assert.deepEqual(samples(before, 'nereid_inference_preemptions_total'), [
      'nereid_inference_preemptions_total{kind="queued",model="m",version="2"} 0',
      'nereid_inference_preemptions_total{kind="running",model="m",version="2"} 0',
    ]);
    const request = {} as ScheduledRequest;
    v.stats.onPreempted(request, 'queued');
    v.stats.onPreempted(request, 'queued');
    v.stats.onPreempted(request, 'running');
    const text = await metricsOf([v]).text();
    assert.equal(value(text, 'nereid_inference_preemptions_total{kind="queued",model="m",version="2"}'), 2);
    assert.equal(value(text, 'nereid_inference_preemptions_total{kind="running",model="m",version="2"}'), 1);
  });

  it('creates every series with zeros, all four failure reasons included (§5.2)', async () => {
    const text = await metricsOf([new FakeVersion('m', 3)]).text();
    assert.deepEqual(samples(text, 'nv_inference_request_failure').sort(), [
      'nv_inference_request_failure{model="m",reason="BACKEND",version="3"} 0',
      'nv_inference_request_failure{model="m",reason="CANCELED",version="3"} 0',
      'nv_inference_request_failure{model="m",reason="OTHER",version="3"} 0',
      'nv_inference_request_failure{model="m",reason="REJECTED",version="3"} 0',
    ]);
    for (const family of [
      'nv_inference_request_success',
      'nv_inference_count',
      'nv_inference_exec_count',
      'nv_inference_pending_request_count',
      'nv_inference_request_duration_us',
      'nv_inference_queue_duration_us',
      'nv_inference_compute_input_duration_us',
      'nv_inference_compute_infer_duration_us',
      'nv_inference_compute_output_duration_us',
    ]) {
      assert.equal(value(text, `${family}{model="m",version="3"}`), 0, family);
    }
    assert.equal(value(text, 'nv_model_load_duration_secs{model="m",version="3"}'), 0.25);
    assert.match(text, /^# TYPE nv_inference_pending_request_count gauge$/m);
    assert.match(text, /^# TYPE nv_model_load_duration_secs gauge$/m);
  });

  it('reads counts, failures by reason, the queue gauge and µs durations at scrape time', async () => {
    const v = new FakeVersion('m', 1);
    const metrics = metricsOf([v]);
    v.complete({ requestNs: 10_500n, queueNs: 2_000n, computeNs: 6_000n, batchSize: 4 });
    v.complete({ requestNs: 1_000n, queueNs: 100n, computeNs: 300n });
    v.complete({ requestNs: 700n, queueNs: 0n, computeNs: 0n, failure: 'BACKEND' });
    v.complete({ requestNs: 700n, queueNs: 0n, computeNs: 0n, failure: 'REJECTED' });
    v.complete({ requestNs: 700n, queueNs: 0n, computeNs: 0n, failure: 'REJECTED' });
    v.scheduler.queuedCount = 7;
    const text = await metrics.text();
    const l = '{model="m",version="1"}';
    assert.equal(value(text, `nv_inference_request_success${l}`), 2);
    assert.equal(value(text, `nv_inference_count${l}`), 5);
    assert.equal(value(text, `nv_inference_exec_count${l}`), 2);
    assert.equal(value(text, `nv_inference_pending_request_count${l}`), 7);
    assert.equal(value(text, 'nv_inference_request_failure{model="m",reason="BACKEND",version="1"}'), 1);
    assert.equal(value(text, 'nv_inference_request_failure{model="m",reason="REJECTED",version="1"}'), 2);
    assert.equal(value(text, 'nv_inference_request_failure{model="m",reason="CANCELED",version="1"}'), 0);
    // Sub-microsecond parts are kept: 10 500 + 1 000 ns of successful requests = 11.5 µs.
    assert.equal(value(text, `nv_inference_request_duration_us${l}`), 11.5);
    assert.equal(value(text, `nv_inference_queue_duration_us${l}`), 2.1);
    const compute =
      value(text, `nv_inference_compute_input_duration_us${l}`) +
      value(text, `nv_inference_compute_infer_duration_us${l}`) +
      value(text, `nv_inference_compute_output_duration_us${l}`);
    assert.equal(Math.round(compute * 1000), 6_300);
  });

  it('labels metric_tags as _<key> (invalid characters as _), every label in name order', async () => {
    const v = new FakeVersion('m', 2, { metric_tags: { team: 'search', 'cost-center': 'a"b' } });
    const text = await metricsOf([v]).text();
    assert.deepEqual(samples(text, 'nv_inference_count'), ['nv_inference_count{_cost_center="a\\"b",_team="search",model="m",version="2"} 0']);
    assert.ok(
      samples(text, 'nv_inference_request_failure').includes(
        'nv_inference_request_failure{_cost_center="a\\"b",_team="search",model="m",reason="OTHER",version="2"} 0',
      ),
    );
  });

  it('has series exactly for the versions listed at scrape time', async () => {
    const a = new FakeVersion('a', 1);
    const b = new FakeVersion('b', 1);
    const versions = [a, b];
    const metrics = new ServerMetrics(() => versions, { cpu: false });
    assert.equal(samples(await metrics.text(), 'nv_inference_count').length, 2);
    versions.pop();
    const text = await metrics.text();
    assert.deepEqual(samples(text, 'nv_inference_count'), ['nv_inference_count{model="a",version="1"} 0']);
    assert.doesNotMatch(text, /model="b"/);
    versions.pop();
    assert.doesNotMatch(await metrics.text(), /model=/);
  });

  it('counter_latencies=false leaves the five µs counters out', async () => {
    const text = await metricsOf([new FakeVersion('m', 1)], { counterLatencies: false }).text();
    assert.doesNotMatch(text, /_duration_us/);
    assert.match(text, /^nv_inference_request_success\{/m);
  });
});

describe('ServerMetrics: histograms', () => {
  it('are off by default: no family, no statistics listener', async () => {
    const v = new FakeVersion('m', 1);
    const metrics = metricsOf([v]);
    assert.equal(v.histograms, undefined);
    assert.doesNotMatch(await metrics.text(), /histogram/);
  });

  it('histogram_latencies enables request, queue, compute and first-response histograms with their default buckets', async () => {
    const v = new FakeVersion('m', 1);
    const metrics = metricsOf([v], { histogramLatencies: true });
    const series = v.histograms!.series;
    assert.deepEqual([...series.keys()].sort(), [COMPUTE_HISTOGRAM, FIRST_RESPONSE_HISTOGRAM, QUEUE_HISTOGRAM, REQUEST_HISTOGRAM].sort());
    assert.deepEqual(series.get(REQUEST_HISTOGRAM)!.bounds, DEFAULT_LATENCY_BUCKETS_US);
    assert.deepEqual(series.get(FIRST_RESPONSE_HISTOGRAM)!.bounds, [100, 500, 2000, 5000]);
    v.complete({ requestNs: 300_000n, queueNs: 50_000n, computeNs: 200_000n });
    v.complete({ requestNs: 700_000_000n, queueNs: 40_000_000n, computeNs: 600_000_000n });
    const text = await metrics.text();
    assert.match(text, /^# TYPE nv_inference_request_histogram_us histogram$/m);
    assert.equal(value(text, 'nv_inference_request_histogram_us_bucket{model="m",version="1",le="250"}'), 0);
    assert.equal(value(text, 'nv_inference_request_histogram_us_bucket{model="m",version="1",le="500"}'), 1);
    assert.equal(value(text, 'nv_inference_request_histogram_us_bucket{model="m",version="1",le="+Inf"}'), 2);
    assert.equal(value(text, 'nv_inference_request_histogram_us_count{model="m",version="1"}'), 2);
    assert.equal(value(text, 'nv_inference_request_histogram_us_sum{model="m",version="1"}'), 700_300);
    assert.equal(value(text, 'nv_inference_queue_histogram_us_bucket{model="m",version="1",le="25000"}'), 1);
    assert.equal(value(text, 'nv_inference_compute_histogram_us_bucket{model="m",version="1",le="250"}'), 1);
    // 0.3 ms and 700 ms.
    assert.equal(value(text, 'nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="100"}'), 1);
    assert.equal(value(text, 'nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="2000"}'), 2);
    assert.doesNotMatch(text, new RegExp(BATCH_SIZE_HISTOGRAM));
  });

  it('histogram_batch_size observes every execution; default buckets are powers of two up to max_batch_size', async () => {
    const v = new FakeVersion('m', 1, { max_batch_size: 12 });
    const metrics = metricsOf([v], { histogramBatchSize: true });
    assert.deepEqual([...v.histograms!.series.keys()], [BATCH_SIZE_HISTOGRAM]);
    assert.deepEqual(v.histograms!.series.get(BATCH_SIZE_HISTOGRAM)!.bounds, [1, 2, 4, 8]);
    v.complete({ requestNs: 10n, queueNs: 1n, computeNs: 3n, batchSize: 3 });
    v.complete({ requestNs: 10n, queueNs: 1n, computeNs: 3n, batchSize: 12 });
    const text = await metrics.text();
    assert.equal(value(text, 'nv_inference_batch_size_histogram_bucket{model="m",version="1",le="2"}'), 0);
    assert.equal(value(text, 'nv_inference_batch_size_histogram_bucket{model="m",version="1",le="4"}'), 1);
    assert.equal(value(text, 'nv_inference_batch_size_histogram_bucket{model="m",version="1",le="8"}'), 1);
    assert.equal(value(text, 'nv_inference_batch_size_histogram_bucket{model="m",version="1",le="+Inf"}'), 2);
    assert.equal(value(text, 'nv_inference_batch_size_histogram_sum{model="m",version="1"}'), 15);
    assert.doesNotMatch(text, /_us_bucket/);
  });

  it('buckets: the model_metrics control wins over the server-wide setting, which wins over the default', () => {
    const versions = [
      new FakeVersion('own', 1, {
        model_metrics: {
          metric_control: [
            { metric_identifier: { family: QUEUE_HISTOGRAM }, histogram_options: { buckets: [30, 10, 20] } },
            { metric_identifier: { family: FIRST_RESPONSE_HISTOGRAM }, histogram_options: { buckets: [1, 2] } },
          ],
        },
      }),
      new FakeVersion('plain', 1),
    ];
    metricsOf(versions, { histogramLatencies: true, buckets: { [QUEUE_HISTOGRAM]: [1000, 2000], [REQUEST_HISTOGRAM]: [5] } });
    const [own, plain] = versions.map((v) => v.histograms!.series);
    assert.deepEqual(own!.get(QUEUE_HISTOGRAM)!.bounds, [10, 20, 30]);
    assert.deepEqual(own!.get(FIRST_RESPONSE_HISTOGRAM)!.bounds, [1, 2]);
    assert.deepEqual(own!.get(REQUEST_HISTOGRAM)!.bounds, [5]);
    assert.deepEqual(own!.get(COMPUTE_HISTOGRAM)!.bounds, DEFAULT_LATENCY_BUCKETS_US);
    assert.deepEqual(plain!.get(QUEUE_HISTOGRAM)!.bounds, [1000, 2000]);
    assert.deepEqual(plain!.get(FIRST_RESPONSE_HISTOGRAM)!.bounds, [100, 500, 2000, 5000]);
  });

  it('warns about a model_metrics family it does not have, and rejects a server-wide one', () => {
    const warnings: string[] = [];
    const logger = createLogger({ info: false });
    const captured = { ...logger, warning: (m: string) => void warnings.push(m) };
    const v = new FakeVersion('m', 1, {
      model_metrics: { metric_control: [{ metric_identifier: { family: 'nv_no_such_histogram' }, histogram_options: { buckets: [1] } }] },
    });
    metricsOf([v], { histogramLatencies: true }, captured);
    assert.equal(warnings.length, 1);
    assert.match(warnings[0]!, /model 'm': model_metrics names 'nv_no_such_histogram', which is not a histogram family/);
    assert.throws(
      () => new ServerMetrics(() => [], { buckets: { nv_inference_count: [1] } }),
      (err: unknown) => err instanceof NereidError && /'nv_inference_count' is not a histogram family/.test(err.message),
    );
  });
});

describe('ServerMetrics: CPU families', () => {
  it('samples utilization in [0, 1] and memory while started; cpu=false leaves them out', async () => {
    const metrics = new ServerMetrics(() => [], { intervalMs: 20 });
    try {
      metrics.start();
      await new Promise((r) => setTimeout(r, 120));
      const text = await metrics.text();
      const total = value(text, 'nv_cpu_memory_total_bytes');
      const used = value(text, 'nv_cpu_memory_used_bytes');
      const utilization = value(text, 'nv_cpu_utilization');
      assert.ok(total > 0 && used > 0 && used <= total, `${used} of ${total}`);
      assert.ok(utilization >= 0 && utilization <= 1, String(utilization));
      assert.match(text, /^# TYPE nv_cpu_utilization gauge$/m);
    } finally {
      metrics.stop();
    }
    assert.doesNotMatch(await new ServerMetrics(() => [], { cpu: false }).text(), /nv_cpu_/);
  });
});

describe('load and unload phase families', () => {
  const phases = { read: 0.001, parse: 0.002, auto_complete: 0.003, backend_init: 0.25, warmup: 0.5 };

  it('nv_model_load_phase_duration_secs: one gauge per loaded version and phase, with its tags', async () => {
    const v = Object.assign(new FakeVersion('m', 2, { metric_tags: { team: 'x' } }), { loadPhases: phases });
    const untimed = new FakeVersion('plain', 1);
    const metrics = new ServerMetrics(() => [v, untimed], { cpu: false });
    const text = await metrics.text();
    assert.match(text, /^# TYPE nv_model_load_phase_duration_secs gauge$/m);
    for (const [phase, secs] of Object.entries(phases)) {
      assert.match(text, new RegExp(`^nv_model_load_phase_duration_secs\\{_team="x",model="m",phase="${phase}",version="2"\\} ${secs}$`, 'm'));
    }
    // A version that reports no phases has no series.
    assert.doesNotMatch(text, /nv_model_load_phase_duration_secs\{.*model="plain"/);
  });

  it('nv_model_unload_phase_duration_secs: the last unload of each version, until stop()', async () => {
    const metrics = new ServerMetrics(() => [], { cpu: false });
    const record = (version: number, drain: number) =>
      metrics.recordUnload({ name: 'm', version, phases: { drain, release: 0.125 }, totalSecs: drain + 0.125, at: process.hrtime.bigint() });
    record(1, 1.5);
    record(2, 0.5);
    record(1, 0.25);
    const text = await metrics.text();
    assert.match(text, /^nv_model_unload_phase_duration_secs\{model="m",phase="drain",version="1"\} 0\.25$/m);
    assert.match(text, /^nv_model_unload_phase_duration_secs\{model="m",phase="release",version="1"\} 0\.125$/m);
    assert.match(text, /^nv_model_unload_phase_duration_secs\{model="m",phase="drain",version="2"\} 0\.5$/m);
    assert.deepEqual(metrics.unloads().map((u) => [u.version, u.phases.drain]), [[2, 0.5], [1, 0.25]]);
    metrics.stop();
    assert.deepEqual(metrics.unloads(), []);
    assert.doesNotMatch(await metrics.text(), /model="m"/);
  });
});
