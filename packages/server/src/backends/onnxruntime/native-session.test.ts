import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { identityModel, simpleModel, simpleStringModel, writeModelToRepository } from '@nereid/testkit';
import { nativeAddonMissing } from '../../core/native.js';
import { loadSyncSession, outputBytes, toFeed, type Feed, type SyncSession } from './native-session.js';
import type { OrtTensorType } from './ort-types.js';
import type { SessionWorkerOptions } from './worker-protocol.js';

let dir: string;
const opened: SyncSession[] = [];

function options(model: string, direct = true): SessionWorkerOptions {
  return {
    modelPath: join(dir, model, '1', 'model.onnx'),
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    enableCpuMemArena: true,
    enableMemPattern: true,
    direct,
  };
}

function load(model: string, direct = true): SyncSession {
  const session = loadSyncSession(options(model, direct));
  assert.ok(session, 'onnxruntime-node offers synchronous sessions');
  opened.push(session);
  return session;
}

function bytesOf(values: ArrayBufferView): Uint8Array {
  return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
}

/** The same run through a direct session and the binding's: types, shapes and bytes agree. */
function assertSameResults(model: string, feeds: Record<string, Feed>, fetches: string[]): Record<string, Uint8Array> {
  const direct = load(model);
  const binding = load(model, false);
  assert.equal(direct.kind, 'direct');
  assert.equal(binding.kind, 'binding');
  const a = direct.run(feeds, fetches);
  const b = binding.run(feeds, fetches);
  const out: Record<string, Uint8Array> = {};
  for (const name of fetches) {
    assert.equal(a[name]!.type, b[name]!.type, `${model} ${name}: type`);
    assert.deepEqual([...a[name]!.dims], [...b[name]!.dims], `${model} ${name}: dims`);
    assert.deepEqual(outputBytes(a[name]!), outputBytes(b[name]!), `${model} ${name}: bytes`);
    out[name] = outputBytes(a[name]!);
  }
  return out;
}

describe('ONNX Runtime sessions: direct calls against the binding', () => {
  before(async () => {
    assert.equal(nativeAddonMissing(), undefined, 'the native addon is built by `npm run build`');
    dir = await mkdtemp(join(tmpdir(), 'nereid-direct-'));
    await writeModelToRepository(dir, simpleModel());
    await writeModelToRepository(dir, simpleStringModel());
    for (const type of ['FP16', 'FP32', 'FP64', 'INT8', 'INT16', 'INT64', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'BOOL'] as const) {
      await writeModelToRepository(dir, identityModel(type, [-1, 4], { name: `identity_${type}` }));
    }
  });

  after(async () => {
    for (const s of opened) {
      try {
        s.dispose();
      } catch {
        // disposed by the test
      }
    }
    await rm(dir, { recursive: true, force: true });
  });

  it("computes simple's sum and difference as the binding does", () => {
    const in0 = Int32Array.from({ length: 32 }, (_, i) => i * 3 - 7);
    const in1 = Int32Array.from({ length: 32 }, (_, i) => 100 - i);
    const out = assertSameResults(
      'simple',
      { INPUT0: toFeed('int32', [2, 16], bytesOf(in0)), INPUT1: toFeed('int32', [2, 16], bytesOf(in1)) },
      ['OUTPUT1', 'OUTPUT0'],
    );
    const sum = new Int32Array(out.OUTPUT0!.slice().buffer);
    const difference = new Int32Array(out.OUTPUT1!.slice().buffer);
    for (let i = 0; i < 32; i++) {
      assert.equal(sum[i], in0[i]! + in1[i]!);
      assert.equal(difference[i], in0[i]! - in1[i]!);
    }
  });

  it('carries every numeric type, an empty batch, and an input that starts unaligned', () => {
    const types: Record<string, OrtTensorType> = {
      FP16: 'float16',
      FP32: 'float32',
      FP64: 'float64',
      INT8: 'int8',
      INT16: 'int16',
      INT64: 'int64',
      UINT8: 'uint8',
      UINT16: 'uint16',
      UINT32: 'uint32',
      UINT64: 'uint64',
      BOOL: 'bool',
    };
    const sizes: Record<OrtTensorType, number> = { float16: 2, float32: 4, float64: 8, int8: 1, int16: 2, int32: 4, int64: 8, uint8: 1, uint16: 2, uint32: 4, uint64: 8, bool: 1, string: 0 };
    for (const [datatype, type] of Object.entries(types)) {
      const model = `identity_${datatype}`;
      const bytes = Uint8Array.from({ length: 3 * 4 * sizes[type] }, (_, i) => (type === 'bool' ? i % 2 : (i * 37 + 11) & 0xff));
      const out = assertSameResults(model, { INPUT0: toFeed(type, [3, 4], bytes) }, ['OUTPUT0']);
      assert.deepEqual(out.OUTPUT0, bytes, `${model}: identity`);
      const empty = assertSameResults(model, { INPUT0: toFeed(type, [0, 4], new Uint8Array(0)) }, ['OUTPUT0']);
      assert.equal(empty.OUTPUT0!.byteLength, 0);
    }
    // A view at an odd offset is copied to alignment (toFeed) and computes the same.
    const backing = new Uint8Array(1 + 16);
    const odd = backing.subarray(1);
    const values = Float32Array.from([1.5, -2, 3.25, 4]);
    odd.set(bytesOf(values));
    const out = assertSameResults('identity_FP32', { INPUT0: toFeed('float32', [1, 4], odd) }, ['OUTPUT0']);
    assert.deepEqual([...new Float32Array(out.OUTPUT0!.slice().buffer)], [...values]);
  });

  it('leaves a model with STRING tensors, and a model that asks for it, to the binding', () => {
    assert.equal(load('simple_string').kind, 'binding');
    assert.equal(load('simple', false).kind, 'binding');
    const strings = load('simple_string').run(
      { INPUT0: { type: 'string', dims: [1, 16], data: Array(16).fill('7') }, INPUT1: { type: 'string', dims: [1, 16], data: Array(16).fill('2') } },
      ['OUTPUT0'],
    );
    assert.deepEqual(strings.OUTPUT0!.data, Array(16).fill('9'));
  });

  it("fails a bad run with ONNX Runtime's own message, or one naming the tensor, and keeps working", () => {
    const session = load('simple');
    const good = { INPUT0: toFeed('int32', [1, 16], bytesOf(new Int32Array(16).fill(2))), INPUT1: toFeed('int32', [1, 16], bytesOf(new Int32Array(16).fill(1))) };
    assert.throws(() => session.run({ ...good, INPUT0: toFeed('int32', [1, 15], bytesOf(new Int32Array(15))) }, ['OUTPUT0']), /Got invalid dimensions for input: INPUT0/);
    assert.throws(() => session.run({ ...good, INPUT1: toFeed('float32', [1, 16], bytesOf(new Float32Array(16))) }, ['OUTPUT0']), /Unexpected input data type/);
    assert.throws(() => session.run({ INPUT0: good.INPUT0 }, ['OUTPUT0']), /INPUT1/);
    assert.throws(() => session.run({ ...good, EXTRA: good.INPUT0 }, ['OUTPUT0']), /'EXTRA' is not an input of the model \(its inputs: INPUT0, INPUT1\)/);
    assert.throws(() => session.run(good, ['OUTPUT9']), /'OUTPUT9' is not an output of the model \(its outputs: OUTPUT0, OUTPUT1\)/);
    assert.throws(() => session.run({ ...good, INPUT0: { type: 'int32', dims: [1, 16], data: new Int32Array(15) } }, ['OUTPUT0']), /input 'INPUT0' has 60 bytes where its shape and type need 64/);
    const sum = new Int32Array(outputBytes(session.run(good, ['OUTPUT0']).OUTPUT0!).slice().buffer);
    assert.deepEqual([...sum], Array(16).fill(3));
  });

  it('refuses a run after dispose, and a model file ONNX Runtime cannot load', () => {
    const session = load('simple');
    session.dispose();
    const feed = toFeed('int32', [1, 16], bytesOf(new Int32Array(16)));
    assert.throws(() => session.run({ INPUT0: feed, INPUT1: feed }, ['OUTPUT0']), /session was released/);
    assert.throws(() => loadSyncSession({ ...options('simple'), modelPath: join(dir, 'missing.onnx') }), /missing\.onnx/);
  });
});
