/**
 * The response cache end to end (models-and-scheduling.md §8.2, docs/cache.md): a local cache
 * shared by the models that enable it; hits over HTTP and gRPC byte-identical to the computed
 * responses (JSON and binary outputs chosen per request, requested outputs, classification),
 * without running the model; statistics and metrics; an ensemble's top-level hit; models that
 * enable it on a server without a cache; the configurations Triton refuses.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { simpleModel } from '@nereid/testkit';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { scrape, sample, seriesOf, startMetrics, type RunningMetrics } from '../metrics/exposition.js';
import { ensembleConfig, StepBackend, stepConfig } from '../ensemble/step-backend.js';
import { GrpcClient } from '@nereid/client';
import { recordingLogger } from '../../helpers/python.js';

const CACHED = 'response_cache { enable: true }\n';
const step = (config: string) => ({ 'config.pbtxt': config, '1/.keep': '' });

let repo: string;
let srv: RunningGrpcServer;
let metrics: RunningMetrics;
let steps: StepBackend;

before(async () => {
  steps = new StepBackend();
  const simple = simpleModel();
  repo = await makeRepository({
    simple: modelFiles(simple, { config: simple.config + CACHED }),
    simple_plain: modelFiles(simpleModel({ name: 'simple_plain' })),
    add1: step(stepConfig('add1') + CACHED),
    add10: step(stepConfig('add10', { add: '10' })),
    uncached: step(stepConfig('uncached')),
    pipe: step(
      ensembleConfig('pipe', { inputs: ['X'], outputs: ['Y'] }, [
        { model: 'add10', inputs: { IN: 'X' }, outputs: { OUT: 't' } },
        { model: 'uncached', inputs: { IN: 't' }, outputs: { OUT: 'Y' } },
      ]) + CACHED,
    ),
  });
  srv = await startServer({ modelRepositories: [repo], backends: [steps.backend], cache: { name: 'local', settings: { size: '1048576' } }, grpc: true });
  assert.deepEqual(srv.server.startReport.failures, []);
  metrics = await startMetrics(srv.server);
});

after(async () => {
  await metrics?.close();
  await srv?.stop();
  if (repo) await removeDir(repo);
});

/** POSTs `body` (an object: JSON; bytes: as given with its header length) and returns the raw reply. */
async function post(path: string, body: object | { bytes: Uint8Array; headerLength: number }): Promise<{ status: number; headers: Headers; bytes: Buffer }> {
  const init: RequestInit =
    'bytes' in body
      ? { method: 'POST', body: body.bytes, headers: { 'Inference-Header-Content-Length': String(body.headerLength) } }
      : { method: 'POST', body: JSON.stringify(body) };
  const r = await fetch(srv.url + path, init);
  return { status: r.status, headers: r.headers, bytes: Buffer.from(await r.arrayBuffer()) };
}

async function stats(model: string): Promise<{ inference_count: number; execution_count: number; inference_stats: Record<string, { count: number; ns: number }> }> {
  const r = await fetch(`${srv.url}/v2/models/${model}/stats`);
  return ((await r.json()) as { model_stats: never[] }).model_stats[0]!;
}

const fp32 = (values: number[]) => ({ name: 'IN', datatype: 'FP32', shape: [values.length], data: values });
const simpleInputs = (seed: number) => [
  { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i + seed) },
  { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => 100 - i) },
];

describe('a model with response_cache enabled on a server with a local cache', () => {
  it('answers a repeated request from the cache, byte for byte, without running the model', async () => {
    const before = steps.of('add1').length;
    const body = { id: 'r1', inputs: [fp32([1, 2, 3])] };
    const miss = await post('/v2/models/add1/infer', body);
    const hit = await post('/v2/models/add1/infer', body);
    assert.equal(miss.status, 200, miss.bytes.toString());
    assert.deepEqual(JSON.parse(hit.bytes.toString()), { id: 'r1', model_name: 'add1', model_version: '1', outputs: [{ name: 'OUT', datatype: 'FP32', shape: [3], data: [2, 3, 4] }] });
    assert.ok(hit.bytes.equals(miss.bytes), `${hit.bytes} vs ${miss.bytes}`);
    assert.equal(steps.of('add1').length, before + 1, 'the hit ran the model');
    // Another id is not part of the key, and each response carries its own.
    const other = await post('/v2/models/add1/infer', { id: 'r2', inputs: [fp32([1, 2, 3])] });
    assert.equal(JSON.parse(other.bytes.toString()).id, 'r2');
    assert.equal(steps.of('add1').length, before + 1);
    // Different bytes or a different shape are computed.
    await post('/v2/models/add1/infer', { inputs: [fp32([1, 2, 4])] });
    await post('/v2/models/add1/infer', { inputs: [{ name: 'IN', datatype: 'FP32', shape: [1], data: [1] }] });
    assert.equal(steps.of('add1').length, before + 3);
  });

  it('counts hits and misses in the statistics: a hit is a success with no inference or execution', async () => {
    const s0 = await stats('add1');
    const body = { inputs: [fp32([7, 7])] };
    await post('/v2/models/add1/infer', body);
    for (let i = 0; i < 3; i++) await post('/v2/models/add1/infer', body);
    const s = await stats('add1');
    const d = (k: string) => s.inference_stats[k]!.count - s0.inference_stats[k]!.count;
    assert.deepEqual(
      { success: d('success'), queue: d('queue'), cache_hit: d('cache_hit'), cache_miss: d('cache_miss'), compute_infer: d('compute_infer') },
      { success: 4, queue: 4, cache_hit: 3, cache_miss: 1, compute_infer: 1 },
    );
    assert.equal(s.inference_count - s0.inference_count, 1);
    assert.equal(s.execution_count - s0.execution_count, 1);
    assert.ok(s.inference_stats.cache_hit!.ns > s0.inference_stats.cache_hit!.ns);
    assert.ok(s.inference_stats.cache_miss!.ns > s0.inference_stats.cache_miss!.ns);
    // A model that does not enable the cache never counts one.
    await post('/v2/models/uncached/infer', body);
    await post('/v2/models/uncached/infer', body);
    const u = await stats('uncached');
    assert.equal(u.inference_stats.cache_hit!.count + u.inference_stats.cache_miss!.count, 0);
    assert.equal(u.execution_count, 2);
  });

  it('encodes a hit as each request asks: binary or JSON outputs, the outputs requested, classification', async () => {
    const inputs = simpleInputs(3);
    const cases: object[] = [
      { inputs },
      { inputs, parameters: { binary_data_output: true } },
      { inputs, outputs: [{ name: 'OUTPUT1' }] },
      { inputs, outputs: [{ name: 'OUTPUT1', parameters: { binary_data: true } }, { name: 'OUTPUT0' }] },
      { inputs, outputs: [{ name: 'OUTPUT0', parameters: { classification: 3 } }] },
    ];
    // The same requests to the same model without the cache: what the computed answers are.
    const plain = [];
    for (const body of cases) plain.push(await post('/v2/models/simple_plain/infer', body));
    const first = [];
    for (const body of cases) first.push(await post('/v2/models/simple/infer', body));
    const s0 = await stats('simple');
    for (let i = 0; i < cases.length; i++) {
      const hit = await post('/v2/models/simple/infer', cases[i]!);
      assert.equal(hit.status, 200);
      assert.ok(hit.bytes.equals(first[i]!.bytes), `case ${i}: hit differs from the miss`);
      assert.equal(hit.headers.get('inference-header-content-length'), first[i]!.headers.get('inference-header-content-length'));
      assert.equal(hit.bytes.toString().replace('"simple"', '"simple_plain"'), plain[i]!.bytes.toString(), `case ${i}: differs from the model without cache`);
    }
    const s = await stats('simple');
    assert.equal(s.inference_stats.cache_hit!.count - s0.inference_stats.cache_hit!.count, cases.length);
    assert.equal(s.execution_count, s0.execution_count);
  });

  it('serves hits over gRPC with the same raw outputs, and reports the statistics there', async () => {
    const grpc = new GrpcClient(srv.grpcTarget);
    try {
      const input = (seed: number) => {
        const a = new Int32Array(16).map((_, i) => i * seed);
        const b = new Int32Array(16).fill(seed);
        return [
          { name: 'INPUT0', datatype: 'INT32' as const, shape: [1, 16], data: new Uint8Array(a.buffer) },
          { name: 'INPUT1', datatype: 'INT32' as const, shape: [1, 16], data: new Uint8Array(b.buffer) },
        ];
      };
      const s0 = await grpc.modelStatistics('simple');
      const miss = await grpc.infer({ model: 'simple', inputs: input(11) });
      const hit = await grpc.infer({ model: 'simple', inputs: input(11) });
      for (const name of ['OUTPUT0', 'OUTPUT1']) {
        assert.ok(Buffer.from(hit.bytes(name)).equals(Buffer.from(miss.bytes(name))), name);
        assert.deepEqual(hit.shape(name), miss.shape(name));
        assert.equal(hit.datatype(name), miss.datatype(name));
      }
      assert.deepEqual([...(miss.typed('OUTPUT0') as Int32Array)].slice(0, 3), [11, 22, 33]);
      const s = await grpc.modelStatistics('simple');
      const cur = s.model_stats[0]!.inference_stats!;
      const prev = s0.model_stats[0]!.inference_stats!;
      assert.equal(Number(cur.cache_hit!.count) - Number(prev.cache_hit!.count), 1);
      assert.equal(Number(cur.cache_miss!.count) - Number(prev.cache_miss!.count), 1);
      // An HTTP request with the same tensors hits the entry the gRPC request made.
      const http = await post('/v2/models/simple/infer', {
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i * 11) },
          { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: new Array(16).fill(11) },
        ],
      });
      assert.equal(http.status, 200);
      const after = (await grpc.modelStatistics('simple')).model_stats[0]!.inference_stats!;
      assert.equal(Number(after.cache_hit!.count) - Number(cur.cache_hit!.count), 1);
    } finally {
      grpc.close();
    }
  });

  it('answers from the cache on the streaming path (inferStream, as gRPC ModelStreamInfer) of a model that is not decoupled', async () => {
    const before = steps.of('add1').length;
    const request = { model: 'add1', inputs: [{ name: 'IN', datatype: 'FP32' as const, shape: [2], data: new Float32Array([40, 41]) }] };
    const answers: { final: boolean; data?: number[] }[] = [];
    for (let i = 0; i < 2; i++) {
      await srv.server.inferStream(request, {
        onResponse: (r) => answers.push({ final: r.final, data: r.response && [...new Float32Array(r.response.outputs[0]!.data.slice().buffer)] }),
      });
    }
    assert.deepEqual(answers, [
      { final: true, data: [41, 42] },
      { final: true, data: [41, 42] },
    ]);
    assert.equal(steps.of('add1').length, before + 1);
  });

  it("answers an ensemble's repeated request at the top, without running any step", async () => {
    const body = { inputs: [{ name: 'X', datatype: 'FP32', shape: [2], data: [5, 6] }] };
    const ran = () => steps.of('add10').length + steps.of('uncached').length;
    const r0 = ran();
    const miss = await post('/v2/models/pipe/infer', body);
    assert.equal(ran(), r0 + 2);
    const hit = await post('/v2/models/pipe/infer', body);
    assert.ok(hit.bytes.equals(miss.bytes));
    assert.deepEqual(JSON.parse(hit.bytes.toString()).outputs[0].data, [16, 17]);
    assert.equal(ran(), r0 + 2, 'a step ran on a hit');
    const s = await stats('pipe');
    assert.equal(s.inference_stats.cache_hit!.count, 1);
    assert.equal(s.inference_stats.cache_miss!.count, 1);
    assert.equal(s.execution_count, 1);
  });

  it("exports Triton's cache metrics: per model that uses the cache, and the cache's own", async () => {
    const text = await scrape(metrics.url);
    for (const family of ['nv_cache_num_hits_per_model', 'nv_cache_num_misses_per_model', 'nv_cache_hit_duration_per_model', 'nv_cache_miss_duration_per_model']) {
      const series = seriesOf(text, family).sort();
      assert.deepEqual(series, ['add1', 'pipe', 'simple'].map((m) => `${family}{model="${m}",version="1"}`), family);
    }
    const s = await stats('add1');
    assert.equal(sample(text, 'nv_cache_num_hits_per_model{model="add1",version="1"}'), s.inference_stats.cache_hit!.count);
    assert.equal(sample(text, 'nv_cache_num_misses_per_model{model="add1",version="1"}'), s.inference_stats.cache_miss!.count);
    const cache = srv.server.responseCache!;
    assert.ok(cache.counters.entries > 0);
    assert.equal(sample(text, 'nv_cache_num_entries'), cache.counters.entries);
    assert.equal(sample(text, 'nv_cache_num_hits'), cache.counters.hits);
    assert.equal(sample(text, 'nv_cache_num_lookups'), cache.counters.hits + cache.counters.misses);
    assert.equal(sample(text, 'nv_cache_util'), cache.counters.bytes / 1048576);
    for (const family of ['nv_cache_num_misses', 'nv_cache_num_evictions', 'nv_cache_lookup_duration', 'nv_cache_insertion_duration']) {
      assert.equal(seriesOf(text, family).length, 1, family);
    }
  });
});

describe('a traced request answered from the cache', () => {
  it('has its queue start and request end, and no compute timestamps', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'nereid-cache-trace-'));
    const file = join(dir, 'trace.json');
    const r = await makeRepository({ add1: step(stepConfig('add1') + CACHED) });
    const s = await startServer({ modelRepositories: [r], backends: [new StepBackend().backend], cache: { name: 'local', settings: { size: '100000' } }, trace: { level: 1, rate: 1, file } });
    try {
      for (let i = 0; i < 2; i++) await fetch(`${s.url}/v2/models/add1/infer`, { method: 'POST', body: JSON.stringify({ inputs: [fp32([3])] }) });
      await s.server.tracing.flush();
    } finally {
      await s.stop();
      await removeDir(r);
    }
    const events = JSON.parse(readFileSync(file, 'utf8')) as { id: number; timestamps?: { name: string }[] }[];
    const stamps = new Map<number, string[]>();
    for (const e of events) for (const t of e.timestamps ?? []) stamps.set(e.id, [...(stamps.get(e.id) ?? []), t.name]);
    const [miss, hit] = [...stamps.values()];
    assert.ok(miss!.includes('COMPUTE_START') && miss!.includes('QUEUE_START') && miss!.includes('REQUEST_END'), miss!.join(' '));
    assert.ok(hit!.includes('QUEUE_START') && hit!.includes('REQUEST_END') && hit!.includes('INFER_RESPONSE_COMPLETE'), hit!.join(' '));
    assert.ok(!hit!.some((n) => n.startsWith('COMPUTE_')), hit!.join(' '));
    await removeDir(dir);
  });
});

describe('configurations around the cache', () => {
  it('a model that enables the cache on a server without one is computed every time, with a warning at load', async () => {
    const logger = recordingLogger();
    const lines = logger.lines;
    const r = await makeRepository({ add1: step(stepConfig('add1') + CACHED) });
    const local = new StepBackend();
    const s = await startServer({ modelRepositories: [r], backends: [local.backend], logger });
    try {
      assert.match(lines.join('\n'), /model 'add1': response_cache\.enable is true, but the server has no response cache \(--cache-config\)/);
      for (let i = 0; i < 2; i++) await fetch(`${s.url}/v2/models/add1/infer`, { method: 'POST', body: JSON.stringify({ inputs: [fp32([1])] }) });
      assert.equal(local.of('add1').length, 2);
      assert.equal(s.server.responseCache, undefined);
      assert.ok(!(await s.server.metrics.text()).includes('nv_cache_'));
    } finally {
      await s.stop();
      await removeDir(r);
    }
  });

  it("refuses the cache on decoupled and sequence-batched models with Triton's messages", async () => {
    const r = await makeRepository({
      dec: step(stepConfig('dec') + 'model_transaction_policy { decoupled: true }\n' + CACHED),
      seq: step(stepConfig('seq') + 'sequence_batching { }\n' + CACHED),
    });
    const s = await startServer({ modelRepositories: [r], backends: [new StepBackend().backend], cache: { name: 'local', settings: { size: '1000' } } });
    try {
      const reasons = new Map(s.server.startReport.failures.map((f) => [f.name, f.reason]));
      assert.match(reasons.get('dec') ?? '', /Response Cache does not currently support model dec with 'decoupled' transaction policy\. Please disable the response cache\./);
      assert.match(reasons.get('seq') ?? '', /Response Cache does not currently support model seq with sequence batching scheduler\. Please disable the response cache\./);
    } finally {
      await s.stop();
      await removeDir(r);
    }
  });
});
