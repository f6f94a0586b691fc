/**
 * The dynamic batcher's queue behaviour over real HTTP (models-and-scheduling.md §4.2–§4.7): a
 * JS backend holds its instances busy until the test releases them, so queues fill, time out,
 * lose cancelled requests and reorder by priority deterministically. A queue known to hold N
 * requests is reached by sending N + 1 into a level of `max_queue_size` N: the first answer is
 * then the refusal, and the other N are queued.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { nodeRequest, type HttpResult } from '../../helpers/http.js';
import { status as GrpcStatus, type StatusObject } from '@grpc/grpc-js';
import { assertStatus, inferenceClient, inferRequest, inputTensor, unary } from '../../helpers/grpc.js';
import { GateBackend, gateConfig } from './gate-backend.js';

/** A started server with one gate model `m`; stopped (and its repository removed) after `body`. */
async function withGateServer(
  config: { maxBatchSize?: number; count?: number; extra: string },
  body: (srv: RunningServer, gate: GateBackend) => Promise<void>,
): Promise<void> {
  const gate = new GateBackend();
  const repo = await makeRepository({ m: { 'config.pbtxt': gateConfig('m', config), '1/.keep': '' } });
  const srv = await startServer({ modelRepositories: [repo], backends: [gate.backend] });
  try {
    assert.deepEqual(srv.server.startReport.failures, []);
    await body(srv, gate);
  } finally {
    await gate.releaseAll();
    await srv.stop();
    await removeDir(repo);
  }
}

interface Sent {
  value: number;
  controller: AbortController;
  result: Promise<HttpResult>;
  /** Set once the reply is in. */
  settled: boolean;
}

/** POSTs `{IN: [[value]]}` with the given request parameters on a fresh connection. */
function send(srv: RunningServer, value: number, parameters: Record<string, number> = {}): Sent {
  const controller = new AbortController();
  const body = JSON.stringify({
    inputs: [{ name: 'IN', datatype: 'INT32', shape: [1, 1], data: [value] }],
    ...(Object.keys(parameters).length > 0 ? { parameters } : {}),
  });
  const sent: Sent = {
    value,
    controller,
    settled: false,
    result: nodeRequest(srv.url, '/v2/models/m/infer', { method: 'POST', body, signal: controller.signal }),
  };
  sent.result.then(
    () => (sent.settled = true),
    () => (sent.settled = true),
  );
  return sent;
}

/** The OUT value of a 200 reply. */
function outValue(reply: HttpResult): number {
  assert.equal(reply.status, 200, reply.body.toString());
  const out = (JSON.parse(reply.body.toString()) as { outputs: { name: string; data: number[] }[] }).outputs;
  return out.find((o) => o.name === 'OUT')!.data[0]!;
}

/** The `error` of a JSON error reply with `status`. */
function errorOf(reply: HttpResult, status: number): string {
  assert.equal(reply.status, status, reply.body.toString());
  return (JSON.parse(reply.body.toString()) as { error: string }).error;
}

/**
 * Sends the values at once into a level that holds one fewer; returns the refused one's reply
 * and the queued ones, in no particular order.
 */
async function fill(srv: RunningServer, values: readonly number[], parameters: Record<string, number> = {}): Promise<{ refused: HttpResult; queued: Sent[] }> {
  const sent = values.map((v) => send(srv, v, parameters));
  const first = await Promise.race(sent.map((s, i) => s.result.then((r) => ({ i, r }))));
  assert.match(errorOf(first.r, 503), /Exceeds maximum queue size/);
  return { refused: first.r, queued: sent.filter((_, i) => i !== first.i) };
}

interface Stats {
  inference_count: number;
  execution_count: number;
  inference_stats: Record<string, { count: number; ns: number }>;
  batch_stats: { batch_size: number; compute_infer: { count: number } }[];
}

async function stats(srv: RunningServer): Promise<Stats> {
  const reply = await nodeRequest(srv.url, '/v2/models/m/stats');
  assert.equal(reply.status, 200);
  const text = reply.body.toString();
  assert.doesNotMatch(text, /\d[.eE][-+\d]/, 'every number is a JSON integer');
  const s = (JSON.parse(text) as { model_stats: Stats[] }).model_stats[0]!;
  for (const d of Object.values(s.inference_stats)) assert.ok(Number.isInteger(d.count) && Number.isInteger(d.ns));
  assert.equal(s.inference_stats.queue!.count, s.inference_stats.success!.count);
  return s;
}

/** Polls the statistics until `ready` holds (the server reacts to a client going away on its own). */
async function statsWhen(srv: RunningServer, ready: (s: Stats) => boolean): Promise<Stats> {
  for (;;) {
    const s = await stats(srv);
    if (ready(s)) return s;
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('dynamic batching queue policies over HTTP', () => {
  it('a full queue answers 503 naming the model and the limit; the refusal is a failure with reason REJECTED', async () => {
    await withGateServer({ extra: 'dynamic_batching { default_queue_policy { max_queue_size: 3 } }' }, async (srv, gate) => {
      const busy = send(srv, 100);
      await gate.execution(0);
      const { refused, queued } = await fill(srv, [1, 2, 3, 4]);
      const message = errorOf(refused, 503);
      assert.match(message, /'m'/);
      assert.match(message, /max_queue_size 3\b/);
      // Still full: refused at once, whatever its priority parameter says.
      assert.match(errorOf(await send(srv, 5, { priority: 3 }).result, 503), /Exceeds maximum queue size/);
      await gate.releaseAll();
      assert.equal(outValue(await busy.result), 100);
      const values = await Promise.all(queued.map(async (q) => outValue(await q.result)));
      assert.deepEqual(values, queued.map((q) => q.value));
      const s = await stats(srv);
      assert.equal(s.inference_stats.success!.count, 4);
      assert.equal(s.inference_stats.fail!.count, 2);
      const text = await srv.server.metrics.text();
      assert.match(text, /^nv_inference_request_failure\{[^}]*model="m"[^}]*reason="REJECTED"[^}]*\} 2$/m);
      assert.match(text, /^nv_inference_request_failure\{[^}]*model="m"[^}]*reason="OTHER"[^}]*\} 0$/m);
    });
  });

  it('over gRPC too, a full queue answers UNAVAILABLE and counts the refusal as REJECTED', async () => {
    const gate = new GateBackend();
    const repo = await makeRepository({ m: { 'config.pbtxt': gateConfig('m', { extra: 'dynamic_batching { default_queue_policy { max_queue_size: 1 } }' }), '1/.keep': '' } });
    const srv = await startServer({ modelRepositories: [repo], backends: [gate.backend], grpc: true });
    const client = inferenceClient(srv.grpcTarget);
    try {
      const request = (v: number) =>
        inferRequest({ model_name: 'm', inputs: [inputTensor('IN', 'INT32', [1, 1], { int_contents: [v] })] });
      const busy = unary(client, 'ModelInfer', request(1));
      await gate.execution(0);
      // Two more at once into a queue that holds one: one is queued, the other refused.
      const pair = [unary(client, 'ModelInfer', request(2)), unary(client, 'ModelInfer', request(3))];
      const refusedError = await Promise.race(pair.map((p) => p.then(() => undefined, (err: unknown) => err)));
      assert.ok(refusedError !== undefined, 'the first answer is the refusal');
      assertStatus(refusedError as StatusObject, GrpcStatus.UNAVAILABLE, 'Exceeds maximum queue size');
      gate.autoRelease = true;
      await gate.releaseAll();
      await busy;
      await Promise.allSettled(pair);
      const text = await srv.server.metrics.text();
      const rejected = Number(/^nv_inference_request_failure\{[^}]*model="m"[^}]*reason="REJECTED"[^}]*\} (\d+)$/m.exec(text)?.[1]);
      assert.equal(rejected, 1, text);
    } finally {
      client.close();
      await gate.releaseAll();
      await srv.stop();
      await removeDir(repo);
    }
  });

  it('a higher-priority request goes before queued lower-priority ones; priority 0 and out-of-range mean the default level', async () => {
    const extra = `dynamic_batching {
  preferred_batch_size: [ 2 ]
  priority_levels: 2
  default_priority_level: 2
  priority_queue_policy { key: 1 value: { max_queue_size: 1 } }
  priority_queue_policy { key: 2 value: { max_queue_size: 3 } }
}`;
    await withGateServer({ maxBatchSize: 2, extra }, async (srv, gate) => {
      const busy = send(srv, 100, { priority: 1 });
      await gate.execution(0);
      const low = await fill(srv, [1, 2, 3, 4], { priority: 2 });
      // Level 2 is full: requests without a priority, or beyond the levels, belong to it.
      assert.match(errorOf(await send(srv, 5).result, 503), /priority level 2/);
      assert.match(errorOf(await send(srv, 6, { priority: 9 }).result, 503), /priority level 2/);
      const high = await fill(srv, [7, 8], { priority: 1 });
      const [h] = high.queued;
      await (await gate.execution(0)).release();
      const second = await gate.execution(1);
      assert.equal(second.values[0], h!.value, `the level-1 request leads the next batch: ${second.values}`);
      assert.equal(second.values.length, 2);
      await second.release();
      const third = await gate.execution(2);
      assert.equal(third.values.length, 2);
      await third.release();
      assert.deepEqual(
        [...second.values.slice(1), ...third.values].sort(),
        low.queued.map((q) => q.value).sort(),
        'the level-2 requests follow in their queue order',
      );
      for (const q of [busy, h!, ...low.queued]) assert.equal(outValue(await q.result), q.value);
    });
  });

  it('a request whose queue timeout expires answers 503 "Request timeout expired" while the instance stays busy', async () => {
    const extra = 'dynamic_batching { default_queue_policy { default_timeout_microseconds: 60000000 allow_timeout_override: true } }';
    await withGateServer({ extra }, async (srv, gate) => {
      const busy = send(srv, 100);
      await gate.execution(0);
      const patient = send(srv, 1);
      const hasty = send(srv, 2, { timeout: 2000 });
      assert.match(errorOf(await hasty.result, 503), /Request timeout expired/);
      assert.equal(patient.settled, false, 'the default 60 s timeout has not expired');
      await gate.releaseAll();
      assert.equal(outValue(await busy.result), 100);
      assert.equal(outValue(await patient.result), 1);
      assert.deepEqual(
        gate.executions.map((e) => e.values),
        [[100], [1]],
        'the expired request never executed',
      );
      const s = await stats(srv);
      assert.equal(s.inference_stats.success!.count, 2);
      assert.equal(s.inference_stats.fail!.count, 1);
    });
  });

  it('the default queue timeout applies to requests that give none', async () => {
    await withGateServer({ extra: 'dynamic_batching { default_queue_policy { default_timeout_microseconds: 2000 } }' }, async (srv, gate) => {
      const busy = send(srv, 100);
      await gate.execution(0);
      const queued = [send(srv, 1), send(srv, 2, { timeout: 60000000 })];
      for (const q of queued) assert.match(errorOf(await q.result, 503), /Request timeout expired/);
      await gate.releaseAll();
      assert.equal(outValue(await busy.result), 100);
    });
  });

  it('under DELAY an expired request is never rejected: it is served once the instance frees', async () => {
    const extra = `dynamic_batching {
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 1000 max_queue_size: 1 }
}`;
    await withGateServer({ extra }, async (srv, gate) => {
      const busy = send(srv, 100);
      await gate.execution(0);
      const { queued } = await fill(srv, [1, 2]);
      // Well past its 1 ms timeout before the instance frees.
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(queued[0]!.settled, false);
      await gate.releaseAll();
      assert.equal(outValue(await queued[0]!.result), queued[0]!.value);
      assert.equal(outValue(await busy.result), 100);
    });
  });

  it('a client that disconnects while queued is removed without disturbing the others', async () => {
    await withGateServer({ maxBatchSize: 4, extra: 'dynamic_batching { default_queue_policy { max_queue_size: 3 } }' }, async (srv, gate) => {
      const busy = send(srv, 100);
      await gate.execution(0);
      const { queued } = await fill(srv, [1, 2, 3, 4]);
      const [a, gone, c] = queued;
      gone!.controller.abort();
      await assert.rejects(gone!.result);
      // Two failures: the refusal of the full queue (REJECTED) and the cancelled request.
      await statsWhen(srv, (s) => s.inference_stats.fail!.count === 2);
      // Its place is free again.
      const d = send(srv, 5);
      await gate.releaseAll();
      for (const q of [busy, a!, c!, d]) assert.equal(outValue(await q.result), q.value);
      const executed = gate.executions.flatMap((e) => e.values);
      assert.ok(!executed.includes(gone!.value), `the cancelled request executed: ${executed}`);
      assert.deepEqual(executed.sort(), [a!.value, c!.value, 5, 100].sort());
      const s = await stats(srv);
      assert.equal(s.inference_stats.success!.count, 4);
      assert.equal(s.inference_stats.fail!.count, 2);
      assert.equal(s.inference_stats.queue!.count, 4);
      assert.equal(s.inference_count, 4);
      assert.equal(s.execution_count, gate.executions.length);
    });
  });

  it('preserve_ordering: a response waits for the earlier request even when its batch finished first', async () => {
    await withGateServer({ count: 2, extra: 'dynamic_batching { preserve_ordering: true }' }, async (srv, gate) => {
      const a = send(srv, 1);
      const first = await gate.execution(0);
      const b = send(srv, 2);
      const second = await gate.execution(1);
      assert.notEqual(first.instance, second.instance);
      await second.release();
      // Time for b's response to arrive, were it not held back.
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(b.settled, false, 'b was answered before a');
      await first.release();
      assert.equal(outValue(await a.result), 1);
      assert.equal(outValue(await b.result), 2);
    });
  });

  it('preserve_ordering holds for a request that waited in the queue', async () => {
    const extra = 'dynamic_batching { preserve_ordering: true default_queue_policy { max_queue_size: 1 } }';
    await withGateServer({ maxBatchSize: 1, count: 2, extra }, async (srv, gate) => {
      const a = send(srv, 1);
      await gate.execution(0);
      const b = send(srv, 2);
      const onB = await gate.execution(1);
      const { queued } = await fill(srv, [3, 4]);
      const c = queued[0]!;
      await (await gate.execution(0)).release();
      assert.equal(outValue(await a.result), 1);
      const onC = await gate.execution(2);
      assert.deepEqual(onC.values, [c.value]);
      await onC.release();
      // Time for c's response to arrive, were it not held back.
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(c.settled, false, 'c was answered before b, which left the queue before it');
      await onB.release();
      assert.equal(outValue(await b.result), 2);
      assert.equal(outValue(await c.result), c.value);
    });
  });

  it('without preserve_ordering the same response leaves as soon as its batch finished', async () => {
    await withGateServer({ count: 2, extra: 'dynamic_batching { }' }, async (srv, gate) => {
      const a = send(srv, 1);
      const first = await gate.execution(0);
      const b = send(srv, 2);
      const second = await gate.execution(1);
      await second.release();
      assert.equal(outValue(await b.result), 2);
      assert.equal(a.settled, false);
      await first.release();
      assert.equal(outValue(await a.result), 1);
    });
  });
});
