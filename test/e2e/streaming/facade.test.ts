/**
 * `Server.inferStream` embedded, without a network (models-and-scheduling.md §8.1): a decoupled
 * model's responses with their final flags, one final response from a non-decoupled model,
 * `onAccepted`, errors after earlier responses, cancellation through the signal, `Server.infer`
 * refusing decoupled models, and shutdown waiting for a request the model left open.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import { Server, silentLogger, type InferRequest, type StreamAccepted } from '@nereid/server';
import { simpleModel } from '@nereid/testkit';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { DecoupledBackend, repeatConfig } from './decoupled-backend.js';

let repo: string;
let server: Server;
let backend: DecoupledBackend;

before(async () => {
  backend = new DecoupledBackend();
  repo = await makeRepository({ repeat: { 'config.pbtxt': repeatConfig('repeat'), '1/.keep': '' }, simple: modelFiles(simpleModel()) });
  server = await Server.start({ modelRepositories: [repo], backends: [backend.backend], logger: silentLogger() });
});

after(async () => {
  await server?.stop();
  if (repo) await removeDir(repo);
});

function repeat(id: string, values: number[], parameters: Record<string, string | number> = {}): InferRequest {
  return { model: 'repeat', id, inputs: [{ name: 'IN', datatype: 'INT32', shape: [values.length], data: Int32Array.from(values) }], parameters };
}

function value(response: { outputs: { name: string; data: Uint8Array }[] } | undefined, name: string): number | undefined {
  const out = response?.outputs.find((o) => o.name === name);
  return out === undefined ? undefined : new DataView(out.data.buffer, out.data.byteOffset, 4).getInt32(0, true);
}

/** Runs a request through `inferStream`; resolves with what was seen, or the error after it. */
async function stream(request: InferRequest, signal?: AbortSignal) {
  const seen: [number | undefined, boolean][] = [];
  let accepted: StreamAccepted | undefined;
  let error: unknown;
  try {
    await server.inferStream(request, {
      ...(signal ? { signal } : {}),
      onAccepted: (a) => (accepted = a),
      onResponse: (r) => seen.push([value(r.response, 'OUT') ?? value(r.response, 'OUTPUT0'), r.final]),
    });
  } catch (err) {
    error = err;
  }
  return { seen, accepted, error };
}

describe('Server.inferStream', () => {
  it('a decoupled model: every response with its final flag; a flags-only final response has no response', async () => {
    const a = await stream(repeat('a', [1, 2, 3]));
    assert.equal(a.error, undefined);
    assert.deepEqual(a.accepted, { model: 'repeat', version: '1', decoupled: true });
    assert.deepEqual(a.seen, [
      [1, false],
      [2, false],
      [3, true],
    ]);
    const b = await stream(repeat('b', [4], { mode: 'empty_final' }));
    assert.deepEqual(b.seen, [
      [4, false],
      [undefined, true],
    ]);
  });

  it('a non-decoupled model: exactly one final response', async () => {
    const input = Int32Array.from({ length: 16 }, (_, i) => i + 21);
    const r = await stream({
      model: 'simple',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: input },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: input },
      ],
    });
    assert.equal(r.error, undefined);
    assert.deepEqual(r.accepted, { model: 'simple', version: '1', decoupled: false });
    assert.deepEqual(r.seen, [[42, true]]);
  });

  it('an error rejects after the responses before it; validation errors reject before onAccepted', async () => {
    const r = await stream(repeat('e', [5, 6], { mode: 'error' }));
    assert.deepEqual(r.seen, [
      [5, false],
      [6, false],
    ]);
    assert.ok(r.error instanceof NereidError && r.error.code === 'BACKEND_ERROR', String(r.error));
    const bad = await stream({ model: 'repeat', inputs: [{ name: 'IN', datatype: 'FP32', shape: [1], data: new Float32Array(1) }] });
    assert.equal(bad.accepted, undefined);
    assert.ok(bad.error instanceof NereidError && bad.error.code === 'INPUT_DATATYPE', String(bad.error));
  });

  it('aborting the signal reaches the backend, which ends the request', async () => {
    const controller = new AbortController();
    const seen: boolean[] = [];
    await assert.rejects(
      server.inferStream(repeat('c', [7], { mode: 'wait_cancel' }), {
        signal: controller.signal,
        onResponse: (r) => {
          seen.push(r.final);
          controller.abort();
        },
      }),
      (err: unknown) => err instanceof NereidError && err.kind === 'CANCELLED',
    );
    assert.deepEqual(seen, [false]);
    assert.ok(backend.cancelled.includes('c'));
  });

  it('Server.infer refuses a decoupled model', async () => {
    await assert.rejects(server.infer(repeat('u', [1])), (err: unknown) => err instanceof NereidError && err.code === 'MODEL_DECOUPLED_UNSUPPORTED');
  });
});

describe('shutdown with a decoupled request left open', () => {
  it('the instance is unloaded only after the request ended', async () => {
    const own = new DecoupledBackend();
    const dir = await makeRepository({ repeat: { 'config.pbtxt': repeatConfig('repeat'), '1/.keep': '' } });
    const s = await Server.start({ modelRepositories: [dir], backends: [own.backend], logger: silentLogger() });
    try {
      const seen: boolean[] = [];
      const running = s.inferStream(repeat('h', [1], { mode: 'hold' }), { onResponse: (r) => seen.push(r.final) });
      while (own.batches.length === 0) await new Promise((r) => setTimeout(r, 5));
      const stopping = s.stop();
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(own.unloadedInstances, 0, 'unloaded while a request was open');
      await own.release('h');
      await running;
      await stopping;
      assert.deepEqual(seen, [true]);
      assert.equal(own.unloadedInstances, 1);
    } finally {
      await s.stop();
      await removeDir(dir);
    }
  });
});

describe('warmup of a decoupled model', () => {
  it('takes every response of the warmup requests and waits for their final ones', async () => {
    const own = new DecoupledBackend();
    const warmup = `model_warmup [ { name: "three" batch_size: 1 count: 2 inputs { key: "IN" value { data_type: TYPE_INT32 dims: [ 3 ] zero_data: true } } } ]`;
    const dir = await makeRepository({ repeat: { 'config.pbtxt': repeatConfig('repeat', { extra: warmup }), '1/.keep': '' } });
    const s = await Server.start({ modelRepositories: [dir], backends: [own.backend], logger: silentLogger() });
    try {
      assert.deepEqual(s.startReport.failures, []);
      assert.equal(own.finished.length, 2, 'both warmup requests ended before the model was ready');
      const [stats] = s.modelStatistics('repeat');
      assert.equal(stats!.execution_count, 0, 'warmup is not counted');
      assert.deepEqual(stats!.response_stats, {});
    } finally {
      await s.stop();
      await removeDir(dir);
    }
  });
});
