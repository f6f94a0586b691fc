/**
 * An ensemble over a sequence-batched model (models-and-scheduling.md §6.3 step 4): the ensemble
 * request's correlation id and sequence flags reach the step, so the composing model's sequence
 * batcher keeps the client's sequence (its controls and implicit state).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import { Server, silentLogger } from '@nereid/server';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { SequenceProbeBackend, probeConfig } from '../sequence/sequence-backend.js';

let repo: string;
let server: Server;
const probe = new SequenceProbeBackend();

before(async () => {
  repo = await makeRepository({
    stateful: { 'config.pbtxt': probeConfig('stateful', { mode: 'echo', strategy: 'direct {}' }), '1/.keep': '' },
    seq_pipe: {
      'config.pbtxt': `name: "seq_pipe"
platform: "ensemble"
max_batch_size: 4
input [{ name: "X" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "Y" data_type: TYPE_INT32 dims: [1] }]
ensemble_scheduling {
  step { model_name: "stateful" model_version: -1 input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "Y" } }
}
`,
      '1/.keep': '',
    },
  });
  server = await Server.start({ modelRepositories: [repo], backends: [probe.backend], logger: silentLogger() });
  assert.deepEqual(server.startReport.failures, []);
});

after(async () => {
  await server?.stop();
  if (repo) await removeDir(repo);
});

const send = (x: number, parameters: Record<string, number | boolean>) =>
  server.infer({ model: 'seq_pipe', inputs: [{ name: 'X', datatype: 'INT32', shape: [1, 1], data: Int32Array.of(x) }], parameters });

describe('ensembles over sequence models', () => {
  it("carry the client's sequence id and flags to the step", async () => {
    await send(1, { sequence_id: 42, sequence_start: true });
    await send(2, { sequence_id: 42 });
    await send(3, { sequence_id: 42, sequence_end: true });
    const rows = probe.of('stateful').flat();
    assert.deepEqual(
      rows.map((r) => [r.corrid, r.start, r.end, r.value, r.state]),
      [
        [42n, 1, 0, 1, 0],
        [42n, 0, 0, 2, 1],
        [42n, 0, 1, 3, 2],
      ],
    );
  });

  it("refuse a request without a sequence id with the step's error", async () => {
    await assert.rejects(send(1, {}), (e: NereidError) => /in ensemble 'seq_pipe', step 0/.test(e.message) && /correlation ID/.test(e.message));
  });
});
