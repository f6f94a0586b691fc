/**
 * Model warmup (models-and-scheduling.md §2.15, §8.3): samples run on every instance, through the
 * instances' real execution path, before the version is READY; warmup is not in the statistics;
 * a failing sample fails the load with a reason naming the sample and the input.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { Server, silentLogger } from '@nereid/server';
import { simpleModel } from '@nereid/testkit';
import { GateBackend, gateConfig } from '../batching/gate-backend.js';
import { inferJson, jsonBody, makeRepository, outputNamed, removeDir, simpleCase, startServer, type JsonInferResponse } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { ProbeBackend, probeConfig, probeWarmup } from './probe-backend.js';

const repos: string[] = [];
after(async () => {
  for (const r of repos) await removeDir(r);
});

async function repository(models: Parameters<typeof makeRepository>[0]): Promise<string> {
  const repo = await makeRepository(models);
  repos.push(repo);
  return repo;
}

/** `simple` (INT32 [16] × 2) with `warmup` appended to its config. */
function warmedSimple(warmup: string, extra: Record<string, string | Uint8Array> = {}) {
  const model = simpleModel();
  return modelFiles(model, { config: `${model.config!}\n${warmup}`, extra });
}

describe('model warmup', () => {
  it('runs on every instance before the version is READY; statistics do not count it', async () => {
    const gate = new GateBackend();
    const warmup = `model_warmup [ { name: "gated" batch_size: 2 count: 2 inputs { key: "IN" value { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } } ]`;
    const repo = await repository({ w: { 'config.pbtxt': gateConfig('w', { count: 2, extra: warmup }), '1/.keep': '' } });
    const server = new Server({ modelRepositories: [repo], backends: [gate.backend], logger: silentLogger() });
    const loading = server.load();
    try {
      // Both instances are executing their first warmup batch, held by the gate.
      const [first, second] = await Promise.all([gate.execution(0), gate.execution(1)]);
      assert.deepEqual(new Set([first.instance, second.instance]), new Set(['w_0_0', 'w_0_1']));
      assert.deepEqual([first.requests.length, second.requests.length], [2, 2]);
      assert.deepEqual(first.requests[0]!.inputs.get('IN')!.shape, [1, 1]);
      assert.deepEqual(server.modelStatuses().map((s) => s.state), ['LOADING']);
      assert.equal(server.isReady(), false);
      assert.throws(() => server.isModelReady('w'), /has no available versions|not at ready state|unknown model/);
      await gate.releaseAll();
      const report = await loading;
      assert.deepEqual(report.failures, []);
      assert.deepEqual(server.modelStatuses().map((s) => s.state), ['READY']);
      // count 2: two executions per instance, each one batch of batch_size requests.
      const perInstance = new Map<string, number[]>();
      for (const e of gate.executions) perInstance.set(e.instance, [...(perInstance.get(e.instance) ?? []), e.requests.length]);
      assert.deepEqual(Object.fromEntries(perInstance), { w_0_0: [2, 2], w_0_1: [2, 2] });
      const stats = server.modelStatistics('w')[0]!;
      assert.equal(stats.inference_count, 0);
      assert.equal(stats.execution_count, 0);
      assert.equal(stats.inference_stats.success.count, 0);
      assert.ok(server.modelTimings('w')[0]!.load!.phases['warmup']! > 0);

      const data = new Uint8Array(new Int32Array([7]).buffer);
      const res = await server.infer({ model: 'w', inputs: [{ name: 'IN', datatype: 'INT32', shape: [1, 1], data }] });
      assert.deepEqual([...res.outputs[0]!.data], [...data]);
      assert.equal(server.modelStatistics('w')[0]!.inference_count, 1);
    } finally {
      await gate.releaseAll();
      await loading.catch(() => undefined);
      await server.stop();
    }
  });

  it('warms an ONNX model with zero, random and file data, then serves it', async () => {
    const int32s = (n: number, f: (i: number) => number) => new Uint8Array(new Int32Array(Array.from({ length: n }, (_, i) => f(i))).buffer);
    const warmup = `
model_warmup [
  { name: "zeros" batch_size: 8
    inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
    inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] random_data: true } } },
  { name: "from files" batch_size: 1 count: 3
    inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "in0.bin" } }
    inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "sub/in1.bin" } } }
]`;
    const repo = await repository({
      simple: warmedSimple(warmup, { 'warmup/in0.bin': int32s(16, (i) => i), 'warmup/sub/in1.bin': int32s(16, (i) => 2 * i) }),
    });
    const srv = await startServer({ modelRepositories: [repo] });
    try {
      assert.deepEqual(srv.server.startReport.failures, []);
      const c = simpleCase(2, 5);
      const reply = await inferJson(srv.url, 'simple', c.inputs);
      assert.equal(reply.status, 200, reply.text);
      assert.deepEqual(outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0').data, c.sum);
      const stats = srv.server.modelStatistics('simple')[0]!;
      assert.equal(stats.inference_count, 2, 'only the request above is counted');
      assert.equal(stats.execution_count, 1);
    } finally {
      await srv.stop();
    }
  });

  it('fails the load with the sample and input named when a sample cannot be built; other models serve', async () => {
    const warmup = `model_warmup [ { name: "no file" batch_size: 1
  inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
  inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "missing.bin" } } } ]`;
    const short = `model_warmup [ { name: "short" batch_size: 1
  inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
  inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "short.bin" } } } ]`;
    const repo = await repository({
      simple: warmedSimple(warmup),
      short: modelFiles(simpleModel({ name: 'short' }), {
        config: `${simpleModel({ name: 'short' }).config!}\n${short}`,
        extra: { 'warmup/short.bin': new Uint8Array(60) },
      }),
      plain: modelFiles(simpleModel({ name: 'plain' })),
    });
    const srv = await startServer({ modelRepositories: [repo] });
    try {
      const byName = new Map(srv.server.modelStatuses().map((s) => [s.name, s]));
      assert.equal(byName.get('simple')!.state, 'UNAVAILABLE');
      assert.match(byName.get('simple')!.reason, /failed to run warmup sample 'no file': input 'INPUT1': input_data_file '.*\/simple\/warmup\/missing\.bin' cannot be read/);
      assert.equal(byName.get('short')!.state, 'UNAVAILABLE');
      assert.match(byName.get('short')!.reason, /failed to run warmup sample 'short': input 'INPUT1': input_data_file 'short.bin' holds 60 bytes; dims \[16\] of TYPE_INT32 need 64/);
      assert.equal(byName.get('plain')!.state, 'READY');
      assert.equal((await inferJson(srv.url, 'plain', simpleCase(1).inputs)).status, 200);
    } finally {
      await srv.stop();
    }
  });

  it('fails the load when an execution fails, naming sample and instance, and releases every instance', async () => {
    const probe = new ProbeBackend();
    const repo = await repository({
      bad: { 'config.pbtxt': probeConfig('bad', { count: 3, parameters: { fail_execute: 'true' }, extra: probeWarmup('boom') }), '1/.keep': '' },
      good: { 'config.pbtxt': probeConfig('good', { count: 2, extra: probeWarmup('fine', { batchSize: 3, count: 2 }) }), '1/.keep': '' },
    });
    const srv = await startServer({ modelRepositories: [repo], backends: [probe.backend] });
    try {
      const bad = srv.server.modelStatuses().find((s) => s.name === 'bad')!;
      assert.equal(bad.state, 'UNAVAILABLE');
      assert.match(bad.reason, /^failed to run warmup sample 'boom': instance 'bad_0_\d': .*probe model 'bad' was told to fail$/);
      // Every instance of the failed load was released, and its backend model.
      assert.equal(probe.instancesCreated, 5);
      assert.equal(probe.instancesReleased, 3);
      assert.equal(probe.modelsReleased, 1);
      assert.deepEqual(Object.fromEntries(probe.executionsOf('good')), { good_0_0: [3, 3], good_0_1: [3, 3] });
    } finally {
      await srv.stop();
    }
    assert.equal(probe.instancesReleased, 5);
    assert.equal(probe.modelsReleased, 2);
  });
});
