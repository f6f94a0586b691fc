/**
 * Ensembles with a decoupled step (models-and-scheduling.md §6.5): the ensemble is decoupled,
 * every response of the decoupled step runs the steps after it once, each complete set of outputs
 * is one ensemble response, the final flag comes last; `Server.infer` refuses the ensemble.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import { Server, silentLogger } from '@nereid/server';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { DecoupledBackend, repeatConfig } from '../streaming/decoupled-backend.js';

let repo: string;
let server: Server;

before(async () => {
  repo = await makeRepository({
    repeat: { 'config.pbtxt': repeatConfig('repeat'), '1/.keep': '' },
    rep_pipe: {
      'config.pbtxt': `name: "rep_pipe"
platform: "ensemble"
max_batch_size: 0
input [{ name: "X" data_type: TYPE_INT32 dims: [-1] }]
output [{ name: "Y" data_type: TYPE_INT32 dims: [1] }]
ensemble_scheduling {
  step { model_name: "repeat" model_version: -1 input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "t" } }
  step { model_name: "repeat" model_version: -1 input_map { key: "IN" value: "t" } output_map { key: "OUT" value: "Y" } }
}
`,
      '1/.keep': '',
    },
  });
  server = await Server.start({ modelRepositories: [repo], backends: [new DecoupledBackend().backend], logger: silentLogger() });
  assert.deepEqual(server.startReport.failures, []);
});

after(async () => {
  await server?.stop();
  if (repo) await removeDir(repo);
});

describe('ensembles with a decoupled step', () => {
  it('are decoupled and stream one response per iteration, then the final flag', async () => {
    assert.equal(server.modelConfig('rep_pipe').model_transaction_policy?.decoupled, true);
    const seen: { y: number | undefined; final: boolean }[] = [];
    let accepted = false;
    await server.inferStream(
      { model: 'rep_pipe', inputs: [{ name: 'X', datatype: 'INT32', shape: [3], data: Int32Array.of(4, 5, 6) }] },
      {
        onAccepted: (a) => (accepted = a.decoupled),
        onResponse: ({ response, final }) => {
          const out = response?.outputs.find((o) => o.name === 'Y');
          seen.push({ y: out === undefined ? undefined : new DataView(out.data.buffer, out.data.byteOffset, 4).getInt32(0, true), final });
        },
      },
    );
    assert.equal(accepted, true);
    const data = seen.filter((s) => s.y !== undefined);
    assert.deepEqual(data.map((s) => s.y).sort(), [4, 5, 6]);
    assert.equal(seen.at(-1)!.final, true);
    assert.equal(seen.filter((s) => s.final).length, 1);
  });

  it('are refused by Server.infer', async () => {
    await assert.rejects(
      server.infer({ model: 'rep_pipe', inputs: [{ name: 'X', datatype: 'INT32', shape: [1], data: Int32Array.of(1) }] }),
      (err: unknown) => err instanceof NereidError && err.code === 'MODEL_DECOUPLED_UNSUPPORTED',
    );
  });
});
