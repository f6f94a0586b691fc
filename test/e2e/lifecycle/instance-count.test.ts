/**
 * In-place instance count changes (models-and-scheduling.md §1.10): a reload whose configuration
 * differs only in instance counts adds and removes instances of the serving copy instead of
 * loading a new one. Traffic never fails, statistics keep counting, the backend model is not
 * created again, removed instances finish what they hold before they are released, and a failed
 * instance creation leaves the model serving as it was. Any other change still reloads fully.
 *
 * ONNX Runtime models carry the traffic tests; the probe backend (probe-backend.ts) counts
 * backend models and instances and can hold executions, for the tests that need to see them.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { HttpClient } from '@nereid/client';
import { Server, createLogger, type Logger } from '@nereid/server';
import { httpRequest, jsonBody, makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { TAGGED_WIDTH, taggedConfig, taggedConfigJson, taggedFiles, waitFor } from '../../helpers/lifecycle.js';
import { ProbeBackend, probeConfig, probeWarmup } from './probe-backend.js';

const TAG = 100;

/** A logger that keeps every info and warning line. */
function capturingLogger(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  const base = createLogger({ info: false, warning: false, error: false });
  return { lines, logger: { ...base, info: (m: string) => void lines.push(m), warning: (m: string) => void lines.push(m) } };
}

interface Traffic {
  /** Requests answered so far. */
  readonly answered: number;
  /** Stops sending; resolves with the failures (empty when every request succeeded) and the total. */
  stop(): Promise<{ failures: string[]; total: number }>;
}

/** `workers` clients, each sending a batch-1 request and, once answered, the next one. */
function traffic(client: HttpClient, model: string, workers: number): Traffic {
  const failures: string[] = [];
  let answered = 0;
  let running = true;
  const loops = Array.from({ length: workers }, async (_, w) => {
    for (let i = 0; running; i++) {
      const row = Int32Array.from({ length: TAGGED_WIDTH }, (_, k) => w * 1000 + i * 10 + k);
      try {
        const r = await client.infer({ model, inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, TAGGED_WIDTH], data: row }] });
        const out = r.typed('OUTPUT0') as Int32Array;
        if (!out.every((x, k) => x === row[k]! + TAG)) failures.push(`wrong output ${[...out]} for input ${[...row]}`);
      } catch (err) {
        failures.push((err as Error).message);
      }
      answered++;
    }
  });
  return {
    get answered() {
      return answered;
    },
    async stop() {
      running = false;
      await Promise.all(loops);
      return { failures, total: answered };
    },
  };
}

/** The instance counts of the served configuration, per group. */
async function servedCounts(client: HttpClient, model: string): Promise<number[]> {
  const config = (await client.modelConfig(model)) as { instance_group: { count: number }[] };
  return config.instance_group.map((g) => g.count);
}

async function inferenceCount(client: HttpClient, model: string): Promise<number> {
  const body = jsonBody(await httpRequest(`${client.url}/v2/models/${model}/versions/1/stats`)) as { model_stats: { inference_count: number }[] };
  return body.model_stats[0]!.inference_count;
}

/** The INT32 elements of a facade output. */
const int32s = (data: Uint8Array) => [...new Int32Array(new Uint8Array(data).buffer)];

const count = (lines: readonly string[], prefix: string) => lines.filter((l) => l.startsWith(prefix)).length;

for (const variant of [
  { title: 'direct scheduler', extra: '', json: {} },
  { title: 'dynamic batcher', extra: 'dynamic_batching { max_queue_delay_microseconds: 500 }\n', json: { dynamic_batching: { max_queue_delay_microseconds: 500 } } },
  { title: 'direct scheduler under --rate-limit=execution_count', extra: '', json: {}, rateLimit: true },
  { title: 'dynamic batcher under --rate-limit=execution_count', extra: 'dynamic_batching { }\n', json: { dynamic_batching: {} }, rateLimit: true },
] as const) {
  describe(`instance count changes in place (${variant.title})`, () => {
    let repo: string;
    let srv: RunningServer;
    let client: HttpClient;
    let lines: string[];
    const rateLimited = 'rateLimit' in variant;
    const limiterText = rateLimited ? ' rate_limiter { resources [ { name: "R" count: 1 } ] }' : '';
    const group = (n: number) => ({ kind: 'KIND_CPU', count: n, ...(rateLimited ? { rate_limiter: { resources: [{ name: 'R', count: 1 }] } } : {}) });

    before(async () => {
      repo = await makeRepository({ tagged: taggedFiles('tagged', { 1: TAG }, `instance_group [ { kind: KIND_CPU count: 2${limiterText} } ]\n${variant.extra}`) });
      const captured = capturingLogger();
      lines = captured.lines;
      srv = await startServer({
        modelRepositories: [repo],
        modelControlMode: 'explicit',
        loadModels: ['tagged'],
        logger: captured.logger,
        ...(rateLimited ? { rateLimit: 'execution_count' as const } : {}),
      });
      client = new HttpClient(srv.url);
    });
    after(async () => {
      await srv?.stop();
      await removeDir(repo);
    });

    it('2 → 4 → 1 under traffic: no request fails, statistics keep counting, the model is not loaded again', async () => {
      assert.deepEqual(await servedCounts(client, 'tagged'), [2]);
      const load = traffic(client, 'tagged', 8);
      for (const n of [4, 1]) {
        const before = load.answered;
        await waitFor('requests before the change', () => load.answered >= before + 20);
        await client.loadModel('tagged', { config: taggedConfigJson('tagged', { instance_group: [group(n)], ...variant.json }) });
        assert.deepEqual(await servedCounts(client, 'tagged'), [n]);
        const after = load.answered;
        await waitFor(`requests served by ${n} instance(s)`, () => load.answered >= after + 20);
      }
      const { failures, total } = await load.stop();
      assert.deepEqual(failures, []);
      // One copy counted every request: nothing was reset by the changes.
      assert.equal(await inferenceCount(client, 'tagged'), total);
      assert.equal(count(lines, "loaded model 'tagged' version 1 "), 1, lines.join('\n'));
      assert.equal(count(lines, "updated model 'tagged' version 1 in place "), 2, lines.join('\n'));
      assert.ok(lines.some((l) => l.includes("instances group 'tagged_0' 2 → 4 (2 created and warmed up, 0 removed)")), lines.join('\n'));
      assert.ok(lines.some((l) => l.includes("instances group 'tagged_0' 4 → 1 (0 created and warmed up, 3 removed)")), lines.join('\n'));
      const index = await client.repositoryIndex();
      assert.deepEqual(index.map((e) => [e.name, e.version, e.state, e.reason ?? '']), [['tagged', '1', 'READY', '']]);
    });

    it('a count change combined with another change loads a new copy (statistics start again)', async () => {
      const before = await inferenceCount(client, 'tagged');
      assert.ok(before > 0);
      await client.loadModel('tagged', {
        config: taggedConfigJson('tagged', { instance_group: [group(3)], ...variant.json, parameters: { marker: { string_value: 'changed' } } }),
      });
      assert.deepEqual(await servedCounts(client, 'tagged'), [3]);
      assert.equal(count(lines, "loaded model 'tagged' version 1 "), 2, lines.join('\n'));
      assert.equal(await inferenceCount(client, 'tagged'), 0);
      const load = traffic(client, 'tagged', 4);
      await waitFor('requests on the new copy', () => load.answered >= 10);
      const { failures, total } = await load.stop();
      assert.deepEqual(failures, []);
      assert.equal(await inferenceCount(client, 'tagged'), total);
    });
  });
}

describe('instance count changes in poll mode', () => {
  let repo: string;
  let srv: RunningServer;
  let client: HttpClient;
  let lines: string[];

  before(async () => {
    repo = await makeRepository({ tagged: taggedFiles('tagged', { 1: TAG }, 'instance_group [ { kind: KIND_CPU count: 1 } ]\n') });
    const captured = capturingLogger();
    lines = captured.lines;
    srv = await startServer({ modelRepositories: [repo], modelControlMode: 'poll', repositoryPollSecs: 0.05, logger: captured.logger });
    client = new HttpClient(srv.url);
  });
  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  it('an edited count in config.pbtxt is applied in place; an edit of something else reloads', async () => {
    const load = traffic(client, 'tagged', 4);
    await waitFor('requests before the edit', () => load.answered >= 10);
    await writeFile(join(repo, 'tagged', 'config.pbtxt'), taggedConfig('tagged', 'instance_group [ { kind: KIND_CPU count: 3 } ]\n'));
    await waitFor('the poll to apply count 3', async () => (await servedCounts(client, 'tagged'))[0] === 3);
    const after = load.answered;
    await waitFor('requests after the edit', () => load.answered >= after + 10);
    const { failures, total } = await load.stop();
    assert.deepEqual(failures, []);
    assert.equal(await inferenceCount(client, 'tagged'), total);
    assert.equal(count(lines, "loaded model 'tagged' version 1 "), 1, lines.join('\n'));
    assert.equal(count(lines, "updated model 'tagged' version 1 in place "), 1, lines.join('\n'));

    await writeFile(
      join(repo, 'tagged', 'config.pbtxt'),
      taggedConfig('tagged', 'instance_group [ { kind: KIND_CPU count: 2 } ]\ndynamic_batching { }\n'),
    );
    await waitFor('the poll to reload', () => count(lines, "loaded model 'tagged' version 1 ") === 2);
    assert.deepEqual(await servedCounts(client, 'tagged'), [2]);
    assert.equal(count(lines, "updated model 'tagged' version 1 in place "), 1, lines.join('\n'));
  });
});

describe('instance count changes, instance by instance (probe backend)', () => {
  const WARMUP_BATCH = 3;
  const probe = new ProbeBackend();
  let repo: string;
  let server: Server;
  let lines: string[];
  const config = (n: number) => ({
    name: 'p',
    backend: 'probe',
    max_batch_size: 4,
    input: [{ name: 'IN', data_type: 'TYPE_INT32', dims: [1] }],
    output: [{ name: 'OUT', data_type: 'TYPE_INT32', dims: [1] }],
    instance_group: [{ kind: 'KIND_CPU', count: n }],
    model_warmup: [
      { name: 'w', batch_size: WARMUP_BATCH, count: 1, inputs: { IN: { data_type: 'TYPE_INT32', dims: [1], zero_data: true } } },
    ],
  });
  const infer = (value: number) =>
    server.infer({ model: 'p', inputs: [{ name: 'IN', datatype: 'INT32', shape: [1, 1], data: Int32Array.of(value) }] });

  before(async () => {
    repo = await makeRepository({ p: { 'config.pbtxt': probeConfig('p', { count: 2, extra: probeWarmup('w', { batchSize: WARMUP_BATCH }) }), '1/.keep': '' } });
    const captured = capturingLogger();
    lines = captured.lines;
    server = new Server({ modelRepositories: [repo], backends: [probe.backend], logger: captured.logger, modelControlMode: 'explicit', loadModels: ['p'] });
    await server.load();
  });
  after(async () => {
    probe.release();
    await server?.stop();
    await removeDir(repo);
  });

  it('growing creates only the new instances, warms them up before they take work, and keeps the backend model', async () => {
    assert.equal(probe.modelsCreated, 1);
    assert.equal(probe.instancesCreated, 2);
    await server.loadModel('p', { config: JSON.stringify(config(4)) });
    assert.equal(probe.modelsCreated, 1);
    assert.equal(probe.instancesCreated, 4);
    assert.equal(probe.liveInstances, 4);
    assert.deepEqual(
      probe.instanceSpecs.map((spec) => [spec.name, spec.instanceCount]),
      [['p_0_0', 2], ['p_0_1', 2], ['p_0_2', 4], ['p_0_3', 4]],
      'new instances are told the new instance count',
    );
    const effective = server.modelEffectiveConfig('p');
    assert.equal(effective.source, 'override');
    assert.equal((effective.config['instance_group'] as { count: number }[])[0]!.count, 4);
    assert.equal(effective.provenance['instance_group[0].count'], 'override');
    for (const instance of ['p_0_2', 'p_0_3']) {
      const runs = probe.executionsOf('p').get(instance);
      assert.deepEqual(runs, [WARMUP_BATCH], `instance ${instance} ran its warmup, and only that, before serving`);
    }
    // The new instances take work: four requests held at once occupy four instances.
    probe.hold();
    const pending = [1, 2, 3, 4].map((v) => infer(v));
    await waitFor('four executions at once', () => probe.executions.filter((e) => e.batchSize === 1).length === 4);
    const busy = new Set(probe.executions.filter((e) => e.batchSize === 1).map((e) => e.instance));
    assert.equal(busy.size, 4);
    probe.release();
    await Promise.all(pending);
  });

  it('shrinking while every instance is busy: they finish their requests, then the surplus is released', async () => {
    probe.executions.length = 0;
    const releasedBefore = probe.instancesReleased;
    probe.hold();
    const pending = [10, 20, 30, 40].map((v) => infer(v));
    await waitFor('four executions at once', () => probe.executions.length === 4);
    await server.loadModel('p', { config: JSON.stringify(config(1)) });
    assert.equal(server.modelConfig('p').instance_group[0]!.count, 1);
    assert.equal(probe.instancesReleased, releasedBefore, 'no instance is released while it holds a request');
    probe.release();
    const answers = await Promise.all(pending);
    assert.deepEqual(
      answers.map((a) => int32s(a.outputs[0]!.data)),
      [[10], [20], [30], [40]],
    );
    await waitFor('the surplus instances to be released', () => probe.instancesReleased === releasedBefore + 3);
    assert.equal(probe.liveInstances, 1);
    assert.equal(probe.modelsCreated, 1);
    // Only the remaining instance takes work now.
    probe.executions.length = 0;
    await Promise.all([1, 2, 3].map((v) => infer(v)));
    assert.deepEqual([...new Set(probe.executions.map((e) => e.instance))], ['p_0_0']);
  });

  it('a failed instance creation while growing reports the error and leaves the model serving as it was', async () => {
    const statsBefore = server.modelStatistics('p')[0]!.inference_count;
    probe.failCreate = true;
    try {
      await assert.rejects(server.loadModel('p', { config: JSON.stringify(config(3)) }), (err: Error) => {
        assert.match(err.message, /load failed for model 'p': version 1 is at UNAVAILABLE state: .*probe model 'p' was told to fail creating instance 'p_0_[12]'/);
        return true;
      });
    } finally {
      probe.failCreate = false;
    }
    assert.equal(server.modelConfig('p').instance_group[0]!.count, 1);
    assert.equal(probe.liveInstances, 1);
    assert.equal(probe.modelsCreated, 1);
    const index = await server.repositoryIndex();
    assert.equal(index[0]!.state, 'READY');
    assert.match(index[0]!.reason ?? '', /^reload failed, this version keeps serving its previous copy: /);
    const answer = await infer(7);
    assert.deepEqual(int32s(answer.outputs[0]!.data), [7]);
    assert.equal(server.modelStatistics('p')[0]!.inference_count, statsBefore + 1);
    // The next attempt, with instances that can be created, applies the change.
    await server.loadModel('p', { config: JSON.stringify(config(3)) });
    assert.equal(probe.liveInstances, 3);
    assert.equal((await server.repositoryIndex())[0]!.reason ?? '', '');
    assert.ok(lines.some((l) => l.startsWith("updated model 'p' version 1 in place ")));
  });

  it('unloading the model releases every instance, the ones added in place included, and the backend model', async () => {
    await server.unloadModel('p');
    await waitFor('everything released', () => probe.liveInstances === 0 && probe.modelsReleased === 1);
  });
});
