/**
 * `sequence_batching { oldest { preserve_ordering: true } }` (models-and-scheduling.md §5.5,
 * §4.7): responses are delivered in the order the sequence batcher took the requests for
 * execution, even when the model answers the rows of a batch in another order; without it they
 * are delivered as the model answers.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Server, silentLogger } from '@nereid/server';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { SequenceProbeBackend, probeConfig } from './sequence-backend.js';

let repo: string;
let server: Server;
const probe = new SequenceProbeBackend();
const strategy = (preserve: boolean) =>
  `oldest { max_candidate_sequences: 4 preferred_batch_size: [3] max_queue_delay_microseconds: 100000 preserve_ordering: ${preserve} }`;

before(async () => {
  repo = await makeRepository({
    ordered: { 'config.pbtxt': probeConfig('ordered', { mode: 'order', state: false, strategy: strategy(true) }), '1/.keep': '' },
    unordered: { 'config.pbtxt': probeConfig('unordered', { mode: 'order', state: false, strategy: strategy(false) }), '1/.keep': '' },
  });
  server = await Server.start({ modelRepositories: [repo], backends: [probe.backend], logger: silentLogger() });
  assert.deepEqual(server.startReport.failures, []);
});

after(async () => {
  await server?.stop();
  if (repo) await removeDir(repo);
});

/** Sends one request of each of `ids` at once (START on `step` 0, END on the last); resolves with the ids in delivery order. */
async function round(model: string, ids: readonly number[], step: number, last: boolean): Promise<number[]> {
  const delivered: number[] = [];
  await Promise.all(
    ids.map((id) =>
      server
        .infer({
          model,
          inputs: [{ name: 'IN', datatype: 'INT32', shape: [1, 1], data: Int32Array.of(id * 10 + step) }],
          parameters: { sequence_id: id, sequence_start: step === 0, sequence_end: last },
        })
        .then((r) => {
          const out = r.outputs[0]!;
          assert.equal(new DataView(out.data.buffer, out.data.byteOffset, 4).getInt32(0, true), id * 10 + step);
          delivered.push(id);
        }),
    ),
  );
  return delivered;
}

describe('oldest strategy with preserve_ordering', () => {
  it('delivers the responses of a batch in request order although the model answers them in reverse', async () => {
    const ids = [1, 2, 3];
    for (let step = 0; step < 3; step++) assert.deepEqual(await round('ordered', ids, step, step === 2), ids, `step ${step}`);
    // Each round was one batch of the three sequences, answered last row first.
    assert.deepEqual(probe.of('ordered').map((b) => b.map((r) => Number(r.corrid))), [ids, ids, ids]);
  });

  it('without it, responses go out as the model answers (the control case)', async () => {
    assert.deepEqual(await round('unordered', [1, 2, 3], 0, true), [3, 2, 1]);
  });
});
