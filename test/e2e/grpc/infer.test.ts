/**
 * ModelInfer over real gRPC (protocol.md §4.6, §7.4): raw and typed input contents for every
 * datatype that has them, FP16 through raw contents, BYTES both ways, the shape of responses (one
 * raw entry per output, never typed contents), requested outputs, request ids, request
 * parameters with the gRPC typing rules, classification and batches.
 */
import assert from 'node:assert/strict';
import { status, type Client } from '@grpc/grpc-js';
import { after, before, describe, it } from 'node:test';
import type { pb } from '@nereid/protocol';
import { identityModel, simpleModel, simpleStringModel } from '@nereid/testkit';
import {
  assertSimpleResponse,
  assertStatus,
  bytesElements,
  inferenceClient,
  inferRequest,
  inputTensor,
  int32s,
  nextResponses,
  openStream,
  rawBytes,
  requestedOutput,
  simpleRequest,
  unary,
  unaryError,
  viewAs,
} from '../../helpers/grpc.js';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';

/** Identity models (INPUT0 → OUTPUT0, shape [-1, -1]) for every datatype the tests send. */
const IDENTITY_TYPES = ['BOOL', 'INT8', 'INT16', 'INT32', 'INT64', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'FP16', 'FP32', 'FP64', 'BYTES'] as const;

let repo: string;
let srv: RunningGrpcServer;
let client: Client;

before(async () => {
  const models: Record<string, ReturnType<typeof modelFiles>> = {
    simple: modelFiles(simpleModel()),
    simple_string: modelFiles(simpleStringModel()),
  };
  for (const t of IDENTITY_TYPES) models[`identity_${t.toLowerCase()}`] = modelFiles(identityModel(t, [-1, -1]));
  repo = await makeRepository(models);
  srv = await startServer({ modelRepositories: [repo], grpc: true });
  assert.deepEqual(srv.server.startReport.failures, []);
  client = inferenceClient(srv.grpcTarget);
});

after(async () => {
  client?.close();
  await srv?.stop();
  if (repo) await removeDir(repo);
});

/** Asserts the one-output response of an identity model and returns its raw bytes. */
function identityOutput(response: pb.ModelInferResponse, datatype: string, shape: readonly number[]): Uint8Array {
  assert.equal(response.model_name, `identity_${datatype.toLowerCase()}`);
  assert.equal(response.model_version, '1');
  assert.equal(response.outputs.length, 1);
  const out = response.outputs[0]!;
  assert.equal(out.name, 'OUTPUT0');
  assert.equal(out.datatype, datatype);
  assert.deepEqual(out.shape, shape.map((d) => BigInt(d)));
  assert.equal(out.contents, undefined, 'typed contents must never be set in a response');
  assert.equal(response.raw_output_contents.length, 1);
  return response.raw_output_contents[0]!;
}

function identityRequest(datatype: string, shape: readonly number[], contents: Partial<pb.InferTensorContents> | Uint8Array): pb.ModelInferRequest {
  const raw = contents instanceof Uint8Array;
  return inferRequest({
    model_name: `identity_${datatype.toLowerCase()}`,
    inputs: [inputTensor('INPUT0', datatype, shape, raw ? undefined : contents)],
    raw_input_contents: raw ? [contents] : [],
  });
}

describe('raw contents', () => {
  it('simple: both outputs summed and subtracted, in output order', async () => {
    const c = simpleRequest(1, 3);
    const response = await unary(client, 'ModelInfer', c.request);
    assertSimpleResponse(response, c);
    assert.equal(response.id, '');
    assert.deepEqual(response.parameters, {});
    for (const out of response.outputs) assert.equal(out.contents, undefined);
  });

  it('simple with batch 4 and an explicit version', async () => {
    const c = simpleRequest(4, 11, { model_version: '1' });
    assertSimpleResponse(await unary(client, 'ModelInfer', c.request), c, 4);
  });

  it('FP16 travels as raw bits', async () => {
    // 1.0, -2.0, 65504 (max), the smallest subnormal, -0, 0.333 (0x3555)
    const bits = Uint16Array.from([0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000, 0x3555]);
    const raw = identityOutput(await unary(client, 'ModelInfer', identityRequest('FP16', [2, 3], rawBytes(bits))), 'FP16', [2, 3]);
    assert.deepEqual(viewAs(raw, Uint16Array), bits);
  });

  it('a zero-element tensor: its output still has its (empty) raw entry', async () => {
    for (const datatype of ['FP32', 'BYTES'] as const) {
      const response = await unary(client, 'ModelInfer', identityRequest(datatype, [1, 0], new Uint8Array(0)));
      const raw = identityOutput(response, datatype, [1, 0]);
      assert.equal(raw.byteLength, 0);
    }
  });

  it('a batch dimension of 0 is refused, as Triton refuses it', async () => {
    const err = await unaryError(
      client,
      'ModelInfer',
      inferRequest({
        model_name: 'simple',
        inputs: [inputTensor('INPUT0', 'INT32', [0, 16]), inputTensor('INPUT1', 'INT32', [0, 16])],
        raw_input_contents: [new Uint8Array(0), new Uint8Array(0)],
      }),
    );
    assertStatus(err, status.INVALID_ARGUMENT, "input byte size mismatch for input 'INPUT0' for model 'simple': inference request batch-size must be >= 1");
  });

  it('BYTES through simple_string: length-prefixed elements in and out', async () => {
    const encode = (values: string[]) => {
      const parts = values.flatMap((v) => {
        const len = Buffer.alloc(4);
        len.writeUInt32LE(Buffer.byteLength(v));
        return [len, Buffer.from(v)];
      });
      return new Uint8Array(Buffer.concat(parts));
    };
    const a = Array.from({ length: 16 }, (_, i) => String(i * 10));
    const b = Array.from({ length: 16 }, (_, i) => String(i - 5));
    const response = await unary(
      client,
      'ModelInfer',
      inferRequest({
        model_name: 'simple_string',
        inputs: [inputTensor('INPUT0', 'BYTES', [1, 16]), inputTensor('INPUT1', 'BYTES', [1, 16])],
        raw_input_contents: [encode(a), encode(b)],
      }),
    );
    assert.deepEqual(response.outputs.map((o) => [o.name, o.datatype, o.shape]), [
      ['OUTPUT0', 'BYTES', [1n, 16n]],
      ['OUTPUT1', 'BYTES', [1n, 16n]],
    ]);
    assert.equal(response.raw_output_contents.length, 2);
    const sum = bytesElements(response.raw_output_contents[0]!).map(String);
    const diff = bytesElements(response.raw_output_contents[1]!).map(String);
    assert.deepEqual(sum, a.map((x, i) => String(Number(x) + Number(b[i]))));
    assert.deepEqual(diff, a.map((x, i) => String(Number(x) - Number(b[i]))));
  });
});

describe('large outputs', () => {
  it('go back to the server once encoded, unary and streamed, and concurrent responses keep their own bytes', async () => {
    const server = srv.server;
    const original = server.recycleOutputs;
    const recycled: string[] = [];
    server.recycleOutputs = (response) => {
      recycled.push(response.id);
      original.call(server, response);
    };
    try {
      const n = 1 << 17; // 512 KiB of FP32, above the output pool's threshold
      const values = (k: number) => Float32Array.from({ length: n }, (_, i) => i * 8 + k);
      const request = (k: number) => ({ ...identityRequest('FP32', [1, n], rawBytes(values(k))), id: `r${k}` });
      const ids = [0, 1, 2, 3, 4, 5, 6, 7];
      // Eight calls at once: an output buffer given back before its bytes were copied into the
      // message would show another call's values.
      const responses = await Promise.all(ids.map((k) => unary(client, 'ModelInfer', request(k))));
      for (const k of ids) assert.deepEqual(viewAs(identityOutput(responses[k]!, 'FP32', [1, n]), Float32Array), values(k));
      assert.deepEqual([...recycled].sort(), ids.map((k) => `r${k}`));
      recycled.length = 0;
      const stream = openStream(client);
      const got = nextResponses(stream, ids.length);
      for (const k of ids) stream.write(request(k));
      const streamed = await got;
      stream.end();
      for (const r of streamed) {
        assert.equal(r.error_message, '');
        const k = Number(r.infer_response!.id.slice(1));
        assert.deepEqual(viewAs(identityOutput(r.infer_response!, 'FP32', [1, n]), Float32Array), values(k));
      }
      assert.deepEqual([...recycled].sort(), ids.map((k) => `r${k}`));
    } finally {
      Reflect.deleteProperty(server, 'recycleOutputs');
    }
  });
});

describe('typed contents', () => {
  it('int_contents for simple (INT32), both inputs', async () => {
    const a = Array.from({ length: 16 }, (_, i) => i * 1000 - 2_000_000_000);
    const b = Array.from({ length: 16 }, (_, i) => -i);
    const response = await unary(
      client,
      'ModelInfer',
      inferRequest({
        model_name: 'simple',
        inputs: [inputTensor('INPUT0', 'INT32', [1, 16], { int_contents: a }), inputTensor('INPUT1', 'INT32', [1, 16], { int_contents: b })],
      }),
    );
    assertSimpleResponse(response, { sum: a.map((x, i) => x + b[i]!), difference: a.map((x, i) => x - b[i]!) });
  });

  it('BOOL: bool_contents become one byte each', async () => {
    const values = [true, false, false, true, true, false];
    const raw = identityOutput(await unary(client, 'ModelInfer', identityRequest('BOOL', [2, 3], { bool_contents: values })), 'BOOL', [2, 3]);
    assert.deepEqual(Array.from(raw), values.map((v) => (v ? 1 : 0)));
  });

  const narrowed: [string, number[], { new (buffer: ArrayBuffer): ArrayLike<number>; BYTES_PER_ELEMENT: number }][] = [
    ['INT8', [-128, -1, 0, 1, 127], Int8Array],
    ['INT16', [-32768, -129, 0, 255, 32767], Int16Array],
    ['INT32', [-2147483648, -1, 0, 65536, 2147483647], Int32Array],
  ];
  for (const [datatype, values, Ctor] of narrowed) {
    it(`${datatype}: int_contents narrowed to ${Ctor.BYTES_PER_ELEMENT} byte(s) per element, extremes exact`, async () => {
      const raw = identityOutput(await unary(client, 'ModelInfer', identityRequest(datatype, [1, 5], { int_contents: values })), datatype, [1, 5]);
      assert.equal(raw.byteLength, 5 * Ctor.BYTES_PER_ELEMENT);
      assert.deepEqual(Array.from(viewAs(raw, Ctor)), values);
    });
  }

  const unsignedNarrowed: [string, number[], { new (buffer: ArrayBuffer): ArrayLike<number>; BYTES_PER_ELEMENT: number }][] = [
    ['UINT8', [0, 1, 128, 255], Uint8Array],
    ['UINT16', [0, 1, 32768, 65535], Uint16Array],
    ['UINT32', [0, 1, 2147483648, 4294967295], Uint32Array],
  ];
  for (const [datatype, values, Ctor] of unsignedNarrowed) {
    it(`${datatype}: uint_contents narrowed to ${Ctor.BYTES_PER_ELEMENT} byte(s) per element, extremes exact`, async () => {
      const raw = identityOutput(await unary(client, 'ModelInfer', identityRequest(datatype, [4, 1], { uint_contents: values })), datatype, [4, 1]);
      assert.equal(raw.byteLength, 4 * Ctor.BYTES_PER_ELEMENT);
      assert.deepEqual(Array.from(viewAs(raw, Ctor)), values);
    });
  }

  it('INT64: int64_contents with the INT64 extremes and values past 2^53, exact', async () => {
    const values = [-(2n ** 63n), -1n, 0n, 2n ** 53n + 1n, 2n ** 63n - 1n, -(2n ** 53n) - 3n];
    const raw = identityOutput(await unary(client, 'ModelInfer', identityRequest('INT64', [2, 3], { int64_contents: values })), 'INT64', [2, 3]);
    assert.deepEqual(Array.from(viewAs(raw, BigInt64Array)), values);
  });

  it('UINT64: uint64_contents up to 2^64-1, exact', async () => {
    const values = [0n, 1n, 2n ** 53n + 1n, 2n ** 63n, 2n ** 64n - 1n];
    const raw = identityOutput(await unary(client, 'ModelInfer', identityRequest('UINT64', [1, 5], { uint64_contents: values })), 'UINT64', [1, 5]);
    assert.deepEqual(Array.from(viewAs(raw, BigUint64Array)), values);
  });

  it('FP32: fp32_contents, float32 values exact (max, smallest subnormal, -0)', async () => {
    const values = Array.from(Float32Array.from([0.5, -1.25, 3.4028234663852886e38, 1.401298464324817e-45, -0, 0.1]));
    const raw = identityOutput(await unary(client, 'ModelInfer', identityRequest('FP32', [3, 2], { fp32_contents: values })), 'FP32', [3, 2]);
    assert.deepEqual(Array.from(viewAs(raw, Float32Array)), values);
  });

  it('FP64: fp64_contents exact (pi, -1e308, 5e-324, -0)', async () => {
    const values = [Math.PI, -1e308, 5e-324, -0, 0.1];
    const raw = identityOutput(await unary(client, 'ModelInfer', identityRequest('FP64', [1, 5], { fp64_contents: values })), 'FP64', [1, 5]);
    assert.deepEqual(Array.from(viewAs(raw, Float64Array)), values);
  });

  it('BYTES: bytes_contents (empty, multi-byte UTF-8) re-serialized with length prefixes', async () => {
    // UTF-8 without NUL only: ONNX Runtime's Node binding carries string tensors as JS strings.
    const values = [Buffer.from('hello'), Buffer.alloc(0), Buffer.from('héllo wörld'), Buffer.from('日本 🚀')];
    const raw = identityOutput(await unary(client, 'ModelInfer', identityRequest('BYTES', [2, 2], { bytes_contents: values })), 'BYTES', [2, 2]);
    assert.equal(raw.byteLength, values.reduce((n, v) => n + 4 + v.byteLength, 0));
    assert.deepEqual(bytesElements(raw), values);
  });
});

describe('requested outputs and ids', () => {
  it('a subset of the outputs: only that output and its one raw entry', async () => {
    const c = simpleRequest(2, 1, { outputs: [requestedOutput('OUTPUT1')] });
    const response = await unary(client, 'ModelInfer', c.request);
    assert.deepEqual(response.outputs.map((o) => [o.name, o.datatype, o.shape]), [['OUTPUT1', 'INT32', [2n, 16n]]]);
    assert.equal(response.raw_output_contents.length, 1);
    assert.deepEqual(int32s(response.raw_output_contents[0]!), c.difference);
  });

  it('outputs requested in reverse order: each raw entry sits at its output index', async () => {
    const c = simpleRequest(1, 2, { outputs: [requestedOutput('OUTPUT1'), requestedOutput('OUTPUT0')] });
    const response = await unary(client, 'ModelInfer', c.request);
    assert.equal(response.raw_output_contents.length, response.outputs.length);
    const byName = new Map(response.outputs.map((o, i) => [o.name, int32s(response.raw_output_contents[i]!)]));
    assert.deepEqual([...byName.keys()].sort(), ['OUTPUT0', 'OUTPUT1']);
    assert.deepEqual(byName.get('OUTPUT0'), c.sum);
    assert.deepEqual(byName.get('OUTPUT1'), c.difference);
  });

  it('the request id is echoed', async () => {
    const c = simpleRequest(1, 0, { id: 'request-42 ✓' });
    const response = await unary(client, 'ModelInfer', c.request);
    assert.equal(response.id, 'request-42 ✓');
    assertSimpleResponse(response, c);
  });
});

describe('request parameters', () => {
  const accepted: [string, Record<string, pb.InferParameter>][] = [
    ['sequence_id as int64_param, sequence_start/end as bool_param', { sequence_id: { int64_param: 42n }, sequence_start: { bool_param: true }, sequence_end: { bool_param: true } }],
    ['sequence_id as string_param', { sequence_id: { string_param: 'correlation-7' } }],
    ['priority as int64_param', { priority: { int64_param: 1n } }],
    ['priority as uint64_param (what the Python client sends)', { priority: { uint64_param: 2n } }],
    ['timeout as int64_param', { timeout: { int64_param: 10_000_000n } }],
    [
      'custom parameters of each accepted choice',
      {
        custom_bool: { bool_param: false },
        custom_int: { int64_param: -(2n ** 62n) },
        custom_string: { string_param: 'value' },
        custom_double: { double_param: 0.25 },
      },
    ],
    ['triton_enable_empty_final_response as bool_param', { triton_enable_empty_final_response: { bool_param: true } }],
  ];
  for (const [what, parameters] of accepted) {
    it(`accepts ${what}`, async () => {
      const c = simpleRequest(1, 5, { parameters });
      assertSimpleResponse(await unary(client, 'ModelInfer', c.request), c);
    });
  }

  it('rejects a custom uint64_param (INVALID_ARGUMENT naming the key)', async () => {
    const err = await unaryError(client, 'ModelInfer', simpleRequest(1, 0, { parameters: { my_count: { uint64_param: 3n } } }).request);
    assertStatus(err, status.INVALID_ARGUMENT, "'my_count'", 'uint64_param');
  });

  it("rejects a 'triton_' key other than triton_enable_empty_final_response", async () => {
    const err = await unaryError(client, 'ModelInfer', simpleRequest(1, 0, { parameters: { triton_secret: { bool_param: true } } }).request);
    assertStatus(err, status.INVALID_ARGUMENT, "'triton_secret'", 'triton_enable_empty_final_response');
  });

  it('rejects a protocol parameter of the wrong choice (sequence_start as int64_param)', async () => {
    const err = await unaryError(client, 'ModelInfer', simpleRequest(1, 0, { parameters: { sequence_start: { int64_param: 1n } } }).request);
    assertStatus(err, status.INVALID_ARGUMENT, "'sequence_start'", 'bool_param');
  });

  it('rejects a negative priority and a parameter with no value', async () => {
    let err = await unaryError(client, 'ModelInfer', simpleRequest(1, 0, { parameters: { priority: { int64_param: -1n } } }).request);
    assertStatus(err, status.INVALID_ARGUMENT, "'priority'");
    err = await unaryError(client, 'ModelInfer', simpleRequest(1, 0, { parameters: { custom: {} } }).request);
    assertStatus(err, status.INVALID_ARGUMENT, "'custom'");
  });
});

describe('classification', () => {
  it('classification=3 on OUTPUT0 of a batch of 2: BYTES [2, 3] of "value:index"', async () => {
    // simpleRequest(2, 0): sum[i] = 1000 - 2i, decreasing along each row of 16.
    const c = simpleRequest(2, 0, { outputs: [requestedOutput('OUTPUT0', { classification: { int64_param: 3n } }), requestedOutput('OUTPUT1')] });
    const response = await unary(client, 'ModelInfer', c.request);
    assert.deepEqual(response.outputs.map((o) => [o.name, o.datatype, o.shape]), [
      ['OUTPUT0', 'BYTES', [2n, 3n]],
      ['OUTPUT1', 'INT32', [2n, 16n]],
    ]);
    assert.equal(response.raw_output_contents.length, 2);
    assert.deepEqual(bytesElements(response.raw_output_contents[0]!).map(String), ['1000:0', '998:1', '996:2', '968:0', '966:1', '964:2']);
    assert.deepEqual(int32s(response.raw_output_contents[1]!), c.difference);
  });

  it('classification that is not a positive int64_param is INVALID_ARGUMENT', async () => {
    for (const p of [{ int64_param: 0n }, { string_param: '3' }, { uint64_param: 3n }]) {
      const err = await unaryError(client, 'ModelInfer', simpleRequest(1, 0, { outputs: [requestedOutput('OUTPUT0', { classification: p })] }).request);
      assertStatus(err, status.INVALID_ARGUMENT, 'classification', 'OUTPUT0');
    }
  });
});
