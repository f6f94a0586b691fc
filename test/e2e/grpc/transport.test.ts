/**
 * The gRPC transport under real sockets (protocol.md §4.6, §4.9): messages past grpc's 4 MiB
 * default, undecodable messages on unary calls and streams, deadlines that expire while a request
 * waits or computes, and gzip/deflate request compression. After each, the server keeps serving.
 */
import assert from 'node:assert/strict';
import { Metadata, credentials, makeGenericClientConstructor, status, type Client, type ServiceError } from '@grpc/grpc-js';
import { after, before, describe, it } from 'node:test';
import { GRPC_INFERENCE_SERVICE, pb } from '@nereid/protocol';
import { MLP_CONFIG_EXTRA, identityModel, mlpModel, simpleModel } from '@nereid/testkit';
import {
  assertSimpleResponse,
  assertStatus,
  collectStream,
  inferenceClient,
  inferRequest,
  inputTensor,
  openStream,
  rawBytes,
  simpleRequest,
  startUnary,
  unary,
  unaryError,
} from '../../helpers/grpc.js';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';

/** A heavy mlp request: 512 rows through 16 → 1024 → 1024 → 16, about 1.1 GFLOP on one thread. */
const BATCH = 512;
const INPUT = 16;

let repo: string;
let srv: RunningGrpcServer;
let client: Client;
const opened: Client[] = [];

before(async () => {
  const mlp = mlpModel({
    maxBatchSize: BATCH,
    inputSize: INPUT,
    hiddenSizes: [1024, 1024],
    configExtra: `${MLP_CONFIG_EXTRA}parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n`,
  });
  repo = await makeRepository({
    simple: modelFiles(simpleModel()),
    identity_fp32: modelFiles(identityModel('FP32', [-1, -1])),
    mlp: modelFiles(mlp),
  });
  srv = await startServer({ modelRepositories: [repo], grpc: true });
  assert.deepEqual(srv.server.startReport.failures, []);
  client = inferenceClient(srv.grpcTarget);
});

after(async () => {
  client?.close();
  for (const c of opened) c.close();
  await srv?.stop();
  if (repo) await removeDir(repo);
});

function heavyRequest(id: string): pb.ModelInferRequest {
  const input = Float32Array.from({ length: BATCH * INPUT }, (_, i) => Math.cos(i * 0.11));
  return inferRequest({ model_name: 'mlp', id, inputs: [inputTensor('INPUT0', 'FP32', [BATCH, INPUT])], raw_input_contents: [rawBytes(input)] });
}

/** The server answers a normal request correctly. */
async function assertServing(): Promise<void> {
  const ok = simpleRequest(3, 7);
  assertSimpleResponse(await unary(client, 'ModelInfer', ok.request), ok, 3);
}

/** A large FP32 tensor for identity_fp32 and the request carrying it. */
function largeRequest(elements: number): { request: pb.ModelInferRequest; data: Float32Array } {
  const data = Float32Array.from({ length: elements }, (_, i) => (i % 1000) * 0.5 - 250);
  return {
    request: inferRequest({
      model_name: 'identity_fp32',
      inputs: [inputTensor('INPUT0', 'FP32', [1, elements])],
      raw_input_contents: [rawBytes(data)],
    }),
    data,
  };
}

describe('message size', () => {
  // 2.2 M floats = 8.8 MB each way, more than twice grpc's 4 MiB default.
  const ELEMENTS = 2_200_000;

  it('accepts and returns a message of about 8.8 MB intact', async () => {
    const { request, data } = largeRequest(ELEMENTS);
    const response = await unary(client, 'ModelInfer', request);
    assert.deepEqual(response.outputs.map((o) => [o.name, o.datatype, o.shape]), [['OUTPUT0', 'FP32', [1n, BigInt(ELEMENTS)]]]);
    assert.equal(response.raw_output_contents.length, 1);
    assert.ok(Buffer.from(rawBytes(data)).equals(Buffer.from(response.raw_output_contents[0]!)), 'the tensor came back changed');
  });

  it('a client that keeps the 4 MiB receive default fails with RESOURCE_EXHAUSTED; the server is unaffected', async () => {
    const small = inferenceClient(srv.grpcTarget, { 'grpc.max_receive_message_length': 4 * 1024 * 1024 });
    opened.push(small);
    const err = await unaryError(small, 'ModelInfer', largeRequest(ELEMENTS).request);
    assert.equal(err.code, status.RESOURCE_EXHAUSTED, err.details);
    await assertServing();
  });
});

describe('undecodable messages', { timeout: 120_000 }, () => {
  /** Not a protobuf message: field 1 (string) claims 2^32-1 bytes. */
  const GARBAGE = Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x02]);
  const RawClient = makeGenericClientConstructor({}, 'Raw');

  function rawClient(): Client {
    const c = new RawClient(srv.grpcTarget, credentials.createInsecure());
    opened.push(c);
    return c;
  }
  const identity = (b: Buffer): Buffer => b;
  const serialize = (m: pb.ModelInferRequest): Buffer => GRPC_INFERENCE_SERVICE.ModelStreamInfer.requestSerialize(m);

  it('a unary ModelInfer with garbage fails cleanly (INTERNAL) and the server keeps serving', async () => {
    const err = await new Promise<ServiceError>((resolve, reject) => {
      rawClient().makeUnaryRequest(GRPC_INFERENCE_SERVICE.ModelInfer.path, identity, identity, GARBAGE, (e, r) => {
        if (e) resolve(e);
        else reject(new Error(`garbage was answered: ${r?.byteLength} bytes`));
      });
    });
    assertStatus(err, status.INTERNAL, 'deserializ');
    await assertServing();
  });

  it('a stream that sends garbage after a good request: that response arrives, then the call fails cleanly', async () => {
    const stream = rawClient().makeBidiStreamRequest(GRPC_INFERENCE_SERVICE.ModelStreamInfer.path, identity, identity, new Metadata());
    const ok = simpleRequest(1, 2, { id: 'good' });
    const responses: pb.ModelStreamInferResponse[] = [];
    const ended = new Promise<ServiceError>((resolve, reject) => {
      stream.on('data', (b: Buffer) => {
        responses.push(pb.ModelStreamInferResponse.decode(b));
        if (responses.length === 1) stream.write(GARBAGE);
      });
      stream.on('error', resolve);
      stream.on('end', () => reject(new Error('the stream ended OK after garbage')));
    });
    stream.write(serialize(ok.request));
    const err = await ended;
    assertStatus(err, status.INTERNAL, 'deserializ');
    assert.equal(responses.length, 1);
    assert.equal(responses[0]!.infer_response?.id, 'good');
    assertSimpleResponse(responses[0]!.infer_response, ok);
    await assertServing();
  });

  it('a stream that sends garbage while a request computes: the call fails, the server survives the late response', async () => {
    const stream = rawClient().makeBidiStreamRequest(GRPC_INFERENCE_SERVICE.ModelStreamInfer.path, identity, identity, new Metadata());
    const ended = new Promise<ServiceError>((resolve, reject) => {
      stream.on('data', () => undefined);
      stream.on('error', resolve);
      stream.on('end', () => reject(new Error('the stream ended OK after garbage')));
    });
    stream.write(serialize(heavyRequest('in-flight')));
    stream.write(GARBAGE);
    const err = await ended;
    assertStatus(err, status.INTERNAL, 'deserializ');
    // A heavy request queues behind the stream's (if it still runs): once it is answered, the
    // stream's request has finished too.
    const response = await unary(client, 'ModelInfer', heavyRequest('after'));
    assert.equal(response.id, 'after');
    assert.equal(response.raw_output_contents[0]!.byteLength, BATCH * 16 * 4);
    await assertServing();
    // And a new stream works.
    const ok = simpleRequest(1, 1, { id: 'next' });
    const next = openStream(client);
    const done = collectStream(next);
    next.write(ok.request);
    next.end();
    const result = await done;
    assert.equal(result.status.code, status.OK);
    assertSimpleResponse(result.responses[0]!.infer_response, ok);
  });
});

describe('deadlines', { timeout: 120_000 }, () => {
  it('a deadline that expires while the request waits behind heavy batches: DEADLINE_EXCEEDED, the others complete', async () => {
    // Four heavy batches fill the one instance (one computing, the others handed to it ahead);
    // the fifth waits in the queue. Its 10 ms deadline is far shorter than their compute time.
    const ahead = ['h1', 'h2', 'h3', 'h4'].map((id) => unary(client, 'ModelInfer', heavyRequest(id)));
    const late = unaryError(client, 'ModelInfer', heavyRequest('late'), { options: { deadline: Date.now() + 10 } });
    const err = await late;
    assert.equal(err.code, status.DEADLINE_EXCEEDED, err.details);
    const answered = await Promise.all(ahead);
    assert.deepEqual(answered.map((r) => r.id), ['h1', 'h2', 'h3', 'h4']);
    for (const r of answered) assert.equal(r.raw_output_contents[0]!.byteLength, BATCH * 16 * 4);
    await assertServing();
  });

  it('a deadline that expires while the request computes: DEADLINE_EXCEEDED, the late result is dropped, the server keeps serving', async (t) => {
    const executions = () => srv.server.modelStatistics('mlp')[0]!.execution_count;
    // The deadline is half of this run's own round trip of the same request on the idle instance,
    // so it expires while the request computes; no duration is fixed in advance. A noisy machine
    // may still delay the start past the deadline (then the request is cancelled unrun), so one of
    // three attempts must see it run.
    for (let attempt = 1; ; attempt++) {
      const started = performance.now();
      assert.equal((await unary(client, 'ModelInfer', heavyRequest('measure'))).id, 'measure');
      const roundTripMs = performance.now() - started;
      const before = executions();
      // When the measuring call was the slow one (a noisy machine), this one may finish within
      // half of it: then the deadline did not pass, and the attempt counts as one that missed.
      const answered = await unary(client, 'ModelInfer', heavyRequest('deadline'), { options: { deadline: Date.now() + roundTripMs / 2 } }).then(
        () => true,
        (err: ServiceError) => {
          assert.equal(err.code, status.DEADLINE_EXCEEDED, err.details);
          return false;
        },
      );
      if (answered) {
        assert.ok(attempt < 3, 'in three attempts the deadline never expired while the request computed');
        continue;
      }
      // One instance computes in arrival order (and cannot batch two full batches): once a request
      // sent after it is answered, the expired one has finished or was dropped unrun.
      assert.equal((await unary(client, 'ModelInfer', heavyRequest('after'))).id, 'after');
      const ran = executions() - before - 1;
      assert.ok(ran === 0 || ran === 1, `${ran} extra executions`);
      if (ran === 1) {
        t.diagnostic(`attempt ${attempt}: deadline ${(roundTripMs / 2).toFixed(1)} ms`);
        break;
      }
      assert.ok(attempt < 3, 'in three attempts the deadline never expired while the request computed');
    }
    await assertServing();
  });

  it('cancelled ModelInfer calls that are still queued never run; the others complete', async () => {
    const executions = () => srv.server.modelStatistics('mlp')[0]!.execution_count;
    const before = executions();
    const CALLS = 10;
    const CANCELLED = 4;
    const calls = Array.from({ length: CALLS }, (_, i) => startUnary(client, 'ModelInfer', heavyRequest(`c${i}`)));
    // Once a batch has run, the instance holds the next few (its pipeline depth) and the last
    // ones are still queued in the scheduler.
    while (executions() === before) await new Promise((resolve) => setTimeout(resolve, 2));
    const cancelled = calls.slice(CALLS - CANCELLED);
    for (const c of cancelled) c.call.cancel();
    for (const c of cancelled) {
      const err = await c.response.then(
        () => assert.fail('a cancelled call was answered'),
        (e: unknown) => e as ServiceError,
      );
      assert.equal(err.code, status.CANCELLED);
    }
    const answered = await Promise.all(calls.slice(0, CALLS - CANCELLED).map((c) => c.response));
    assert.deepEqual(answered.map((r) => r.id), ['c0', 'c1', 'c2', 'c3', 'c4', 'c5']);
    // A request after them runs after whatever of theirs still runs.
    assert.equal((await unary(client, 'ModelInfer', heavyRequest('after'))).id, 'after');
    const ran = executions() - before - 1;
    assert.ok(ran >= CALLS - CANCELLED && ran < CALLS, `${ran} of ${CALLS} batches ran; cancelled queued ones must not`);
    await assertServing();
  });

  it('a deadline on a stream ends it DEADLINE_EXCEEDED; the server keeps serving', async () => {
    const stream = openStream(client, { options: { deadline: Date.now() + 10 } });
    const done = collectStream(stream);
    for (let i = 0; i < 3; i++) stream.write(heavyRequest(`s${i}`));
    const result = await done;
    assert.equal(result.status.code, status.DEADLINE_EXCEEDED, result.status.details);
    await assertServing();
  });
});

describe('request compression', () => {
  for (const [name, algorithm] of [
    ['deflate', 1],
    ['gzip', 2],
  ] as const) {
    it(`${name}-compressed requests are accepted, unary and streaming`, async () => {
      const compressing = inferenceClient(srv.grpcTarget, { 'grpc.default_compression_algorithm': algorithm });
      opened.push(compressing);
      const ok = simpleRequest(2, 4, { id: name });
      const response = await unary(compressing, 'ModelInfer', ok.request);
      assert.equal(response.id, name);
      assertSimpleResponse(response, ok, 2);

      // A large compressible tensor: small on the wire, past grpc's 4 MiB default once inflated.
      const { request, data } = largeRequest(2_200_000);
      const big = await unary(compressing, 'ModelInfer', request);
      assert.ok(Buffer.from(rawBytes(data)).equals(Buffer.from(big.raw_output_contents[0]!)));

      const stream = openStream(compressing);
      const done = collectStream(stream);
      const cases = [simpleRequest(1, 1, { id: 'a' }), simpleRequest(1, 2, { id: 'b' })];
      for (const c of cases) stream.write(c.request);
      stream.end();
      const result = await done;
      assert.equal(result.status.code, status.OK);
      assert.deepEqual(result.responses.map((r) => r.infer_response?.id), ['a', 'b']);
      cases.forEach((c, i) => assertSimpleResponse(result.responses[i]!.infer_response, c));
    });
  }
});
