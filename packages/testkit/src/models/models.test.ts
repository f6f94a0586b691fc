import assert from 'node:assert/strict';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import type { DataType } from '@nereid/protocol';
import * as ort from 'onnxruntime-node';
import { fromFloat16Bits, toFloat16Bits } from '../onnx/onnx-types.js';
import type { TestModel } from './index.js';
import {
  ORT_NODE_DATATYPES,
  Prng,
  fixedFirstDimModel,
  identityModel,
  mlpModel,
  noShapeModel,
  scalarOutputModel,
  simpleIdentityModel,
  simpleInt8Model,
  simpleModel,
  simpleStringModel,
  symbolicDimsModel,
  twoOutputTypesModel,
  writeModelToRepository,
} from './index.js';

type Feeds = Record<string, ort.Tensor>;

async function run(model: TestModel | string, feeds: Feeds): Promise<Record<string, ort.Tensor>> {
  const session = typeof model === 'string' ? await ort.InferenceSession.create(model) : await ort.InferenceSession.create(model.onnx.bytes);
  try {
    const out = await session.run(feeds);
    return out as Record<string, ort.Tensor>;
  } finally {
    await session.release();
  }
}

const TRITON_SIMPLE_CONFIG = `name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "OUTPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
`;

describe('simple', () => {
  it('adds and subtracts a batch of 2', async () => {
    const a = Int32Array.from({ length: 32 }, (_, i) => i);
    const b = Int32Array.from({ length: 32 }, (_, i) => 100 - 3 * i);
    const out = await run(simpleModel(), {
      INPUT0: new ort.Tensor('int32', a, [2, 16]),
      INPUT1: new ort.Tensor('int32', b, [2, 16]),
    });
    assert.deepEqual(out['OUTPUT0']!.dims, [2, 16]);
    assert.deepEqual(Array.from(out['OUTPUT0']!.data as Int32Array), Array.from(a, (x, i) => x + b[i]!));
    assert.deepEqual(Array.from(out['OUTPUT1']!.data as Int32Array), Array.from(a, (x, i) => x - b[i]!));
  });

  it("has Triton's simple config, with the ONNX platform", () => {
    assert.equal(simpleModel().config, TRITON_SIMPLE_CONFIG);
  });
});

describe('simple_string', () => {
  it('adds and subtracts decimal strings', async () => {
    const a = Array.from({ length: 32 }, (_, i) => String(i * 7 - 50));
    const b = Array.from({ length: 32 }, (_, i) => String(1000 - i));
    const out = await run(simpleStringModel(), {
      INPUT0: new ort.Tensor('string', a, [2, 16]),
      INPUT1: new ort.Tensor('string', b, [2, 16]),
    });
    assert.equal(out['OUTPUT0']!.type, 'string');
    assert.deepEqual(out['OUTPUT0']!.data, a.map((x, i) => String(Number(x) + Number(b[i]))));
    assert.deepEqual(out['OUTPUT1']!.data, a.map((x, i) => String(Number(x) - Number(b[i]))));
  });

  it('declares TYPE_STRING tensors', () => {
    const config = simpleStringModel().config!;
    assert.equal(config.match(/data_type: TYPE_STRING/g)?.length, 4);
    assert.match(config, /^name: "simple_string"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n/);
  });
});

describe('mlp', () => {
  it('matches the reference forward pass', async () => {
    const model = mlpModel();
    assert.ok(model.flopsPerRow > 2e6, `${model.flopsPerRow} FLOP per row`);
    const batch = 3;
    const input = new Prng(42).float32Array(batch * 256);
    const out = await run(model, { INPUT0: new ort.Tensor('float32', input, [batch, 256]) });
    assert.deepEqual(out['OUTPUT0']!.dims, [batch, 16]);
    const got = out['OUTPUT0']!.data as Float32Array;
    const want = model.compute(input, batch);
    for (let i = 0; i < want.length; i++) {
      assert.ok(Math.abs(got[i]! - want[i]!) <= 1e-4 + 1e-4 * Math.abs(want[i]!), `element ${i}: ${got[i]} vs ${want[i]}`);
    }
    assert.ok(want.some((v) => Math.abs(v) > 0.05), 'outputs are not all near zero');
  });

  it('is deterministic for a seed and differs across seeds', () => {
    assert.deepEqual(mlpModel().onnx.bytes, mlpModel().onnx.bytes);
    assert.notDeepEqual(mlpModel({ seed: 2 }).layers[0]!.weight.subarray(0, 8), mlpModel().layers[0]!.weight.subarray(0, 8));
  });

  it('has a dynamic-batching config', () => {
    const config = mlpModel().config!;
    assert.match(config, /max_batch_size: 32\n/);
    assert.match(config, /dims: \[ 256 \]/);
    assert.match(config, /dynamic_batching \{\n {2}max_queue_delay_microseconds: 200\n\}/);
    assert.match(config, /instance_group \[\n {2}\{\n {4}kind: KIND_CPU\n {4}count: 1\n {2}\}\n\]/);
  });
});

/** Test data for each datatype, and how to read an ORT output back into comparable values. */
function identityData(datatype: DataType): { type: ort.Tensor.Type; data: ort.Tensor.DataType; expect: unknown[] } {
  switch (datatype) {
    case 'BOOL': return { type: 'bool', data: Uint8Array.from([1, 0, 0, 1]), expect: [1, 0, 0, 1] };
    case 'UINT8': return { type: 'uint8', data: Uint8Array.from([0, 1, 128, 255]), expect: [0, 1, 128, 255] };
    case 'UINT16': return { type: 'uint16', data: Uint16Array.from([0, 1, 40000, 65535]), expect: [0, 1, 40000, 65535] };
    case 'UINT32': return { type: 'uint32', data: Uint32Array.from([0, 1, 3e9, 4294967295]), expect: [0, 1, 3e9, 4294967295] };
    case 'UINT64': return { type: 'uint64', data: BigUint64Array.from([0n, 1n, 1n << 53n, (1n << 64n) - 1n]), expect: [0n, 1n, 1n << 53n, (1n << 64n) - 1n] };
    case 'INT8': return { type: 'int8', data: Int8Array.from([-128, -1, 0, 127]), expect: [-128, -1, 0, 127] };
    case 'INT16': return { type: 'int16', data: Int16Array.from([-32768, -1, 0, 32767]), expect: [-32768, -1, 0, 32767] };
    case 'INT32': return { type: 'int32', data: Int32Array.from([-(2 ** 31), -1, 0, 2 ** 31 - 1]), expect: [-(2 ** 31), -1, 0, 2 ** 31 - 1] };
    case 'INT64': return { type: 'int64', data: BigInt64Array.from([-(1n << 63n), -1n, 1n << 60n, (1n << 63n) - 1n]), expect: [-(1n << 63n), -1n, 1n << 60n, (1n << 63n) - 1n] };
    case 'FP16': return { type: 'float16', data: Uint16Array.from([1, -2.5, 65504, 2 ** -24], toFloat16Bits), expect: [1, -2.5, 65504, 2 ** -24] };
    case 'FP32': return { type: 'float32', data: Float32Array.from([1.5, -0, 3.4e38, -1e-7]), expect: Array.from(Float32Array.from([1.5, -0, 3.4e38, -1e-7])) };
    case 'FP64': return { type: 'float64', data: Float64Array.from([Math.PI, -1e300, 5e-324, 0]), expect: [Math.PI, -1e300, 5e-324, 0] };
    case 'BYTES': return { type: 'string', data: ['', 'a', 'héllo ✓', 'x'.repeat(1000)], expect: ['', 'a', 'héllo ✓', 'x'.repeat(1000)] };
    default: throw new Error(`no test data for ${datatype}`);
  }
}

describe('identity', () => {
  for (const datatype of ORT_NODE_DATATYPES) {
    it(`round-trips ${datatype}`, async () => {
      const model = identityModel(datatype, [-1, 2]);
      const { type, data, expect } = identityData(datatype);
      const out = await run(model, { INPUT0: new ort.Tensor(type, data, [2, 2]) });
      const y = out['OUTPUT0']!;
      assert.equal(y.type, type);
      assert.deepEqual(y.dims, [2, 2]);
      const values = datatype === 'FP16' ? Array.from(y.data as Uint16Array, fromFloat16Bits) : Array.from(y.data as ArrayLike<unknown>);
      assert.deepEqual(values, expect);
      assert.equal(model.name, `identity_${datatype.toLowerCase()}`);
    });
  }

  it('accepts ONNX type names and fixed shapes', async () => {
    const model = identityModel('DOUBLE', [3]);
    assert.equal(model.maxBatchSize, 0);
    assert.match(model.config!, /data_type: TYPE_FP64\n {4}dims: \[ 3 \]/);
    const out = await run(model, { INPUT0: new ort.Tensor('float64', Float64Array.from([1, 2, 3]), [3]) });
    assert.deepEqual(Array.from(out['OUTPUT0']!.data as Float64Array), [1, 2, 3]);
  });

  it('cannot feed BF16 through the Node binding (why ORT_NODE_DATATYPES lacks it)', async () => {
    await assert.rejects(ort.InferenceSession.create(identityModel('BF16').onnx.bytes), /Unsupported data type: 16/);
  });
});

describe('shape models', () => {
  it('scalarOutputModel sums to a scalar', async () => {
    const model = scalarOutputModel();
    const out = await run(model, { INPUT0: new ort.Tensor('float32', Float32Array.from([1, 2, 3, 4.5]), [4]) });
    assert.deepEqual(out['OUTPUT0']!.dims, []);
    assert.deepEqual(Array.from(out['OUTPUT0']!.data as Float32Array), [10.5]);
    assert.match(model.config!, /max_batch_size: 0\n/);
    assert.match(model.config!, /name: "OUTPUT0"\n {4}data_type: TYPE_FP32\n {4}dims: \[ 1 \]\n/);
  });

  it('fixedFirstDimModel doubles a [2, 8] tensor', async () => {
    const model = fixedFirstDimModel();
    const x = Float32Array.from({ length: 16 }, (_, i) => i);
    const out = await run(model, { INPUT0: new ort.Tensor('float32', x, [2, 8]) });
    assert.deepEqual(Array.from(out['OUTPUT0']!.data as Float32Array), Array.from(x, (v) => 2 * v));
    assert.match(model.config!, /max_batch_size: 0\n/);
    assert.match(model.config!, /dims: \[ 2, 8 \]/);
  });

  it('symbolicDimsModel takes any batch, height and width', async () => {
    const model = symbolicDimsModel();
    const x = Float32Array.from({ length: 2 * 3 * 5 * 3 }, (_, i) => (i % 2 ? i : -i));
    const out = await run(model, { INPUT0: new ort.Tensor('float32', x, [2, 3, 5, 3]) });
    assert.deepEqual(out['OUTPUT0']!.dims, [2, 3, 5, 3]);
    // ORT's Relu keeps the sign of -0; compare values with -0 folded into 0.
    assert.deepEqual(Array.from(out['OUTPUT0']!.data as Float32Array, (v) => v + 0), Array.from(x, (v) => Math.max(0, v)));
    assert.match(model.config!, /dims: \[ -1, -1, 3 \]/);
  });

  it('twoOutputTypesModel returns FP32 and INT64', async () => {
    const model = twoOutputTypesModel();
    const x = Float32Array.from([1.5, -2.7, 0, 100.9]);
    const out = await run(model, { INPUT0: new ort.Tensor('float32', x, [1, 4]) });
    assert.deepEqual(Array.from(out['OUTPUT0']!.data as Float32Array), Array.from(x, (v) => Math.fround(-v)));
    assert.equal(out['OUTPUT1']!.type, 'int64');
    assert.deepEqual(Array.from(out['OUTPUT1']!.data as BigInt64Array), [1n, -2n, 0n, 100n]);
    assert.match(model.config!, /data_type: TYPE_INT64/);
  });

  it('noShapeModel passes any shape and has no config', async () => {
    const model = noShapeModel();
    assert.equal(model.config, undefined);
    for (const dims of [[3], [2, 2], []]) {
      const n = dims.reduce((a, b) => a * b, 1);
      const out = await run(model, { INPUT0: new ort.Tensor('float32', new Float32Array(n).fill(7), dims) });
      assert.deepEqual(out['OUTPUT0']!.dims, dims);
    }
  });
});

describe('writeModelToRepository', () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'nereid-testkit-repo-'));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('writes config.pbtxt and <version>/model.onnx', async () => {
    const model = simpleModel();
    const dir = await writeModelToRepository(root, model);
    assert.equal(dir, join(root, 'simple'));
    assert.equal(await readFile(join(dir, 'config.pbtxt'), 'utf8'), model.config);
    assert.deepEqual(await readFile(join(dir, '1', 'model.onnx')), Buffer.from(model.onnx.bytes));
  });

  it('writes an external-data model as a model.onnx directory that ORT runs', async () => {
    const model = mlpModel({ name: 'mlp_ext', externalData: true, hiddenSizes: [64], inputSize: 32, outputSize: 4 });
    const dir = await writeModelToRepository(root, model, { version: 3, asDirectory: true });
    const modelDir = join(dir, '3', 'model.onnx');
    assert.deepEqual((await readdir(modelDir)).sort(), ['model.onnx', 'model.onnx.data']);
    const input = new Prng(7).float32Array(2 * 32);
    const out = await run(join(modelDir, 'model.onnx'), { INPUT0: new ort.Tensor('float32', input, [2, 32]) });
    const want = model.compute(input, 2);
    const got = out['OUTPUT0']!.data as Float32Array;
    for (let i = 0; i < want.length; i++) assert.ok(Math.abs(got[i]! - want[i]!) < 1e-4);
  });
});

describe('examples/model_repository', () => {
  // The example configs are committed text; scripts/make-examples.mjs writes the models from
  // these same builders, so the two must agree.
  const repository = fileURLToPath(new URL('../../../../examples/model_repository/', import.meta.url));
  for (const model of [simpleModel(), simpleStringModel(), simpleIdentityModel(), simpleInt8Model(), mlpModel()]) {
    it(`${model.name}/config.pbtxt matches the ${model.name} builder`, async () => {
      assert.equal(await readFile(join(repository, model.name, 'config.pbtxt'), 'utf8'), model.config);
    });
  }
});
