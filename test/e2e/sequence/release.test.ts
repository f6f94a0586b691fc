/**
 * When a sequence lets go of its slot (models-and-scheduling.md §5.6, §5.10), over real gRPC:
 * an idle sequence is released with its state, and its next request gets a clear error; a gRPC
 * stream cancelled while a request of its sequence is queued releases the slot at once; one
 * cancelled with nothing queued leaves the sequence to the idle timeout, as Triton does; a
 * decoupled request left without its final response is bounded by the response timeout.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@grpc/grpc-js';
import { inferRequest, inferenceClient, inputTensor, int32s, nextResponses, openStream, unary, unaryError } from '../../helpers/grpc.js';
import { makeRepository, removeDir, type RunningGrpcServer, startServer } from '../../helpers/harness.js';
import { SequenceProbeBackend, probeConfig } from './sequence-backend.js';

let repo: string;
let srv: RunningGrpcServer;
let client: Client;
const probe = new SequenceProbeBackend();
const oneSlot = 'direct {}';

before(async () => {
  repo = await makeRepository({
    // One slot each (max_batch_size 1, one instance).
    idle: { 'config.pbtxt': probeConfig('idle', { mode: 'echo', maxBatchSize: 1, strategy: oneSlot, idleUs: 150_000 }), '1/.keep': '' },
    slow: { 'config.pbtxt': probeConfig('slow', { mode: 'echo', maxBatchSize: 1, strategy: oneSlot, idleUs: 600_000_000, delayMs: 300 }), '1/.keep': '' },
    slow_idle: { 'config.pbtxt': probeConfig('slow_idle', { mode: 'echo', maxBatchSize: 1, strategy: oneSlot, idleUs: 300_000 }), '1/.keep': '' },
    silent: { 'config.pbtxt': probeConfig('silent', { mode: 'nofinal', decoupled: true, state: false }), '1/.keep': '' },
  });
  srv = await startServer({ modelRepositories: [repo], backends: [probe.backend], grpc: true, decoupledResponseTimeoutMs: 200 });
  client = inferenceClient(srv.grpcTarget);
});

after(async () => {
  client?.close();
  await srv?.stop();
  if (repo) await removeDir(repo);
});

const request = (model: string, id: number, value: number, flags: { start?: boolean; end?: boolean } = {}) =>
  inferRequest({
    model_name: model,
    parameters: {
      sequence_id: { int64_param: BigInt(id) },
      ...(flags.start ? { sequence_start: { bool_param: true } } : {}),
      ...(flags.end ? { sequence_end: { bool_param: true } } : {}),
    },
    inputs: [inputTensor('IN', 'INT32', [1, 1], { int_contents: [value] })],
  });

async function value(model: string, id: number, v: number, flags: { start?: boolean; end?: boolean } = {}): Promise<number> {
  const r = await unary(client, 'ModelInfer', request(model, id, v, flags));
  return int32s(r.raw_output_contents[0]!)[0]!;
}

describe('sequence release', () => {
  it("a decoupled sequence model that never sends a request's final response is bounded by the response timeout; the sequence goes on", { timeout: 20_000 }, async () => {
    const send = (v: number, flags: Record<string, boolean>) => {
      const values: number[] = [];
      return srv.server
        .inferStream(
          { model: 'silent', inputs: [{ name: 'IN', datatype: 'INT32', shape: [1, 1], data: Int32Array.of(v) }], parameters: { sequence_id: 30, ...flags } },
          { onResponse: ({ response }) => response && values.push(int32s(response.outputs[0]!.data)[0]!) },
        )
        .then(() => values);
    };
    const stuck = send(-1, { sequence_start: true });
    // Under `oldest` the sequence's next request waits until the stuck one has ended.
    const next = send(2, { sequence_end: true });
    await assert.rejects(stuck, (e: Error & { code?: string }) => e.code === 'RESPONSE_TIMEOUT' && /decoupled-response-timeout-secs/.test(e.message));
    assert.deepEqual(await next, [2]);
    assert.deepEqual(probe.of('silent').flat().map((r) => [r.value, r.start, r.end]), [[-1, 1, 0], [2, 0, 1]]);
  });

  it('an idle sequence is released; its next request gets a clear error and another sequence takes the slot', { timeout: 20_000 }, async () => {
    assert.equal(await value('idle', 1, 5, { start: true }), 5);
    await sleep(400);
    const err = await unaryError(client, 'ModelInfer', request('idle', 1, 6));
    assert.equal(err.code, 3, 'INVALID_ARGUMENT');
    assert.match(err.details ?? '', /sequence 1 .*must specify the START flag/);
    assert.match(err.details ?? '', /released after 150000 µs idle/);
    // The only slot is free: another sequence runs at once, and sequence 1 starts again from the initial state.
    assert.equal(await value('idle', 2, 7, { start: true, end: true }), 7);
    assert.equal(await value('idle', 1, 8, { start: true }), 8);
    assert.equal(await value('idle', 1, 9, { end: true }), 9);
    assert.deepEqual(probe.of('idle').flat().map((r) => r.state), [0, 0, 0, 8], 'each START begins from the initial state');
  });

  it('a gRPC stream cancelled while a request of its sequence is queued releases the slot at once', { timeout: 20_000 }, async () => {
    const stream = openStream(client);
    stream.on('error', () => undefined);
    const first = nextResponses(stream, 1).catch((e: unknown) => e);
    stream.write(request('slow', 10, 1, { start: true }));
    stream.write(request('slow', 10, 2));
    await sleep(100);
    stream.cancel();
    await first;
    // Sequence 10 held the model's only slot for 600 s of idle time; the cancellation freed it.
    assert.equal(await value('slow', 11, 3, { start: true, end: true }), 3);
    const ids = probe.of('slow').flat().map((r) => [Number(r.corrid), r.value]);
    assert.deepEqual(ids, [[10, 1], [11, 3]], "sequence 10's queued request never ran");
  });

  it('a gRPC stream cancelled with nothing of its sequence queued leaves the sequence to the idle timeout', { timeout: 20_000 }, async () => {
    const stream = openStream(client);
    stream.on('error', () => undefined);
    const got = nextResponses(stream, 1);
    stream.write(request('slow_idle', 20, 1, { start: true }));
    await got;
    stream.cancel();
    // Sequence 21 waits in the backlog until sequence 20 idles out (300 ms), then runs.
    assert.equal(await value('slow_idle', 21, 4, { start: true, end: true }), 4);
    const err = await unaryError(client, 'ModelInfer', request('slow_idle', 20, 2));
    assert.match(err.details ?? '', /must specify the START flag/);
  });
});
