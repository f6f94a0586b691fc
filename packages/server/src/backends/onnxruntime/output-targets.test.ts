/**
 * `BackendRequest.outputBuffers` on the ONNX Runtime backend: a worker run writes a large output
 * into the memory the request names (a slab or a mapped shared-memory region, core/slabs.ts)
 * where it fits, and answers with a view of it; one that does not fit comes back as usual.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import { identityModel, writeModelToRepository } from '@nereid/testkit';
import { completeModelConfig, normalizeModelConfig, parseModelConfigText } from '../../config/index.js';
import { requireNativeAddon } from '../../core/test-support.js';
import { giveSlab, takeSlab } from '../../core/slabs.js';
import { silentLogger } from '../../observability/logger.js';
import type { BackendInstance, BackendModel, BackendRequest, BackendResponse, BackendTensor, ExecutionTiming } from '../spi.js';
import { onnxRuntimeBackend } from './onnxruntime-backend.js';


const ELEMENTS = 256 * 1024;
const BYTES = ELEMENTS * 4;
const timing: ExecutionTiming = { markComputeStart() {}, markInputsReady() {}, markOutputsStart() {}, markComputeEnd() {} };

interface Answered extends BackendRequest {
  readonly answer: Promise<BackendResponse | NereidError | null>;
}

function request(data: Float32Array, outputBuffers?: Map<string, Uint8Array>): Answered {
  let settle!: (r: BackendResponse | NereidError | null) => void;
  const answer = new Promise<BackendResponse | NereidError | null>((resolve) => (settle = resolve));
  const input: BackendTensor = { name: 'INPUT0', datatype: 'FP32', shape: [1, data.length], data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) };
  return {
    id: '',
    inputs: new Map([['INPUT0', input]]),
    requestedOutputs: ['OUTPUT0'],
    ...(outputBuffers && { outputBuffers }),
    parameters: {},
    batchSize: 1,
    signal: new AbortController().signal,
    respond: (r) => settle(r),
    answer,
  };
}

function output(r: BackendResponse | NereidError | null): BackendTensor {
  assert.ok(r !== null && !(r instanceof NereidError), `expected outputs, got ${String(r)}`);
  return r.outputs.find((o) => o.name === 'OUTPUT0')!;
}

function floats(n: number, seed: number): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => seed * 10_000 + (i % 9973));
}

describe('ONNX Runtime backend: outputs written into the buffers a request names', () => {
  before(requireNativeAddon);
  let dir: string;
  let model: BackendModel;
  let instance: BackendInstance;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'nereid-targets-'));
    const test = identityModel('FP32', [1, -1], { name: 'identity' });
    await writeModelToRepository(dir, test);
    const text = `${test.config!}\nparameters { key: "execution_thread" value { string_value: "worker" } }\n`;
    const config = normalizeModelConfig(completeModelConfig(parseModelConfigText(text)));
    model = await onnxRuntimeBackend.createModel({
      name: 'identity',
      version: 1,
      config,
      modelDirectory: join(dir, 'identity'),
      versionDirectory: join(dir, 'identity', '1'),
      modelPath: join(dir, 'identity', '1', 'model.onnx'),
      backendConfig: {},
      logger: silentLogger(),
    });
    instance = await model.createInstance({ name: 'identity_0', groupName: 'identity', kind: 'KIND_CPU', deviceId: 0, instanceCount: 1 });
  });

  after(async () => {
    await instance?.unload();
    await model?.unload();
    await rm(dir, { recursive: true, force: true });
  });

  it('writes an output that fits into its buffer, at its offset, and answers with a view of it', async () => {
    const slab = takeSlab(BYTES + 8192)!;
    try {
      const memory = new Uint8Array(slab, 0, BYTES + 8192).fill(0xab);
      const target = new Uint8Array(slab, 4096, BYTES + 64);
      const data = floats(ELEMENTS, 1);
      const r = request(data, new Map([['OUTPUT0', target]]));
      await instance.execute([r], timing);
      const out = output(await r.answer);
      assert.equal(out.data.buffer, slab, 'the answer is a view of the buffer named');
      assert.equal(out.data.byteOffset, 4096);
      assert.equal(out.data.byteLength, BYTES);
      assert.deepEqual(new Float32Array(slab, 4096, ELEMENTS), data);
      assert.ok(memory.subarray(0, 4096).every((b) => b === 0xab), 'nothing written before the target');
      assert.ok(memory.subarray(4096 + BYTES).every((b) => b === 0xab), 'nothing written after the output');
    } finally {
      giveSlab(slab);
    }
  });

  it('answers an output larger than its buffer as usual, leaving the buffer alone', async () => {
    const slab = takeSlab(BYTES)!;
    try {
      const target = new Uint8Array(slab, 0, BYTES - 4).fill(0xcd);
      const data = floats(ELEMENTS, 2);
      const r = request(data, new Map([['OUTPUT0', target]]));
      await instance.execute([r], timing);
      const out = output(await r.answer);
      assert.notEqual(out.data.buffer, slab);
      assert.deepEqual(new Float32Array(out.data.buffer, out.data.byteOffset, ELEMENTS), data);
      assert.ok(target.every((b) => b === 0xcd), 'the buffer is untouched');
    } finally {
      giveSlab(slab);
    }
  });

  it('ignores a buffer in memory the worker cannot view', async () => {
    const plain = new Uint8Array(BYTES);
    const a = request(floats(ELEMENTS, 3), new Map([['OUTPUT0', plain]]));
    await instance.execute([a], timing);
    const out = output(await a.answer);
    assert.notEqual(out.data.buffer, plain.buffer);
    assert.deepEqual(new Float32Array(out.data.buffer, out.data.byteOffset, ELEMENTS), floats(ELEMENTS, 3));
    assert.ok(plain.every((b) => b === 0));
  });
});
