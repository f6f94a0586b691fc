/**
 * Model warmup of sequence models (models-and-scheduling.md §8.3 with §5.3, §5.8): warmup requests
 * carry the control inputs of a one-request sequence (START, END, READY true, CORRID 0) and the
 * initial state, unless the sample lists them; they bypass the sequence batcher, so no sequence,
 * slot or state is left behind, and they are not counted.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { sequenceAccumulatorModel } from '@nereid/testkit';
import { Server, silentLogger } from '@nereid/server';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { SequenceProbeBackend, probeConfig } from './sequence-backend.js';

let repo: string;
let server: Server;
const probe = new SequenceProbeBackend();
const input = (name: string, source = 'random_data: true') => `inputs { key: "${name}" value: { data_type: TYPE_INT32 dims: [1] ${source} } }`;

before(async () => {
  const accumulator = sequenceAccumulatorModel({ name: 'seq_warm', maxBatchSize: 1 });
  repo = await makeRepository({
    // ONNX Runtime needs every graph input: without the control and state inputs the load fails.
    seq_warm: modelFiles(accumulator, { config: `${accumulator.config!}\nmodel_warmup [{ name: "w" batch_size: 1 count: 3 ${input('INPUT')} }]\n` }),
    probe_warm: {
      'config.pbtxt': probeConfig('probe_warm', { mode: 'echo', extra: `model_warmup [{ name: "w" batch_size: 2 ${input('IN')} }]` }),
      '1/.keep': '',
    },
    probe_override: {
      'config.pbtxt': probeConfig('probe_override', {
        mode: 'echo',
        extra: `model_warmup [{ name: "w" batch_size: 1 ${input('IN')} ${input('START', 'zero_data: true')} }]`,
      }),
      '1/.keep': '',
    },
  });
  server = await Server.start({ modelRepositories: [repo], backends: [probe.backend], logger: silentLogger() });
});

after(async () => {
  await server?.stop();
  if (repo) await removeDir(repo);
});

async function accumulate(id: number, value: number, start: boolean, end: boolean): Promise<number> {
  const r = await server.infer({
    model: 'seq_warm',
    inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [1, 1], data: Int32Array.of(value) }],
    outputs: [{ name: 'OUTPUT' }],
    parameters: { sequence_id: id, sequence_start: start, sequence_end: end },
  });
  const out = r.outputs[0]!;
  return new DataView(out.data.buffer, out.data.byteOffset, 4).getInt32(0, true);
}

describe('warmup of sequence models', () => {
  it('an ONNX sequence model warms up with only its data input listed, and serves from a clean state', async () => {
    assert.deepEqual(server.startReport.failures, []);
    const stats = server.modelStatistics('seq_warm')[0]!;
    assert.equal(stats.inference_count, 0, 'warmup is not counted');
    assert.equal(stats.execution_count, 0);
    // The model's one slot is free and the sequence starts from the initial state.
    assert.equal(await accumulate(9, 5, true, false), 5);
    assert.equal(await accumulate(9, 6, false, true), 11);
  });

  it('warmup requests carry START, END, READY true, CORRID 0 and the initial state', () => {
    const rows = probe.of('probe_warm');
    assert.equal(rows.length, 1, 'one execution of the sample');
    assert.equal(rows[0]!.length, 2, 'batch_size 2');
    for (const row of rows[0]!) {
      assert.deepEqual(
        { start: row.start, end: row.end, ready: row.ready, corrid: row.corrid, state: row.state },
        { start: 1, end: 1, ready: 1, corrid: 0n, state: 0 },
      );
      assert.deepEqual(row.inputs, ['CORRID', 'END', 'IN', 'READY', 'START', 'STATE_IN']);
    }
  });

  it('a control input the sample lists overrides the one the server adds', () => {
    const row = probe.of('probe_override')[0]![0]!;
    assert.equal(row.start, 0, "the sample's zero START");
    assert.equal(row.end, 1);
  });
});
