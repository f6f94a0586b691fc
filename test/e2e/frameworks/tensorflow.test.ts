/**
 * The TensorFlow backend (`platform: "tensorflow_savedmodel"` / `"tensorflow_graphdef"`): models
 * made at test time by the runtimes environment's TensorFlow (test/helpers/tensorflow.ts), served
 * over HTTP and gRPC and compared element by element with TensorFlow run directly on the same
 * inputs; batches formed by the dynamic batcher; BYTES tensors; auto-complete of a SavedModel
 * without config.pbtxt; `TF_SIGNATURE_DEF`; and the load and request errors, after which the
 * server keeps serving.
 *
 * Needs the runtimes environment (`node scripts/setup.mjs runtimes`); fails naming it otherwise.
 */
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { GrpcClient, HttpClient, type InferResult } from '@nereid/client';
import { defaultIntraOpThreads, type ModelVersionStatus } from '@nereid/server';
import { simpleModel } from '@nereid/testkit';
import { httpRequest, inferJson, makeRepository, removeDir, simpleCase, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { recordingLogger } from '../../helpers/python.js';
import { makeTensorFlowModels, requireTensorFlow, simpleConfig, tensorflowReference, type ReferenceTensor } from '../../helpers/tensorflow.js';

const ONE_INSTANCE = 'instance_group [ { count: 1 kind: KIND_CPU } ]';
/** A long enough window that concurrent requests meet in one batch. */
const BATCHING = `dynamic_batching { max_queue_delay_microseconds: 100000 }\n${ONE_INSTANCE}`;

const SIGNATURE_CONFIG = `
name: "tf_signature"
platform: "tensorflow_savedmodel"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]
parameters { key: "TF_SIGNATURE_DEF" value: { string_value: "scale" } }
parameters { key: "TF_NUM_INTRA_THREADS" value: { string_value: "1" } }
${ONE_INSTANCE}
`;

/** The lookup GraphDef (test/helpers/tensorflow.ts), with `extra` configuration lines. */
function lookupConfig(name: string, extra = ''): string {
  return `
name: "${name}"
platform: "tensorflow_graphdef"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 1 ] } ]
${ONE_INSTANCE}
${extra}`;
}
const INIT_OPS = (file: string) => `parameters { key: "TF_INIT_OPS_FILE" value: { string_value: "${file}" } }`;

/** INT32 inputs of the simple model as numpy arrays for the reference and as client inputs. */
function simpleInputs(rows: number, seed: number): { reference: Record<string, ReferenceTensor>; a: Int32Array; b: Int32Array } {
  const a = Int32Array.from({ length: rows * 16 }, (_, i) => (i * 7919 + seed * 104729) % 20001 - 10000);
  const b = Int32Array.from({ length: rows * 16 }, (_, i) => (i * 31 + seed * 17) % 999 - 499);
  return {
    a,
    b,
    reference: {
      INPUT0: { dtype: 'int32', shape: [rows, 16], data: [...a] },
      INPUT1: { dtype: 'int32', shape: [rows, 16], data: [...b] },
    },
  };
}

function numbers(r: InferResult, name: string): number[] {
  return Array.from(r.typed(name) as ArrayLike<number | bigint>, Number);
}

describe('TensorFlow backend: SavedModel and GraphDef', () => {
  let repo: string;
  let srv: RunningGrpcServer;
  let http: HttpClient;
  let grpc: GrpcClient;
  let statuses: Map<string, ModelVersionStatus>;
  let logger: ReturnType<typeof recordingLogger>;
  const path = (model: string, file: string) => join(repo, model, '1', file);

  before(async () => {
    await requireTensorFlow();
    repo = await makeRepository({
      tf_graphdef: { 'config.pbtxt': simpleConfig('tf_graphdef', 'tensorflow_graphdef', 'TYPE_INT32', BATCHING) },
      tf_savedmodel: { 'config.pbtxt': simpleConfig('tf_savedmodel', 'tensorflow_savedmodel', 'TYPE_INT32', BATCHING) },
      tf_string: { 'config.pbtxt': simpleConfig('tf_string', 'tensorflow_graphdef', 'TYPE_STRING', ONE_INSTANCE) },
      tf_signature: { 'config.pbtxt': SIGNATURE_CONFIG },
      tf_autocomplete: {},
      tf_types: {},
      // The signature says INT32 [-1,16]; these configurations disagree.
      tf_bad_type: { 'config.pbtxt': simpleConfig('tf_bad_type', 'tensorflow_savedmodel', 'TYPE_FP32') },
      tf_bad_dims: { 'config.pbtxt': simpleConfig('tf_bad_dims', 'tensorflow_savedmodel').replace('name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ]', 'name: "INPUT1" data_type: TYPE_INT32 dims: [ 8 ]') },
      tf_bad_name: { 'config.pbtxt': simpleConfig('tf_bad_name', 'tensorflow_savedmodel').replace('"OUTPUT1"', '"SUM"') },
      tf_bad_signature: { 'config.pbtxt': `${simpleConfig('tf_bad_signature', 'tensorflow_savedmodel')}\nparameters { key: "TF_SIGNATURE_DEF" value: { string_value: "predict" } }` },
      tf_corrupt: { 'config.pbtxt': simpleConfig('tf_corrupt', 'tensorflow_graphdef'), '1/model.graphdef': new Uint8Array([0x0a, 0xff, 0xff, 0x01, 0x02, 0x03, 0x12, 0x80]) },
      tf_graphdef_no_config: {},
      // Auto-complete from a partial configuration: names only (Triton fills types and dims, and
      // takes the model's variable first dimension as batching); max_batch_size on a model that
      // cannot batch; a MetaGraph tag the SavedModel lacks.
      tf_partial: { 'config.pbtxt': 'name: "tf_partial"\nplatform: "tensorflow_savedmodel"\ninput [ { name: "INPUT1" }, { name: "INPUT0" } ]\noutput [ { name: "OUTPUT1" } ]\n' },
      tf_types_batching: { 'config.pbtxt': 'name: "tf_types_batching"\nplatform: "tensorflow_savedmodel"\nmax_batch_size: 4\n' },
      tf_bad_tag: { 'config.pbtxt': `${simpleConfig('tf_bad_tag', 'tensorflow_savedmodel')}\nparameters { key: "TF_GRAPH_TAG" value: { string_value: "gpu" } }` },
      // TF_INIT_OPS_FILE: in the version directory; missing (the table is never initialized);
      // naming a file that is not there.
      // Its operations run on an inter-op pool; the other models' on the instance's calling thread.
      tf_init_ops: { 'config.pbtxt': lookupConfig('tf_init_ops', `${INIT_OPS('init_ops.json')}\nparameters { key: "TF_NUM_INTER_THREADS" value: { string_value: "2" } }`), '1/init_ops.json': JSON.stringify({ init_ops: ['init_tables'] }) },
      tf_no_init_ops: { 'config.pbtxt': lookupConfig('tf_no_init_ops') },
      tf_init_ops_absent: { 'config.pbtxt': lookupConfig('tf_init_ops_absent', INIT_OPS('nope.json')) },
      simple: { 'config.pbtxt': simpleModel().config!, '1/model.onnx': simpleModel().onnx.bytes },
    });
    await makeTensorFlowModels([
      { kind: 'graphdef', model: 'simple', path: path('tf_graphdef', 'model.graphdef') },
      { kind: 'savedmodel_v1', model: 'simple', path: path('tf_savedmodel', 'model.savedmodel') },
      { kind: 'graphdef', model: 'simple_string', path: path('tf_string', 'model.graphdef') },
      { kind: 'savedmodel', model: 'signatures', path: path('tf_signature', 'model.savedmodel') },
      { kind: 'savedmodel', model: 'signatures', path: path('tf_autocomplete', 'model.savedmodel') },
      { kind: 'savedmodel', model: 'types', path: path('tf_types', 'model.savedmodel') },
      { kind: 'savedmodel_v1', model: 'simple', path: path('tf_bad_type', 'model.savedmodel') },
      { kind: 'savedmodel_v1', model: 'simple', path: path('tf_bad_dims', 'model.savedmodel') },
      { kind: 'savedmodel_v1', model: 'simple', path: path('tf_bad_name', 'model.savedmodel') },
      { kind: 'savedmodel_v1', model: 'simple', path: path('tf_bad_signature', 'model.savedmodel') },
      { kind: 'graphdef', model: 'simple', path: path('tf_graphdef_no_config', 'model.graphdef') },
      { kind: 'savedmodel', model: 'signatures', path: path('tf_partial', 'model.savedmodel') },
      { kind: 'savedmodel', model: 'types', path: path('tf_types_batching', 'model.savedmodel') },
      { kind: 'savedmodel_v1', model: 'simple', path: path('tf_bad_tag', 'model.savedmodel') },
      { kind: 'graphdef', model: 'lookup', path: path('tf_init_ops', 'model.graphdef') },
      { kind: 'graphdef', model: 'lookup', path: path('tf_no_init_ops', 'model.graphdef') },
      { kind: 'graphdef', model: 'lookup', path: path('tf_init_ops_absent', 'model.graphdef') },
    ]);
    logger = recordingLogger();
    srv = await startServer({ modelRepositories: [repo], grpc: true, logger });
    http = new HttpClient(srv.url);
    grpc = new GrpcClient(srv.grpcTarget);
    statuses = new Map(srv.server.modelStatuses().map((s) => [s.name, s]));
  });

  after(async () => {
    grpc?.close();
    await srv?.stop();
    if (repo) await removeDir(repo);
  });

  it('serves the good models and refuses the bad ones', () => {
    for (const name of ['tf_graphdef', 'tf_savedmodel', 'tf_string', 'tf_signature', 'tf_autocomplete', 'tf_types', 'tf_partial', 'tf_init_ops', 'tf_no_init_ops', 'simple']) {
      assert.equal(statuses.get(name)?.state, 'READY', `${name}: ${statuses.get(name)?.reason}`);
    }
    for (const name of ['tf_bad_type', 'tf_bad_dims', 'tf_bad_name', 'tf_bad_signature', 'tf_bad_tag', 'tf_corrupt', 'tf_graphdef_no_config', 'tf_types_batching', 'tf_init_ops_absent']) {
      assert.equal(statuses.get(name)?.state, 'UNAVAILABLE', name);
    }
    assert.equal(srv.server.modelMetadata('tf_graphdef').platform, 'tensorflow_graphdef');
    assert.equal(srv.server.modelMetadata('tf_savedmodel').platform, 'tensorflow_savedmodel');
  });

  for (const [model, kind, file] of [
    ['tf_graphdef', 'graphdef', 'model.graphdef'],
    ['tf_savedmodel', 'savedmodel', 'model.savedmodel'],
  ] as const) {
    it(`${model}: HTTP and gRPC answers equal TensorFlow's own, element by element`, async () => {
      const { a, b, reference } = simpleInputs(3, model.length);
      const expected = await tensorflowReference(kind, path(model, file), reference, ['OUTPUT0', 'OUTPUT1']);
      const inputs = [
        { name: 'INPUT0', datatype: 'INT32' as const, shape: [3, 16], data: a },
        { name: 'INPUT1', datatype: 'INT32' as const, shape: [3, 16], data: b },
      ];
      for (const client of [http, grpc]) {
        const r = await client.infer({ model, inputs });
        for (const name of ['OUTPUT0', 'OUTPUT1']) {
          assert.deepEqual(r.shape(name), expected[name]!.shape);
          assert.deepEqual(numbers(r, name), expected[name]!.data);
        }
      }
      // And the arithmetic itself, so that a reference gone wrong cannot hide a wrong answer.
      assert.deepEqual(expected['OUTPUT0']!.data, [...a].map((x, i) => x + b[i]!));
      assert.deepEqual(expected['OUTPUT1']!.data, [...a].map((x, i) => x - b[i]!));
    });
  }

  it('answers only the requested output', async () => {
    const c = simpleCase(1, 5);
    const reply = await inferJson(srv.url, 'tf_graphdef', c.inputs, { outputs: ['OUTPUT1'] });
    assert.equal(reply.status, 200, reply.text);
    const body = JSON.parse(reply.text) as { outputs: { name: string; data: number[] }[] };
    assert.deepEqual(body.outputs.map((o) => o.name), ['OUTPUT1']);
    assert.deepEqual(body.outputs[0]!.data, c.difference);
  });

  it('runs concurrent requests as batches (one TensorFlow call each) and splits the answers back', async () => {
    for (const model of ['tf_savedmodel', 'tf_graphdef']) {
      const before = srv.server.modelStatistics(model)[0]!;
      const cases = Array.from({ length: 12 }, (_, i) => ({ rows: 1 + (i % 2), ...simpleInputs(1 + (i % 2), i) }));
      const results = await Promise.all(
        cases.map((c, i) =>
          (i % 2 === 0 ? http : grpc).infer({
            model,
            inputs: [
              { name: 'INPUT0', datatype: 'INT32', shape: [c.rows, 16], data: c.a },
              { name: 'INPUT1', datatype: 'INT32', shape: [c.rows, 16], data: c.b },
            ],
          }),
        ),
      );
      results.forEach((r, i) => {
        const c = cases[i]!;
        assert.deepEqual(r.shape('OUTPUT0'), [c.rows, 16]);
        assert.deepEqual(numbers(r, 'OUTPUT0'), [...c.a].map((x, k) => x + c.b[k]!));
        assert.deepEqual(numbers(r, 'OUTPUT1'), [...c.a].map((x, k) => x - c.b[k]!));
      });
      const stats = srv.server.modelStatistics(model)[0]!;
      const inferences = Number(stats.inference_count) - Number(before.inference_count);
      const executions = Number(stats.execution_count) - Number(before.execution_count);
      assert.equal(inferences, 18, model);
      assert.ok(executions < 12, `${model}: ${executions} executions for 12 requests`);
      assert.ok(
        stats.batch_stats.some((s) => s.batch_size > 2),
        `${model}: expected a batch of more than one request: ${JSON.stringify(stats.batch_stats.map((s) => s.batch_size))}`,
      );
    }
  });

  it('BYTES: string tensors in and out, over HTTP (JSON and binary) and gRPC, equal TensorFlow', async () => {
    const a = Array.from({ length: 32 }, (_, i) => String(i * 37 - 500));
    const b = Array.from({ length: 32 }, (_, i) => String(1000 - i * i));
    const expected = await tensorflowReference(
      'graphdef',
      path('tf_string', 'model.graphdef'),
      { INPUT0: { dtype: 'string', shape: [2, 16], data: a }, INPUT1: { dtype: 'string', shape: [2, 16], data: b } },
      ['OUTPUT0', 'OUTPUT1'],
    );
    assert.deepEqual(expected['OUTPUT0']!.data, a.map((x, i) => String(Number(x) + Number(b[i]))));
    for (const [client, json] of [
      [http, true],
      [http, false],
      [grpc, false],
    ] as const) {
      const r = await client.infer({
        model: 'tf_string',
        inputs: [
          { name: 'INPUT0', datatype: 'BYTES', shape: [2, 16], data: a, json },
          { name: 'INPUT1', datatype: 'BYTES', shape: [2, 16], data: b, json },
        ],
      });
      assert.equal(r.datatype('OUTPUT0'), 'BYTES');
      assert.deepEqual(r.shape('OUTPUT0'), [2, 16]);
      assert.deepEqual(r.strings('OUTPUT0'), expected['OUTPUT0']!.data);
      assert.deepEqual(r.strings('OUTPUT1'), expected['OUTPUT1']!.data);
    }
  });

  it('auto-completes a SavedModel without config.pbtxt from its signature, batching with max_batch_size 4', async () => {
    const reply = await httpRequest(`${srv.url}/v2/models/tf_autocomplete/config`);
    assert.equal(reply.status, 200, reply.text);
    const config = JSON.parse(reply.text) as {
      platform: string;
      backend: string;
      max_batch_size: number;
      input: { name: string; data_type: string; dims: number[] }[];
      output: { name: string; data_type: string; dims: number[] }[];
      dynamic_batching?: unknown;
    };
    assert.equal(config.platform, 'tensorflow_savedmodel');
    assert.equal(config.backend, 'tensorflow');
    assert.equal(config.max_batch_size, 4);
    assert.deepEqual(config.input.map((i) => [i.name, i.data_type, i.dims.map(Number)]), [
      ['INPUT0', 'TYPE_INT32', [16]],
      ['INPUT1', 'TYPE_INT32', [16]],
    ]);
    assert.deepEqual(config.output.map((o) => [o.name, o.data_type, o.dims.map(Number)]), [
      ['OUTPUT0', 'TYPE_INT32', [16]],
      ['OUTPUT1', 'TYPE_INT32', [16]],
    ]);
    assert.ok(config.dynamic_batching !== undefined, 'a batching model gets the dynamic batcher');
    const c = simpleCase(2, 3);
    const r = await inferJson(srv.url, 'tf_autocomplete', c.inputs);
    assert.equal(r.status, 200, r.text);
    const body = JSON.parse(r.text) as { outputs: { name: string; data: number[] }[] };
    assert.deepEqual(body.outputs.find((o) => o.name === 'OUTPUT0')!.data, c.sum);
  });

  it('auto-completes a model without a batch dimension to max_batch_size 0; FP16, FP64, INT64 and BOOL equal TensorFlow', async () => {
    const config = JSON.parse((await httpRequest(`${srv.url}/v2/models/tf_types/config`)).text) as {
      max_batch_size: number;
      input: { name: string; data_type: string; dims: number[] }[];
    };
    assert.equal(config.max_batch_size, 0);
    assert.deepEqual(config.input.map((i) => [i.name, i.data_type, i.dims.map(Number)]), [
      ['B', 'TYPE_BOOL', [4]],
      ['D', 'TYPE_FP64', [4]],
      ['H', 'TYPE_FP16', [4]],
      ['L', 'TYPE_INT64', [4]],
    ]);
    const h = [0.5, -1.25, 3, 1000];
    const d = [2, 9, 0.25, 1e6];
    const l = [1, -7, 2 ** 40, 0];
    const bools = [true, false, false, true];
    const expected = await tensorflowReference(
      'savedmodel',
      path('tf_types', 'model.savedmodel'),
      {
        H: { dtype: 'float16', shape: [4], data: h },
        D: { dtype: 'float64', shape: [4], data: d },
        L: { dtype: 'int64', shape: [4], data: l },
        B: { dtype: 'bool', shape: [4], data: bools },
      },
      ['H_OUT', 'D_OUT', 'L_OUT', 'B_OUT'],
    );
    const fp16 = new Uint16Array(h.map(toHalf));
    for (const client of [http, grpc]) {
      const r = await client.infer({
        model: 'tf_types',
        inputs: [
          { name: 'H', datatype: 'FP16', shape: [4], data: fp16 },
          { name: 'D', datatype: 'FP64', shape: [4], data: new Float64Array(d) },
          { name: 'L', datatype: 'INT64', shape: [4], data: BigInt64Array.from(l.map(BigInt)) },
          { name: 'B', datatype: 'BOOL', shape: [4], data: bools },
        ],
      });
      assert.deepEqual([...new Uint16Array(Uint8Array.from(r.bytes('H_OUT')).buffer)].map(fromHalf), expected['H_OUT']!.data);
      assert.deepEqual(numbers(r, 'D_OUT'), expected['D_OUT']!.data);
      assert.deepEqual(numbers(r, 'L_OUT'), expected['L_OUT']!.data);
      assert.deepEqual([...r.bytes('B_OUT')].map((x) => x !== 0), expected['B_OUT']!.data);
    }
    assert.deepEqual(expected['L_OUT']!.data, l.map((x) => x * 3 - 1));
    assert.deepEqual(expected['B_OUT']!.data, [false, true, true, false]);
  });

  it('completes a partial configuration as Triton does: the listed tensors filled, batching taken from the signature, only the listed outputs', async () => {
    const config = JSON.parse((await httpRequest(`${srv.url}/v2/models/tf_partial/config`)).text) as {
      max_batch_size: number;
      input: { name: string; data_type: string; dims: number[] }[];
      output: { name: string; data_type: string; dims: number[] }[];
    };
    assert.equal(config.max_batch_size, 4);
    assert.deepEqual(config.input.map((i) => [i.name, i.data_type, i.dims.map(Number)]), [
      ['INPUT1', 'TYPE_INT32', [16]],
      ['INPUT0', 'TYPE_INT32', [16]],
    ]);
    assert.deepEqual(config.output.map((o) => [o.name, o.data_type, o.dims.map(Number)]), [['OUTPUT1', 'TYPE_INT32', [16]]]);
    const c = simpleCase(2, 4);
    const r = await inferJson(srv.url, 'tf_partial', c.inputs);
    assert.equal(r.status, 200, r.text);
    const body = JSON.parse(r.text) as { outputs: { name: string; data: number[] }[] };
    assert.deepEqual(body.outputs.map((o) => o.name), ['OUTPUT1']);
    assert.deepEqual(body.outputs[0]!.data, c.difference);
  });

  it('auto-complete refuses max_batch_size on a signature that cannot batch, and a MetaGraph tag the SavedModel lacks', () => {
    assert.match(
      statuses.get('tf_types_batching')!.reason,
      /unable to autofill for 'tf_types_batching', configuration specified max-batch 4 but model signature does not support batching .*; set max_batch_size: 0/,
    );
    assert.match(statuses.get('tf_bad_tag')!.reason, /model 'tf_bad_tag': the SavedModel '.*' has no MetaGraph tagged 'gpu' \(its tag sets: \[serve\]\); set the parameter TF_GRAPH_TAG to one of them/);
  });

  it('runs the signature TF_SIGNATURE_DEF names', async () => {
    const metadata = srv.server.modelMetadata('tf_signature');
    assert.deepEqual(metadata.inputs.map((i) => i.name), ['X']);
    const x = [1, -2, 0.5, 10, 20, 30];
    const expected = await tensorflowReference('savedmodel', path('tf_signature', 'model.savedmodel'), { X: { dtype: 'float32', shape: [2, 3], data: x } }, ['Y'], 'scale');
    assert.deepEqual(expected['Y']!.data, x.map((v) => v * 2.5 + 1));
    for (const client of [http, grpc]) {
      const r = await client.infer({ model: 'tf_signature', inputs: [{ name: 'X', datatype: 'FP32', shape: [2, 3], data: new Float32Array(x) }] });
      assert.deepEqual(numbers(r, 'Y'), expected['Y']!.data);
    }
  });

  it('a signature that disagrees with config.pbtxt is a load error naming the model, the tensor, what the signature says and the fix', () => {
    const reason = (name: string) => statuses.get(name)!.reason;
    assert.match(reason('tf_bad_type'), /model 'tf_bad_type': input 'INPUT0' is TYPE_INT32 in signature 'serving_default', but config\.pbtxt says TYPE_FP32; set data_type: TYPE_INT32/);
    assert.match(
      reason('tf_bad_dims'),
      /model 'tf_bad_dims': input 'INPUT1' has shape \[-1,16\] in signature 'serving_default', but config\.pbtxt gives dims \[8\].*; set dims: \[16\] in config\.pbtxt/,
    );
    assert.match(reason('tf_bad_name'), /model 'tf_bad_name': output 'SUM' is not an output of signature 'serving_default' \(its outputs: OUTPUT0, OUTPUT1\); name the configuration's outputs by the signature's output keys/);
    assert.match(reason('tf_bad_signature'), /model 'tf_bad_signature': the SavedModel '.*model\.savedmodel' has no signature 'predict' \(its signatures: serving_default\); correct the parameter TF_SIGNATURE_DEF/);
  });

  it('a corrupt GraphDef, and a GraphDef without config.pbtxt, are load errors that say so', () => {
    assert.match(statuses.get('tf_corrupt')!.reason, /model 'tf_corrupt': '.*model\.graphdef' is not a GraphDef TensorFlow 2\.\d+\.\d+ can import \(a frozen graph in binary protobuf form/);
    assert.match(
      statuses.get('tf_graphdef_no_config')!.reason,
      /model 'tf_graphdef_no_config': a tensorflow_graphdef model needs a config\.pbtxt that lists its inputs and outputs/,
    );
  });

  it('TF_INIT_OPS_FILE: the listed init ops run at load (a string table answers); without them TensorFlow fails naming the model; a file that is not there is a load error', async () => {
    const keys = [{ name: 'INPUT0', datatype: 'BYTES', shape: [4, 1], data: ['a', 'c', 'q', 'b'] }];
    const ok = await inferJson(srv.url, 'tf_init_ops', keys);
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual((JSON.parse(ok.text) as { outputs: { data: number[]; shape: number[] }[] }).outputs[0], { name: 'OUTPUT0', datatype: 'INT64', shape: [4, 1], data: [1, 3, -1, 2] });
    const uninitialized = await inferJson(srv.url, 'tf_no_init_ops', keys);
    assert.equal(uninitialized.status, 500, uninitialized.text);
    assert.match(uninitialized.text, /model 'tf_no_init_ops': TensorFlow failed to run the GraphDef: Table not initialized/);
    assert.match(statuses.get('tf_init_ops_absent')?.reason ?? '', /model 'tf_init_ops_absent': TF_INIT_OPS_FILE 'nope\.json' is in neither .*tf_init_ops_absent\/1\/nope\.json/);
  });

  it("runs a graph's operations on the instance's calling thread unless TF_NUM_INTER_THREADS asks for a pool; intra-op threads as configured, else the server's default", () => {
    const session = (model: string) => {
      const line = logger.lines.find((l) => l.includes(`model '${model}': TensorFlow `) && l.includes(' session: '));
      assert.ok(line, `no session line for ${model} in:\n${logger.lines.join('\n')}`);
      return line;
    };
    const threads = defaultIntraOpThreads(availableParallelism(), 1);
    assert.match(session('tf_signature'), /session: 1 intra-op thread; operations run on the calling thread$/);
    assert.match(session('tf_savedmodel'), new RegExp(`session: ${threads} intra-op threads?; operations run on the calling thread$`));
    assert.match(session('tf_graphdef'), /operations run on the calling thread$/);
    // The table lookup answered through the pool in the TF_INIT_OPS_FILE test above.
    assert.match(session('tf_init_ops'), /; an inter-op pool of 2 threads$/);
  });

  it('a request of the wrong datatype or shape is refused naming the tensor, a TensorFlow error names the model; the models keep serving', async () => {
    const bad = await inferJson(srv.url, 'tf_graphdef', [
      { name: 'INPUT0', datatype: 'FP32', shape: [1, 16], data: Array.from({ length: 16 }, () => 1.5) },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, () => 1) },
    ]);
    assert.equal(bad.status, 400, bad.text);
    assert.match(bad.text, /INPUT0/);
    assert.match(bad.text, /FP32/);
    assert.match(bad.text, /INT32/);
    const wrongShape = await inferJson(srv.url, 'tf_savedmodel', [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 8], data: Array.from({ length: 8 }, () => 1) },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 8], data: Array.from({ length: 8 }, () => 1) },
    ]);
    assert.equal(wrongShape.status, 400, wrongShape.text);
    assert.match(wrongShape.text, /INPUT0/);
    // TensorFlow itself fails: a string that is not a number reaches StringToNumber.
    const strings = (first: string) => [
      { name: 'INPUT0', datatype: 'BYTES', shape: [1, 16], data: [first, ...Array.from({ length: 15 }, () => '1')] },
      { name: 'INPUT1', datatype: 'BYTES', shape: [1, 16], data: Array.from({ length: 16 }, () => '2') },
    ];
    const failed = await inferJson(srv.url, 'tf_string', strings('x'));
    assert.equal(failed.status, 500, failed.text);
    assert.match(failed.text, /model 'tf_string': TensorFlow failed to run the GraphDef: StringToNumberOp could not correctly convert string: x/);
    const fine = await inferJson(srv.url, 'tf_string', strings('40'));
    assert.equal(fine.status, 200, fine.text);
    assert.equal((JSON.parse(fine.text) as { outputs: { name: string; data: string[] }[] }).outputs.find((o) => o.name === 'OUTPUT0')!.data[0], '42');
    const c = simpleCase(1, 9);
    for (const model of ['tf_graphdef', 'tf_savedmodel', 'simple']) {
      const ok = await inferJson(srv.url, model, c.inputs);
      assert.equal(ok.status, 200, `${model}: ${ok.text}`);
    }
  });
});

describe('TensorFlow backend: an interpreter without TensorFlow', () => {
  let repo: string;
  let srv: RunningGrpcServer | undefined;

  before(async () => {
    await requireTensorFlow();
    repo = await makeRepository({
      tf_no_runtime: { 'config.pbtxt': simpleConfig('tf_no_runtime', 'tensorflow_graphdef') },
      // TF_INIT_OPS_FILE: in the version directory; missing (the table is never initialized);
      // naming a file that is not there.
      // Its operations run on an inter-op pool; the other models' on the instance's calling thread.
      tf_init_ops: { 'config.pbtxt': lookupConfig('tf_init_ops', `${INIT_OPS('init_ops.json')}\nparameters { key: "TF_NUM_INTER_THREADS" value: { string_value: "2" } }`), '1/init_ops.json': JSON.stringify({ init_ops: ['init_tables'] }) },
      tf_no_init_ops: { 'config.pbtxt': lookupConfig('tf_no_init_ops') },
      tf_init_ops_absent: { 'config.pbtxt': lookupConfig('tf_init_ops_absent', INIT_OPS('nope.json')) },
      simple: { 'config.pbtxt': simpleModel().config!, '1/model.onnx': simpleModel().onnx.bytes },
    });
    await makeTensorFlowModels([{ kind: 'graphdef', model: 'simple', path: join(repo, 'tf_no_runtime', '1', 'model.graphdef') }]);
    srv = await startServer({ modelRepositories: [repo], grpc: true, backendConfig: new Map([['tensorflow', { 'python-executable': '/usr/bin/python3' }]]) });
  });

  after(async () => {
    await srv?.stop();
    if (repo) await removeDir(repo);
  });

  it('refuses the model at load with the command that installs TensorFlow; the other models serve', async () => {
    const status = srv!.server.modelStatuses().find((s) => s.name === 'tf_no_runtime')!;
    assert.equal(status.state, 'UNAVAILABLE');
    assert.match(
      status.reason,
      /model 'tf_no_runtime': the tensorflow backend runs models with TensorFlow \(PyPI tensorflow-cpu\), and it is not installed for the Python interpreter \/usr\/bin\/python3\. Install it into the project's runtimes environment with: node scripts\/setup\.mjs runtimes/,
    );
    const ok = await inferJson(srv!.url, 'simple', simpleCase(1).inputs);
    assert.equal(ok.status, 200, ok.text);
  });
});

/** IEEE 754 half-precision bits of `v` (exact for the values used here). */
function toHalf(v: number): number {
  const f = new Float32Array([v]);
  const x = new Uint32Array(f.buffer)[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = ((x >>> 23) & 0xff) - 127 + 15;
  const mant = (x >>> 13) & 0x3ff;
  if (v === 0) return sign;
  return sign | (exp << 10) | mant;
}

function fromHalf(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}
