/**
 * The server under a heavy model: ONNX Runtime runs on worker threads, so health checks sent
 * while big batches compute finish first (an ordering assertion, never a timing one); clients
 * that give up on in-flight or queued requests leave the server serving correct results.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { MLP_CONFIG_EXTRA, mlpModel, type MlpModel } from '@nereid/testkit';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { binaryBody, bytesOf, nodeRequest, parseInferResponse, postInfer, type HttpResult } from '../../helpers/http.js';

const BATCH = 512;
const INPUT = 16;

let repo: string;
let srv: RunningServer;
let mlp: MlpModel;
let input: Float32Array;
let request: { body: Buffer; headerLength: number };

before(async () => {
  // 16 → 1024 → 1024 → 16 with batches of 512: about 1.1 GFLOP per request from a 32 KiB body.
  // One ONNX Runtime thread leaves a core to the event loop on small machines, so the ordering
  // below depends on where inference runs, not on how many cores there are.
  mlp = mlpModel({
    maxBatchSize: BATCH,
    inputSize: INPUT,
    hiddenSizes: [1024, 1024],
    configExtra: `${MLP_CONFIG_EXTRA}parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n`,
  });
  repo = await makeRepository({ mlp: modelFiles(mlp) });
  srv = await startServer({ modelRepositories: [repo] });
  assert.deepEqual(srv.server.startReport.failures, []);
  input = Float32Array.from({ length: BATCH * INPUT }, (_, i) => Math.sin(i * 0.37));
  request = binaryBody(
    {
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [BATCH, INPUT], parameters: { binary_data_size: input.byteLength } }],
      outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }],
    },
    [bytesOf(input)],
  );
});

after(async () => {
  await srv?.stop();
  if (repo) await removeDir(repo);
});

function heavy(signal?: AbortSignal): Promise<HttpResult> {
  return nodeRequest(srv.url, '/v2/models/mlp/infer', {
    method: 'POST',
    headers: { 'Inference-Header-Content-Length': request.headerLength },
    body: request.body,
    ...(signal ? { signal } : {}),
  });
}

/** Checks a heavy response against the reference forward pass on its first rows. */
function assertHeavyResult(res: HttpResult): void {
  assert.equal(res.status, 200, res.body.toString());
  const { header, blobs } = parseInferResponse(res.headers, res.body);
  assert.deepEqual(header.outputs[0]!.shape, [BATCH, 16]);
  const blob = blobs.get('OUTPUT0')!;
  const got = new Float32Array(blob.buffer.slice(blob.byteOffset, blob.byteOffset + blob.byteLength));
  const rows = 2;
  const expected = mlp.compute(input.subarray(0, rows * INPUT), rows);
  for (let i = 0; i < expected.length; i++) {
    assert.ok(Math.abs(got[i]! - expected[i]!) <= 1e-3 * (1 + Math.abs(expected[i]!)), `OUTPUT0[${i}]: ${got[i]} vs ${expected[i]}`);
  }
}

describe('responsiveness', () => {
  test('health checks sent while heavy batches compute all complete before the heavy requests do', async () => {
    // As many sequential health checks as heavy requests: were inference to block the event loop,
    // each check would wait out a whole batch and the last would come back after the last batch.
    const HEAVY = 8;
    const HEALTH = 8;
    const events: string[] = [];
    const heavyDone = Array.from({ length: HEAVY }, (_, i) =>
      heavy().then((res) => {
        events.push(`heavy${i}`);
        return res;
      }),
    );
    // Once one heavy request has come back, the rest are executing or queued behind it.
    await Promise.race(heavyDone);
    assert.ok(events.length < HEAVY);
    for (let i = 0; i < HEALTH; i++) {
      const res = await nodeRequest(srv.url, '/v2/health/live');
      assert.equal(res.status, 200);
      events.push(`live${i}`);
    }
    const pendingWhenHealthDone = HEAVY - events.filter((e) => e.startsWith('heavy')).length;
    const results = await Promise.all(heavyDone);
    results.forEach(assertHeavyResult);
    assert.ok(pendingWhenHealthDone > 0, `order of completion: ${events.join(' ')}`);
    assert.ok(events.at(-1)!.startsWith('heavy'), `order of completion: ${events.join(' ')}`);
  });

  test('concurrent small requests on another path are answered while heavy ones queue', async () => {
    const events: string[] = [];
    const heavyDone = Array.from({ length: 4 }, (_, i) => heavy().then((res) => (events.push(`heavy${i}`), res)));
    await Promise.race(heavyDone);
    const metadata = await Promise.all(
      Array.from({ length: 8 }, (_, i) => nodeRequest(srv.url, '/v2/models/mlp').then((res) => (events.push(`meta${i}`), res))),
    );
    metadata.forEach((res) => assert.equal(res.status, 200));
    const results = await Promise.all(heavyDone);
    results.forEach(assertHeavyResult);
    assert.ok(events.at(-1)!.startsWith('heavy'), `order of completion: ${events.join(' ')}`);
  });
});

describe('cancellation and disconnect', () => {
  test('clients that abort in-flight and queued requests do not break the server', async () => {
    const controllers = Array.from({ length: 5 }, () => new AbortController());
    const outcomes = controllers.map((c) => heavy(c.signal).then(
      (res) => ({ ok: true as const, res }),
      (err: unknown) => ({ ok: false as const, err }),
    ));
    // Let the first come back, then abandon the others while they run or wait in the queue.
    const first = await Promise.race(outcomes);
    for (const c of controllers) c.abort();
    const settled = await Promise.all(outcomes);
    assert.ok(settled.some((o) => !o.ok), 'at least one request was aborted');
    for (const o of settled) {
      if (o.ok) assertHeavyResult(o.res);
      else assert.equal((o.err as Error).name, 'AbortError');
    }
    assert.ok(first.ok);

    // The next requests work and compute the right values.
    assertHeavyResult(await heavy());
    const live = await nodeRequest(srv.url, '/v2/health/live');
    assert.equal(live.status, 200);
  });

  test('a client that disconnects right after sending the whole body', async () => {
    for (let i = 0; i < 3; i++) {
      const c = new AbortController();
      const pending = heavy(c.signal).catch((err: unknown) => err);
      setImmediate(() => c.abort());
      const err = await pending;
      assert.ok(err instanceof Error && err.name === 'AbortError');
    }
    assertHeavyResult(await heavy());
  });

  test('aborted requests to a small model between good ones', async () => {
    const x = Float32Array.from({ length: 2 * INPUT }, (_, i) => i / 100);
    const json = {
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [2, INPUT], data: Array.from(x) }],
    };
    const expected = mlp.compute(x, 2);
    for (let i = 0; i < 3; i++) {
      const c = new AbortController();
      const aborted = fetch(`${srv.url}/v2/models/mlp/infer`, { method: 'POST', body: JSON.stringify(json), signal: c.signal }).catch((e: unknown) => e);
      c.abort();
      assert.ok((await aborted) instanceof Error);
      const res = await postInfer(srv.url, 'mlp', json);
      assert.equal(res.status, 200, res.body.toString());
      const data = (JSON.parse(res.body.toString()) as { outputs: { data: number[] }[] }).outputs[0]!.data;
      data.forEach((v, k) => assert.ok(Math.abs(v - expected[k]!) <= 1e-3 * (1 + Math.abs(expected[k]!))));
    }
  });
});
