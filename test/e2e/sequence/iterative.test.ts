/**
 * Iterative sequences (`sequence_batching { iterative_sequence: true }`, models-and-scheduling.md
 * §5.9): one client request is a whole sequence; the model reschedules it until it is done and
 * the sequence batcher batches its iterations with the other requests in flight.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import { Server, silentLogger } from '@nereid/server';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { SequenceProbeBackend, probeConfig } from './sequence-backend.js';

let repo: string;
let server: Server;
const probe = new SequenceProbeBackend();

before(async () => {
  repo = await makeRepository({
    countdown: { 'config.pbtxt': probeConfig('countdown', { iterative: true, decoupled: true }), '1/.keep': '' },
    countdown_direct: {
      'config.pbtxt': probeConfig('countdown_direct', { iterative: true, decoupled: true, strategy: 'direct {}' }),
      '1/.keep': '',
    },
    countdown_unary: { 'config.pbtxt': probeConfig('countdown_unary', { iterative: true, state: false }), '1/.keep': '' },
    countdown_slow: {
      'config.pbtxt': probeConfig('countdown_slow', { iterative: true, decoupled: true, strategy: 'oldest { max_candidate_sequences: 1 }', delayMs: 20 }),
      '1/.keep': '',
    },
    not_iterative: { 'config.pbtxt': probeConfig('not_iterative', { mode: 'reschedule' }), '1/.keep': '' },
  });
  server = await Server.start({ modelRepositories: [repo], backends: [probe.backend], logger: silentLogger() });
  assert.deepEqual(server.startReport.failures, []);
});

after(async () => {
  await server?.stop();
  if (repo) await removeDir(repo);
});

/** Streams one countdown request; resolves with the OUT values and whether the last was final. */
function countdown(model: string, count: number, options: { parameters?: Record<string, number | boolean>; signal?: AbortSignal; onFirst?: () => void } = {}) {
  const values: number[] = [];
  let finals = 0;
  const done = server.inferStream(
    { model, inputs: [{ name: 'IN', datatype: 'INT32', shape: [1, 1], data: Int32Array.of(count) }], ...(options.parameters ? { parameters: options.parameters } : {}) },
    {
      ...(options.signal ? { signal: options.signal } : {}),
      onResponse: ({ response, final }) => {
        if (final) finals++;
        const out = response?.outputs.find((o) => o.name === 'OUT');
        if (out !== undefined) {
          values.push(new DataView(out.data.buffer, out.data.byteOffset, 4).getInt32(0, true));
          if (values.length === 1) options.onFirst?.();
        }
      },
    },
  );
  return done.then(() => ({ values, finals }));
}

describe('iterative sequences', () => {
  it('run each request without a sequence id as a sequence of its own, iterations batched together', async () => {
    const before = probe.of('countdown').length;
    const results = await Promise.all([countdown('countdown', 3), countdown('countdown', 5), countdown('countdown', 2)]);
    assert.deepEqual(results.map((r) => r.values), [[3, 2, 1], [5, 4, 3, 2, 1], [2, 1]]);
    assert.deepEqual(results.map((r) => r.finals), [1, 1, 1]);
    const batches = probe.of('countdown').slice(before);
    // One instance: every iteration of every live request in each execution.
    assert.deepEqual(batches.map((b) => b.length), [3, 3, 2, 1, 1]);
    const ids = new Set(batches[0]!.map((r) => r.corrid));
    assert.equal(ids.size, 3, 'each request has its own internal correlation id');
    assert.ok(![...ids].includes(0n));
    for (const [i, batch] of batches.entries()) {
      for (const row of batch) {
        assert.ok(ids.has(row.corrid), 'the id stays with the request over its iterations');
        assert.equal(row.start, i === 0 ? 1 : 0, 'START on the first iteration only');
        assert.equal(row.end, 0, 'END is never set: the model ends the sequence');
        assert.equal(row.ready, 1);
        if (i > 0) assert.equal(row.state, row.value === 5 ? 5 - i : row.value - i, 'the implicit state carries over');
      }
    }
    const stats = server.modelStatistics('countdown')[0]!;
    assert.equal(stats.inference_stats.success.count, 3);
    assert.equal(stats.execution_count, 5);
  });

  it('take a new request into the iterations in flight (continuous batching), under direct too', async () => {
    for (const model of ['countdown', 'countdown_direct']) {
      const before = probe.of(model).length;
      let late: Promise<{ values: number[] }> | undefined;
      const first = countdown(model, 4, { onFirst: () => (late = countdown(model, 2)) });
      const a = await first;
      const b = await late!;
      assert.deepEqual(a.values, [4, 3, 2, 1], model);
      assert.deepEqual(b.values, [2, 1], model);
      const batches = probe.of(model).slice(before);
      assert.ok(batches.some((batch) => batch.length === 2), `${model}: the late request joined a batch of the first one's iterations`);
      assert.equal(server.modelStatistics(model)[0]!.inference_stats.fail.count, 0);
    }
  });

  it('answer a model that is not decoupled once, after its last iteration', async () => {
    const response = await server.infer({ model: 'countdown_unary', inputs: [{ name: 'IN', datatype: 'INT32', shape: [1, 1], data: Int32Array.of(4) }] });
    const out = response.outputs.find((o) => o.name === 'OUT')!;
    assert.equal(new DataView(out.data.buffer, out.data.byteOffset, 4).getInt32(0, true), 4, 'four executions');
  });

  it('keep a correlation id the client gives', async () => {
    const before = probe.of('countdown').length;
    const r = await countdown('countdown', 2, { parameters: { sequence_id: 77, sequence_start: true } });
    assert.deepEqual(r.values, [2, 1]);
    assert.deepEqual(probe.of('countdown').slice(before).flat().map((row) => row.corrid), [77n, 77n]);
  });

  it('cancelling a request between iterations ends it CANCELLED and frees its slot', async () => {
    const controller = new AbortController();
    const cancelled = countdown('countdown_slow', 1000, { signal: controller.signal, onFirst: () => controller.abort() });
    await assert.rejects(cancelled, (e: NereidError) => e.kind === 'CANCELLED');
    // The model's only slot is free again: the next request runs.
    const next = await countdown('countdown_slow', 2);
    assert.deepEqual(next.values, [2, 1]);
    assert.ok(probe.of('countdown_slow').length < 20, 'the cancelled request stopped iterating');
  });

  it('refuse reschedule() on a model without iterative_sequence, naming the setting', async () => {
    await assert.rejects(
      server.infer({
        model: 'not_iterative',
        inputs: [{ name: 'IN', datatype: 'INT32', shape: [1, 1], data: Int32Array.of(1) }],
        parameters: { sequence_id: 5, sequence_start: true, sequence_end: true },
      }),
      (e: NereidError) => /iterative_sequence: true/.test(e.message) && /not_iterative/.test(e.message),
    );
    assert.equal(server.modelStatistics('not_iterative')[0]!.inference_stats.fail.count, 1);
  });
});
