/**
 * Prometheus metrics end to end (protocol.md §5): a server with the metrics frontend on an
 * ephemeral port, real inferences (ONNX `simple`, over HTTP) and deterministic failures and queues
 * (the gate backend, through the facade); exact sample values, series created with zeros at load
 * and removed at unload, `metric_tags` labels, histograms, and the text checked by promtool.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { simpleModel } from '@nereid/testkit';
import { httpRequest, inferJson, jsonBody, makeRepository, removeDir, simpleCase, startServer, type RunningServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import {
  GateBackend,
  gateConfig,
  gateRequest,
  promtoolCheck,
  sample,
  samples,
  scrape,
  seriesOf,
  startMetrics,
  type RunningMetrics,
} from './exposition.js';

const SIMPLE_EXTRA = `
metric_tags { key: "team" value: "search" }
metric_tags { key: "tier" value: "gold" }
model_metrics {
  metric_control [
    {
      metric_identifier { family: "nv_inference_request_histogram_us" }
      histogram_options { buckets: [ 50, 5, 500000 ] }
    }
  ]
}
`;

/** Labels of a version's series, written as the server writes them (names in order). */
function labels(model: string, version: number, extra: Record<string, string> = {}): string {
  const tags: Record<string, string> = model === 'simple' ? { _team: 'search', _tier: 'gold' } : {};
  const all: Record<string, string> = { ...tags, model, version: String(version), ...extra };
  return `{${Object.keys(all)
    .sort()
    .map((k) => `${k}="${all[k]}"`)
    .join(',')}}`;
}

const VERSIONS: [string, number][] = [
  ['gated', 1],
  ['multi', 1],
  ['multi', 2],
  ['queued', 1],
  ['simple', 1],
];
const REASONS = ['BACKEND', 'CANCELED', 'OTHER', 'REJECTED'];
const COUNTERS = [
  'nv_inference_request_success',
  'nv_inference_count',
  'nv_inference_exec_count',
  'nv_inference_request_duration_us',
  'nv_inference_queue_duration_us',
  'nv_inference_compute_input_duration_us',
  'nv_inference_compute_infer_duration_us',
  'nv_inference_compute_output_duration_us',
];
const HISTOGRAMS = [
  'nv_inference_request_histogram_us',
  'nv_inference_queue_histogram_us',
  'nv_inference_compute_histogram_us',
  'nv_inference_first_response_histogram_ms',
  'nv_inference_batch_size_histogram',
];

/** Checks one histogram series: buckets non-decreasing, `+Inf` = `_count`; returns `_count`. */
function checkHistogram(text: string, family: string, model: string, version: number): number {
  const all = samples(text);
  const prefix = `${family}_bucket${labels(model, version).slice(0, -1)},le="`;
  const buckets = [...all].filter(([k]) => k.startsWith(prefix));
  assert.ok(buckets.length >= 2, `no buckets for ${prefix}`);
  assert.equal(buckets.at(-1)![0], `${prefix}+Inf"}`);
  for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i]![1] >= buckets[i - 1]![1], `${buckets[i]![0]} decreases`);
  const count = sample(all, `${family}_count${labels(model, version)}`);
  assert.equal(buckets.at(-1)![1], count);
  return count;
}

let repo: string;
let srv: RunningServer;
let metrics: RunningMetrics;
const gate = new GateBackend();

before(async () => {
  const multi = simpleModel({ name: 'multi' });
  repo = await makeRepository({
    simple: modelFiles(simpleModel(), { config: simpleModel().config + SIMPLE_EXTRA }),
    multi: modelFiles(multi, { config: multi.config + 'version_policy: { all: { } }\n', extra: { '2/model.onnx': multi.onnx.bytes } }),
    gated: { 'config.pbtxt': gateConfig('gated'), '1/.keep': '' },
    queued: {
      'config.pbtxt': gateConfig('queued', {
        maxBatchSize: 4,
        extra: 'dynamic_batching { default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 50000 } }',
      }),
      '1/.keep': '',
    },
  });
  srv = await startServer({
    modelRepositories: [repo],
    backends: [gate.backend],
    metrics: { histogramLatencies: true, histogramBatchSize: true, intervalMs: 50 },
  });
  metrics = await startMetrics(srv.server);
});

after(async () => {
  gate.open();
  await metrics?.close();
  await srv?.stop();
  if (repo) await removeDir(repo);
});

describe('metrics of loaded models', () => {
  it('has every series of every loaded version with zeros right after load, all four failure reasons', async () => {
    const text = await scrape(metrics.url);
    for (const [model, version] of VERSIONS) {
      for (const family of [...COUNTERS, 'nv_inference_pending_request_count']) {
        assert.equal(sample(text, `${family}${labels(model, version)}`), 0, `${family} ${model}/${version}`);
      }
      for (const reason of REASONS) {
        assert.equal(sample(text, `nv_inference_request_failure${labels(model, version, { reason })}`), 0);
      }
      assert.ok(sample(text, `nv_model_load_duration_secs${labels(model, version)}`) > 0);
      for (const family of HISTOGRAMS) assert.equal(checkHistogram(text, family, model, version), 0, family);
    }
    assert.equal(seriesOf(text, 'nv_inference_request_success').length, VERSIONS.length);
    assert.equal(seriesOf(text, 'nv_inference_request_failure').length, VERSIONS.length * 4);
    assert.match(text, /^# TYPE nv_inference_request_success counter$/m);
    assert.match(text, /^# TYPE nv_inference_pending_request_count gauge$/m);
    assert.match(text, /^# TYPE nv_inference_request_histogram_us histogram$/m);
    promtoolCheck(text);
  });

  it('labels the series of a model with metric_tags as _<key>', async () => {
    const text = await scrape(metrics.url);
    assert.deepEqual(seriesOf(text, 'nv_inference_count').filter((s) => s.includes('"simple"')), [
      'nv_inference_count{_team="search",_tier="gold",model="simple",version="1"}',
    ]);
    assert.deepEqual(seriesOf(text, 'nv_inference_count').filter((s) => s.includes('"multi"')), [
      'nv_inference_count{model="multi",version="1"}',
      'nv_inference_count{model="multi",version="2"}',
    ]);
  });

  it('counts successful requests, inferences (batch sizes) and executions exactly; refused requests are not counted', async () => {
    for (const [batch, seed] of [
      [1, 1],
      [2, 2],
      [3, 3],
    ] as const) {
      const reply = await inferJson(srv.url, 'simple', simpleCase(batch, seed).inputs);
      assert.equal(reply.status, 200, reply.text);
    }
    const refused = await inferJson(srv.url, 'simple', [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 3], data: [1, 2, 3] }]);
    assert.equal(refused.status, 400);

    const text = await scrape(metrics.url);
    const l = labels('simple', 1);
    assert.equal(sample(text, `nv_inference_request_success${l}`), 3);
    assert.equal(sample(text, `nv_inference_count${l}`), 6);
    assert.equal(sample(text, `nv_inference_exec_count${l}`), 3);
    assert.equal(sample(text, `nv_inference_pending_request_count${l}`), 0);
    for (const reason of REASONS) assert.equal(sample(text, `nv_inference_request_failure${labels('simple', 1, { reason })}`), 0);

    // The µs counters are the statistics extension's nanoseconds (protocol.md §3.14), and not zero.
    const stats = jsonBody(await httpRequest(`${srv.url}/v2/models/simple/stats`)) as {
      model_stats: { inference_stats: Record<string, { count: number; ns: number }> }[];
    };
    const ns = stats.model_stats[0]!.inference_stats;
    for (const [family, key] of [
      ['nv_inference_request_duration_us', 'success'],
      ['nv_inference_queue_duration_us', 'queue'],
      ['nv_inference_compute_input_duration_us', 'compute_input'],
      ['nv_inference_compute_infer_duration_us', 'compute_infer'],
      ['nv_inference_compute_output_duration_us', 'compute_output'],
    ] as const) {
      const us = sample(text, `${family}${l}`);
      assert.ok(us > 0, `${family} is ${us}`);
      assert.equal(Math.round(us * 1000), ns[key]!.ns, family);
    }

    // Histograms: one observation per successful request (per execution for the batch size).
    for (const family of HISTOGRAMS) assert.equal(checkHistogram(text, family, 'simple', 1), 3, family);
    assert.equal(sample(text, `nv_inference_batch_size_histogram_sum${l}`), 6);
    assert.equal(sample(text, `nv_inference_batch_size_histogram_bucket${l.slice(0, -1)},le="2"}`), 2);
    // The model's own buckets (model_metrics, sorted); the other families keep the defaults.
    assert.deepEqual(
      seriesOf(text, 'nv_inference_request_histogram_us_bucket').filter((s) => s.includes('"simple"')),
      ['5', '50', '500000', '+Inf'].map((le) => `nv_inference_request_histogram_us_bucket${l.slice(0, -1)},le="${le}"}`),
    );
    assert.equal(sample(text, `nv_inference_request_histogram_us_bucket${l.slice(0, -1)},le="500000"}`), 3);
    assert.deepEqual(
      seriesOf(text, 'nv_inference_first_response_histogram_ms_bucket')
        .filter((s) => s.includes('"simple"'))
        .map((s) => /le="([^"]+)"/.exec(s)![1]),
      ['100', '500', '2000', '5000', '+Inf'],
    );
    // Other models did not move.
    assert.equal(sample(text, `nv_inference_request_success${labels('multi', 2)}`), 0);
    promtoolCheck(text);
  });

  it('counts failures by reason (BACKEND, CANCELED, REJECTED) and shows queued requests as pending', async () => {
    const server = srv.server;
    const gl = labels('gated', 1);
    const p1 = server.infer(gateRequest('gated', 1));
    await gate.held(1);
    const p2 = server.infer(gateRequest('gated', 2));
    const p3 = server.infer(gateRequest('gated', 13)).then(
      () => assert.fail('13 must fail'),
      (err: unknown) => err,
    );
    const abort = new AbortController();
    const p4 = server.infer(gateRequest('gated', 4), { signal: abort.signal }).then(
      () => assert.fail('the cancelled request must fail'),
      (err: unknown) => err,
    );
    assert.equal(sample(await scrape(metrics.url), `nv_inference_pending_request_count${gl}`), 3);
    abort.abort();
    assert.match(String(await p4), /cancelled/);
    assert.equal(sample(await scrape(metrics.url), `nv_inference_pending_request_count${gl}`), 2);
    gate.open();
    await Promise.all([p1, p2]);
    assert.match(String(await p3), /fails batches holding 13/);

    // A queue timeout (REJECT) behind a held execution.
    gate.close();
    const ql = labels('queued', 1);
    const q1 = server.infer(gateRequest('queued', 5, true));
    await gate.held(1);
    const q2 = await server.infer(gateRequest('queued', 6, true)).then(
      () => assert.fail('the queued request must time out'),
      (err: unknown) => err,
    );
    assert.match(String(q2), /timeout/i);
    gate.open();
    await q1;

    const text = await scrape(metrics.url);
    const stats = server.modelStatistics('gated')[0]!;
    assert.equal(sample(text, `nv_inference_request_success${gl}`), 2);
    assert.equal(sample(text, `nv_inference_count${gl}`), 2);
    assert.equal(sample(text, `nv_inference_exec_count${gl}`), stats.execution_count);
    assert.equal(sample(text, `nv_inference_pending_request_count${gl}`), 0);
    const failures = (l: (reason: string) => string) => REASONS.map((reason) => sample(text, `nv_inference_request_failure${l(reason)}`));
    assert.deepEqual(failures((reason) => labels('gated', 1, { reason })), [1, 1, 0, 0]);
    assert.deepEqual(failures((reason) => labels('queued', 1, { reason })), [0, 0, 0, 1]);
    assert.equal(sample(text, `nv_inference_request_success${ql}`), 1);
    assert.equal(checkHistogram(text, 'nv_inference_request_histogram_us', 'gated', 1), 2);
    assert.equal(checkHistogram(text, 'nv_inference_queue_histogram_us', 'queued', 1), 1);
    promtoolCheck(text);
  });

  it('samples the CPU families: utilization in [0, 1], memory used within total', async () => {
    await new Promise((r) => setTimeout(r, 120));
    const text = await scrape(metrics.url);
    const utilization = sample(text, 'nv_cpu_utilization');
    assert.ok(utilization >= 0 && utilization <= 1, String(utilization));
    const total = sample(text, 'nv_cpu_memory_total_bytes');
    const used = sample(text, 'nv_cpu_memory_used_bytes');
    assert.ok(total > 0 && used > 0 && used <= total, `${used} of ${total}`);
    assert.doesNotMatch(text, /nv_gpu_/);
  });
});

describe('the metrics endpoint (protocol.md §5.1)', () => {
  it('serves /metrics with a trailing slash or a query too', async () => {
    for (const path of ['/metrics/', '/metrics?x=1']) {
      assert.match(await scrape(metrics.url.replace('/metrics', path)), /^# TYPE nv_inference_count counter$/m);
    }
  });

  it('answers other methods 405 and other GET paths 200 with an empty body', async () => {
    for (const method of ['POST', 'PUT', 'DELETE']) {
      const reply = await httpRequest(metrics.url, { method });
      assert.equal(reply.status, 405);
      assert.equal(reply.text, '{"error":"Method Not Allowed"}');
    }
    const other = await httpRequest(metrics.url.replace('/metrics', '/v2/health/ready'));
    assert.equal(other.status, 200);
    assert.equal(other.text, '');
  });
});

describe('unload', () => {
  it('removes every per-model series once the models are unloaded (server stopped)', async () => {
    await srv.server.stop();
    const text = await scrape(metrics.url);
    assert.doesNotMatch(text, /model="/);
    assert.match(text, /^# TYPE nv_inference_request_success counter$/m);
    promtoolCheck(text);
  });
});
