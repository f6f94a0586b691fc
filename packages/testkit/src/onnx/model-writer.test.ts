import assert from 'node:assert/strict';
import { mkdtemp, readFile, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as ort from 'onnxruntime-node';
import { OnnxGraphBuilder, attr, encodeModel, writeOnnxModel } from './model-writer.js';
import { OnnxElemType, dataTypeOfOnnx, onnxElemType } from './onnx-types.js';

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');
const contains = (bytes: Uint8Array, hexNeedle: string): boolean => Buffer.from(bytes).indexOf(Buffer.from(hexNeedle, 'hex')) >= 0;

describe('encodeModel wire bytes', () => {
  it('encodes a minimal Identity model byte for byte', () => {
    const g = new OnnxGraphBuilder('g').input('X', 'FLOAT', [2]).output('Y', 'FLOAT', [2]).node('Identity', ['X'], ['Y']);
    const { bytes, externalData } = encodeModel(g, { irVersion: 8, opsets: [{ version: 13 }], producerName: 'p' });
    assert.equal(externalData, null);
    const valueInfo = (name: string): string =>
      // ValueInfoProto { name: 1, type: 2 { tensor_type: 1 { elem_type: 1 = FLOAT, shape: 2 { dim: 1 { dim_value: 1 = 2 } } } } }
      '0a01' + Buffer.from(name).toString('hex') + '120a' + '0a08' + '0801' + '1204' + '0a02' + '0802';
    const graph =
      '0a10' + '0a0158' + '120159' + '2208' + Buffer.from('Identity').toString('hex') + // node: input, output, op_type
      '120167' + // name 'g'
      '5a0f' + valueInfo('X') + // input (field 11)
      '620f' + valueInfo('Y'); // output (field 12)
    const expected =
      '0808' + // ir_version 8
      '120170' + // producer_name 'p'
      '3a37' + graph + // graph (field 7), 55 bytes
      '42040a00100d'; // opset_import (field 8) { domain: '', version: 13 }
    assert.equal(graph.length / 2, 0x37);
    assert.equal(hex(bytes), expected);
  });

  it('encodes symbolic, unknown and scalar shapes, and shapeless values', () => {
    const g = new OnnxGraphBuilder('g')
      .input('A', 'INT64', ['N', null, 3])
      .input('B', 'STRING', [])
      .input('C', 'DOUBLE', null)
      .output('D', 'FLOAT', [1])
      .node('Identity', ['A'], ['D']);
    const { bytes } = encodeModel(g);
    // A: elem_type 7, shape { dim { dim_param 'N' } dim { } dim { dim_value 3 } }
    assert.ok(contains(bytes, '0a01' + '41' + '1211' + '0a0f' + '0807' + '120b' + '0a03' + '12014e' + '0a00' + '0a02' + '0803'));
    // B: elem_type 8 and an empty shape (a scalar)
    assert.ok(contains(bytes, '0a0142' + '1206' + '0a04' + '0808' + '1200'));
    // C: elem_type 11 and no shape field at all
    assert.ok(contains(bytes, '0a0143' + '1204' + '0a02' + '080b'));
  });

  it('encodes every attribute kind with its type discriminator (field 20)', () => {
    const g = new OnnxGraphBuilder('g')
      .input('X', 'FLOAT', [1])
      .output('Y', 'FLOAT', [1])
      .node('Custom', ['X'], ['Y'], {
        i: attr.int(6),
        n: attr.int(-1),
        f: attr.float(1),
        s: attr.string('ab'),
        is: attr.ints([1, 2]),
        fs: attr.floats([1]),
        ss: attr.strings(['a', 'b']),
        t: attr.tensor({ name: 'w', elemType: 'INT32', dims: [2], data: new Int32Array([1, 2]) }),
      }, { domain: 'test.domain', name: 'n0' });
    const { bytes } = encodeModel(g);
    const name = (s: string): string => '0a' + s.length.toString(16).padStart(2, '0') + Buffer.from(s).toString('hex');
    assert.ok(contains(bytes, '2a08' + name('i') + '1806' + 'a00102'));
    assert.ok(contains(bytes, '2a11' + name('n') + '18ffffffffffffffffff01' + 'a00102'));
    assert.ok(contains(bytes, '2a0b' + name('f') + '150000803f' + 'a00101'));
    assert.ok(contains(bytes, '2a0a' + name('s') + '22026162' + 'a00103'));
    assert.ok(contains(bytes, '2a0b' + name('is') + '4001' + '4002' + 'a00107')); // ints unpacked
    assert.ok(contains(bytes, '2a0c' + name('fs') + '3d0000803f' + 'a00106')); // floats unpacked
    assert.ok(contains(bytes, '2a0d' + name('ss') + '4a0161' + '4a0162' + 'a00108'));
    // t: TensorProto { dims: 2, data_type: 6, name: 'w', raw_data: 01000000 02000000 }
    assert.ok(contains(bytes, '2a19' + name('t') + '2a11' + '0802' + '1006' + '420177' + '4a080100000002000000' + 'a00104'));
    assert.ok(contains(bytes, '1a026e30')); // node name (field 3)
    assert.ok(contains(bytes, '3a0b' + Buffer.from('test.domain').toString('hex'))); // node domain (field 7)
  });

  it('encodes initializers as raw_data, string_data or external data entries', () => {
    const g = new OnnxGraphBuilder('g')
      .input('X', 'FLOAT', [2])
      .output('Y', 'FLOAT', [2])
      .initializer('F', 'FLOAT', [2], [1, 2])
      .initializer('S', 'STRING', [2], ['a', 'bc'])
      .initializer('E', 'INT64', [1], [5n], { external: true })
      .node('Identity', ['X'], ['Y']);
    const { bytes, externalData } = encodeModel(g, { externalDataLocation: 'w.bin' });
    assert.ok(contains(bytes, '2a11' + '0802' + '1001' + '420146' + '4a080000803f00000040'));
    assert.ok(contains(bytes, '2a0e' + '0802' + '1008' + '320161' + '32026263' + '420153'));
    const entry = (k: string, v: string): string => {
      const body = '0a' + k.length.toString(16).padStart(2, '0') + Buffer.from(k).toString('hex') + '12' + v.length.toString(16).padStart(2, '0') + Buffer.from(v).toString('hex');
      return '6a' + (body.length / 2).toString(16).padStart(2, '0') + body;
    };
    assert.ok(contains(bytes, '0801' + '1007' + '420145' + entry('location', 'w.bin') + entry('offset', '0') + entry('length', '8') + '7001'));
    assert.ok(externalData);
    assert.equal(externalData.location, 'w.bin');
    assert.equal(hex(externalData.bytes), '0500000000000000');
  });

  it('writes model-level fields', () => {
    const g = new OnnxGraphBuilder('g').input('X', 'FLOAT', [1]).output('X', 'FLOAT', [1]);
    const { bytes } = encodeModel(g, {
      irVersion: 7,
      opsets: [{ version: 12 }, { domain: 'com.microsoft', version: 1 }],
      producerVersion: '1.0',
      domain: 'ai.nereid',
      modelVersion: 3,
      docString: 'doc',
      metadata: { k: 'v' },
    });
    assert.equal(hex(bytes.subarray(0, 2)), '0807');
    assert.ok(contains(bytes, '1a03' + Buffer.from('1.0').toString('hex')));
    assert.ok(contains(bytes, '2209' + Buffer.from('ai.nereid').toString('hex')));
    assert.ok(contains(bytes, '2803'));
    assert.ok(contains(bytes, '3203' + Buffer.from('doc').toString('hex')));
    assert.ok(contains(bytes, '4211' + '0a0d' + Buffer.from('com.microsoft').toString('hex') + '1001'));
    assert.ok(contains(bytes, '7206' + '0a016b' + '120176'));
  });

  it('rejects data of the wrong size and impossible external data', () => {
    const g = (data: Float32Array | readonly string[], type: 'FLOAT' | 'STRING', external = false): OnnxGraphBuilder =>
      new OnnxGraphBuilder('g').input('X', 'FLOAT', [1]).output('X', 'FLOAT', [1]).initializer('W', type, [3], data, { external });
    assert.throws(() => encodeModel(g(new Float32Array(2), 'FLOAT')), /8 bytes of data for 3 elements of FLOAT \(12 expected\)/);
    assert.throws(() => encodeModel(g(['a'], 'STRING')), /needs an array of 3 strings/);
    assert.throws(() => encodeModel(g(['a', 'b', 'c'], 'STRING', true)), /cannot be external data/);
    assert.throws(() => encodeModel(new OnnxGraphBuilder().input('X', 'FLOAT', [-1])), /non-negative integer/);
  });
});

describe('element types', () => {
  it('maps ONNX names, Nereid datatypes and numbers', () => {
    assert.equal(onnxElemType('FLOAT'), 1);
    assert.equal(onnxElemType('FP32'), 1);
    assert.equal(onnxElemType('BYTES'), OnnxElemType.STRING);
    assert.equal(onnxElemType('FP16'), 10);
    assert.equal(onnxElemType(11), 11);
    assert.equal(dataTypeOfOnnx('DOUBLE'), 'FP64');
    assert.equal(dataTypeOfOnnx(OnnxElemType.STRING), 'BYTES');
    assert.equal(dataTypeOfOnnx('BFLOAT16'), undefined);
    assert.equal(dataTypeOfOnnx('COMPLEX64'), undefined);
    assert.throws(() => onnxElemType('NOPE' as 'FLOAT'), RangeError);
    assert.throws(() => onnxElemType(99), RangeError);
  });
});

describe('written models run in ONNX Runtime', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'nereid-onnx-writer-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('runs a graph with initializers and attributes (Gemm, Constant)', async () => {
    const g = new OnnxGraphBuilder('affine')
      .input('X', 'FLOAT', ['N', 2])
      .output('Y', 'FLOAT', ['N', 2])
      .initializer('W', 'FLOAT', [2, 2], new Float32Array([1, 2, 3, 4]))
      .node('Constant', [], ['B'], { value: attr.tensor({ elemType: 'FLOAT', dims: [2], data: [10, 20] }) })
      .node('Gemm', ['X', 'W', 'B'], ['Y'], { alpha: attr.float(2), beta: attr.float(1), transB: attr.int(1) });
    const session = await ort.InferenceSession.create(encodeModel(g).bytes);
    const out = await session.run({ X: new ort.Tensor('float32', new Float32Array([1, 1, 0, 1]), [2, 2]) });
    // Y = 2 * X · Wᵀ + B; W rows are [1, 2] and [3, 4]
    assert.deepEqual(Array.from(out['Y']!.data as Float32Array), [16, 34, 14, 28]);
    await session.release();
  });

  it('loads external data from a model.onnx directory', async () => {
    const weights = Float32Array.from({ length: 1000 }, (_, i) => i / 8);
    const g = new OnnxGraphBuilder('ext')
      .input('X', 'FLOAT', ['N', 1000])
      .output('Y', 'FLOAT', ['N', 1000])
      .initializer('W', 'FLOAT', [1000], weights, { external: true })
      .initializer('K', 'INT64', [1], new BigInt64Array([2n]), { external: true })
      .node('Add', ['X', 'W'], ['S'])
      .node('Cast', ['K'], ['KF'], { to: attr.int(OnnxElemType.FLOAT) })
      .node('Mul', ['S', 'KF'], ['Y']);
    const model = encodeModel(g, { externalDataAlignment: 4096 });
    const file = join(dir, 'ext', '1', 'model.onnx', 'model.onnx');
    await writeOnnxModel(file, model);
    assert.deepEqual((await readdir(join(dir, 'ext', '1', 'model.onnx'))).sort(), ['model.onnx', 'model.onnx.data']);
    assert.equal((await stat(join(dir, 'ext', '1', 'model.onnx', 'model.onnx.data'))).size, 4096 + 8);
    assert.ok((await readFile(file)).length < 1000, 'weights are not inside the model file');
    const session = await ort.InferenceSession.create(file);
    const x = new Float32Array(1000).fill(1);
    const out = await session.run({ X: new ort.Tensor('float32', x, [1, 1000]) });
    const y = out['Y']!.data as Float32Array;
    assert.equal(y[0], 2);
    assert.equal(y[999], (1 + 999 / 8) * 2);
    await session.release();
  });

  it('declares the shapes ONNX Runtime reports', async () => {
    const g = new OnnxGraphBuilder('meta')
      .input('A', 'INT32', ['batch', 'seq', 4])
      .output('B', 'INT32', ['batch', 'seq', 4])
      .node('Identity', ['A'], ['B']);
    const session = await ort.InferenceSession.create(encodeModel(g).bytes);
    assert.deepEqual(session.inputMetadata[0], { name: 'A', isTensor: true, type: 'int32', shape: ['batch', 'seq', 4] });
    await session.release();
  });
});
