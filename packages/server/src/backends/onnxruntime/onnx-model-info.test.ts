import assert from 'node:assert/strict';
import { mkdir, mkdtemp, open, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import type { TestModel, ValueInfoSpec } from '@nereid/testkit';
import {
  OnnxGraphBuilder,
  Prng,
  ProtoWriter,
  WireType,
  dataTypeOfOnnx,
  encodeModel,
  fixedFirstDimModel,
  identityModel,
  mlpModel,
  noShapeModel,
  onnxElemType,
  scalarOutputModel,
  simpleModel,
  simpleStringModel,
  symbolicDimsModel,
  twoOutputTypesModel,
  writeModelToRepository,
} from '@nereid/testkit';
import * as ort from 'onnxruntime-node';
import type { OnnxValueInfo } from './onnx-model-info.js';
import { onnxElemTypeName, onnxElemTypeToDataType, readOnnxModelInfo } from './onnx-model-info.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'nereid-onnx-info-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

let fileCounter = 0;
async function writeTemp(bytes: Uint8Array | string, name = `m${fileCounter++}.onnx`): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, bytes);
  return path;
}

/** What the reader should report for a declared tensor. */
function expected(spec: ValueInfoSpec, hasInitializer = false): OnnxValueInfo {
  const elemType = onnxElemType(spec.elemType);
  const shape = spec.shape ?? null;
  return {
    name: spec.name,
    kind: 'tensor',
    elemType,
    datatype: dataTypeOfOnnx(elemType),
    shape: shape === null ? null : shape.map((d) => (typeof d === 'number' ? d : -1)),
    dimParams: shape === null ? null : shape.map((d) => (typeof d === 'string' ? d : null)),
    hasInitializer,
  };
}

async function assertFailure(path: string, pattern: RegExp): Promise<void> {
  await assert.rejects(readOnnxModelInfo(path), (err: unknown) => {
    assert.ok(err instanceof NereidError, `expected a NereidError, got ${String(err)}`);
    assert.equal(err.code, 'MODEL_LOAD_FAILED');
    assert.ok(err.message.includes(path), `message names the file: ${err.message}`);
    assert.match(err.message, pattern);
    return true;
  });
}

const builders: [string, () => TestModel][] = [
  ['simple', () => simpleModel()],
  ['simple_string', () => simpleStringModel()],
  ['mlp', () => mlpModel()],
  ['scalar_output', () => scalarOutputModel()],
  ['fixed_first_dim', () => fixedFirstDimModel()],
  ['symbolic_dims', () => symbolicDimsModel()],
  ['two_output_types', () => twoOutputTypesModel()],
  ['no_shape', () => noShapeModel()],
  ...(['BOOL', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64', 'FLOAT16', 'FLOAT', 'DOUBLE', 'STRING', 'BFLOAT16'] as const).map(
    (t): [string, () => TestModel] => [`identity ${t}`, () => identityModel(t, [-1, 3, 'w'])],
  ),
];

describe('readOnnxModelInfo on the testkit models', () => {
  for (const [label, build] of builders) {
    it(`reads exactly what ${label} declares`, async () => {
      const model = build();
      const path = await writeTemp(model.onnx.bytes);
      const info = await readOnnxModelInfo(path);
      assert.equal(info.path, path);
      assert.equal(info.irVersion, 8);
      assert.deepEqual(info.opsetImports, [{ domain: '', version: 13 }]);
      assert.equal(info.producerName, 'nereid-testkit');
      assert.deepEqual(info.inputs, model.inputs.map((s) => expected(s)));
      assert.deepEqual(info.outputs, model.outputs.map((s) => expected(s)));
      assert.deepEqual(info.externalDataLocations, []);
      assert.ok(info.bytesRead <= model.onnx.bytes.length);
    });
  }

  it('reports what ONNX Runtime reports', async () => {
    for (const [label, build] of builders) {
      if (label === 'identity BFLOAT16') continue; // the Node binding cannot open it (see testkit)
      const model = build();
      const info = await readOnnxModelInfo(await writeTemp(model.onnx.bytes));
      const session = await ort.InferenceSession.create(model.onnx.bytes);
      try {
        const fromOrt = (m: readonly ort.InferenceSession.ValueMetadata[]): unknown[] =>
          m.map((v) => ({ name: v.name, shape: v.isTensor ? v.shape.map((d) => (typeof d === 'string' ? -1 : d)) : null }));
        const fromInfo = (vs: readonly OnnxValueInfo[]): unknown[] => vs.map((v) => ({ name: v.name, shape: v.shape ?? [] }));
        assert.deepEqual(fromInfo(info.inputs), fromOrt(session.inputMetadata), label);
        assert.deepEqual(fromInfo(info.outputs), fromOrt(session.outputMetadata), label);
      } finally {
        await session.release();
      }
    }
  });

  it('lists initializers and finds external data in a model.onnx directory', async () => {
    const model = mlpModel({ name: 'mlp_ext', externalData: true });
    const modelDir = join(await writeModelToRepository(dir, model, { asDirectory: true }), '1', 'model.onnx');
    const info = await readOnnxModelInfo(modelDir);
    assert.equal(info.path, join(modelDir, 'model.onnx'));
    assert.deepEqual(info.initializerNames, ['W0', 'B0', 'W1', 'B1', 'W2', 'B2']);
    assert.deepEqual(info.externalDataLocations, ['model.onnx.data']);
    assert.deepEqual(info.inputs, model.inputs.map((s) => expected(s)));
    assert.deepEqual(info.outputs, model.outputs.map((s) => expected(s)));

    const inline = await readOnnxModelInfo(await writeTemp(mlpModel().onnx.bytes));
    assert.deepEqual(inline.initializerNames, ['W0', 'B0', 'W1', 'B1', 'W2', 'B2']);
    assert.ok(inline.bytesRead < 256 * 1024, `read ${inline.bytesRead} bytes of a 5 MB model`);
  });
});

describe('readOnnxModelInfo on hand-built graphs', () => {
  it('handles unknown dims, scalars, missing shapes and non-tensor values', async () => {
    const g = new OnnxGraphBuilder('odd')
      .input('A', 'FLOAT', ['N', null, 0, 7])
      .input('B', 'INT64', [])
      .input('C', 'DOUBLE', null)
      .inputSpec({ name: 'D', elemType: 'FLOAT', shape: [2], kind: 'sequence' })
      .input('E', 'COMPLEX64', [1])
      .output('F', 'FLOAT', [1]);
    const info = await readOnnxModelInfo(await writeTemp(encodeModel(g).bytes));
    assert.equal(info.graphName, 'odd');
    assert.deepEqual(info.inputs, [
      { name: 'A', kind: 'tensor', elemType: 1, datatype: 'FP32', shape: [-1, -1, 0, 7], dimParams: ['N', null, null, null], hasInitializer: false },
      { name: 'B', kind: 'tensor', elemType: 7, datatype: 'INT64', shape: [], dimParams: [], hasInitializer: false },
      { name: 'C', kind: 'tensor', elemType: 11, datatype: 'FP64', shape: null, dimParams: null, hasInitializer: false },
      { name: 'D', kind: 'sequence', elemType: 0, datatype: undefined, shape: null, dimParams: null, hasInitializer: false },
      { name: 'E', kind: 'tensor', elemType: 14, datatype: undefined, shape: [1], dimParams: [null], hasInitializer: false },
    ]);
  });

  it('marks inputs that are also initializers (IR < 4 style)', async () => {
    const g = new OnnxGraphBuilder('ir3')
      .input('X', 'FLOAT', [2])
      .input('W', 'FLOAT', [2])
      .output('Y', 'FLOAT', [2])
      .initializer('W', 'FLOAT', [2], [1, 2])
      .initializer('S', 'STRING', [1], ['s'])
      .node('Add', ['X', 'W'], ['Y']);
    const info = await readOnnxModelInfo(await writeTemp(encodeModel(g, { irVersion: 3, opsets: [{ version: 9 }] }).bytes));
    assert.equal(info.irVersion, 3);
    assert.deepEqual(info.initializerNames, ['W', 'S']);
    assert.deepEqual(info.inputs.map((v) => [v.name, v.hasInitializer]), [['X', false], ['W', true]]);
  });

  it('reads model-level fields', async () => {
    const g = new OnnxGraphBuilder('meta').input('X', 'FLOAT', [1]).output('X', 'FLOAT', [1]);
    const bytes = encodeModel(g, {
      irVersion: 10,
      opsets: [{ version: 21 }, { domain: 'com.microsoft', version: 1 }],
      producerName: 'pytorch',
      producerVersion: '2.5.0',
      metadata: { author: 'me', 'é': 'ü', ['__proto__']: 'x' },
    }).bytes;
    const info = await readOnnxModelInfo(await writeTemp(bytes));
    assert.equal(info.irVersion, 10);
    assert.deepEqual(info.opsetImports, [{ domain: '', version: 21 }, { domain: 'com.microsoft', version: 1 }]);
    assert.equal(info.producerName, 'pytorch');
    assert.equal(info.producerVersion, '2.5.0');
    assert.deepEqual(Object.entries(info.metadata), [['author', 'me'], ['é', 'ü'], ['__proto__', 'x']]);
    assert.equal(Object.getPrototypeOf(info.metadata), Object.prototype);
  });

  it('reads negative dim_value as -1 and skips unknown fields', async () => {
    const dim = (w: ProtoWriter, value: number): void => void w.messageField(1, (d) => d.varintField(1, value));
    const bytes = new ProtoWriter()
      .varintField(1, 7)
      .varintField(99, 5) // unknown varint field
      .fixed64Field(98, 1n) // unknown fixed64 field
      .messageField(7, (g) => {
        g.messageField(11, (vi) => {
          vi.stringField(1, 'X');
          vi.messageField(2, (t) => t.messageField(1, (tt) => {
            tt.varintField(1, 1);
            tt.messageField(2, (s) => { dim(s, -1); dim(s, 5); });
          }));
          vi.fixed32Field(50, 1); // unknown fixed32 field
        });
      })
      .finish();
    const info = await readOnnxModelInfo(await writeTemp(bytes));
    assert.deepEqual(info.inputs[0]!.shape, [-1, 5]);
    assert.deepEqual(info.opsetImports, []);
  });

  it('reads a 2 GB model without reading its weights', async (t) => {
    // A graph whose first initializer holds 2e9 bytes of raw_data (a hole in a sparse file),
    // followed, as the reference serializer orders them, by the graph's inputs and outputs.
    const RAW = 2_000_000_000;
    const tensorHead = new ProtoWriter()
      .varintField(1, RAW / 4) // dims
      .varintField(2, 1) // FLOAT
      .stringField(8, 'huge')
      .tag(9, WireType.LEN)
      .varint(RAW)
      .finish();
    const valueInfo = (name: string) => (vi: ProtoWriter): void => {
      vi.stringField(1, name);
      vi.messageField(2, (t) => t.messageField(1, (tt) => {
        tt.varintField(1, 1);
        tt.messageField(2, (s) => s.messageField(1, (d) => d.stringField(2, 'N')));
      }));
    };
    const graphHead = new ProtoWriter()
      .messageField(1, (n) => n.stringField(1, 'X').stringField(1, 'huge').stringField(2, 'Y').stringField(4, 'Add'))
      .stringField(2, 'big')
      .tag(5, WireType.LEN)
      .varint(tensorHead.length + RAW)
      .raw(tensorHead)
      .finish();
    const graphTail = new ProtoWriter().messageField(11, valueInfo('X')).messageField(12, valueInfo('Y')).finish();
    const modelHead = new ProtoWriter()
      .varintField(1, 8)
      .stringField(2, 'big-exporter')
      .tag(7, WireType.LEN)
      .varint(graphHead.length + RAW + graphTail.length)
      .raw(graphHead)
      .finish();
    const modelTail = new ProtoWriter().messageField(8, (o) => o.stringField(1, '').varintField(2, 17)).finish();
    const path = join(dir, 'big.onnx');
    const fh = await open(path, 'w');
    try {
      await fh.write(modelHead, 0, modelHead.length, 0);
      const tail = Buffer.concat([graphTail, modelTail]);
      await fh.write(tail, 0, tail.length, modelHead.length + RAW);
    } finally {
      await fh.close();
    }
    try {
      const started = process.hrtime.bigint();
      const info = await readOnnxModelInfo(path);
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      assert.deepEqual(info.initializerNames, ['huge']);
      assert.deepEqual(info.inputs.map((v) => [v.name, v.shape, v.datatype]), [['X', [-1], 'FP32']]);
      assert.deepEqual(info.outputs.map((v) => v.name), ['Y']);
      assert.deepEqual(info.opsetImports, [{ domain: '', version: 17 }]);
      assert.ok(info.bytesRead < 512 * 1024, `read ${info.bytesRead} bytes of ${modelHead.length + RAW + 100}`);
      t.diagnostic(`2 GB model read in ${ms.toFixed(2)} ms, ${info.bytesRead} bytes read`);
    } finally {
      await rm(path, { force: true });
    }
  });
});

describe('readOnnxModelInfo failures', () => {
  it('rejects a truncated file, naming the file and the cut field', async () => {
    const bytes = simpleModel().onnx.bytes;
    const path = await writeTemp(bytes.subarray(0, Math.floor(bytes.length / 2)));
    await assertFailure(path, /is truncated: the graph \(ModelProto.graph\) at byte \d+ declares \d+ bytes but the file ends \d+ bytes later/);
  });

  it('never fails with anything but MODEL_LOAD_FAILED on any prefix of a model', async () => {
    const bytes = twoOutputTypesModel().onnx.bytes;
    let rejected = 0;
    for (let n = 1; n < bytes.length; n++) {
      const path = await writeTemp(bytes.subarray(0, n), 'prefix.onnx');
      try {
        await readOnnxModelInfo(path);
      } catch (err) {
        assert.ok(err instanceof NereidError && err.code === 'MODEL_LOAD_FAILED', `prefix ${n}: ${String(err)}`);
        rejected++;
      }
    }
    // Only cuts at the end of the graph field (before opset_import) leave a readable model.
    assert.ok(rejected >= bytes.length - 10, `${rejected} of ${bytes.length - 1} prefixes rejected`);
  });

  it('never fails with anything but MODEL_LOAD_FAILED on random bytes', async () => {
    const rng = new Prng(3);
    for (let i = 0; i < 200; i++) {
      const bytes = Uint8Array.from({ length: 1 + (rng.nextUint32() % 300) }, () => rng.nextUint32() & 0xff);
      const path = await writeTemp(bytes, 'random.onnx');
      await assert.rejects(readOnnxModelInfo(path), (err: unknown) => err instanceof NereidError && err.code === 'MODEL_LOAD_FAILED');
    }
  });

  it('rejects missing, empty and non-ONNX files with a reason', async () => {
    await assertFailure(join(dir, 'nope.onnx'), /cannot read ONNX model .*: no such file or directory/);
    const emptyDir = join(dir, 'empty-model-dir');
    await mkdir(emptyDir);
    await assertFailure(emptyDir, /model\.onnx': no such file or directory/);
    await assertFailure(await writeTemp(new Uint8Array(0)), /is empty/);
    await assertFailure(
      await writeTemp('version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n'),
      /Git LFS pointer/,
    );
    await assertFailure(await writeTemp('name: "simple"\nplatform: "onnxruntime_onnx"\n'), /malformed|truncated|no graph/);
    await assertFailure(await writeTemp(new ProtoWriter().varintField(1, 8).finish()), /has no graph \(ModelProto field 7\)/);
    const noIr = new ProtoWriter().messageField(7, (g) => g.stringField(2, 'g')).finish();
    await assertFailure(await writeTemp(noIr), /has no ir_version/);
    await assertFailure(await writeTemp(new ProtoWriter().tag(7, WireType.VARINT).varint(1).finish()), /ModelProto.graph has wire type 0, expected 2/);
    await assertFailure(await writeTemp(Uint8Array.from([0x4b])), /ModelProto field 9 at byte 1 has a protobuf group \(wire type 3\)/);
    await assertFailure(await writeTemp(Uint8Array.from([0x08, 0x80, 0x80])), /truncated: a varint at byte 1 is cut off by the end of the file/);
    await assertFailure(await writeTemp(Uint8Array.from([0x08, ...new Array<number>(11).fill(0xff)])), /longer than 10 bytes/);
  });

  it('rejects an inner field that overruns its message', async () => {
    const bytes = new ProtoWriter()
      .varintField(1, 8)
      .messageField(7, (g) => g.messageField(11, (vi) => vi.tag(1, WireType.LEN).varint(50).raw(Buffer.from('X'))))
      .finish();
    // The ValueInfoProto's name claims 50 bytes inside a 4-byte message.
    const path = await writeTemp(bytes);
    await assertFailure(path, /malformed: a field at byte \d+ declares 50 bytes, past the end of its enclosing message/);
  });
});

describe('element type helpers', () => {
  it('maps ONNX element types to Nereid datatypes', () => {
    assert.equal(onnxElemTypeToDataType(1), 'FP32');
    assert.equal(onnxElemTypeToDataType(8), 'BYTES');
    assert.equal(onnxElemTypeToDataType(10), 'FP16');
    assert.equal(onnxElemTypeToDataType(13), 'UINT64');
    assert.equal(onnxElemTypeToDataType(16), undefined);
    assert.equal(onnxElemTypeToDataType(0), undefined);
    assert.equal(onnxElemTypeName(16), 'BFLOAT16');
    assert.equal(onnxElemTypeName(99), 'type 99');
  });
});
