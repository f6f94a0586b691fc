/**
 * Inline batches (`execution_thread: inline`) of every ONNX Runtime instance of the process run in
 * one `setImmediate` callback, in call order: the responses of all of them are then written in
 * the same turn. An ordering assertion (what has been answered when a marker callback queued
 * between two batches runs), never a timing one.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import { identityModel, writeModelToRepository } from '@nereid/testkit';
import { completeModelConfig, normalizeModelConfig, parseModelConfigText } from '../../config/index.js';
import { silentLogger } from '../../observability/logger.js';
import type { BackendInstance, BackendModel, BackendRequest, BackendResponse, BackendTensor, ExecutionTiming } from '../spi.js';
import { onnxRuntimeBackend } from './onnxruntime-backend.js';

const timing: ExecutionTiming = { markComputeStart() {}, markInputsReady() {}, markOutputsStart() {}, markComputeEnd() {} };

interface Tracked extends BackendRequest {
  answered: BackendResponse | NereidError | null | undefined;
}

function request(value: number, order: number[]): Tracked {
  const data = new Float32Array(4).fill(value);
  const input: BackendTensor = { name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: new Uint8Array(data.buffer) };
  const r: Tracked = {
    id: String(value),
    inputs: new Map([['INPUT0', input]]),
    requestedOutputs: ['OUTPUT0'],
    parameters: {},
    batchSize: 1,
    signal: new AbortController().signal,
    respond: (answer) => {
      r.answered = answer;
      order.push(value);
    },
    answered: undefined,
  };
  return r;
}

function value(r: Tracked): number {
  assert.ok(r.answered !== undefined && r.answered !== null && !(r.answered instanceof NereidError), `expected outputs, got ${String(r.answered)}`);
  const out = r.answered.outputs.find((o) => o.name === 'OUTPUT0')!;
  return new Float32Array(out.data.slice().buffer)[0]!;
}

describe('ONNX Runtime backend: inline batches of every instance in one callback', () => {
  let dir: string;
  let model: BackendModel;
  const instances: BackendInstance[] = [];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'nereid-inline-'));
    const test = identityModel('FP32', [-1, 4], { name: 'identity' });
    await writeModelToRepository(dir, test);
    const text = `${test.config!}\nparameters { key: "execution_thread" value { string_value: "inline" } }\n`;
    model = await onnxRuntimeBackend.createModel({
      name: 'identity',
      version: 1,
      config: normalizeModelConfig(completeModelConfig(parseModelConfigText(text))),
      modelDirectory: join(dir, 'identity'),
      versionDirectory: join(dir, 'identity', '1'),
      modelPath: join(dir, 'identity', '1', 'model.onnx'),
      backendConfig: {},
      logger: silentLogger(),
    });
    for (let i = 0; i < 3; i++) {
      instances.push(await model.createInstance({ name: `identity_0_${i}`, groupName: 'identity_0', kind: 'KIND_CPU', deviceId: 0, instanceCount: 3 }));
    }
  });

  after(async () => {
    for (const instance of instances) await instance.unload();
    await model?.unload();
    await rm(dir, { recursive: true, force: true });
  });

  it("runs two instances' batches before a callback queued between them", async () => {
    const order: number[] = [];
    const [a, b] = [instances[0]!, instances[1]!];
    const first = request(1, order);
    const second = request(2, order);
    const done = [a.execute([first], timing)];
    const seen = new Promise<number[]>((resolve) => setImmediate(() => resolve([...order])));
    done.push(b.execute([second], timing));
    await Promise.all(done);
    assert.deepEqual(await seen, [1, 2], 'both batches were answered in the callback that ran first');
    assert.equal(value(first), 1);
    assert.equal(value(second), 2);
  });

  it('keeps call order across instances, and fails only the batch of an instance unloaded meanwhile', async () => {
    const order: number[] = [];
    const [a, b, c] = instances as [BackendInstance, BackendInstance, BackendInstance];
    const requests = [1, 2, 3, 4, 5].map((v) => request(v, order));
    const runs = [a.execute([requests[0]!], timing), b.execute([requests[1]!], timing), c.execute([requests[2]!], timing), a.execute([requests[3]!], timing), b.execute([requests[4]!], timing)];
    const unloaded = c.unload();
    const outcomes = await Promise.allSettled(runs);
    await unloaded;
    instances.pop();
    assert.deepEqual(order, [1, 2, 4, 5]);
    assert.deepEqual(
      outcomes.map((o) => o.status),
      ['fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'fulfilled'],
    );
    const failure = (outcomes[2] as PromiseRejectedResult).reason;
    assert.ok(failure instanceof NereidError && /identity_0_2.*unloaded before its batch ran/.test(failure.message), String(failure));
    assert.deepEqual([0, 1, 3, 4].map((i) => value(requests[i]!)), [1, 2, 4, 5]);
  });
});
