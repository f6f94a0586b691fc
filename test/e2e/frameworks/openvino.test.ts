/**
 * The OpenVINO backend (`backend: "openvino"`): models made here by OpenVINO itself (an ONNX model
 * from our writer converted to an IR with openvino.convert_model / save_model, the same ONNX model
 * read directly, graphs from OpenVINO's opset API), served over HTTP and gRPC and checked element
 * by element against OpenVINO called directly on the same model and input; dynamic batching,
 * the parameters Triton's OpenVINO backend takes, RESHAPE_IO_LAYERS and dynamic shapes,
 * auto-complete of a config-less IR, and bad models and requests refused with clear errors while
 * the server keeps serving.
 *
 * Needs the runtimes environment (`node scripts/setup.mjs runtimes`); fails naming it otherwise.
 */
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { defaultIntraOpThreads, type InferResponse, type ModelConfig } from '@nereid/server';
import type { DataType } from '@nereid/protocol';
import { OnnxGraphBuilder, simpleModel } from '@nereid/testkit';
import { inferRequest, inferenceClient, inputTensor, rawBytes, unary, unaryError, assertStatus } from '../../helpers/grpc.js';
import { httpRequest, inferJson, makeRepository, outputNamed, removeDir, simpleCase, startServer, type JsonInferResponse, type ModelFiles, type RunningGrpcServer, type RunningServer } from '../../helpers/harness.js';
import { convertToIr, copyIr, openvinoInfer, requireOpenVino, saveOpsetModel, writeOnnx, type RawTensor } from '../../helpers/openvino.js';
import { LOCAL_ENDPOINTS, runNereid } from '../../helpers/cli.js';
import { recordingLogger, waitUntil } from '../../helpers/python.js';

const W = [0.5, -1, 2, 1.5, 0.25, -0.75, -2, 1, 0.125, 3, -0.5, 1];
const B = [0.1, -0.2, 0.3];

/** Y = X·W + B, Z = Relu(Y): X FP32 [batch, 4] (a fixed first dimension when `batch` is a number). */
function affineGraph(batch: string | number = 'batch'): OnnxGraphBuilder {
  return new OnnxGraphBuilder('affine')
    .input('X', 'FLOAT', [batch, 4])
    .initializer('W', 'FLOAT', [4, 3], new Float32Array(W))
    .initializer('B', 'FLOAT', [3], new Float32Array(B))
    .output('Y', 'FLOAT', [batch, 3])
    .output('Z', 'FLOAT', [batch, 3])
    .node('MatMul', ['X', 'W'], ['XW'])
    .node('Add', ['XW', 'B'], ['Y'])
    .node('Relu', ['Y'], ['Z']);
}

/** A(n, m) FP32 of any shape → A * 2 (dynamic shapes). */
function doubleGraph(): OnnxGraphBuilder {
  return new OnnxGraphBuilder('double')
    .input('A', 'FLOAT', ['n', 'm'])
    .initializer('TWO', 'FLOAT', [], new Float32Array([2]))
    .output('D', 'FLOAT', ['n', 'm'])
    .node('Mul', ['A', 'TWO'], ['D']);
}

/** One output per data type the backend maps: INT64 ×3, FP16 ×0.5, UINT8 +1, BOOL not, INT8 negated. */
const TYPES_SOURCE = `
i = ops.parameter([-1, 3], np.int64, name="I64")
h = ops.parameter([-1, 3], np.float16, name="F16")
u = ops.parameter([-1, 3], np.uint8, name="U8")
b = ops.parameter([-1, 3], bool, name="BOOL")
s = ops.parameter([-1, 3], np.int8, name="I8")
outs = [
    ops.multiply(i, ops.constant(np.array(3, np.int64))),
    ops.multiply(h, ops.constant(np.array(0.5, np.float16))),
    ops.add(u, ops.constant(np.array(1, np.uint8))),
    ops.logical_not(b),
    ops.negative(s),
]
for out, name in zip(outs, ["I64_OUT", "F16_OUT", "U8_OUT", "BOOL_OUT", "I8_OUT"]):
    out.output(0).get_tensor().set_names({name})
model = ov.Model(outs, [i, h, u, b, s], "types")
`;

const IO_AFFINE = `input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "Z" data_type: TYPE_FP32 dims: [ 3 ] } ]`;

function param(key: string, value: string): string {
  return `parameters { key: "${key}" value { string_value: "${value}" } }\n`;
}

const CONFIGS: Record<string, string> = {
  // A parameter Triton passes on that OpenVINO's CPU plugin no longer takes: left out, with a warning.
  ov_compile_threads: `backend: "openvino"\nmax_batch_size: 8\n${IO_AFFINE}\n${param('COMPILATION_NUM_THREADS', '2')}`,
  ov_ir: `backend: "openvino"
max_batch_size: 8
${IO_AFFINE}
dynamic_batching { max_queue_delay_microseconds: 50000 }
${param('NUM_STREAMS', '1')}${param('INFERENCE_NUM_THREADS', '1')}${param('PERFORMANCE_HINT', 'LATENCY')}`,
  ov_onnx: `backend: "openvino"
default_model_filename: "model.onnx"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, 3 ] }, { name: "Z" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]
${param('NUM_STREAMS', '2')}${param('PERFORMANCE_HINT', 'THROUGHPUT')}`,
  ov_types: `backend: "openvino"
max_batch_size: 4
input [
  { name: "I64" data_type: TYPE_INT64 dims: [ 3 ] }, { name: "F16" data_type: TYPE_FP16 dims: [ 3 ] },
  { name: "U8" data_type: TYPE_UINT8 dims: [ 3 ] }, { name: "BOOL" data_type: TYPE_BOOL dims: [ 3 ] },
  { name: "I8" data_type: TYPE_INT8 dims: [ 3 ] }
]
output [
  { name: "I64_OUT" data_type: TYPE_INT64 dims: [ 3 ] }, { name: "F16_OUT" data_type: TYPE_FP16 dims: [ 3 ] },
  { name: "U8_OUT" data_type: TYPE_UINT8 dims: [ 3 ] }, { name: "BOOL_OUT" data_type: TYPE_BOOL dims: [ 3 ] },
  { name: "I8_OUT" data_type: TYPE_INT8 dims: [ 3 ] }
]`,
  ov_dynamic: `backend: "openvino"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]
output [ { name: "D" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]`,
  // The IR has the fixed shape [1, 4]; RESHAPE_IO_LAYERS makes it take any number of rows.
  ov_reshape: `backend: "openvino"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, 3 ] }, { name: "Z" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]
${param('RESHAPE_IO_LAYERS', 'YES')}`,
  // A batch dimension fixed at max_batch_size, smaller batches padded.
  ov_padded: `backend: "openvino"
max_batch_size: 4
${IO_AFFINE}
${param('SKIP_OV_DYNAMIC_BATCHSIZE', 'YES')}${param('ENABLE_BATCH_PADDING', 'YES')}${param('HINT_BF16', 'YES')}`,
  // The configured INT32 input of an FP32 model: OpenVINO converts, as under Triton.
  ov_convert: `backend: "openvino"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]`,
  ov_fixed: `backend: "openvino"
max_batch_size: 4
${IO_AFFINE}
${param('SKIP_OV_DYNAMIC_BATCHSIZE', 'YES')}`,
};

/** The bad models: name → [config, what the reason must say]. Each has the affine IR unless noted. */
const BAD: Record<string, [string, RegExp]> = {
  bad_no_bin: [`backend: "openvino"\nmax_batch_size: 8\n${IO_AFFINE}`, /model 'bad_no_bin': the OpenVINO IR '.*model\.xml' has no weights file '.*model\.bin' beside it; put the model\.bin/],
  bad_name: [
    `backend: "openvino"\nmax_batch_size: 8\ninput [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\noutput [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]`,
    /model 'bad_name': input 'INPUT0' is not an input of the model; its inputs are: X \(name the configuration's inputs as the model does\)/,
  ],
  bad_rank: [
    `backend: "openvino"\nmax_batch_size: 8\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 4, 1 ] } ]\noutput [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]`,
    /model 'bad_rank': input 'X' has shape \[-1, 4\] in the model \(2 dimensions\), but the configuration gives dims \[4, 1\] after the batch dimension \(max_batch_size > 0\): configure dims \[4\]/,
  ],
  bad_dims: [
    `backend: "openvino"\nmax_batch_size: 8\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 5 ] } ]\noutput [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]`,
    /model 'bad_dims': input 'X' has shape \[-1, 4\] in the model, but the configuration gives dims \[5\]: .*RESHAPE_IO_LAYERS/,
  ],
  bad_type: [
    `backend: "openvino"\nmax_batch_size: 8\ninput [ { name: "X" data_type: TYPE_FP64 dims: [ 4 ] } ]\noutput [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]`,
    /model 'bad_type': input 'X' has data type TYPE_FP64, which the openvino backend does not support; use one of TYPE_BOOL/,
  ],
  bad_streams: [`backend: "openvino"\nmax_batch_size: 8\n${IO_AFFINE}\n${param('NUM_STREAMS', 'many')}`, /model 'bad_streams': parameter NUM_STREAMS is 'many'; the openvino backend accepts AUTO, NUMA or a number of streams/],
  bad_hint: [`backend: "openvino"\nmax_batch_size: 8\n${IO_AFFINE}\n${param('PERFORMANCE_HINT', 'FAST')}`, /model 'bad_hint': parameter PERFORMANCE_HINT is 'FAST'; the openvino backend accepts LATENCY, THROUGHPUT or CUMULATIVE_THROUGHPUT/],
  bad_threads: [`backend: "openvino"\nmax_batch_size: 8\n${IO_AFFINE}\n${param('INFERENCE_NUM_THREADS', '-2')}`, /model 'bad_threads': parameter INFERENCE_NUM_THREADS is '-2'; the openvino backend accepts a non-negative number/],
  bad_bf16: [`backend: "openvino"\nmax_batch_size: 8\n${IO_AFFINE}\n${param('HINT_BF16', 'NO')}`, /model 'bad_bf16': parameter HINT_BF16 is 'NO'; the openvino backend accepts YES \(or no HINT_BF16 parameter\)/],
  bad_extension: [
    `backend: "openvino"\nmax_batch_size: 8\n${IO_AFFINE}\n${param('CPU_EXTENSION_PATH', '/nonexistent/libcustom_ops.so')}`,
    /model 'bad_extension': parameter CPU_EXTENSION_PATH: OpenVINO cannot load '\/nonexistent\/libcustom_ops\.so': /,
  ],
  bad_flag: [`backend: "openvino"\nmax_batch_size: 8\n${IO_AFFINE}\n${param('RESHAPE_IO_LAYERS', 'true')}`, /model 'bad_flag': parameter RESHAPE_IO_LAYERS is 'true'; the openvino backend accepts YES or NO/],
  bad_device: [`backend: "openvino"\nmax_batch_size: 8\n${IO_AFFINE}\n${param('TARGET_DEVICE', 'GPU')}`, /model 'bad_device': parameter TARGET_DEVICE is 'GPU'; this server runs OpenVINO models on the CPU only/],
  // Only a model.onnx: the default file is model.xml, and the error says how to use the ONNX file.
  bad_onnx_only: [`backend: "openvino"\nmax_batch_size: 8\n${IO_AFFINE}`, /model 'bad_onnx_only': OpenVINO model file '.*model\.xml' does not exist; for the model\.onnx beside it, set default_model_filename: "model\.onnx"/],
};

function f32(view: Uint8Array): Float32Array {
  return new Float32Array(Uint8Array.from(view).buffer);
}

function outputBytes(r: InferResponse, name: string): Uint8Array {
  const out = r.outputs.find((o) => o.name === name);
  assert.ok(out, `no output ${name}`);
  return new Uint8Array(out.data);
}

/** Element by element: the server's output bytes against OpenVINO's, as `dtype` elements. */
function assertSameElements(actual: Uint8Array, expected: { dtype: string; data: Uint8Array }, what: string): void {
  assert.equal(actual.byteLength, expected.data.byteLength, `${what}: ${actual.byteLength} bytes, OpenVINO gave ${expected.data.byteLength}`);
  const size = { float32: 4, float16: 2, int64: 8, uint8: 1, bool: 1, int8: 1 }[expected.dtype] ?? 1;
  for (let i = 0; i < actual.byteLength; i += size) {
    assert.deepEqual([...actual.subarray(i, i + size)], [...expected.data.subarray(i, i + size)], `${what}: element ${i / size} differs from OpenVINO's`);
  }
}

function rows(n: number, seed: number): Float32Array {
  return Float32Array.from({ length: n * 4 }, (_, k) => ((k * 7 + seed * 13) % 11) / 4 - 1.25);
}

let repo: string;
let logger: ReturnType<typeof recordingLogger>;
let srv: RunningGrpcServer;

before(async () => {
  await requireOpenVino();
  const models: Record<string, ModelFiles> = {};
  for (const [name, config] of Object.entries({ ...CONFIGS, ...Object.fromEntries(Object.entries(BAD).map(([n, [c]]) => [n, c])) })) {
    models[name] = { 'config.pbtxt': `name: "${name}"\n${config}\n` };
  }
  models.simple = { 'config.pbtxt': simpleModel().config!, '1/model.onnx': simpleModel().onnx.bytes };
  models.ov_auto = {};
  models.ov_auto_flat = {};
  repo = await makeRepository(models);
  const onnx = join(repo, 'affine.onnx');
  await writeOnnx(onnx, affineGraph());
  await writeOnnx(join(repo, 'ov_onnx', '1', 'model.onnx'), affineGraph());
  await writeOnnx(join(repo, 'bad_onnx_only', '1', 'model.onnx'), affineGraph());
  await writeOnnx(join(repo, 'fixed.onnx'), affineGraph(1));
  await writeOnnx(join(repo, 'double.onnx'), doubleGraph());
  await convertToIr(onnx, join(repo, 'affine.xml'));
  for (const name of ['ov_ir', 'ov_padded', 'ov_fixed', 'ov_convert', 'bad_no_bin', 'bad_bf16', 'ov_compile_threads', 'bad_extension', 'bad_name', 'bad_rank', 'bad_dims', 'bad_type', 'bad_streams', 'bad_hint', 'bad_threads', 'bad_flag', 'bad_device', 'ov_auto_flat']) {
    await copyIr(join(repo, 'affine.xml'), join(repo, name, '1', 'model.xml'));
  }
  await convertToIr(onnx, join(repo, 'ov_auto', '1', 'model.xml'), { layouts: { X: 'NC', Y: 'NC', Z: 'NC' } });
  await convertToIr(join(repo, 'fixed.onnx'), join(repo, 'ov_reshape', '1', 'model.xml'));
  await convertToIr(join(repo, 'double.onnx'), join(repo, 'ov_dynamic', '1', 'model.xml'));
  await saveOpsetModel(join(repo, 'ov_types', '1', 'model.xml'), TYPES_SOURCE);
  await removeDir(join(repo, 'bad_no_bin', '1', 'model.bin'));
  logger = recordingLogger();
  srv = await startServer({ modelRepositories: [repo], logger, grpc: true });
});

after(async () => {
  await srv?.stop();
  if (repo !== undefined) await removeDir(repo);
});

function status(name: string): { state: string; reason: string } {
  const s = srv.server.modelStatuses().find((m) => m.name === name);
  assert.ok(s, `no status for ${name}`);
  return s;
}

describe('OpenVINO backend: serving', () => {
  it('loads every good model', () => {
    for (const name of [...Object.keys(CONFIGS), 'ov_auto', 'ov_auto_flat']) assert.equal(status(name).state, 'READY', `${name}: ${status(name).reason}`);
  });

  /** The IR converted here and the ONNX file it came from, with the properties each compiles with. */
  const SERVED: [string, string, Record<string, string | number>][] = [
    ['ov_ir', 'model.xml', { INFERENCE_NUM_THREADS: 1 }],
    ['ov_onnx', 'model.onnx', { NUM_STREAMS: 2, PERFORMANCE_HINT: 'THROUGHPUT' }],
  ];

  for (const [model, file, properties] of SERVED) {
    it(`${model} (${file}) answers over HTTP as OpenVINO does, element by element`, async () => {
      const x = rows(3, 1);
      const expected = await openvinoInfer(join(repo, model, '1', file), { X: { dtype: 'float32', shape: [3, 4], data: x } }, properties);
      const reply = await inferJson(srv.url, model, [{ name: 'X', datatype: 'FP32', shape: [3, 4], data: [...x] }]);
      assert.equal(reply.status, 200, reply.text);
      const body = JSON.parse(reply.text) as { outputs: { name: string; datatype: string; shape: number[]; data: number[] }[] };
      assert.deepEqual(body.outputs.map((o) => [o.name, o.datatype, o.shape]), [
        ['Y', 'FP32', [3, 3]],
        ['Z', 'FP32', [3, 3]],
      ]);
      for (const out of body.outputs) assert.deepEqual(out.data, [...f32(expected[out.name]!.data)], `${out.name} differs from OpenVINO's`);
      // And the math itself, in FP32 (OpenVINO may compute in bfloat16 on CPUs that have it).
      const y = body.outputs[0]!.data;
      for (let r = 0; r < 3; r++) {
        for (let c = 0; c < 3; c++) {
          let v = B[c]!;
          for (let k = 0; k < 4; k++) v += x[r * 4 + k]! * W[k * 3 + c]!;
          assert.ok(Math.abs(y[r * 3 + c]! - v) < 0.05, `Y[${r},${c}] ${y[r * 3 + c]} vs ${v}`);
        }
      }
    });

    it(`${model} (${file}) answers over gRPC as OpenVINO does, element by element`, async () => {
      const x = rows(2, 5);
      const expected = await openvinoInfer(join(repo, model, '1', file), { X: { dtype: 'float32', shape: [2, 4], data: x } }, properties);
      const client = inferenceClient(srv.grpcTarget);
      try {
        const response = await unary(client, 'ModelInfer', inferRequest({ model_name: model, inputs: [inputTensor('X', 'FP32', [2, 4])], raw_input_contents: [rawBytes(x)] }));
        assert.deepEqual(
          response.outputs.map((o) => [o.name, o.datatype, o.shape.map(Number)]),
          [
            ['Y', 'FP32', [2, 3]],
            ['Z', 'FP32', [2, 3]],
          ],
        );
        response.outputs.forEach((o, i) => assertSameElements(response.raw_output_contents[i]!, expected[o.name]!, `gRPC ${o.name}`));
      } finally {
        client.close();
      }
      assert.equal(srv.server.modelMetadata(model).platform, 'openvino');
    });
  }

  it('serves the data types OpenVINO takes: INT64, FP16, UINT8, BOOL, INT8', async () => {
    const tensors: Record<string, RawTensor> = {
      I64: { dtype: 'int64', shape: [2, 3], data: BigInt64Array.from([1n, -2n, 3n, 2n ** 40n, 0n, -7n]) },
      F16: { dtype: 'float16', shape: [2, 3], data: Uint16Array.from([0x3c00, 0x4000, 0xc200, 0x3800, 0x0000, 0x4500]) },
      U8: { dtype: 'uint8', shape: [2, 3], data: Uint8Array.from([0, 1, 254, 7, 8, 9]) },
      BOOL: { dtype: 'bool', shape: [2, 3], data: Uint8Array.from([1, 0, 1, 0, 0, 1]) },
      I8: { dtype: 'int8', shape: [2, 3], data: Int8Array.from([-127, -1, 0, 1, 5, 127]) },
    };
    const expected = await openvinoInfer(join(repo, 'ov_types', '1', 'model.xml'), tensors);
    const wire: Record<string, DataType> = { I64: 'INT64', F16: 'FP16', U8: 'UINT8', BOOL: 'BOOL', I8: 'INT8' };
    const r = await srv.server.infer({
      model: 'ov_types',
      inputs: Object.entries(tensors).map(([name, t]) => ({ name, datatype: wire[name]!, shape: [...t.shape], data: new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength) })),
    });
    for (const name of Object.keys(tensors)) {
      const out = r.outputs.find((o) => o.name === `${name}_OUT`)!;
      assert.equal(out.datatype, wire[name]);
      assertSameElements(outputBytes(r, `${name}_OUT`), expected[`${name}_OUT`]!, `${name}_OUT`);
    }
    assert.deepEqual([...outputBytes(r, 'I8_OUT')].map((b) => (b << 24) >> 24), [127, 1, 0, -1, -5, -127]);
  });

  it('dynamic batching: concurrent requests form batches that one infer runs, split back per request', async () => {
    const before = srv.server.modelStatistics('ov_ir')[0]!;
    const sent = Array.from({ length: 12 }, (_, i) => ({ n: 1 + (i % 3), x: rows(1 + (i % 3), 100 + i) }));
    const expected = await Promise.all(sent.map(({ n, x }) => openvinoInfer(join(repo, 'ov_ir', '1', 'model.xml'), { X: { dtype: 'float32', shape: [n, 4], data: x } }, { INFERENCE_NUM_THREADS: 1 })));
    const results = await Promise.all(sent.map(({ n, x }) => srv.server.infer({ model: 'ov_ir', inputs: [{ name: 'X', datatype: 'FP32', shape: [n, 4], data: x }] })));
    results.forEach((r, i) => {
      assert.deepEqual(r.outputs[0]!.shape, [sent[i]!.n, 3]);
      for (const name of ['Y', 'Z']) assertSameElements(outputBytes(r, name), expected[i]![name]!, `request ${i} ${name}`);
    });
    // The statistics of a batch are recorded once its responses are out: wait for the last.
    const rowsSent = sent.reduce((s, { n }) => s + n, 0);
    await waitUntil(() => srv.server.modelStatistics('ov_ir')[0]!.inference_count - before.inference_count >= rowsSent, 'the statistics of every batch');
    const stats = srv.server.modelStatistics('ov_ir')[0]!;
    assert.equal(stats.inference_count - before.inference_count, rowsSent);
    assert.ok(stats.execution_count - before.execution_count < 12, `12 requests ran in ${stats.execution_count - before.execution_count} executions`);
    assert.ok(stats.batch_stats.some((s) => s.batch_size > 3), `expected a batch larger than one request: ${JSON.stringify(stats.batch_stats.map((s) => s.batch_size))}`);
  });

  it('dynamic shapes: a model with -1 dims takes tensors of any shape', async () => {
    for (const shape of [
      [1, 1],
      [2, 5],
      [7, 3],
    ]) {
      const a = Float32Array.from({ length: shape[0]! * shape[1]! }, (_, k) => k - 2.5);
      const r = await srv.server.infer({ model: 'ov_dynamic', inputs: [{ name: 'A', datatype: 'FP32', shape, data: a }] });
      assert.deepEqual(r.outputs[0]!.shape, shape);
      assert.deepEqual([...f32(outputBytes(r, 'D'))], [...a].map((v) => v * 2));
    }
  });

  it('RESHAPE_IO_LAYERS: an IR of shape [1, 4] reshaped to the configured [-1, 4] takes any number of rows', async () => {
    const x = rows(5, 9);
    const r = await srv.server.infer({ model: 'ov_reshape', inputs: [{ name: 'X', datatype: 'FP32', shape: [5, 4], data: x }] });
    assert.deepEqual(r.outputs[0]!.shape, [5, 3]);
    const reference = await srv.server.infer({ model: 'ov_ir', inputs: [{ name: 'X', datatype: 'FP32', shape: [5, 4], data: x }] });
    assertSameElements(outputBytes(r, 'Y'), { dtype: 'float32', data: outputBytes(reference, 'Y') }, 'reshaped Y');
  });

  it('COMPILATION_NUM_THREADS, which OpenVINO\'s CPU plugin no longer takes, is left out with a warning: the model loads and answers', async () => {
    const x = [1, -2, 3, 7];
    const r = await srv.server.infer({ model: 'ov_compile_threads', inputs: [{ name: 'X', datatype: 'FP32', shape: [1, 4], data: Float32Array.from(x) }] });
    const reference = await srv.server.infer({ model: 'ov_ir', inputs: [{ name: 'X', datatype: 'FP32', shape: [1, 4], data: Float32Array.from(x) }] });
    assertSameElements(outputBytes(r, 'Y'), { dtype: 'float32', data: outputBytes(reference, 'Y') }, 'Y');
    assert.ok(
      logger.lines.some((l) => /W .*model 'ov_compile_threads': parameter COMPILATION_NUM_THREADS is ignored: the CPU plugin of OpenVINO 20\d\d\.\d+\.\d+ has no such property \(remove the parameter\)/.test(l)),
      logger.lines.join('\n'),
    );
  });

  it('a configured data type other than the model\'s is converted by OpenVINO, as Triton does', async () => {
    const x = [1, -2, 3, 7, 0, 5, -6, 2];
    const r = await srv.server.infer({ model: 'ov_convert', inputs: [{ name: 'X', datatype: 'INT32', shape: [2, 4], data: Int32Array.from(x) }] });
    const reference = await srv.server.infer({ model: 'ov_ir', inputs: [{ name: 'X', datatype: 'FP32', shape: [2, 4], data: Float32Array.from(x) }] });
    assertSameElements(outputBytes(r, 'Y'), { dtype: 'float32', data: outputBytes(reference, 'Y') }, 'converted Y');
    assert.ok(
      logger.lines.some((l) => l.includes("model 'ov_convert': OpenVINO converts the data types of input 'X' i32→f32")),
      logger.lines.join('\n'),
    );
  });

  it('SKIP_OV_DYNAMIC_BATCHSIZE fixes the batch at max_batch_size: padded with ENABLE_BATCH_PADDING, refused without', async () => {
    const x = rows(1, 3);
    const padded = await srv.server.infer({ model: 'ov_padded', inputs: [{ name: 'X', datatype: 'FP32', shape: [1, 4], data: x }] });
    assert.deepEqual(padded.outputs[0]!.shape, [1, 3]);
    const reference = await srv.server.infer({ model: 'ov_ir', inputs: [{ name: 'X', datatype: 'FP32', shape: [1, 4], data: x }] });
    assertSameElements(outputBytes(padded, 'Y'), { dtype: 'float32', data: outputBytes(reference, 'Y') }, 'padded Y');
    await assert.rejects(
      srv.server.infer({ model: 'ov_fixed', inputs: [{ name: 'X', datatype: 'FP32', shape: [1, 4], data: x }] }),
      /model 'ov_fixed': the batch dimension is fixed at max_batch_size 4 \(SKIP_OV_DYNAMIC_BATCHSIZE\), and this batch has 1; send batches of 4, or set ENABLE_BATCH_PADDING to YES/,
    );
    const full = await srv.server.infer({ model: 'ov_fixed', inputs: [{ name: 'X', datatype: 'FP32', shape: [4, 4], data: rows(4, 3) }] });
    assert.deepEqual(full.outputs[0]!.shape, [4, 3]);
  });
});

describe('OpenVINO backend: parameters', () => {
  function compiledLine(model: string): string {
    const line = logger.lines.find((l) => l.includes(`model '${model}': OpenVINO `) && l.includes('compiled'));
    assert.ok(line, `no compile line for ${model} in:\n${logger.lines.join('\n')}`);
    return line;
  }

  it('NUM_STREAMS, INFERENCE_NUM_THREADS and PERFORMANCE_HINT reach the compiled model, as OpenVINO reports them back', () => {
    assert.match(compiledLine('ov_ir'), /compiled 'model\.xml' for CPU \(dynamic batch dimension\): NUM_STREAMS=1, INFERENCE_NUM_THREADS=1, PERFORMANCE_HINT=LATENCY/);
    assert.match(compiledLine('ov_onnx'), /compiled 'model\.onnx' for CPU \(no batch dimension\): NUM_STREAMS=2, .*PERFORMANCE_HINT=THROUGHPUT/);
    assert.match(compiledLine('ov_fixed'), /\(batch dimension fixed at 4\)/);
    // HINT_BF16: bfloat16 where the CPU has it (OpenVINO keeps f32 where it has not).
    assert.match(compiledLine('ov_padded'), /INFERENCE_PRECISION_HINT=(bf16|f32)$/);
  });

  it("without INFERENCE_NUM_THREADS, the server's default threads per instance", () => {
    const threads = defaultIntraOpThreads(availableParallelism(), 1);
    assert.match(compiledLine('ov_types'), new RegExp(`INFERENCE_NUM_THREADS=${threads}\\b`));
    // NUM_STREAMS 2 without INFERENCE_NUM_THREADS: at least one thread per stream.
    assert.match(compiledLine('ov_onnx'), new RegExp(`INFERENCE_NUM_THREADS=${Math.max(threads, 2)}\\b`));
  });
});

describe('OpenVINO backend: auto-complete', () => {
  it('a config-less IR whose layouts have a batch dimension: max_batch_size 4, dims without it, dynamic batching', async () => {
    const config = srv.server.modelConfig('ov_auto') as ModelConfig;
    assert.equal(config.backend, 'openvino');
    assert.equal(config.max_batch_size, 4);
    assert.deepEqual(
      config.input.map((i) => [i.name, i.data_type, i.dims.map(Number)]),
      [['X', 'TYPE_FP32', [4]]],
    );
    assert.deepEqual(
      config.output.map((o) => [o.name, o.data_type, o.dims.map(Number)]),
      [
        ['Y', 'TYPE_FP32', [3]],
        ['Z', 'TYPE_FP32', [3]],
      ],
    );
    assert.ok(config.dynamic_batching, 'dynamic_batching was not added');
    assert.ok(
      logger.lines.some((l) => /W .*model 'ov_auto': auto-complete set max_batch_size to 4, as the model's layouts have a batch dimension/.test(l)),
      logger.lines.join('\n'),
    );
    const x = rows(2, 4);
    const r = await srv.server.infer({ model: 'ov_auto', inputs: [{ name: 'X', datatype: 'FP32', shape: [2, 4], data: x }] });
    const reference = await srv.server.infer({ model: 'ov_ir', inputs: [{ name: 'X', datatype: 'FP32', shape: [2, 4], data: x }] });
    assertSameElements(outputBytes(r, 'Z'), { dtype: 'float32', data: outputBytes(reference, 'Z') }, 'auto-completed Z');
  });

  it('--backend-config=openvino,default-max-batch-size sets the max_batch_size auto-complete gives', async () => {
    const own = await makeRepository({});
    try {
      await copyIr(join(repo, 'ov_auto', '1', 'model.xml'), join(own, 'ov_auto', '1', 'model.xml'));
      const other = await startServer({ modelRepositories: [own], backendConfig: new Map([['openvino', { 'default-max-batch-size': '6' }]]) });
      try {
        assert.equal((other.server.modelConfig('ov_auto') as ModelConfig).max_batch_size, 6);
      } finally {
        await other.stop();
      }
    } finally {
      await removeDir(own);
    }
  });

  it('a config-less IR without layouts: max_batch_size 0 and the full shapes, as Triton completes it', async () => {
    const config = srv.server.modelConfig('ov_auto_flat') as ModelConfig;
    assert.equal(config.max_batch_size, 0);
    assert.deepEqual(
      config.input.map((i) => [i.name, i.data_type, i.dims.map(Number)]),
      [['X', 'TYPE_FP32', [-1, 4]]],
    );
    assert.deepEqual(config.output.map((o) => o.dims.map(Number)), [
      [-1, 3],
      [-1, 3],
    ]);
    const r = await srv.server.infer({ model: 'ov_auto_flat', inputs: [{ name: 'X', datatype: 'FP32', shape: [3, 4], data: rows(3, 2) }] });
    assert.deepEqual(r.outputs[0]!.shape, [3, 3]);
  });
});

describe('OpenVINO backend: bad models and requests', () => {
  for (const [name, [, reason]] of Object.entries(BAD)) {
    it(`${name}: refused at load with a clear reason`, () => {
      const s = status(name);
      assert.equal(s.state, 'UNAVAILABLE');
      assert.match(s.reason, reason);
    });
  }

  it('a request tensor of the wrong data type is refused naming the model and the tensor; the model keeps serving', async () => {
    const reply = await inferJson(srv.url, 'ov_ir', [{ name: 'X', datatype: 'INT32', shape: [1, 4], data: [1, 2, 3, 4] }]);
    assert.equal(reply.status, 400, reply.text);
    assert.match(reply.text, /ov_ir/);
    assert.match(reply.text, /'X'/);
    assert.match(reply.text, /FP32/);
    const client = inferenceClient(srv.grpcTarget);
    try {
      const err = await unaryError(client, 'ModelInfer', inferRequest({ model_name: 'ov_types', inputs: [inputTensor('I64', 'INT32', [1, 3])], raw_input_contents: [rawBytes(Int32Array.from([1, 2, 3]))] }));
      assertStatus(err, 3, 'I64');
    } finally {
      client.close();
    }
    const ok = await inferJson(srv.url, 'ov_ir', [{ name: 'X', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] }]);
    assert.equal(ok.status, 200, ok.text);
  });

  it('a KIND_GPU instance group is refused with a clear message', async () => {
    const gpuRepo = await makeRepository({ ov_gpu: { 'config.pbtxt': `name: "ov_gpu"\n${CONFIGS.ov_ir}\ninstance_group [ { kind: KIND_GPU } ]\n` } });
    try {
      await copyIr(join(repo, 'affine.xml'), join(gpuRepo, 'ov_gpu', '1', 'model.xml'));
      const gpuServer: RunningServer = await startServer({ modelRepositories: [gpuRepo] });
      try {
        const s = gpuServer.server.modelStatuses().find((m) => m.name === 'ov_gpu')!;
        assert.equal(s.state, 'UNAVAILABLE');
        assert.match(s.reason, /ov_gpu/);
        assert.match(s.reason, /GPU/);
      } finally {
        await gpuServer.stop();
      }
    } finally {
      await removeDir(gpuRepo);
    }
  });

  it('an interpreter without OpenVINO: the model is refused naming the command, the other models serve', async () => {
    const other = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', backendConfig: new Map([['openvino', { 'python-executable': '/usr/bin/python3' }]]) });
    try {
      const reply = await httpRequest(`${other.url}/v2/repository/models/ov_ir/load`, { method: 'POST' });
      assert.equal(reply.status, 400);
      assert.match(reply.text, /model 'ov_ir': the openvino backend runs models with OpenVINO \(PyPI openvino\), and it is not installed for the Python interpreter \/usr\/bin\/python3\. Install it into the project's runtimes environment with: node scripts\/setup\.mjs runtimes/);
      assert.equal((await httpRequest(`${other.url}/v2/repository/models/simple/load`, { method: 'POST' })).status, 200);
      const c = simpleCase(2);
      const answer = await inferJson(other.url, 'simple', c.inputs);
      assert.equal(answer.status, 200, answer.text);
      assert.deepEqual(outputNamed(JSON.parse(answer.text) as JsonInferResponse, 'OUTPUT0').data, c.sum);
    } finally {
      await other.stop();
    }
  });

  it('an interpreter without OpenVINO: refused at load naming the interpreter and the command (--backend-config=openvino,python-executable=…)', async () => {
    const r = await runNereid(['serve', `--model-repository=${repo}`, '--model-control-mode=explicit', '--load-model=ov_ir', '--backend-config=openvino,python-executable=/usr/bin/python3', ...LOCAL_ENDPOINTS]);
    assert.notEqual(r.exit.code, 0, 'the server started although its only model failed to load');
    assert.match(
      r.stdout + r.stderr,
      /model 'ov_ir': the openvino backend runs models with OpenVINO \(PyPI openvino\), and it is not installed for the Python interpreter \/usr\/bin\/python3\. Install it into the project's runtimes environment with: node scripts\/setup\.mjs runtimes/,
    );
  });
});
