/**
 * HttpClient and GrpcClient side by side on one server: the same request through both gives the
 * same `InferResult` (model, version, id, parameters, every output's datatype, shape and bytes),
 * the same metadata, configuration and statistics, and the same error status and message.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  GrpcClient,
  HttpClient,
  InferenceServerError,
  type ClientInferOptions,
  type ClientInput,
  type InferResult,
} from '@nereid/client';
import { identityModel, simpleModel, simpleStringModel } from '@nereid/testkit';
import { httpRequest, jsonBody, serveRepository, type RunningGrpcServer, type ServedRepository } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { DATATYPE_CASES, asBuffer, labelledModelFiles, simpleInputs } from './cases.js';

let served: ServedRepository;
let srv: RunningGrpcServer;
let http: HttpClient;
let grpc: GrpcClient;

before(async () => {
  const identities = Object.fromEntries(
    DATATYPE_CASES.map((c) => {
      const model = identityModel(c.datatype, [-1, -1]);
      return [model.name, modelFiles(model)];
    }),
  );
  served = await serveRepository({
    simple: modelFiles(simpleModel()),
    simple_string: modelFiles(simpleStringModel()),
    labelled: labelledModelFiles(),
    ...identities,
  });
  ({ srv, http, grpc } = served);
});

after(async () => {
  await served?.close();
});

/** Everything an InferResult tells, in comparable form. */
function snapshot(result: InferResult): unknown {
  return {
    model: result.model,
    version: result.version,
    id: result.id,
    parameters: result.parameters,
    outputs: result.outputNames().map((name) => ({
      name,
      datatype: result.datatype(name),
      shape: result.shape(name),
      bytes: asBuffer(result.bytes(name)),
    })),
  };
}

/** Sends `options` through both clients and asserts equal results; returns the gRPC one. */
async function same(options: ClientInferOptions): Promise<InferResult> {
  const [viaHttp, viaGrpc] = await Promise.all([http.infer(options), grpc.infer(options)]);
  assert.deepEqual(snapshot(viaGrpc), snapshot(viaHttp));
  return viaGrpc;
}

/** Both clients reject `options` with the same status and message. */
async function sameError(options: ClientInferOptions): Promise<InferenceServerError> {
  const [viaHttp, viaGrpc] = await Promise.all([
    http.infer(options).then(() => assert.fail('HTTP succeeded'), (err: unknown) => err),
    grpc.infer(options).then(() => assert.fail('gRPC succeeded'), (err: unknown) => err),
  ]);
  assert.ok(viaHttp instanceof InferenceServerError, String(viaHttp));
  assert.ok(viaGrpc instanceof InferenceServerError, String(viaGrpc));
  assert.equal(viaGrpc.status, viaHttp.status);
  assert.equal(viaGrpc.message, viaHttp.message);
  assert.equal(viaHttp.grpcCode, undefined);
  return viaGrpc;
}

function simpleRequest(seed: number, batch = 1): ClientInferOptions {
  const { a, b } = simpleInputs(batch, seed);
  return {
    model: 'simple',
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [batch, 16], data: a },
      { name: 'INPUT1', datatype: 'INT32', shape: [batch, 16], data: b },
    ],
  };
}

describe('the same inference through HTTP and gRPC', () => {
  it('simple, with an id', async () => {
    const result = await same({ ...simpleRequest(1, 2), id: 'parity-1' });
    assert.equal(result.id, 'parity-1');
  });

  it('simple, without an id, a version and one output', async () => {
    const result = await same({ ...simpleRequest(2), version: '1', outputs: [{ name: 'OUTPUT1' }] });
    assert.equal(result.id, undefined);
    assert.deepEqual(result.outputNames(), ['OUTPUT1']);
  });

  for (const c of DATATYPE_CASES) {
    it(`${c.datatype} identity`, async () => {
      const result = await same({ model: `identity_${c.datatype.toLowerCase()}`, inputs: [{ name: 'INPUT0', datatype: c.datatype, shape: c.shape, data: c.data }] });
      assert.deepEqual(asBuffer(result.bytes('OUTPUT0')), c.bytes);
    });
  }

  it('HTTP JSON tensors (exact 64-bit integers) match gRPC raw tensors', async () => {
    const cases: ClientInput[] = [
      { name: 'INPUT0', datatype: 'INT64', shape: [1, 3], data: BigInt64Array.of(-(2n ** 63n), 2n ** 63n - 1n, 2n ** 53n + 1n) },
      { name: 'INPUT0', datatype: 'UINT64', shape: [1, 2], data: BigUint64Array.of(2n ** 64n - 1n, 2n ** 53n + 1n) },
      { name: 'INPUT0', datatype: 'FP64', shape: [1, 2], data: Float64Array.of(0.1, -Number.MAX_VALUE) },
      { name: 'INPUT0', datatype: 'BOOL', shape: [1, 2], data: [true, false] },
      { name: 'INPUT0', datatype: 'BYTES', shape: [1, 2], data: ['jsön', ''] },
    ];
    for (const input of cases) {
      const model = `identity_${input.datatype.toLowerCase()}`;
      const viaJson = await http.infer({ model, inputs: [{ ...input, json: true }], outputs: [{ name: 'OUTPUT0', binary: false }] });
      const viaGrpc = await grpc.infer({ model, inputs: [input] });
      assert.deepEqual(snapshot(viaGrpc), snapshot(viaJson), input.datatype);
    }
  });

  it('BYTES through simple_string', async () => {
    const a = Array.from({ length: 16 }, (_, i) => String(i));
    const b = Array.from({ length: 16 }, (_, i) => String(i * i));
    const result = await same({
      model: 'simple_string',
      inputs: [
        { name: 'INPUT0', datatype: 'BYTES', shape: [1, 16], data: a },
        { name: 'INPUT1', datatype: 'BYTES', shape: [1, 16], data: b },
      ],
    });
    assert.deepEqual(result.strings('OUTPUT0'), a.map((x, i) => String(Number(x) + Number(b[i]))));
  });

  it('classification, with and without labels', async () => {
    const fp32 = await same({
      model: 'identity_fp32',
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [2, 3], data: Float32Array.of(3, 1, 2, -1, -3, -2) }],
      outputs: [{ name: 'OUTPUT0', classCount: 2 }],
    });
    assert.deepEqual(fp32.strings('OUTPUT0'), ['3.000000:0', '2.000000:2', '-1.000000:0', '-2.000000:2']);
    const labelled = await same({
      model: 'labelled',
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: Float32Array.of(0.1, 0.2, 0.9, 0.3) }],
      outputs: [{ name: 'OUTPUT0', classCount: 2 }],
    });
    assert.deepEqual(labelled.strings('OUTPUT0'), ['0.900000:2:bird', '0.300000:3:fish']);
  });

  it('request parameters', async () => {
    await same({ ...simpleRequest(3), parameters: { priority: 1, timeout: 5_000_000, custom_int: 3, custom_str: 's', custom_bool: false, custom_double: 2.5 } });
  });
});

describe('the same surface', () => {
  it('both clients have the same methods, except the differences the client README lists', () => {
    const methods = (proto: object) => Object.getOwnPropertyNames(proto).filter((n) => n !== 'constructor').sort();
    // gRPC only: the health service, ModelStreamInfer, the channel. HTTP only: the generate extension.
    const grpcOnly = ['healthCheck', 'stream'];
    const httpOnly = ['generate', 'generateStream'];
    assert.deepEqual(
      methods(GrpcClient.prototype).filter((n) => !grpcOnly.includes(n)),
      methods(HttpClient.prototype).filter((n) => !httpOnly.includes(n)),
    );
    for (const name of [...grpcOnly, ...httpOnly]) {
      assert.ok(name in GrpcClient.prototype !== name in HttpClient.prototype, `${name} is meant to be on one client only`);
    }
  });

  it('log settings: the same through both; an update through one is seen through the other', async () => {
    const before = await http.logSettings();
    assert.deepEqual(await grpc.logSettings(), before);
    assert.equal(typeof before.log_verbose_level, 'number');
    try {
      const updated = await grpc.updateLogSettings({ log_verbose_level: 3, log_info: false });
      assert.equal(updated.log_verbose_level, 3);
      assert.equal(updated.log_info, false);
      assert.deepEqual(await http.logSettings(), updated);
      assert.deepEqual(await http.updateLogSettings({ log_verbose_level: 0 }), { ...updated, log_verbose_level: 0 });
      await assert.rejects(http.updateLogSettings({ log_verbose_level: 'loud' }), (err: unknown) => err instanceof InferenceServerError && err.status === 400);
    } finally {
      // log_file cannot be set over the network (protocol.md §3.16).
      const { log_file: _file, ...restorable } = before;
      await http.updateLogSettings(restorable);
    }
  });

  it('statistics through both clients: the HTTP JSON is the decoded message', async () => {
    assert.deepEqual(asJson(await grpc.modelStatistics('simple', '1')), asJson(await http.modelStatistics('simple', '1')));
  });
});

describe('the same answers to the other calls', () => {
  it('health and readiness', async () => {
    assert.equal(await grpc.isServerLive(), await http.isServerLive());
    assert.equal(await grpc.isServerReady(), await http.isServerReady());
    assert.equal(await grpc.isModelReady('simple', '1'), await http.isModelReady('simple', '1'));
  });

  it('an unknown model: both clients answer false (as the Python clients do against Triton)', async () => {
    assert.equal(await http.isModelReady('nope'), false);
    assert.equal(await grpc.isModelReady('nope'), false);
  });

  it('server and model metadata', async () => {
    assert.deepEqual(await grpc.serverMetadata(), await http.serverMetadata());
    for (const model of ['simple', 'identity_bytes', 'labelled']) {
      assert.deepEqual(await grpc.modelMetadata(model), await http.modelMetadata(model));
    }
  });

  it('model configuration: the decoded message is the HTTP JSON', async () => {
    for (const model of ['simple', 'labelled']) {
      // JSON drops the oneof members the decoder leaves undefined.
      assert.deepEqual(JSON.parse(JSON.stringify(await grpc.modelConfig(model))), await http.modelConfig(model));
    }
  });
});

/** A decoded message as the JSON the HTTP frontend writes (small bigints as numbers). */
function asJson(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value, (_key, v: unknown) => (typeof v === 'bigint' ? Number(v) : v)));
}

describe('statistics', () => {
  it('modelStatistics is the HTTP /stats JSON, for one version, one model and all models', async () => {
    // The tests above have run requests through both clients; nothing runs concurrently now.
    for (const [path, model, version] of [
      ['/v2/models/simple/versions/1/stats', 'simple', '1'],
      ['/v2/models/identity_int64/stats', 'identity_int64', undefined],
      ['/v2/models/stats', undefined, undefined],
    ] as const) {
      const viaHttp = jsonBody(await httpRequest(srv.url + path));
      assert.deepEqual(asJson(await grpc.modelStatistics(model, version)), viaHttp, path);
    }
  });

  it('the same errors: HTTP 400 and gRPC INVALID_ARGUMENT, one message', async () => {
    const reply = await httpRequest(`${srv.url}/v2/models/nope/stats`);
    assert.equal(reply.status, 400);
    await assert.rejects(grpc.modelStatistics('nope'), (err: unknown) => {
      assert.ok(err instanceof InferenceServerError);
      assert.equal(err.status, 400);
      assert.deepEqual({ error: err.message }, jsonBody(reply));
      return true;
    });
  });
});

describe('the same errors', () => {
  it('an unknown model', async () => {
    const err = await sameError({ ...simpleRequest(0), model: 'nope' });
    assert.equal(err.status, 404);
  });

  it('an unknown version', async () => {
    await sameError({ ...simpleRequest(0), version: '4' });
  });

  it('a wrong shape, a wrong datatype, an unknown output', async () => {
    const { a, b } = simpleInputs(1, 0);
    const shape = await sameError({
      model: 'simple',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 8], data: a.subarray(0, 8) },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: b },
      ],
    });
    assert.equal(shape.status, 400);
    await sameError({
      model: 'simple',
      inputs: [
        { name: 'INPUT0', datatype: 'INT16', shape: [1, 16], data: new Int16Array(16) },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: b },
      ],
    });
    await sameError({ ...simpleRequest(0), outputs: [{ name: 'NOPE' }] });
  });
});
