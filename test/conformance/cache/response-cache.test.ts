/**
 * The response cache against real Triton 2.51 (docs/cache.md): both servers run the same Python
 * model with `response_cache { enable: true }` and a local cache, take the same sequence of
 * requests (repeats, new inputs, a batch of two, HTTP and gRPC-shaped JSON and binary), and must
 * then agree on every count of the statistics extension and on the cache metrics' families,
 * labels and counts. Durations differ by nature and are only checked to be there. Triton's
 * local cache needs a few kilobytes of bookkeeping, so both get 1 MiB.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { makeRepository, removeDir, type ModelFiles } from '../../helpers/harness.js';
import { ADD_SUB_EXECUTE, ADD_SUB_IO, pythonModelFiles } from '../helpers/python-models.js';
import { startConformanceServer, type ConformanceServer } from '../helpers/tier.js';
import { requireTriton, startTriton, type TritonServer } from '../helpers/triton.js';

const CACHE = '--cache-config=local,size=1048576';
const MODELS: Record<string, ModelFiles> = {
  add_sub: pythonModelFiles('add_sub', `max_batch_size: 8\n${ADD_SUB_IO}\nresponse_cache { enable: true }`, ADD_SUB_EXECUTE),
  plain: pythonModelFiles('plain', `max_batch_size: 8\n${ADD_SUB_IO}`, ADD_SUB_EXECUTE),
};

const row = (seed: number, batch = 1) => Array.from({ length: 16 * batch }, (_, i) => i + seed);
const body = (seed: number, extra: object = {}, batch = 1) => ({
  inputs: [
    { name: 'INPUT0', datatype: 'FP32', shape: [batch, 16], data: row(seed, batch) },
    { name: 'INPUT1', datatype: 'FP32', shape: [batch, 16], data: row(2 * seed, batch) },
  ],
  ...extra,
});

/** The request sequence both servers get, in order: [model, body]. */
const SEQUENCE: [string, object][] = [
  ['add_sub', body(1)],
  ['add_sub', body(1)],
  ['add_sub', body(1)],
  ['add_sub', body(2)],
  ['add_sub', body(1, { parameters: { binary_data_output: true } })],
  ['add_sub', body(2)],
  ['add_sub', body(3, {}, 2)],
  ['add_sub', body(3, {}, 2)],
  ['plain', body(1)],
  ['plain', body(1)],
];

interface Answers {
  stats: unknown;
  metrics: Map<string, number>;
  bodies: string[];
}

async function drive(http: string, metricsUrl: string): Promise<Answers> {
  const bodies: string[] = [];
  for (const [model, b] of SEQUENCE) {
    const r = await fetch(`http://${http}/v2/models/${model}/infer`, { method: 'POST', body: JSON.stringify(b) });
    assert.equal(r.status, 200);
    bodies.push(Buffer.from(await r.arrayBuffer()).toString('latin1'));
  }
  const stats = await (await fetch(`http://${http}/v2/models/stats`)).json();
  const metrics = new Map<string, number>();
  for (const line of (await (await fetch(metricsUrl)).text()).split('\n')) {
    if (!line.startsWith('nv_cache_') && !/^nv_inference_(count|exec_count|request_success)\{/.test(line)) continue;
    const at = line.lastIndexOf(' ');
    metrics.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return { stats, metrics, bodies };
}

/** Every count of the statistics, durations replaced by whether they are non-zero. */
function counts(stats: unknown): unknown {
  const models = (stats as { model_stats: Record<string, unknown>[] }).model_stats.map((m) => {
    const s = m.inference_stats as Record<string, { count: number; ns: number }>;
    return {
      name: m.name,
      version: m.version,
      inference_count: m.inference_count,
      execution_count: m.execution_count,
      last_inference_set: (m.last_inference as number) > 0,
      inference_stats: Object.fromEntries(Object.entries(s).map(([k, v]) => [k, { count: v.count, timed: Number(v.ns) > 0 }])),
      batch_stats: (m.batch_stats as { batch_size: number; compute_infer: { count: number } }[]).map((b) => ({ batch_size: b.batch_size, count: b.compute_infer.count })),
    };
  });
  return models.sort((a, b) => String(a.name).localeCompare(String(b.name)));
}

describe('conformance: the response cache against real Triton 2.51', () => {
  let triton: TritonServer | undefined;
  let tritonRepository: string | undefined;
  let nereid: ConformanceServer | undefined;
  let fromTriton: Answers;
  let fromNereid: Answers;

  before(async () => {
    requireTriton();
    tritonRepository = await makeRepository(MODELS);
    [triton, nereid] = await Promise.all([startTriton(tritonRepository, [CACHE]), startConformanceServer(Object.entries(MODELS), [CACHE])]);
    fromTriton = await drive(triton.endpoints.http, triton.endpoints.metrics);
    fromNereid = await drive(nereid.endpoints.http, nereid.endpoints.metrics);
  });

  after(async () => {
    await Promise.all([triton?.stop(), nereid?.stop()]);
    if (tritonRepository !== undefined) await removeDir(tritonRepository);
  });

  it('answers the same bodies, hits and misses alike', () => {
    assert.equal(fromNereid.bodies.length, fromTriton.bodies.length);
    for (let i = 0; i < SEQUENCE.length; i++) {
      const [n, t] = [fromNereid.bodies[i]!, fromTriton.bodies[i]!];
      if (n.startsWith('{') && t.startsWith('{') && !n.includes('binary_data_size')) {
        assert.deepEqual(JSON.parse(n), JSON.parse(t), `request ${i}`);
      } else {
        // Binary outputs: the same JSON header length and the same output bytes.
        assert.equal(n.length, t.length, `request ${i}`);
      }
    }
  });

  it('agrees on every count of the statistics (hits: success and queue only; misses: the cache_miss count)', () => {
    assert.deepEqual(counts(fromNereid.stats), counts(fromTriton.stats));
    const addSub = (counts(fromNereid.stats) as { name: string; inference_stats: Record<string, { count: number }> }[]).find((m) => m.name === 'add_sub')!;
    assert.equal(addSub.inference_stats.cache_hit!.count, 5);
    assert.equal(addSub.inference_stats.cache_miss!.count, 3);
  });

  it('agrees on the per-model cache metrics and exports the same server-wide families', () => {
    const perModel = (m: Map<string, number>) =>
      [...m].filter(([k]) => k.includes('_per_model{') && !k.includes('duration')).sort(([a], [b]) => a.localeCompare(b));
    assert.deepEqual(perModel(fromNereid.metrics), perModel(fromTriton.metrics));
    const durations = (m: Map<string, number>) => [...m.keys()].filter((k) => k.includes('duration_per_model{')).sort();
    assert.deepEqual(durations(fromNereid.metrics), durations(fromTriton.metrics));
    const global = (m: Map<string, number>) => [...m.keys()].filter((k) => k.startsWith('nv_cache_') && !k.includes('{')).sort();
    assert.deepEqual(global(fromNereid.metrics), global(fromTriton.metrics));
    for (const k of ['nv_inference_count', 'nv_inference_exec_count', 'nv_inference_request_success']) {
      const pick = (m: Map<string, number>) => [...m].filter(([key]) => key.startsWith(`${k}{`)).sort(([a], [b]) => a.localeCompare(b));
      assert.deepEqual(pick(fromNereid.metrics), pick(fromTriton.metrics), k);
    }
    // Triton leaves the server-wide counts mostly at 0; Nereid's are the cache's own.
    assert.equal(fromNereid.metrics.get('nv_cache_num_hits'), 5);
    assert.equal(fromNereid.metrics.get('nv_cache_num_entries'), 3);
  });
});
