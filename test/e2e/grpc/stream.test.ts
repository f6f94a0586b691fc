/**
 * ModelStreamInfer over real gRPC (protocol.md §4.7): several requests (several models) on one
 * stream answered in request order even when they complete out of order, `triton_final_response`
 * on every response, in-band errors that leave the stream open, half-close, strict error mode,
 * and client cancellation with requests in flight.
 */
import assert from 'node:assert/strict';
import { Metadata, status, type Client } from '@grpc/grpc-js';
import { after, before, describe, it } from 'node:test';
import type { pb } from '@nereid/protocol';
import { MLP_CONFIG_EXTRA, mlpModel, simpleModel, type MlpModel } from '@nereid/testkit';
import {
  assertSimpleResponse,
  collectStream,
  inferenceClient,
  inferRequest,
  inputTensor,
  nextResponses,
  openStream,
  rawBytes,
  setFields,
  simpleRequest,
  unary,
  viewAs,
} from '../../helpers/grpc.js';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';

/** A heavy request: 512 rows through 16 → 1024 → 1024 → 16, about 1.1 GFLOP on one thread. */
const BATCH = 512;
const INPUT = 16;

let repo: string;
let srv: RunningGrpcServer;
let client: Client;
let mlp: MlpModel;

before(async () => {
  mlp = mlpModel({
    maxBatchSize: BATCH,
    inputSize: INPUT,
    hiddenSizes: [1024, 1024],
    configExtra: `${MLP_CONFIG_EXTRA}parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n`,
  });
  repo = await makeRepository({ simple: modelFiles(simpleModel()), mlp: modelFiles(mlp) });
  srv = await startServer({ modelRepositories: [repo], grpc: true });
  assert.deepEqual(srv.server.startReport.failures, []);
  client = inferenceClient(srv.grpcTarget);
});

after(async () => {
  client?.close();
  await srv?.stop();
  if (repo) await removeDir(repo);
});

function mlpInput(seed: number): Float32Array {
  return Float32Array.from({ length: BATCH * INPUT }, (_, i) => Math.sin(i * 0.37 + seed));
}

function mlpRequest(id: string, input: Float32Array): pb.ModelInferRequest {
  return inferRequest({
    model_name: 'mlp',
    id,
    inputs: [inputTensor('INPUT0', 'FP32', [BATCH, INPUT])],
    raw_input_contents: [rawBytes(input)],
  });
}

/** Checks an mlp response against the reference forward pass on its first rows. */
function assertMlpResponse(response: pb.ModelInferResponse | undefined, input: Float32Array): void {
  assert.ok(response);
  assert.equal(response.model_name, 'mlp');
  assert.deepEqual(response.outputs.map((o) => [o.name, o.datatype, o.shape]), [['OUTPUT0', 'FP32', [BigInt(BATCH), 16n]]]);
  const got = viewAs(response.raw_output_contents[0]!, Float32Array);
  assert.equal(got.length, BATCH * 16);
  const rows = 2;
  const expected = mlp.compute(input.subarray(0, rows * INPUT), rows);
  for (let i = 0; i < expected.length; i++) {
    assert.ok(Math.abs(got[i]! - expected[i]!) <= 1e-3 * (1 + Math.abs(expected[i]!)), `OUTPUT0[${i}]: ${got[i]} vs ${expected[i]}`);
  }
}

function assertFinal(response: pb.ModelInferResponse | undefined): void {
  assert.ok(response);
  assert.deepEqual(setFields(response.parameters.triton_final_response), { bool_param: true }, `response '${response.id}' lacks triton_final_response=true`);
}

// A bound against hangs only; nothing here asserts a duration.
describe('ModelStreamInfer', { timeout: 120_000 }, () => {
  it('answers several requests for several models in request order, though the first completes last', async () => {
    const input = mlpInput(1);
    const simples = Array.from({ length: 5 }, (_, i) => simpleRequest(1 + (i % 3), i, { id: `s${i}` }));
    // A unary call on its own channel, sent with the stream's requests, shows that simple requests
    // finish while the mlp batch computes: its answer comes before the stream's first response.
    const events: string[] = [];
    const stream = openStream(client);
    const done = collectStream(stream);
    stream.on('data', (r: pb.ModelStreamInferResponse) => events.push(`stream:${r.infer_response?.id ?? '?'}`));
    stream.write(mlpRequest('m0', input));
    for (const s of simples) stream.write(s.request);
    const side = unary(client, 'ModelInfer', simpleRequest(1, 9).request).then(() => events.push('unary'));
    stream.end();
    const result = await done;
    await side;

    assert.equal(result.error, undefined);
    assert.equal(result.status.code, status.OK);
    assert.deepEqual(result.responses.map((r) => r.infer_response?.id), ['m0', 's0', 's1', 's2', 's3', 's4']);
    for (const r of result.responses) {
      assert.equal(r.error_message, '');
      assertFinal(r.infer_response);
    }
    assertMlpResponse(result.responses[0]!.infer_response, input);
    simples.forEach((s, i) => assertSimpleResponse(result.responses[i + 1]!.infer_response, s, 1 + (i % 3)));
    assert.equal(events[0], 'unary', `a simple request waited for the mlp batch: ${events.join(', ')}`);
  });

  it('keeps request order across 64 requests of mixed batch sizes and models', async () => {
    const stream = openStream(client);
    const done = collectStream(stream);
    const input = mlpInput(3);
    const expected: { id: string; check: (r: pb.ModelInferResponse | undefined) => void }[] = [];
    for (let i = 0; i < 64; i++) {
      const id = `r${i}`;
      if (i % 16 === 5) {
        stream.write(mlpRequest(id, input));
        expected.push({ id, check: (r) => assertMlpResponse(r, input) });
      } else {
        const batch = 1 + (i % 8);
        const c = simpleRequest(batch, i, { id });
        stream.write(c.request);
        expected.push({ id, check: (r) => assertSimpleResponse(r, c, batch) });
      }
    }
    stream.end();
    const result = await done;
    assert.equal(result.status.code, status.OK);
    assert.deepEqual(result.responses.map((r) => r.infer_response?.id), expected.map((e) => e.id));
    result.responses.forEach((r, i) => {
      assert.equal(r.error_message, '');
      assertFinal(r.infer_response);
      expected[i]!.check(r.infer_response);
    });
  });

  it('stays open between requests: request, response, request, response', async () => {
    const stream = openStream(client);
    const done = collectStream(stream);
    for (let i = 0; i < 3; i++) {
      const c = simpleRequest(1, i, { id: `ping-${i}` });
      const next = nextResponses(stream, 1);
      stream.write(c.request);
      const [r] = await next;
      assert.equal(r!.infer_response?.id, `ping-${i}`);
      assertSimpleResponse(r!.infer_response, c);
    }
    stream.end();
    const result = await done;
    assert.equal(result.status.code, status.OK);
    assert.equal(result.responses.length, 3);
  });

  it('reports the concrete version and an empty id when the request has none; non-decoupled models send no empty final', async () => {
    const c = simpleRequest(1, 4, { parameters: { triton_enable_empty_final_response: { bool_param: true } } });
    const stream = openStream(client);
    const done = collectStream(stream);
    stream.write(c.request);
    stream.end();
    const result = await done;
    assert.equal(result.status.code, status.OK);
    assert.equal(result.responses.length, 1);
    const r = result.responses[0]!.infer_response;
    assert.equal(r?.id, '');
    assert.equal(r?.model_version, '1');
    assertFinal(r);
    assertSimpleResponse(r, c);
  });

  it('reports errors in-band with their id, and later requests on the stream still succeed', async () => {
    const ok1 = simpleRequest(1, 1, { id: 'ok-1' });
    const ok2 = simpleRequest(2, 2, { id: 'ok-2' });
    const badShape = simpleRequest(1, 0, { id: 'bad-shape' }).request;
    badShape.inputs[0]!.shape = [1n, 15n];
    const stream = openStream(client);
    const done = collectStream(stream);
    stream.write(ok1.request);
    stream.write(inferRequest({ model_name: 'nope', id: 'unknown-model' }));
    stream.write(badShape);
    stream.write(ok2.request);
    stream.end();
    const result = await done;

    assert.equal(result.status.code, status.OK);
    assert.deepEqual(result.responses.map((r) => r.infer_response?.id), ['ok-1', 'unknown-model', 'bad-shape', 'ok-2']);
    const [first, unknown, shape, last] = result.responses;
    assertSimpleResponse(first!.infer_response, ok1);
    assert.match(unknown!.error_message, /Request for unknown model: 'nope' is not found/);
    assert.deepEqual(unknown!.infer_response?.outputs, []);
    assert.deepEqual(unknown!.infer_response?.raw_output_contents, []);
    assert.equal(unknown!.infer_response?.model_name, '');
    assert.match(shape!.error_message, /INPUT0/);
    assert.match(shape!.error_message, /shape/);
    assert.deepEqual(shape!.infer_response?.outputs, []);
    assert.equal(last!.error_message, '');
    assertSimpleResponse(last!.infer_response, ok2, 2);
    assertFinal(last!.infer_response);
  });

  it('a stream half-closed without requests finishes OK with no responses', async () => {
    const stream = openStream(client);
    const done = collectStream(stream);
    stream.end();
    const result = await done;
    assert.equal(result.status.code, status.OK);
    assert.deepEqual(result.responses, []);
  });

  it('strict error mode (triton_grpc_error: true) ends the stream with the mapped status at the first error', async () => {
    const metadata = new Metadata();
    metadata.set('triton_grpc_error', 'true');
    const ok = simpleRequest(1, 3, { id: 'before' });
    const stream = openStream(client, { metadata });
    const done = collectStream(stream);
    stream.write(ok.request);
    stream.write(inferRequest({ model_name: 'nope', id: 'unknown-model' }));
    stream.write(simpleRequest(1, 4, { id: 'after' }).request);
    stream.end();
    const result = await done;

    assert.equal(result.status.code, status.NOT_FOUND, result.status.details);
    assert.match(result.status.details, /Request for unknown model: 'nope' is not found/);
    assert.ok(result.error);
    assert.deepEqual(result.responses.map((r) => r.infer_response?.id), ['before']);
    assertSimpleResponse(result.responses[0]!.infer_response, ok);
  });

  it('strict error mode: a bad shape ends the stream INVALID_ARGUMENT', async () => {
    const metadata = new Metadata();
    metadata.set('triton_grpc_error', 'true');
    const bad = simpleRequest(1, 0).request;
    bad.inputs[1]!.datatype = 'FP32';
    const stream = openStream(client, { metadata });
    const done = collectStream(stream);
    stream.write(bad);
    const result = await done;
    assert.equal(result.status.code, status.INVALID_ARGUMENT, result.status.details);
    assert.match(result.status.details, /INPUT1/);
    assert.deepEqual(result.responses, []);
  });

  it('a stream cancelled with many requests queued cancels them, warns of no listener leak, and does not break the server', async () => {
    // Every queued request of a stream listens to the stream's one cancellation signal: more than
    // ten must not make Node warn of a leak (MaxListenersExceededWarning) in the server process.
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    try {
      const executions = () => srv.server.modelStatistics('mlp')[0]!.execution_count;
      const before = executions();
      const stream = openStream(client);
      const done = collectStream(stream);
      const input = mlpInput(2);
      const BATCHES = 16;
      for (let i = 0; i < BATCHES; i++) stream.write(mlpRequest(`cancelled-${i}`, input));
      stream.write(simpleRequest(1, 0, { id: 'cancelled-simple' }).request);
      // Cancel once a batch has run: the instance then holds the next few (its pipeline depth), the
      // last ones are still queued in the scheduler.
      while (executions() === before) await new Promise((resolve) => setTimeout(resolve, 2));
      stream.cancel();
      const result = await done;
      assert.equal(result.status.code, status.CANCELLED);

      // A new stream on the same channel, and the same models, work.
      const c = simpleRequest(2, 8, { id: 'after-cancel' });
      const next = openStream(client);
      const nextDone = collectStream(next);
      next.write(c.request);
      next.write(mlpRequest('mlp-after-cancel', input));
      next.end();
      const after = await nextDone;
      assert.equal(after.status.code, status.OK);
      assert.deepEqual(after.responses.map((r) => r.infer_response?.id), ['after-cancel', 'mlp-after-cancel']);
      assertSimpleResponse(after.responses[0]!.infer_response, c, 2);
      assertMlpResponse(after.responses[1]!.infer_response, input);
      assert.deepEqual(await unary(client, 'ServerReady', {}), { ready: true });
      // Batches still queued when the stream was cancelled never ran.
      const ran = executions() - before - 1;
      assert.ok(ran >= 1 && ran < BATCHES, `${ran} of the cancelled stream's ${BATCHES} batches ran`);
    } finally {
      process.off('warning', onWarning);
    }
    assert.deepEqual(warnings.map((w) => `${w.name}: ${w.message}`), []);
  });
});
