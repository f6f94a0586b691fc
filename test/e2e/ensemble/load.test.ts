/**
 * Loading ensembles (models-and-scheduling.md §1.11, §6.2): in control mode explicit, loading an
 * ensemble loads its composing models and unloading a composing model takes the ensemble with it;
 * load-time checks against the composing models name the step and tensor; the other models serve.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Server, silentLogger } from '@nereid/server';
import { simpleModel } from '@nereid/testkit';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { DecoupledBackend, repeatConfig } from '../streaming/decoupled-backend.js';
import { ensembleConfig, StepBackend, stepConfig } from './step-backend.js';

const model = (config: string) => ({ 'config.pbtxt': config, '1/.keep': '' });

function reasonOf(server: Server, name: string): string {
  return server.modelStatuses().find((s) => s.name === name)?.reason ?? '';
}

describe('loading ensembles', () => {
  let repo: string;
  before(async () => {
    repo = await makeRepository({
      add1: model(stepConfig('add1')),
      gate: model(stepConfig('gate', { op: 'gate' })),
      pipe: model(
        ensembleConfig('pipe', { inputs: ['X'], outputs: ['Y'] }, [
          { model: 'add1', inputs: { IN: 'X' }, outputs: { OUT: 't' } },
          { model: 'add1', inputs: { IN: 't' }, outputs: { OUT: 'Y' } },
        ]),
      ),
      unknown_step: model(
        ensembleConfig('unknown_step', { inputs: ['X'], outputs: ['Y'] }, [{ model: 'nowhere', inputs: { IN: 'X' }, outputs: { OUT: 'Y' } }]),
      ),
      wrong_input: model(
        ensembleConfig('wrong_input', { inputs: ['X'], outputs: ['Y'] }, [{ model: 'add1', inputs: { NOPE: 'X' }, outputs: { OUT: 'Y' } }]),
      ),
      wrong_type: model(
        ensembleConfig('wrong_type', { inputs: ['X'], outputs: ['Y'], bools: ['Y'] }, [{ model: 'add1', inputs: { IN: 'X' }, outputs: { OUT: 'Y' } }]),
      ),
      doubly_produced: model(
        ensembleConfig('doubly_produced', { inputs: ['X'], outputs: ['Y'] }, [
          { model: 'add1', inputs: { IN: 'X' }, outputs: { OUT: 'Y' } },
          { model: 'add1', inputs: { IN: 'X' }, outputs: { OUT: 'Y' } },
        ]),
      ),
      repeat: model(repeatConfig('repeat')),
      simple: modelFiles(simpleModel()),
      two_decoupled: {
        'config.pbtxt': `name: "two_decoupled"
platform: "ensemble"
max_batch_size: 0
input [{ name: "X" data_type: TYPE_INT32 dims: [-1] }]
output [{ name: "Y" data_type: TYPE_INT32 dims: [-1, 16] }]
ensemble_scheduling {
  step { model_name: "repeat" model_version: -1 input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "a" } }
  step { model_name: "repeat" model_version: -1 input_map { key: "IN" value: "X" } output_map { key: "IDX" value: "b" } }
  step { model_name: "simple" model_version: -1 input_map [{ key: "INPUT0" value: "a" }, { key: "INPUT1" value: "b" }] output_map { key: "OUTPUT0" value: "Y" } }
}
`,
        '1/.keep': '',
      },
      cycle_a: model(ensembleConfig('cycle_a', { inputs: ['X'], outputs: ['Y'] }, [{ model: 'cycle_b', inputs: { X: 'X' }, outputs: { Y: 'Y' } }])),
      cycle_b: model(ensembleConfig('cycle_b', { inputs: ['X'], outputs: ['Y'] }, [{ model: 'cycle_a', inputs: { X: 'X' }, outputs: { Y: 'Y' } }])),
      bad_condition: model(
        ensembleConfig('bad_condition', { inputs: ['X'], outputs: ['Y'] }, [
          { model: 'add1', inputs: { IN: 'X' }, outputs: { OUT: 't' } },
          { model: 'add1', inputs: { IN: 't' }, outputs: { OUT: 'Y' } },
        ], { 'step_condition:1': 't' }),
      ),
    });
  });
  after(async () => {
    if (repo) await removeDir(repo);
  });

  it('loads the composing models of an ensemble in explicit mode and unloads the ensemble with them', async () => {
    const server = await Server.start({
      modelRepositories: [repo],
      modelControlMode: 'explicit',
      backends: [new StepBackend().backend],
      logger: silentLogger(),
    });
    try {
      assert.throws(() => server.isModelReady('add1'));
      await server.loadModel('pipe');
      assert.equal(server.isModelReady('add1'), true, 'the composing model was loaded first');
      const res = await server.infer({ model: 'pipe', inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: Float32Array.of(1) }] });
      assert.deepEqual(Array.from(new Float32Array(res.outputs[0]!.data.slice().buffer)), [3]);
      await server.unloadModel('add1');
      assert.throws(() => server.isModelReady('pipe'), 'the ensemble went with its composing model');
    } finally {
      await server.stop();
    }
  });

  it('refuses ensembles that do not fit their composing models, naming the step and tensor', async () => {
    const server = await Server.start({
      modelRepositories: [repo],
      backends: [new StepBackend().backend, new DecoupledBackend().backend],
      logger: silentLogger(),
    });
    try {
      assert.match(reasonOf(server, 'unknown_step'), /nowhere/);
      assert.match(reasonOf(server, 'wrong_input'), /step 0 \(model 'add1'\): input_map key 'NOPE' \(ensemble tensor 'X'\) is not an input of model 'add1'/);
      assert.match(reasonOf(server, 'wrong_type'), /ensemble tensor 'Y': .*TYPE_FP32.*TYPE_BOOL|ensemble tensor 'Y': .*TYPE_BOOL.*TYPE_FP32/);
      assert.match(reasonOf(server, 'doubly_produced'), /ensemble tensor 'Y' can appear in an output map only once/);
      assert.match(reasonOf(server, 'two_decoupled'), /step 2 \(model 'simple'\) consumes tensors that come from more than one decoupled step \(steps 0, 1\)/);
      assert.match(reasonOf(server, 'cycle_a'), /circular dependency between ensembles/);
      assert.match(reasonOf(server, 'bad_condition'), /ensemble tensor 't': the condition of step 1 \(model 'add1'\) has datatype TYPE_BOOL/);
      // The others serve.
      const res = await server.infer({ model: 'pipe', inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: Float32Array.of(0) }] });
      assert.equal(res.outputs.length, 1);
    } finally {
      await server.stop();
    }
  });
});
