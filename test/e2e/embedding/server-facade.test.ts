/**
 * Embedding Nereid: the `Server` facade used in-process, with no network (docs/architecture.md,
 * "The `Server` facade is public"). Typed arrays in, bytes out, NereidErrors with their codes,
 * cancellation through AbortSignal, and a stop that lets in-flight requests finish.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { NereidError, decodeBytesElements, encodeBytesElements, typedArrayOf, type ErrorCode, type ErrorKind } from '@nereid/protocol';
import { Server, silentLogger, type InferRequest, type InferResponse } from '@nereid/server';
import { identityModel, simpleModel, simpleStringModel } from '@nereid/testkit';
import { makeRepository, removeDir } from '../../helpers/harness.js';

const ONE_INSTANCE = 'instance_group [ { kind: KIND_CPU, count: 1 } ]\n';

let repo: string;

before(async () => {
  const onnx = simpleModel().onnx.bytes;
  const int64 = identityModel('INT64', [-1, 4]);
  const big = identityModel('FP32', [-1, -1], { name: 'identity_big' });
  const onWorker = 'parameters { key: "execution_thread" value { string_value: "worker" } }\n';
  repo = await makeRepository({
    simple: { 'config.pbtxt': simpleModel().config!, '1/model.onnx': onnx, '2/model.onnx': onnx },
    simple_string: { 'config.pbtxt': simpleStringModel().config! + ONE_INSTANCE, '1/model.onnx': simpleStringModel().onnx.bytes },
    single: { 'config.pbtxt': simpleModel({ name: 'single' }).config! + ONE_INSTANCE, '1/model.onnx': onnx },
    identity_int64: { 'config.pbtxt': int64.config! + ONE_INSTANCE, '1/model.onnx': int64.onnx.bytes },
    identity_big: { 'config.pbtxt': big.config! + ONE_INSTANCE + onWorker, '1/model.onnx': big.onnx.bytes },
  });
});

after(async () => {
  await removeDir(repo);
});

/** A `simple`/`single` request of `batch` rows with typed-array inputs, and its expected outputs. */
function simpleRequest(model: string, batch: number, seed = 0): { request: InferRequest; sum: Int32Array; difference: Int32Array } {
  const a = Int32Array.from({ length: batch * 16 }, (_, i) => i * 5 - seed);
  const b = Int32Array.from({ length: batch * 16 }, (_, i) => 2 ** 20 - i * seed);
  return {
    request: {
      model,
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [batch, 16], data: a },
        { name: 'INPUT1', datatype: 'INT32', shape: [batch, 16], data: b },
      ],
    },
    sum: a.map((x, i) => x + b[i]!),
    difference: a.map((x, i) => x - b[i]!),
  };
}

function output(response: InferResponse, name: string): InferResponse['outputs'][number] {
  const out = response.outputs.find((o) => o.name === name);
  assert.ok(out, `no output '${name}'`);
  return out;
}

/** Asserts `promise` rejects with a NereidError of this code and kind (and HTTP status). */
async function rejectsWith(promise: Promise<unknown>, code: ErrorCode, kind: ErrorKind, httpStatus: number, message?: RegExp): Promise<NereidError> {
  let caught: unknown;
  await assert.rejects(promise, (err: unknown) => {
    caught = err;
    return true;
  });
  assert.ok(caught instanceof NereidError, `not a NereidError: ${String(caught)}`);
  assert.equal(caught.code, code, caught.message);
  assert.equal(caught.kind, kind);
  assert.equal(caught.httpStatus, httpStatus);
  if (message) assert.match(caught.message, message);
  return caught;
}

describe('Server facade', () => {
  let server: Server;

  before(async () => {
    server = await Server.start({ modelRepositories: [repo], logger: silentLogger() });
  });
  after(async () => {
    await server?.stop();
  });

  it('starts every model and is ready', () => {
    assert.equal(server.isLive(), true);
    assert.equal(server.isReady(), true);
    assert.deepEqual(server.startReport.failures, []);
    assert.deepEqual(
      server.modelStatuses().map((s) => `${s.name}/${s.version}:${s.state}`),
      ['identity_big/1:READY', 'identity_int64/1:READY', 'simple/2:READY', 'simple_string/1:READY', 'single/1:READY'],
    );
    assert.deepEqual(server.metadata(), {
      name: 'triton',
      version: server.metadata().version,
      extensions: [
        'classification',
        'sequence',
        'model_repository',
        'model_repository(unload_dependents)',
        'schedule_policy',
        'model_configuration',
        'system_shared_memory',
        'cuda_shared_memory',
        'binary_tensor_data',
        'parameters',
        'statistics',
        'trace',
        'logging',
      ],
    });
  });

  it('infers with Int32Array inputs; outputs are bytes to view with typedArrayOf', async () => {
    const { request, sum, difference } = simpleRequest('simple', 3, 7);
    const response = await server.infer({ ...request, id: 'req-1' });
    assert.equal(response.model, 'simple');
    assert.equal(response.version, '2');
    assert.equal(response.id, 'req-1');
    assert.deepEqual(response.outputs.map((o) => [o.name, o.datatype, o.shape]), [
      ['OUTPUT0', 'INT32', [3, 16]],
      ['OUTPUT1', 'INT32', [3, 16]],
    ]);
    const out0 = output(response, 'OUTPUT0');
    assert.ok(out0.data instanceof Uint8Array);
    assert.equal(out0.data.byteLength, 3 * 16 * 4);
    assert.deepEqual(typedArrayOf('INT32', out0.data), sum);
    assert.deepEqual(typedArrayOf('INT32', output(response, 'OUTPUT1').data), difference);
  });

  it('returns only the requested outputs, and serves a named version', async () => {
    const { request, difference } = simpleRequest('simple', 1, 2);
    const response = await server.infer({ ...request, version: '2', outputs: [{ name: 'OUTPUT1' }] });
    assert.deepEqual(response.outputs.map((o) => o.name), ['OUTPUT1']);
    assert.deepEqual(typedArrayOf('INT32', response.outputs[0]!.data), difference);
  });

  it('carries INT64 exactly through BigInt64Array', async () => {
    const values = BigInt64Array.from([-(1n << 63n), -1n, 0n, (1n << 63n) - 1n, 1n << 53n, (1n << 53n) + 1n, 42n, -42n]);
    const response = await server.infer({ model: 'identity_int64', inputs: [{ name: 'INPUT0', datatype: 'INT64', shape: [2, 4], data: values }] });
    const out = output(response, 'OUTPUT0');
    assert.equal(out.datatype, 'INT64');
    assert.deepEqual(out.shape, [2, 4]);
    assert.deepEqual(typedArrayOf('INT64', out.data), values);
  });

  it('accepts BYTES as an array of strings or as serialized elements', async () => {
    const a = Array.from({ length: 16 }, (_, i) => String(i * 11 - 30));
    const b = Array.from({ length: 16 }, (_, i) => String(7 - i));
    const sum = a.map((x, i) => String(Number(x) + Number(b[i])));
    const difference = a.map((x, i) => String(Number(x) - Number(b[i])));
    for (const encoded of [false, true]) {
      const response = await server.infer({
        model: 'simple_string',
        inputs: [
          { name: 'INPUT0', datatype: 'BYTES', shape: [1, 16], data: encoded ? encodeBytesElements(a) : a },
          { name: 'INPUT1', datatype: 'BYTES', shape: [1, 16], data: encoded ? encodeBytesElements(b) : b.map((s) => new TextEncoder().encode(s)) },
        ],
      });
      const out0 = output(response, 'OUTPUT0');
      assert.equal(out0.datatype, 'BYTES');
      assert.deepEqual(out0.shape, [1, 16]);
      assert.deepEqual(decodeBytesElements(out0.data, 'OUTPUT0').map((e) => e.toString('utf8')), sum);
      assert.deepEqual(decodeBytesElements(output(response, 'OUTPUT1').data, 'OUTPUT1').map((e) => e.toString('utf8')), difference);
    }
  });

  it('recycleOutputs gives large output buffers back: the next response is made in them, unrecycled ones stay intact', async () => {
    const data = Float32Array.from({ length: 1 << 17 }, (_, i) => i); // 512 KiB, above the pooling threshold
    const request: InferRequest = { model: 'identity_big', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, data.length], data }] };
    const values = (r: InferResponse) => typedArrayOf('FP32', output(r, 'OUTPUT0').data) as Float32Array;
    const kept = await server.infer(request);
    const recycled = await server.infer(request);
    assert.deepEqual(values(recycled), data);
    assert.equal(server.holdsPooledOutputs(recycled), true, 'a large output lives in a pooled buffer');
    server.recycleOutputs(recycled);
    assert.equal(server.holdsPooledOutputs(recycled), false, 'and nothing is left to give back once it went back');
    const next = await server.infer(request);
    assert.deepEqual(values(next), data);
    // The recycled buffer went back to the instance and was handed to its worker for `next`'s output.
    assert.equal(output(recycled, 'OUTPUT0').data.byteLength, 0);
    assert.deepEqual(values(kept), data, 'a response never recycled keeps its bytes');
    const small = await server.infer({ ...request, inputs: [{ ...request.inputs[0]!, shape: [1, 16], data: data.subarray(0, 16) }] });
    assert.equal(server.holdsPooledOutputs(small), false, 'a small output is not pooled: nothing to give back');
    server.recycleOutputs(next);
    server.recycleOutputs(next); // a second return is ignored
    assert.deepEqual(values(await server.infer(request)), data);
  });

  it('reports model metadata, with and without a version', () => {
    const expected = {
      name: 'simple',
      versions: ['2'],
      platform: 'onnxruntime_onnx',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [-1, 16] },
        { name: 'INPUT1', datatype: 'INT32', shape: [-1, 16] },
      ],
      outputs: [
        { name: 'OUTPUT0', datatype: 'INT32', shape: [-1, 16] },
        { name: 'OUTPUT1', datatype: 'INT32', shape: [-1, 16] },
      ],
    };
    assert.deepEqual(server.modelMetadata('simple'), expected);
    assert.deepEqual(server.modelMetadata('simple', '2'), expected);
    assert.deepEqual(server.modelMetadata('simple_string').inputs.map((t) => t.datatype), ['BYTES', 'BYTES']);
  });

  it('returns the normalised config as a copy', () => {
    const config = server.modelConfig('simple');
    assert.equal(config.name, 'simple');
    assert.equal(config.max_batch_size, 8);
    assert.equal(config.backend, 'onnxruntime');
    assert.deepEqual(config.version_policy, { latest: { num_versions: 1 } });
    assert.deepEqual(config.instance_group.map((g) => [g.name, g.kind, g.count]), [['simple', 'KIND_CPU', 2]]);
    assert.deepEqual(config.input.map((t) => [t.name, t.data_type, t.dims]), [
      ['INPUT0', 'TYPE_INT32', [16]],
      ['INPUT1', 'TYPE_INT32', [16]],
    ]);
    config.max_batch_size = 1;
    config.input.length = 0;
    assert.equal(server.modelConfig('simple').max_batch_size, 8);
    assert.equal(server.modelConfig('simple').input.length, 2);
    assert.equal(server.modelConfigJson('simple').max_batch_size, 8);
  });

  it('isModelReady is true for a ready version and throws the lookup error otherwise', () => {
    assert.equal(server.isModelReady('simple'), true);
    assert.equal(server.isModelReady('simple', '2'), true);
    assert.throws(() => server.isModelReady('simple', '1'), (err: unknown) => err instanceof NereidError && err.code === 'MODEL_VERSION_NOT_FOUND');
    assert.throws(() => server.isModelReady('nope'), (err: unknown) => err instanceof NereidError && err.kind === 'NOT_FOUND' && err.httpStatus === 404);
  });

  describe('errors are NereidErrors with code, kind and HTTP status', () => {
    it('lookup errors', async () => {
      const { request } = simpleRequest('simple', 1);
      await rejectsWith(server.infer({ ...request, model: 'nope' }), 'MODEL_NOT_FOUND', 'NOT_FOUND', 404, /^Request for unknown model: 'nope' is not found$/);
      await rejectsWith(server.infer({ ...request, version: '1' }), 'MODEL_VERSION_NOT_FOUND', 'NOT_FOUND', 404, /'simple' version 1 is not found/);
      await rejectsWith(server.infer({ ...request, version: 'abc' }), 'MODEL_VERSION_INVALID', 'INVALID_ARG', 400, /integral value/);
      assert.throws(() => server.modelMetadata('nope'), (err: unknown) => err instanceof NereidError && err.code === 'MODEL_NOT_FOUND');
      assert.throws(() => server.modelConfig('simple', '9'), (err: unknown) => err instanceof NereidError && err.code === 'MODEL_VERSION_NOT_FOUND');
    });

    it('request validation errors, before anything executes', async () => {
      const { request } = simpleRequest('simple', 1);
      const [in0, in1] = request.inputs;
      await rejectsWith(
        server.infer({ ...request, inputs: [{ ...in0!, datatype: 'FP32', data: new Float32Array(16) }, in1!] }),
        'INPUT_DATATYPE',
        'INVALID_ARG',
        400,
        /INPUT0/,
      );
      await rejectsWith(server.infer({ ...request, inputs: [in0!] }), 'INPUT_MISSING', 'INVALID_ARG', 400, /INPUT1/);
      await rejectsWith(
        server.infer({ ...request, inputs: [in0!, { ...in1!, data: new Int32Array(15) }] }),
        'INPUT_BYTE_SIZE',
        'INVALID_ARG',
        400,
        /INPUT1/,
      );
      await rejectsWith(server.infer(simpleRequest('simple', 9).request), 'BATCH_SIZE', 'INVALID_ARG', 400, /batch-size must be <= 8/);
      await rejectsWith(server.infer({ ...request, outputs: [{ name: 'OUTPUT7' }] }), 'OUTPUT_UNKNOWN', 'INVALID_ARG', 400, /OUTPUT7/);
      await rejectsWith(
        server.infer({ ...request, inputs: [...request.inputs, { ...in0!, name: 'INPUT9' }] }),
        'INPUT_UNKNOWN',
        'INVALID_ARG',
        400,
        /INPUT9/,
      );
    });
  });

  describe('cancellation with an AbortSignal', () => {
    it('a signal aborted before the call cancels the request', async () => {
      const { request } = simpleRequest('single', 1);
      const controller = new AbortController();
      controller.abort();
      await rejectsWith(server.infer(request, { signal: controller.signal }), 'REQUEST_CANCELLED', 'CANCELLED', 400);
    });

    it('aborting while queued cancels the request; the others complete', async () => {
      // `single` has one instance: these requests occupy it (and any pipeline slots) so the next
      // one waits in the queue. Dispatch happens inside infer(), before it returns.
      const blockers = Array.from({ length: 6 }, (_, i) => simpleRequest('single', 8, i));
      const running = blockers.map((b) => server.infer(b.request));
      const controller = new AbortController();
      const queued = server.infer(simpleRequest('single', 1, 99).request, { signal: controller.signal });
      controller.abort();
      const error = await rejectsWith(queued, 'REQUEST_CANCELLED', 'CANCELLED', 400);
      assert.match(error.message, /cancelled/);
      const responses = await Promise.all(running);
      responses.forEach((r, i) => assert.deepEqual(typedArrayOf('INT32', output(r, 'OUTPUT0').data), blockers[i]!.sum));
      const after = simpleRequest('single', 2, 5);
      assert.deepEqual(typedArrayOf('INT32', output(await server.infer(after.request), 'OUTPUT1').data), after.difference);
    });
  });
});

describe('Server.stop', () => {
  it('waits for in-flight requests, refuses new ones, and then fails every infer with UNAVAILABLE', async () => {
    const server = await Server.start({ modelRepositories: [repo], logger: silentLogger() });
    try {
      const cases = Array.from({ length: 8 }, (_, i) => simpleRequest(i % 2 ? 'single' : 'simple', 8, i));
      const settled: boolean[] = cases.map(() => false);
      const inFlight = cases.map((c, i) =>
        server.infer(c.request).then((r) => {
          settled[i] = true;
          return r;
        }),
      );
      const stopping = server.stop();
      assert.equal(server.isReady(), false);
      await rejectsWith(server.infer(simpleRequest('simple', 1).request), 'SERVER_NOT_READY', 'UNAVAILABLE', 503, /Server not ready/);
      await stopping;
      assert.deepEqual(settled, cases.map(() => true), 'stop() resolved before every in-flight request');
      const responses = await Promise.all(inFlight);
      responses.forEach((r, i) => assert.deepEqual(typedArrayOf('INT32', output(r, 'OUTPUT0').data), cases[i]!.sum));

      assert.equal(server.isLive(), false);
      await rejectsWith(server.infer(simpleRequest('simple', 1).request), 'SERVER_NOT_READY', 'UNAVAILABLE', 503);
      assert.throws(() => server.modelMetadata('simple'), (err: unknown) => err instanceof NereidError && err.kind === 'UNAVAILABLE');
      assert.deepEqual(
        server.modelStatuses().map((s) => `${s.name}/${s.version}:${s.state}:${s.reason}`),
        ['identity_big/1:UNAVAILABLE:unloaded', 'identity_int64/1:UNAVAILABLE:unloaded', 'simple/2:UNAVAILABLE:unloaded', 'simple_string/1:UNAVAILABLE:unloaded', 'single/1:UNAVAILABLE:unloaded'],
      );
      await server.stop();
    } finally {
      await server.stop();
    }
  });

  it('a second stop() call also waits until the first has finished', async () => {
    const server = await Server.start({ modelRepositories: [repo], logger: silentLogger() });
    try {
      const cases = Array.from({ length: 6 }, (_, i) => simpleRequest('single', 8, i));
      const settled: boolean[] = cases.map(() => false);
      const inFlight = cases.map((c, i) => server.infer(c.request).then(() => void (settled[i] = true)));
      const first = server.stop();
      await server.stop();
      assert.deepEqual(settled, cases.map(() => true), 'the second stop() resolved before the in-flight requests');
      assert.deepEqual(new Set(server.modelStatuses().map((s) => s.reason)), new Set(['unloaded']));
      await first;
      await Promise.all(inFlight);
    } finally {
      await server.stop();
    }
  });

  it('Server.start rejects for a repository that does not exist', async () => {
    await rejectsWith(
      Server.start({ modelRepositories: [`${repo}/missing`], logger: silentLogger() }),
      'REPOSITORY_INVALID',
      'INVALID_ARG',
      400,
      /does not exist/,
    );
  });
});
