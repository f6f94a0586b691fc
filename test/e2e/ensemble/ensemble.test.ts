/**
 * Ensembles end to end (models-and-scheduling.md §6, docs/ensembles.md): a pipeline over the
 * facade, HTTP and gRPC; parallel branches overlapping; the same buffer handed from step to step;
 * errors (missing input, a failing step named, cancellation); ensembles of ensembles; a batching
 * step batching with other traffic; statistics; conditional steps both ways.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { GrpcClient } from '@nereid/client';
import { NereidError } from '@nereid/protocol';
import type { InferRequest } from '@nereid/server';
import { identityModel } from '@nereid/testkit';
import { inferJson, jsonBody, makeRepository, removeDir, startServer, type JsonInferResponse, type RunningGrpcServer } from '../../helpers/harness.js';
import { ensembleConfig, StepBackend, stepConfig } from './step-backend.js';

let repo: string;
let srv: RunningGrpcServer;
let steps: StepBackend;

const model = (config: string) => ({ 'config.pbtxt': config, '1/.keep': '' });

before(async () => {
  steps = new StepBackend();
  const ident = identityModel('FP32', [-1, 4], { name: 'ident' });
  repo = await makeRepository({
    add1: model(stepConfig('add1')),
    add10: model(stepConfig('add10', { add: '10' })),
    slow_a: model(stepConfig('slow_a', { delay_ms: '300', add: '1' })),
    slow_b: model(stepConfig('slow_b', { delay_ms: '300', add: '2' })),
    slow_c: model(stepConfig('slow_c', { delay_ms: '2000' })),
    after_slow: model(stepConfig('after_slow')),
    failing: model(stepConfig('failing', { op: 'fail' })),
    gate: model(stepConfig('gate', { op: 'gate' })),
    ident: {
      'config.pbtxt': `name: "ident"
backend: "onnxruntime"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }]
dynamic_batching { max_queue_delay_microseconds: 300000 preferred_batch_size: [2] }
`,
      '1/model.onnx': ident.onnx.bytes,
    },
    pipe: model(
      ensembleConfig('pipe', { inputs: ['X'], outputs: ['Y'] }, [
        { model: 'add1', inputs: { IN: 'X' }, outputs: { OUT: 't1' } },
        { model: 'add10', inputs: { IN: 't1' }, outputs: { OUT: 't2' } },
        { model: 'add1', inputs: { IN: 't2' }, outputs: { OUT: 'Y' } },
      ]),
    ),
    fork: model(
      ensembleConfig('fork', { inputs: ['X'], outputs: ['A', 'B'] }, [
        { model: 'slow_a', inputs: { IN: 'X' }, outputs: { OUT: 'A' } },
        { model: 'slow_b', inputs: { IN: 'X' }, outputs: { OUT: 'B' } },
      ]),
    ),
    bad_step: model(
      ensembleConfig('bad_step', { inputs: ['X'], outputs: ['Y'] }, [
        { model: 'add1', inputs: { IN: 'X' }, outputs: { OUT: 't1' } },
        { model: 'failing', inputs: { IN: 't1' }, outputs: { OUT: 'Y' } },
      ]),
    ),
    slow_pipe: model(
      ensembleConfig('slow_pipe', { inputs: ['X'], outputs: ['Y'] }, [
        { model: 'slow_c', inputs: { IN: 'X' }, outputs: { OUT: 't1' } },
        { model: 'after_slow', inputs: { IN: 't1' }, outputs: { OUT: 'Y' } },
      ]),
    ),
    outer: model(
      ensembleConfig('outer', { inputs: ['X'], outputs: ['Z'] }, [
        { model: 'pipe', inputs: { X: 'X' }, outputs: { Y: 'y' } },
        { model: 'add10', inputs: { IN: 'y' }, outputs: { OUT: 'Z' } },
      ]),
    ),
    batched: {
      'config.pbtxt': `name: "batched"
platform: "ensemble"
max_batch_size: 8
input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [4] }]
ensemble_scheduling { step { model_name: "ident" model_version: -1 input_map { key: "INPUT0" value: "X" } output_map { key: "OUTPUT0" value: "Y" } } }
`,
      '1/.keep': '',
    },
    // Y only when X[0] > 0: the gate's BOOL decides whether add10 runs.
    gated: model(
      ensembleConfig(
        'gated',
        { inputs: ['X'], outputs: ['Y', 'G'], bools: ['G'] },
        [
          { model: 'gate', inputs: { IN: 'X' }, outputs: { OUT: 'G' } },
          { model: 'add10', inputs: { IN: 'X' }, outputs: { OUT: 't' } },
          { model: 'add1', inputs: { IN: 't' }, outputs: { OUT: 'Y' } },
        ],
        { 'step_condition:add10': 'G' },
      ),
    ),
    // At most one request of the slow step at a time, across ensemble requests.
    limited: model(
      ensembleConfig('limited', { inputs: ['X'], outputs: ['Y'] }, [{ model: 'slow_limited', inputs: { IN: 'X' }, outputs: { OUT: 'Y' } }]).replace(
        'ensemble_scheduling {',
        'ensemble_scheduling { max_inflight_requests: 1',
      ),
    ),
    slow_limited: model(stepConfig('slow_limited', { delay_ms: '100' })),
    // The condition is an ensemble input.
    switched: model(
      ensembleConfig('switched', { inputs: ['X', 'RUN'], outputs: ['Y'], bools: ['RUN'] }, [
        { model: 'add1', inputs: { IN: 'X' }, outputs: { OUT: 'Y' } },
      ], { 'step_condition:0': 'RUN' }),
    ),
  });
  srv = await startServer({ modelRepositories: [repo], backends: [steps.backend], grpc: true });
  assert.deepEqual(srv.server.startReport.failures, []);
});

after(async () => {
  await srv?.stop();
  if (repo) await removeDir(repo);
});

function f32(values: number[]) {
  return { name: 'X', datatype: 'FP32' as const, shape: [values.length], data: Float32Array.from(values) };
}

function floats(data: Uint8Array): number[] {
  return Array.from(new Float32Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength)));
}

async function rejection(p: Promise<unknown>): Promise<NereidError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof NereidError, String(err));
    return err;
  }
  assert.fail('expected a rejection');
}

describe('ensembles', () => {
  it('runs a 3-step pipeline through the facade, HTTP and gRPC', async () => {
    const res = await srv.server.infer({ model: 'pipe', inputs: [f32([1, 2, 3])] });
    assert.deepEqual(floats(res.outputs[0]!.data), [13, 14, 15]);
    assert.equal(res.outputs[0]!.name, 'Y');

    const http = await inferJson(srv.url, 'pipe', [{ name: 'X', datatype: 'FP32', shape: [2], data: [5, 6] }]);
    assert.equal(http.status, 200, http.text);
    const body = jsonBody(http) as JsonInferResponse;
    assert.deepEqual(body.outputs[0]!.data, [17, 18]);

    const client = new GrpcClient(srv.grpcTarget);
    try {
      const result = await client.infer({ model: 'pipe', inputs: [{ name: 'X', datatype: 'FP32', shape: [2], data: Float32Array.of(0, -1) }] });
      assert.deepEqual(Array.from(result.typed('Y') as Float32Array), [12, 11]);
    } finally {
      client.close();
    }
  });

  it('hands the same buffer from one step to the next (no copy)', async () => {
    const before = steps.executions.length;
    await srv.server.infer({ model: 'pipe', inputs: [f32([7])] });
    const run = steps.executions.slice(before);
    assert.equal(run.length, 3);
    assert.equal(run[1]!.input, run[0]!.output, 'step 1 received the bytes step 0 produced');
    assert.equal(run[2]!.input, run[1]!.output, 'step 2 received the bytes step 1 produced');
  });

  it('runs independent branches at the same time', async () => {
    const res = await srv.server.infer({ model: 'fork', inputs: [f32([1])] });
    assert.deepEqual(res.outputs.map((o) => [o.name, floats(o.data)]), [['A', [2]], ['B', [3]]]);
    const a = steps.of('slow_a').at(-1)!;
    const b = steps.of('slow_b').at(-1)!;
    assert.ok(a.start < b.end && b.start < a.end, `branches overlap: a ${a.start}–${a.end}, b ${b.start}–${b.end}`);
  });

  it('refuses a request missing an ensemble input, naming it', async () => {
    const err = await rejection(srv.server.infer({ model: 'pipe', inputs: [] }));
    assert.equal(err.kind, 'INVALID_ARG');
    assert.match(err.message, /'X'/);
    const http = await inferJson(srv.url, 'pipe', []);
    assert.equal(http.status, 400);
  });

  it('fails the request naming the failing step, and keeps serving', async () => {
    const err = await rejection(srv.server.infer({ model: 'bad_step', inputs: [f32([1])] }));
    assert.match(err.message, /^in ensemble 'bad_step', step 1 \(model 'failing'\): model 'failing' failed on purpose/);
    const http = await inferJson(srv.url, 'bad_step', [{ name: 'X', datatype: 'FP32', shape: [1], data: [1] }]);
    assert.equal(http.status, 500);
    assert.match(http.text, /step 1 \(model 'failing'\)/);
    const ok = await srv.server.infer({ model: 'pipe', inputs: [f32([0])] });
    assert.deepEqual(floats(ok.outputs[0]!.data), [12]);
  });

  it('cancels the step in flight and runs no later step when the request is cancelled', async () => {
    const controller = new AbortController();
    const before = steps.of('after_slow').length;
    const pending = srv.server.infer({ model: 'slow_pipe', inputs: [f32([1])] }, { signal: controller.signal });
    while (!steps.started.includes('slow_c')) await new Promise((r) => setTimeout(r, 10));
    controller.abort();
    const err = await rejection(pending);
    assert.equal(err.kind, 'CANCELLED');
    assert.ok(steps.of('slow_c').at(-1)!.output === undefined, 'the step in flight saw the cancellation');
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(steps.of('after_slow').length, before, 'the step after the cancelled one never ran');
  });

  it('runs an ensemble of ensembles', async () => {
    const res = await srv.server.infer({ model: 'outer', inputs: [f32([1])] });
    assert.deepEqual(floats(res.outputs[0]!.data), [23]);
  });

  it('lets a batching step batch with other traffic', async () => {
    const stat = () => srv.server.modelStatistics('ident')[0]!;
    const beforeStats = stat();
    const x = { name: 'X', datatype: 'FP32' as const, shape: [1, 4], data: Float32Array.of(1, 2, 3, 4) };
    const direct: InferRequest = { model: 'ident', inputs: [{ ...x, name: 'INPUT0', data: Float32Array.of(5, 6, 7, 8) }] };
    const [viaEnsemble, viaDirect] = await Promise.all([
      srv.server.infer({ model: 'batched', inputs: [x] }),
      srv.server.infer(direct),
    ]);
    assert.deepEqual(floats(viaEnsemble.outputs[0]!.data), [1, 2, 3, 4]);
    assert.deepEqual(viaEnsemble.outputs[0]!.shape, [1, 4]);
    assert.deepEqual(floats(viaDirect.outputs[0]!.data), [5, 6, 7, 8]);
    const afterStats = stat();
    assert.equal(afterStats.inference_count - beforeStats.inference_count, 2);
    assert.equal(afterStats.execution_count - beforeStats.execution_count, 1, 'both requests ran in one batch');
  });

  it('counts ensemble requests, summing their steps\' compute durations, and the steps themselves', async () => {
    const stats = (m: string) => srv.server.modelStatistics(m)[0]!;
    const [pipe0, add1_0, add10_0] = ['pipe', 'add1', 'add10'].map(stats);
    for (let i = 0; i < 3; i++) await srv.server.infer({ model: 'pipe', inputs: [f32([i])] });
    const [pipe1, add1_1, add10_1] = ['pipe', 'add1', 'add10'].map(stats);
    assert.equal(pipe1!.inference_stats.success.count - pipe0!.inference_stats.success.count, 3);
    assert.equal(pipe1!.execution_count - pipe0!.execution_count, 3);
    assert.equal(pipe1!.inference_count - pipe0!.inference_count, 3);
    assert.equal(add10_1!.inference_stats.success.count - add10_0!.inference_stats.success.count, 3);
    assert.equal(add1_1!.inference_stats.success.count - add1_0!.inference_stats.success.count, 6);
    for (const field of ['compute_input', 'compute_infer', 'compute_output'] as const) {
      const delta = (a: typeof pipe0, b: typeof pipe0) => b!.inference_stats[field].ns - a!.inference_stats[field].ns;
      assert.equal(delta(pipe0, pipe1), delta(add1_0, add1_1) + delta(add10_0, add10_1), `${field} of the ensemble is the sum of its steps'`);
    }
    const bad0 = stats('bad_step');
    await rejection(srv.server.infer({ model: 'bad_step', inputs: [f32([1])] }));
    assert.equal(stats('bad_step').inference_stats.fail.count - bad0.inference_stats.fail.count, 1);
    assert.equal(stats('bad_step').execution_count, bad0.execution_count);
  });

  it('keeps at most max_inflight_requests requests of a step outstanding', async () => {
    const results = await Promise.all([1, 2, 3].map((v) => srv.server.infer({ model: 'limited', inputs: [f32([v])] })));
    assert.deepEqual(results.map((r) => floats(r.outputs[0]!.data)), [[2], [3], [4]]);
    const runs = steps.of('slow_limited').sort((a, b) => a.start - b.start);
    assert.equal(runs.length, 3);
    for (let i = 1; i < runs.length; i++) assert.ok(runs[i]!.start >= runs[i - 1]!.end, `run ${i} started after run ${i - 1} ended`);
  });

  it('runs a conditional step only when its BOOL condition is true', async () => {
    const yes = await srv.server.infer({ model: 'gated', inputs: [f32([2])] });
    assert.deepEqual(yes.outputs.map((o) => o.name), ['Y', 'G']);
    assert.deepEqual(floats(yes.outputs[0]!.data), [13]);

    const before = steps.of('add10').length;
    const no = await srv.server.infer({ model: 'gated', inputs: [f32([-2])] });
    assert.deepEqual(no.outputs.map((o) => o.name), ['G'], 'the skipped branch produced no Y');
    assert.deepEqual(Array.from(no.outputs[0]!.data), [0]);
    assert.equal(steps.of('add10').length, before, 'the conditional step did not run');

    const run = (on: boolean) =>
      srv.server.infer({ model: 'switched', inputs: [f32([1]), { name: 'RUN', datatype: 'BOOL', shape: [1], data: Uint8Array.of(on ? 1 : 0) }] });
    assert.deepEqual(floats((await run(true)).outputs[0]!.data), [2]);
    assert.deepEqual((await run(false)).outputs, []);
  });
});
