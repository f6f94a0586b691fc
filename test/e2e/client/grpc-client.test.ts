/**
 * `GrpcClient` against a real Nereid server (protocol.md §4, §7.4): health, metadata and config,
 * unary inference of every datatype ONNX Runtime's Node binding feeds (INT64/UINT64 extremes,
 * FP16 bits, BYTES with binary elements), classification, parameters, statistics, errors,
 * cancellation and deadlines, message compression, and `ModelStreamInfer` through the stream object.
 */
import assert from 'node:assert/strict';
import { createServer, type AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { GrpcClient, InferenceServerError, type ClientInput, type InferResult, type StreamResult } from '@nereid/client';
import { GrpcStatus, NereidError, type DataType } from '@nereid/protocol';
import { MLP_CONFIG_EXTRA, ORT_NODE_DATATYPES, identityModel, mlpModel, simpleModel, simpleStringModel, type MlpModel } from '@nereid/testkit';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { DATATYPE_CASES, MLP_BATCH, MLP_INPUT, asBuffer, labelledModelFiles, simpleInputs } from './cases.js';

let repo: string;
let srv: RunningGrpcServer;
let client: GrpcClient;
let mlp: MlpModel;

before(async () => {
  mlp = mlpModel({
    maxBatchSize: MLP_BATCH,
    inputSize: MLP_INPUT,
    hiddenSizes: [1024, 1024],
    configExtra: `${MLP_CONFIG_EXTRA}parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n`,
  });
  const identities = Object.fromEntries(
    ORT_NODE_DATATYPES.map((dt) => {
      const model = identityModel(dt, [-1, -1]);
      return [model.name, modelFiles(model)];
    }),
  );
  repo = await makeRepository({
    simple: modelFiles(simpleModel()),
    // Used by the statistics tests only, so its counters start at zero there.
    counted: modelFiles(simpleModel({ name: 'counted' })),
    simple_string: modelFiles(simpleStringModel()),
    labelled: labelledModelFiles(),
    mlp: modelFiles(mlp),
    ...identities,
  });
  srv = await startServer({ modelRepositories: [repo], id: 'nereid-client', grpc: true });
  assert.deepEqual(srv.server.startReport.failures, []);
  client = new GrpcClient(srv.grpcTarget);
});

after(async () => {
  client?.close();
  await srv?.stop();
  if (repo) await removeDir(repo);
});

/** Asserts `promise` rejects with an InferenceServerError of `code` whose message contains `fragment`. */
async function rejectsWith(promise: Promise<unknown>, code: number, fragment: string | RegExp): Promise<InferenceServerError> {
  let caught: unknown;
  await assert.rejects(promise, (err: unknown) => {
    caught = err;
    return true;
  });
  assert.ok(caught instanceof InferenceServerError, `expected an InferenceServerError, got ${String(caught)}`);
  assert.equal(caught.grpcCode, code, caught.message);
  if (typeof fragment === 'string') assert.ok(caught.message.includes(fragment), `'${caught.message}' should mention '${fragment}'`);
  else assert.match(caught.message, fragment);
  return caught;
}

function mlpInput(seed: number): Float32Array {
  return Float32Array.from({ length: MLP_BATCH * MLP_INPUT }, (_, i) => Math.sin(i * 0.37 + seed));
}

function mlpRequest(id: string, input = mlpInput(1)) {
  return { model: 'mlp', id, inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [MLP_BATCH, MLP_INPUT], data: input }] satisfies ClientInput[] };
}

function assertMlp(result: InferResult | undefined, input: Float32Array, rows = 4): void {
  assert.ok(result);
  assert.deepEqual(result.shape('OUTPUT0'), [MLP_BATCH, 16]);
  const got = result.typed('OUTPUT0') as Float32Array;
  const expected = mlp.compute(input.subarray(0, rows * MLP_INPUT), rows);
  expected.forEach((v, k) => assert.ok(Math.abs(got[k]! - v) <= 1e-3 * (1 + Math.abs(v)), `row value ${k}: ${got[k]} vs ${v}`));
}

function assertSimple(result: InferResult | undefined, seed: number, batch = 1): void {
  assert.ok(result);
  const { a, b } = simpleInputs(batch, seed);
  assert.equal(result.model, 'simple');
  assert.equal(result.version, '1');
  assert.deepEqual(result.outputNames(), ['OUTPUT0', 'OUTPUT1']);
  assert.deepEqual(result.shape('OUTPUT0'), [batch, 16]);
  assert.equal(result.datatype('OUTPUT0'), 'INT32');
  assert.deepEqual(Array.from(result.typed('OUTPUT0') as Int32Array), Array.from(a, (x, i) => x + b[i]!));
  assert.deepEqual(Array.from(result.typed('OUTPUT1') as Int32Array), Array.from(a, (x, i) => x - b[i]!));
}

function simpleRequest(seed: number, batch = 1, id?: string) {
  const { a, b } = simpleInputs(batch, seed);
  return {
    model: 'simple',
    ...(id === undefined ? {} : { id }),
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [batch, 16], data: a },
      { name: 'INPUT1', datatype: 'INT32', shape: [batch, 16], data: b },
    ] satisfies ClientInput[],
  };
}

async function collect(stream: AsyncIterable<StreamResult>): Promise<StreamResult[]> {
  const out: StreamResult[] = [];
  for await (const r of stream) out.push(r);
  return out;
}

describe('health, metadata and configuration', () => {
  it('isServerLive, isServerReady and the health service', async () => {
    assert.equal(await client.isServerLive(), true);
    assert.equal(await client.isServerReady(), true);
    assert.equal(await client.healthCheck(), 'SERVING');
    assert.equal(await client.healthCheck('inference.GRPCInferenceService'), 'SERVING');
  });

  it('isModelReady: true for a ready model and version, false for an unknown model or an absent version; an invalid version raises', async () => {
    assert.equal(await client.isModelReady('simple'), true);
    assert.equal(await client.isModelReady('simple', '1'), true);
    assert.equal(await client.isModelReady('nope'), false);
    assert.equal(await client.isModelReady('simple', '7'), false);
    const invalid = await rejectsWith(client.isModelReady('simple', 'one'), GrpcStatus.INVALID_ARGUMENT, 'integral value');
    assert.equal(invalid.status, 400);
  });

  it('serverMetadata', async () => {
    assert.deepEqual(await client.serverMetadata(), srv.server.metadata());
    assert.equal((await client.serverMetadata()).name, 'nereid-client');
  });

  it('modelMetadata: shapes as numbers, -1 for variable dimensions', async () => {
    const tensor = (name: string) => ({ name, datatype: 'INT32', shape: [-1, 16] });
    assert.deepEqual(await client.modelMetadata('simple'), {
      name: 'simple',
      versions: ['1'],
      platform: 'onnxruntime_onnx',
      inputs: [tensor('INPUT0'), tensor('INPUT1')],
      outputs: [tensor('OUTPUT0'), tensor('OUTPUT1')],
    });
    assert.deepEqual((await client.modelMetadata('identity_int64', '1')).inputs, [{ name: 'INPUT0', datatype: 'INT64', shape: [-1, -1] }]);
    await rejectsWith(client.modelMetadata('nope'), GrpcStatus.NOT_FOUND, 'nope');
  });

  it('modelConfig: the decoded config, snake_case, enums by name, 64-bit fields as numbers', async () => {
    const config = await client.modelConfig('simple');
    assert.equal(config.name, 'simple');
    assert.equal(config.platform, 'onnxruntime_onnx');
    assert.equal(config.backend, 'onnxruntime');
    assert.equal(config.max_batch_size, 8);
    assert.deepEqual(
      config.input.map((t) => [t.name, t.data_type, t.dims]),
      [
        ['INPUT0', 'TYPE_INT32', [16]],
        ['INPUT1', 'TYPE_INT32', [16]],
      ],
    );
    assert.equal(typeof config.input[0]!.dims[0], 'number');
    assert.equal(config.instance_group[0]!.kind, 'KIND_CPU');
    assert.equal(config.version_policy?.latest?.num_versions, 1);
    assert.equal((await client.modelConfig('mlp', '1')).max_batch_size, MLP_BATCH);
    await rejectsWith(client.modelConfig('nope'), GrpcStatus.NOT_FOUND, 'nope');
  });

  it('per-call headers and deadlines are accepted on every method', async () => {
    assert.equal(await client.isServerLive({ headers: { 'x-request': 'a' }, timeout: 10_000 }), true);
    assert.equal(await client.isModelReady('simple', undefined, { timeout: 10_000 }), true);
  });
});

describe('statistics', () => {
  it('modelStatistics: zero before any request, then counts of requests, executions and batch sizes', async () => {
    const [fresh] = (await client.modelStatistics('counted')).model_stats;
    assert.ok(fresh);
    assert.equal(fresh.name, 'counted');
    assert.equal(fresh.version, '1');
    assert.equal(fresh.last_inference, 0n);
    assert.equal(fresh.inference_count, 0n);
    assert.equal(fresh.execution_count, 0n);
    assert.deepEqual(fresh.inference_stats?.success, { count: 0n, ns: 0n });
    assert.deepEqual(fresh.batch_stats, []);

    const started = Date.now();
    await client.infer({ ...simpleRequest(1, 1), model: 'counted' });
    await client.infer({ ...simpleRequest(2, 3), model: 'counted' });
    const { model_stats } = await client.modelStatistics('counted', '1');
    assert.equal(model_stats.length, 1);
    const s = model_stats[0]!;
    assert.equal(s.inference_count, 4n);
    assert.equal(s.execution_count, 2n);
    assert.ok(s.last_inference >= BigInt(started - 1000) && s.last_inference <= BigInt(Date.now() + 1000), `last_inference ${s.last_inference}`);
    const i = s.inference_stats!;
    for (const d of [i.success, i.queue, i.compute_input, i.compute_infer, i.compute_output]) assert.equal(d?.count, 2n);
    assert.ok(i.success!.ns > 0n);
    assert.equal(typeof i.success!.ns, 'bigint');
    assert.deepEqual(
      s.batch_stats.map((b) => [b.batch_size, b.compute_infer?.count]).sort((x, y) => Number(x[0]! - y[0]!)),
      [
        [1n, 1n],
        [3n, 1n],
      ],
    );
  });

  it('modelStatistics with no model: every READY version of every model', async () => {
    const names = (await client.modelStatistics()).model_stats.map((s) => `${s.name}/${s.version}`);
    assert.ok(names.includes('counted/1') && names.includes('simple/1') && names.includes('mlp/1'), names.join(', '));
    assert.equal(new Set(names).size, names.length);
  });

  it('modelStatistics of an unknown model or version: INVALID_ARGUMENT with the server message', async () => {
    const err = await rejectsWith(client.modelStatistics('nope'), GrpcStatus.INVALID_ARGUMENT, "requested model 'nope' is not available");
    assert.equal(err.status, 400);
    await rejectsWith(client.modelStatistics('counted', '7'), GrpcStatus.INVALID_ARGUMENT, "requested model version is not available for model 'counted'");
  });
});

describe('unary inference', () => {
  it('simple: INT32 typed arrays in, both outputs, id echoed, concrete version', async () => {
    const result = await client.infer(simpleRequest(3, 1, 'my-id'));
    assertSimple(result, 3);
    assert.equal(result.id, 'my-id');
    assert.deepEqual(result.parameters, {});
  });

  it('without an id the result has none; a version and an output subset may be asked for', async () => {
    const result = await client.infer({ ...simpleRequest(5, 2), version: '1', outputs: [{ name: 'OUTPUT1' }] });
    assert.equal(result.id, undefined);
    assert.deepEqual(result.outputNames(), ['OUTPUT1']);
    const { a, b } = simpleInputs(2, 5);
    assert.deepEqual(Array.from(result.typed('OUTPUT1') as Int32Array), Array.from(a, (x, i) => x - b[i]!));
    assert.throws(() => result.bytes('OUTPUT0'), (err: unknown) => err instanceof NereidError && err.code === 'OUTPUT_UNKNOWN');
  });

  for (const c of DATATYPE_CASES) {
    it(`${c.datatype}: identity round trip keeps every byte`, async () => {
      const result = await client.infer({
        model: `identity_${c.datatype.toLowerCase()}`,
        inputs: [{ name: 'INPUT0', datatype: c.datatype, shape: c.shape, data: c.data }],
      });
      assert.equal(result.datatype('OUTPUT0'), c.datatype);
      assert.deepEqual(result.shape('OUTPUT0'), c.shape);
      assert.deepEqual(asBuffer(result.bytes('OUTPUT0')), c.bytes);
      if (c.check) c.check(result);
    });
  }

  it('every datatype the identity models cover has a case', () => {
    assert.deepEqual(new Set(DATATYPE_CASES.map((c) => c.datatype)), new Set<DataType>(ORT_NODE_DATATYPES));
  });

  it('plain JS values are converted to the datatype (INT64 bigints, BOOL, FP64)', async () => {
    const int64 = await client.infer({
      model: 'identity_int64',
      inputs: [{ name: 'INPUT0', datatype: 'INT64', shape: [1, 4], data: [-(2n ** 63n), 2n ** 63n - 1n, 0, -1] }],
    });
    assert.deepEqual(Array.from(int64.typed('OUTPUT0') as BigInt64Array), [-(2n ** 63n), 2n ** 63n - 1n, 0n, -1n]);
    const bool = await client.infer({ model: 'identity_bool', inputs: [{ name: 'INPUT0', datatype: 'BOOL', shape: [1, 3], data: [true, false, true] }] });
    assert.deepEqual(Array.from(bool.typed('OUTPUT0') as Uint8Array), [1, 0, 1]);
    const fp64 = await client.infer({ model: 'identity_fp64', inputs: [{ name: 'INPUT0', datatype: 'FP64', shape: [1, 2], data: [Math.PI, -0.5] }] });
    assert.deepEqual(Array.from(fp64.typed('OUTPUT0') as Float64Array), [Math.PI, -0.5]);
  });

  it('BYTES through simple_string: strings in, strings out', async () => {
    const a = Array.from({ length: 16 }, (_, i) => String(i * 11));
    const b = Array.from({ length: 16 }, (_, i) => String(100 - i));
    const result = await client.infer({
      model: 'simple_string',
      inputs: [
        { name: 'INPUT0', datatype: 'BYTES', shape: [1, 16], data: a },
        { name: 'INPUT1', datatype: 'BYTES', shape: [1, 16], data: b },
      ],
    });
    assert.equal(result.datatype('OUTPUT0'), 'BYTES');
    assert.deepEqual(result.strings('OUTPUT0'), a.map((x, i) => String(Number(x) + Number(b[i]))));
    assert.deepEqual(result.strings('OUTPUT1'), a.map((x, i) => String(Number(x) - Number(b[i]))));
  });

  it('classification: top-k strings, with labels where the model has them', async () => {
    const result = await client.infer({
      model: 'identity_fp32',
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [2, 4], data: Float32Array.of(0.25, 0.75, 0.5, 0.125, -1.5, -0.5, 2, 1) }],
      outputs: [{ name: 'OUTPUT0', classCount: 2 }],
    });
    assert.equal(result.datatype('OUTPUT0'), 'BYTES');
    assert.deepEqual(result.shape('OUTPUT0'), [2, 2]);
    assert.deepEqual(result.strings('OUTPUT0'), ['0.750000:1', '0.500000:2', '2.000000:2', '1.000000:3']);
    const labelled = await client.infer({
      model: 'labelled',
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: Float32Array.of(0.1, 0.9, 0.3, 0.2) }],
      outputs: [{ name: 'OUTPUT0', classCount: 1 }],
    });
    assert.deepEqual(labelled.strings('OUTPUT0'), ['0.900000:1:dog']);
  });

  it('request parameters of every kind are accepted', async () => {
    const result = await client.infer({
      ...simpleRequest(1),
      parameters: { priority: 1, timeout: 10_000_000, custom_int: 5, custom_big: 2n ** 62n, custom_str: 'x', custom_bool: true, custom_double: 0.5 },
    });
    assertSimple(result, 1);
  });

  it('large messages: a 64 MiB input and output go through (maxMessageSize default)', async () => {
    const n = 16 * 1024 * 1024;
    const data = new Float32Array(n);
    for (let i = 0; i < n; i += 4099) data[i] = i;
    const result = await client.infer({ model: 'identity_fp32', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, n], data }] });
    assert.equal(result.bytes('OUTPUT0').byteLength, n * 4);
    assert.ok(asBuffer(result.bytes('OUTPUT0')).equals(asBuffer(data)));
  });
});

describe('errors', () => {
  it('unknown model: NOT_FOUND (404) with the server message', async () => {
    const err = await rejectsWith(client.infer({ ...simpleRequest(0), model: 'nope' }), GrpcStatus.NOT_FOUND, "Request for unknown model: 'nope' is not found");
    assert.equal(err.status, 404);
    assert.equal(err.name, 'InferenceServerError');
  });

  it('invalid requests: INVALID_ARGUMENT (400)', async () => {
    const { a, b } = simpleInputs(1, 0);
    const badShape = client.infer({
      model: 'simple',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 15], data: a.subarray(0, 15) },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: b },
      ],
    });
    assert.equal((await rejectsWith(badShape, GrpcStatus.INVALID_ARGUMENT, 'INPUT0')).status, 400);
    await rejectsWith(client.infer({ ...simpleRequest(0), outputs: [{ name: 'NOPE' }] }), GrpcStatus.INVALID_ARGUMENT, 'NOPE');
    const wrongType = client.infer({
      model: 'simple',
      inputs: [
        { name: 'INPUT0', datatype: 'FP32', shape: [1, 16], data: new Float32Array(16) },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: b },
      ],
    });
    await rejectsWith(wrongType, GrpcStatus.INVALID_ARGUMENT, 'INPUT0');
    await rejectsWith(client.infer({ ...simpleRequest(0), parameters: { triton_custom: 1 } }), GrpcStatus.INVALID_ARGUMENT, 'triton_');
    await rejectsWith(client.infer({ ...simpleRequest(0), version: '9' }), GrpcStatus.NOT_FOUND, 'version 9');
  });

  it('what the client cannot encode is a NereidError and nothing is sent', async () => {
    await assert.rejects(
      client.infer({ model: 'simple', inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: [1, 2, 3] }] }),
      (err: unknown) => err instanceof NereidError,
    );
    await assert.rejects(
      client.infer({ ...simpleRequest(0), parameters: { priority: -1 } }),
      (err: unknown) => err instanceof NereidError && err.code === 'REQUEST_PARAMETER_TYPE',
    );
  });

  it('no server: UNAVAILABLE (503)', async () => {
    // A port that was free a moment ago: the connection is refused.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as AddressInfo).port;
    await new Promise((resolve) => probe.close(resolve));
    const lonely = new GrpcClient(`127.0.0.1:${port}`);
    try {
      const err = await rejectsWith(lonely.isServerLive({ timeout: 10_000 }), GrpcStatus.UNAVAILABLE, /./);
      assert.equal(err.status, 503);
    } finally {
      lonely.close();
    }
  });

  it('maxMessageSize bounds what the client sends: RESOURCE_EXHAUSTED (429); keepalive options are taken', async () => {
    const small = new GrpcClient(srv.grpcTarget, { maxMessageSize: 1024, keepalive: { timeMs: 60_000, timeoutMs: 5_000, permitWithoutCalls: false } });
    try {
      assertSimple(await small.infer(simpleRequest(1)), 1);
      const big = { model: 'identity_fp32', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 1024], data: new Float32Array(1024) }] satisfies ClientInput[] };
      const err = await rejectsWith(small.infer(big), GrpcStatus.RESOURCE_EXHAUSTED, /larger than 1024/);
      assert.equal(err.status, 429);
    } finally {
      small.close();
    }
  });

  it('a closed client refuses calls with a NereidError', async () => {
    const closed = new GrpcClient(srv.grpcTarget);
    assert.equal(await closed.isServerLive(), true);
    closed.close();
    await assert.rejects(closed.isServerLive(), (err: unknown) => err instanceof NereidError && err.code === 'UNAVAILABLE');
    assert.throws(() => closed.stream(), NereidError);
  });
});

describe('cancellation and deadlines', () => {
  it('aborting an in-flight request rejects with the signal reason; the server keeps serving', async () => {
    const controller = new AbortController();
    const pending = client.infer({ ...mlpRequest('aborted'), signal: controller.signal });
    setTimeout(() => controller.abort(), 5);
    await assert.rejects(pending, (err: unknown) => err instanceof Error && err.name === 'AbortError');
    const input = mlpInput(4);
    assertMlp(await client.infer(mlpRequest('after-abort', input)), input);
  });

  it('an already aborted signal rejects at once with its reason', async () => {
    const reason = new Error('not wanted');
    await assert.rejects(client.infer({ ...simpleRequest(0), signal: AbortSignal.abort(reason) }), (err: unknown) => err === reason);
  });

  it('a deadline that passes: DEADLINE_EXCEEDED (504)', async () => {
    const err = await rejectsWith(client.infer({ ...mlpRequest('late'), timeout: 1 }), GrpcStatus.DEADLINE_EXCEEDED, /deadline/i);
    assert.equal(err.status, 504);
    assertSimple(await client.infer({ ...simpleRequest(2), timeout: 30_000 }), 2);
  });
});

describe('compression', () => {
  for (const compression of ['gzip', 'deflate', 'none'] as const) {
    it(`a '${compression}' client: unary and streamed requests, numbers and BYTES`, async () => {
      const compressed = new GrpcClient(srv.grpcTarget, { compression });
      try {
        assertSimple(await compressed.infer(simpleRequest(7)), 7);
        const bytesCase = DATATYPE_CASES.find((c) => c.datatype === 'BYTES')!;
        const bytes = await compressed.infer({ model: 'identity_bytes', inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: bytesCase.shape, data: bytesCase.data }] });
        assert.deepEqual(asBuffer(bytes.bytes('OUTPUT0')), bytesCase.bytes);
        const stream = compressed.stream();
        stream.send(simpleRequest(8, 1, 'c1'));
        stream.send(simpleRequest(9, 2, 'c2'));
        stream.end();
        const results = await collect(stream);
        assert.deepEqual(results.map((r) => r.id), ['c1', 'c2']);
        assertSimple(results[0]!.result, 8);
        assertSimple(results[1]!.result, 9, 2);
      } finally {
        compressed.close();
      }
    });
  }
});

describe('streaming', () => {
  it('results come back in request order, each final, ids echoed, across models', async () => {
    const stream = client.stream();
    const input = mlpInput(6);
    // The mlp request is slow; the simple ones after it still wait for their turn.
    stream.send(mlpRequest('m', input));
    stream.send(simpleRequest(1, 1, 's1'));
    stream.send({ model: 'identity_int64', id: 'i64', inputs: [{ name: 'INPUT0', datatype: 'INT64', shape: [1, 2], data: BigInt64Array.of(-(2n ** 63n), 2n ** 63n - 1n) }] });
    stream.send(simpleRequest(2, 3));
    stream.end();
    const results = await collect(stream);
    assert.deepEqual(results.map((r) => [r.id, r.final, r.error]), [
      ['m', true, undefined],
      ['s1', true, undefined],
      ['i64', true, undefined],
      ['', true, undefined],
    ]);
    assertMlp(results[0]!.result, input);
    assertSimple(results[1]!.result, 1);
    assert.deepEqual(Array.from(results[2]!.result!.typed('OUTPUT0') as BigInt64Array), [-(2n ** 63n), 2n ** 63n - 1n]);
    assertSimple(results[3]!.result, 2, 3);
    assert.equal(results[3]!.result!.id, undefined);
    assert.equal(results[1]!.result!.parameters.triton_final_response, true);
  });

  it('in-band errors become results with an error, and the stream goes on', async () => {
    const stream = client.stream();
    stream.send(simpleRequest(1, 1, 'ok-1'));
    stream.send({ ...simpleRequest(1), id: 'missing', model: 'nope' });
    stream.send({ ...simpleRequest(1), id: 'bad-output', outputs: [{ name: 'NOPE' }] });
    stream.send(simpleRequest(2, 1, 'ok-2'));
    stream.end();
    const results = await collect(stream);
    assert.deepEqual(results.map((r) => r.id), ['ok-1', 'missing', 'bad-output', 'ok-2']);
    assertSimple(results[0]!.result, 1);
    assertSimple(results[3]!.result, 2);
    for (const r of results.slice(1, 3)) {
      assert.equal(r.result, undefined);
      assert.equal(r.final, true);
      assert.ok(r.error instanceof InferenceServerError);
    }
    assert.match(results[1]!.error!.message, /unknown model: 'nope'/);
    assert.match(results[2]!.error!.message, /NOPE/);
  });

  it('enableEmptyFinalResponse on a non-decoupled model: still one final result per request', async () => {
    const stream = client.stream();
    stream.send({ ...simpleRequest(4, 1, 'e1'), enableEmptyFinalResponse: true });
    stream.send({ ...simpleRequest(5, 1, 'e2'), enableEmptyFinalResponse: false });
    stream.end();
    const results = await collect(stream);
    assert.deepEqual(results.map((r) => [r.id, r.final]), [
      ['e1', true],
      ['e2', true],
    ]);
    assertSimple(results[0]!.result, 4);
    assertSimple(results[1]!.result, 5);
  });

  it('sending after end() throws; results are read with next() too', async () => {
    const stream = client.stream();
    stream.send(simpleRequest(3, 1, 'n1'));
    stream.end();
    assert.throws(() => stream.send(simpleRequest(3)), (err: unknown) => err instanceof NereidError);
    const first = await stream.next();
    assert.equal(first.done, false);
    assertSimple(first.value?.result, 3);
    assert.deepEqual(await stream.next(), { value: undefined, done: true });
    assert.deepEqual(await stream.next(), { value: undefined, done: true });
  });

  it('strict error mode (triton_grpc_error metadata): the first error ends the stream with its status', async () => {
    const stream = client.stream({ headers: { triton_grpc_error: 'true' } });
    stream.send(simpleRequest(1, 1, 'fine'));
    stream.send({ ...simpleRequest(1), id: 'missing', model: 'nope' });
    stream.send(simpleRequest(2, 1, 'dropped'));
    stream.end();
    const got: StreamResult[] = [];
    const failure = await (async () => {
      try {
        for await (const r of stream) got.push(r);
      } catch (err) {
        return err;
      }
      return undefined;
    })();
    assert.deepEqual(got.map((r) => r.id), ['fine']);
    assert.ok(failure instanceof InferenceServerError, String(failure));
    assert.equal(failure.grpcCode, GrpcStatus.NOT_FOUND);
    assert.match(failure.message, /nope/);
  });

  it('cancel() with requests in flight ends the iteration quietly; the server keeps serving', async () => {
    const stream = client.stream();
    for (let i = 0; i < 3; i++) stream.send(mlpRequest(`c${i}`));
    const seen: StreamResult[] = [];
    setTimeout(() => stream.cancel(), 5);
    for await (const r of stream) seen.push(r);
    assert.ok(seen.length < 3, `${seen.length} results after cancel`);
    assert.throws(() => stream.send(simpleRequest(0)), NereidError);
    const next = client.stream();
    next.send(simpleRequest(6, 1, 'after-cancel'));
    next.end();
    const results = await collect(next);
    assertSimple(results[0]?.result, 6);
  });

  it('leaving a for-await loop early cancels the call', async () => {
    const stream = client.stream();
    stream.send(simpleRequest(1, 1, 'first'));
    for (let i = 0; i < 3; i++) stream.send(mlpRequest(`later-${i}`));
    for await (const r of stream) {
      assert.equal(r.id, 'first');
      break;
    }
    assert.deepEqual(await stream.next(), { value: undefined, done: true });
    assert.throws(() => stream.send(simpleRequest(0)), NereidError);
  });

  it('the stream signal aborts it: the iteration throws the reason', async () => {
    const controller = new AbortController();
    const stream = client.stream({ signal: controller.signal });
    stream.send(mlpRequest('slow'));
    setTimeout(() => controller.abort(), 5);
    await assert.rejects(collect(stream), (err: unknown) => err instanceof Error && err.name === 'AbortError');
  });

  it('the stream deadline covers the whole call: DEADLINE_EXCEEDED after the results before it', async () => {
    const stream = client.stream({ timeout: 800 });
    stream.send(simpleRequest(1, 1, 'in-time'));
    const got: StreamResult[] = [];
    const failure = await (async () => {
      try {
        for await (const r of stream) got.push(r);
      } catch (err) {
        return err;
      }
      return undefined;
    })();
    assert.deepEqual(got.map((r) => r.id), ['in-time']);
    assert.ok(failure instanceof InferenceServerError, String(failure));
    assert.equal(failure.grpcCode, GrpcStatus.DEADLINE_EXCEEDED);
  });

  it('many requests on one stream, read slower than they arrive', async () => {
    const stream = client.stream();
    const n = 200;
    for (let i = 0; i < n; i++) stream.send(simpleRequest(i % 50, 1, `r${i}`));
    stream.end();
    let i = 0;
    for await (const r of stream) {
      assert.equal(r.id, `r${i}`);
      assertSimple(r.result, i % 50);
      // A reader that lags behind: results pile up, the call pauses and resumes.
      if (i % 50 === 0) await new Promise((resolve) => setTimeout(resolve, i === 0 ? 200 : 5));
      i++;
    }
    assert.equal(i, n);
  });
});
