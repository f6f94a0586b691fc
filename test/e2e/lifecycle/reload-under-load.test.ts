/**
 * Live updates without downtime (models-and-scheduling.md §1.10): clients keep 16 requests in
 * flight (8 over HTTP, 8 over gRPC) while the model is reloaded again and again; no request
 * fails, and every answer comes from a version that was ready while the request was in flight.
 * The answer tells which copy computed it: version 1 adds 100, version 2 adds 200.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { after, before, describe, it } from 'node:test';
import { GrpcClient, HttpClient, type InferResult } from '@nereid/client';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { TAGGED_WIDTH, taggedConfig, taggedConfigJson, taggedFiles, taggedOnnx } from '../../helpers/lifecycle.js';

const TAGS: Record<string, number> = { '1': 100, '2': 200 };

/** A stretch of time and the versions that were READY in it. */
interface Epoch {
  start: number;
  end: number;
  ready: Set<string>;
}

interface Answer {
  start: number;
  end: number;
  version: string;
  ok: boolean;
  detail: string;
}

/**
 * Keeps `workers` requests in flight until `stop()` is called: each worker sends a request and,
 * once answered, the next one. Each answer is checked against the version it names.
 */
function traffic(send: (row: Int32Array) => Promise<InferResult>, workers: number) {
  const answers: Answer[] = [];
  let running = true;
  const loops = Array.from({ length: workers }, async (_, w) => {
    for (let i = 0; running; i++) {
      const row = Int32Array.from({ length: TAGGED_WIDTH }, (_, k) => w * 1000 + i * 10 + k);
      const start = performance.now();
      try {
        const result = await send(row);
        const out = result.typed('OUTPUT0') as Int32Array;
        const tag = TAGS[result.version];
        const ok = tag !== undefined && out.every((x, k) => x === row[k]! + tag);
        answers.push({ start, end: performance.now(), version: result.version, ok, detail: ok ? '' : `wrong output ${[...out]} for version ${result.version}` });
      } catch (err) {
        answers.push({ start, end: performance.now(), version: '', ok: false, detail: (err as Error).message });
      }
    }
  });
  return {
    answers,
    async stop(): Promise<Answer[]> {
      running = false;
      await Promise.all(loops);
      return answers;
    },
  };
}

/** The versions allowed for an answer: every version READY in some epoch the request overlapped. */
function allowed(epochs: readonly Epoch[], a: Answer): Set<string> {
  const out = new Set<string>();
  for (const e of epochs) if (e.start <= a.end && a.start <= e.end) for (const v of e.ready) out.add(v);
  return out;
}

let repo: string;
let srv: RunningGrpcServer;
let http: HttpClient;
let grpc: GrpcClient;

before(async () => {
  repo = await makeRepository({
    tagged: taggedFiles('tagged', { 1: TAGS['1']!, 2: TAGS['2']! }, 'version_policy: { specific: { versions: [ 1 ] } }\ninstance_group [ { kind: KIND_CPU, count: 1 } ]\n'),
  });
  srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', loadModels: ['tagged'], grpc: true });
  http = new HttpClient(srv.url);
  grpc = new GrpcClient(srv.grpcTarget);
});

after(async () => {
  grpc?.close();
  await srv?.stop();
  await removeDir(repo);
});

function sendBoth(): (row: Int32Array, i?: number) => Promise<InferResult> {
  let n = 0;
  return (row) => {
    const options = { model: 'tagged', inputs: [{ name: 'INPUT0', datatype: 'INT32' as const, shape: [1, TAGGED_WIDTH], data: row }] };
    return n++ % 2 === 0 ? http.infer(options) : grpc.infer(options);
  };
}

describe('reloads under traffic', () => {
  it('20 reloads alternating versions and configurations with 16 requests in flight: none fails, each answer from a ready version', async () => {
    // Each step: the version policy and the configuration of one reload, and the versions it serves.
    const one = [{ kind: 'KIND_CPU', count: 1 }];
    const steps: { config: Record<string, unknown>; ready: string[] }[] = [
      { config: { version_policy: { specific: { versions: [2] } }, instance_group: [{ kind: 'KIND_CPU', count: 2 }], dynamic_batching: {} }, ready: ['2'] },
      { config: { version_policy: { specific: { versions: [1] } }, instance_group: one }, ready: ['1'] },
      { config: { version_policy: { all: {} }, instance_group: one, dynamic_batching: { max_queue_delay_microseconds: 200 } }, ready: ['1', '2'] },
      { config: { version_policy: { latest: { num_versions: 1 } }, instance_group: one }, ready: ['2'] },
      { config: { version_policy: { specific: { versions: [1] } }, instance_group: one, dynamic_batching: { preferred_batch_size: [4], max_queue_delay_microseconds: 100 } }, ready: ['1'] },
    ];
    const epochs: Epoch[] = [];
    let ready = new Set(['1']);
    let since = performance.now();
    const load = traffic(sendBoth(), 16);
    for (let k = 0; k < 20; k++) {
      const step = steps[k % steps.length]!;
      const callStart = performance.now();
      epochs.push({ start: since, end: callStart, ready });
      await http.loadModel('tagged', { config: taggedConfigJson('tagged', step.config) });
      const callEnd = performance.now();
      const next = new Set(step.ready);
      epochs.push({ start: callStart, end: callEnd, ready: new Set([...ready, ...next]) });
      ready = next;
      since = callEnd;
      assert.deepEqual(
        (await http.repositoryIndex({ ready: true })).map((e) => e.version),
        step.ready,
        `after reload ${k}`,
      );
    }
    const answers = await load.stop();
    epochs.push({ start: since, end: performance.now(), ready });

    const failed = answers.filter((a) => !a.ok);
    assert.deepEqual(failed.slice(0, 5), [], `${failed.length} of ${answers.length} requests failed`);
    const misplaced = answers.filter((a) => !allowed(epochs, a).has(a.version));
    assert.deepEqual(misplaced.slice(0, 5), [], `${misplaced.length} answers came from a version not ready at the time`);
    assert.ok(answers.length >= 100, `only ${answers.length} answers`);
    const byVersion = new Set(answers.map((a) => a.version));
    assert.deepEqual([...byVersion].sort(), ['1', '2']);
  });

  it('a reload that fails leaves the serving copy serving, with the failure in the index', async () => {
    const only1 = { version_policy: { specific: { versions: [1] } }, instance_group: [{ kind: 'KIND_CPU', count: 1 }] };
    await http.loadModel('tagged', { config: taggedConfigJson('tagged', only1) });
    const load = traffic(sendBoth(), 16);
    // Version 2 cannot load with these dims: the model's input is [batch, 4].
    const bad = JSON.parse(taggedConfigJson('tagged', { ...only1, version_policy: { all: {} } })) as { input: { dims: number[] }[] };
    bad.input[0]!.dims = [5];
    await assert.rejects(http.loadModel('tagged', { config: JSON.stringify(bad) }), (err: Error & { status?: number }) => {
      assert.equal(err.status, 400);
      assert.match(err.message, /^load failed for model 'tagged': version 1 is at UNAVAILABLE state: .*INPUT0.*; version 2 is at UNAVAILABLE state: /);
      return true;
    });
    const answers = await load.stop();
    assert.deepEqual(answers.filter((a) => !a.ok).slice(0, 5), []);
    assert.ok(answers.every((a) => a.version === '1'));
    const index = await http.repositoryIndex();
    const one = index.find((e) => e.version === '1')!;
    assert.equal(one.state, 'READY');
    assert.match(one.reason ?? '', /^reload failed, this version keeps serving its previous copy: /);
    const two = index.find((e) => e.version === '2')!;
    assert.equal(two.state, 'UNAVAILABLE');
    assert.match(two.reason ?? '', /INPUT0/);
    assert.equal(await http.isServerReady(), false, 'a version that failed to load keeps strict readiness false');
    // A good load clears both.
    await http.loadModel('tagged', { config: taggedConfigJson('tagged', only1) });
    assert.equal(await http.isServerReady(), true);
  });

  it('changed model files and an instance-count change reload without a failed request', async () => {
    // Back to the files (the override is undone).
    await http.loadModel('tagged');
    const load = traffic(sendBoth(), 16);
    for (const count of [2, 1]) {
      await writeFile(join(repo, 'tagged', 'config.pbtxt'), taggedConfig('tagged', `version_policy: { specific: { versions: [ 1 ] } }\ninstance_group [ { kind: KIND_CPU, count: ${count} } ]\n`));
      await http.loadModel('tagged');
      const config = (await http.modelConfig('tagged')) as { instance_group: { count: number }[] };
      assert.equal(config.instance_group[0]!.count, count);
    }
    // New bytes for version 1 with the same tag: a file change.
    await writeFile(join(repo, 'tagged', '1', 'model.onnx'), taggedOnnx(TAGS['1']!));
    await http.loadModel('tagged');
    const answers = await load.stop();
    assert.deepEqual(answers.filter((a) => !a.ok).slice(0, 5), []);
    assert.ok(answers.length > 0);
  });
});
