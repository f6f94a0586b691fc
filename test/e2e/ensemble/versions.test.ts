/**
 * Ensemble step versions (models-and-scheduling.md §2.13, §6.2, §6.3 step 1): `model_version` N
 * pins a step to version N, -1 to the latest ready version; the versions are resolved once per
 * ensemble request and hold for all its steps; a load fails clearly when a pinned version is not
 * served; when the composing model's versions or configuration change, the ensemble follows
 * (or, when it no longer fits, says so) without being reloaded.
 */
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import { BACKEND_SPI_VERSION, Server, silentLogger, type Backend, type BackendRequest } from '@nereid/server';
import { makeRepository, removeDir } from '../../helpers/harness.js';

/** `backend: "versioned"`: OUT = IN + 100 × the version; an input below 0 waits 400 ms first. */
const versioned: Backend = {
  name: 'versioned',
  spiVersion: BACKEND_SPI_VERSION,
  async createModel(ctx) {
    return {
      async createInstance() {
        return {
          async execute(requests: readonly BackendRequest[]) {
            for (const r of requests) {
              const t = r.inputs.get('IN')!;
              const x = new DataView(t.data.buffer, t.data.byteOffset, 4).getFloat32(0, true);
              if (x < 0) await new Promise((resolve) => setTimeout(resolve, 400));
              r.respond({ outputs: [{ name: 'OUT', datatype: 'FP32', shape: [1], data: new Uint8Array(Float32Array.of(x + 100 * ctx.version).buffer) }] });
            }
          },
          async unload() {},
        };
      },
      async unload() {},
    };
  },
};

const composingConfig = (policy: string, datatype = 'TYPE_FP32') => `name: "versioned"
backend: "versioned"
max_batch_size: 0
version_policy: ${policy}
input [{ name: "IN" data_type: TYPE_FP32 dims: [1] }]
output [{ name: "OUT" data_type: ${datatype} dims: [1] }]
instance_group [{ count: 1 kind: KIND_CPU }]
`;

const ensemble = (name: string, versions: readonly number[]) => {
  const steps = versions.map((v, i) => {
    const from = i === 0 ? 'X' : `t${i}`;
    const to = i === versions.length - 1 ? 'Y' : `t${i + 1}`;
    return `  step { model_name: "versioned" model_version: ${v} input_map { key: "IN" value: "${from}" } output_map { key: "OUT" value: "${to}" } }`;
  });
  return `name: "${name}"
platform: "ensemble"
max_batch_size: 0
input [{ name: "X" data_type: TYPE_FP32 dims: [1] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [1] }]
ensemble_scheduling {
${steps.join('\n')}
}
`;
};

let repo: string;
let server: Server;

before(async () => {
  repo = await makeRepository({
    versioned: { 'config.pbtxt': composingConfig('{ all: {} }'), '1/.keep': '', '2/.keep': '' },
    ens_latest: { 'config.pbtxt': ensemble('ens_latest', [-1]), '1/.keep': '' },
    ens_v1: { 'config.pbtxt': ensemble('ens_v1', [1]), '1/.keep': '' },
    ens_mixed: { 'config.pbtxt': ensemble('ens_mixed', [1, -1]), '1/.keep': '' },
    ens_chain: { 'config.pbtxt': ensemble('ens_chain', [-1, -1]), '1/.keep': '' },
    ens_v3: { 'config.pbtxt': ensemble('ens_v3', [3]), '1/.keep': '' },
  });
  server = await Server.start({
    modelRepositories: [repo],
    modelControlMode: 'explicit',
    loadModels: ['*'],
    backends: [versioned],
    logger: silentLogger(),
  });
});

after(async () => {
  await server?.stop();
  if (repo) await removeDir(repo);
});

async function run(model: string, x: number): Promise<number> {
  const r = await server.infer({ model, inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: Float32Array.of(x) }] });
  const out = r.outputs[0]!;
  return new DataView(out.data.buffer, out.data.byteOffset, 4).getFloat32(0, true);
}

describe('ensemble step versions', () => {
  it('a step with model_version N runs version N; -1 runs the latest', async () => {
    assert.equal(await run('ens_v1', 1), 101);
    assert.equal(await run('ens_latest', 1), 201);
    assert.equal(await run('ens_mixed', 1), 301, 'version 1, then version 2');
    const v1 = server.modelStatistics('versioned', '1')[0]!.inference_stats.success.count;
    const v2 = server.modelStatistics('versioned', '2')[0]!.inference_stats.success.count;
    assert.deepEqual([v1, v2], [2, 2]);
  });

  it('an ensemble pinned to a version the model does not serve fails to load, naming the version', async () => {
    const failure = server.startReport.failures.find((f) => f.name === 'ens_v3');
    assert.ok(failure, 'ens_v3 failed');
    assert.match(failure.reason, /versioned version 3/);
    assert.match(failure.reason, /ready: 1, 2/);
    assert.equal((await server.repositoryIndex()).find((m) => m.name === 'ens_v3')?.state, 'UNAVAILABLE');
  });

  it('follows the composing model when its versions change, without reloading the ensemble', async () => {
    await server.loadModel('versioned', { config: { ...baseJson(), version_policy: { specific: { versions: [1] } } } });
    assert.equal(await run('ens_latest', 1), 101, '-1 now resolves to version 1');
    assert.equal(await run('ens_v1', 1), 101);
    await server.loadModel('versioned', { config: { ...baseJson(), version_policy: { specific: { versions: [2] } } } });
    assert.equal(await run('ens_latest', 1), 201);
    await assert.rejects(run('ens_v1', 1), (e: NereidError) => {
      assert.equal(e.kind, 'UNAVAILABLE', e.message);
      assert.match(e.message, /in ensemble 'ens_v1', step 0 \(model 'versioned', model_version 1\)/);
      assert.match(e.message, /version 1/);
      return true;
    });
    await server.loadModel('versioned', { config: { ...baseJson(), version_policy: { all: {} } } });
    assert.equal(await run('ens_v1', 1), 101, 'version 1 serves again');
  });

  it('pins the versions for the whole request: a version that appears meanwhile serves only later requests', async () => {
    const inFlight = run('ens_chain', -1000);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await mkdir(join(repo, 'versioned', '3'));
    await server.loadModel('versioned', { config: { ...baseJson(), version_policy: { all: {} } } });
    assert.equal(await inFlight, -1000 + 200 + 200, 'both steps ran version 2');
    assert.equal(await run('ens_chain', 1), 601, 'a new request runs version 3 twice');
  });

  it('says so when a composing model no longer fits the ensemble, and recovers when it fits again', async () => {
    await server.loadModel('versioned', { config: { ...baseJson(), output: [{ name: 'OUT', data_type: 'TYPE_INT32', dims: [1] }] } });
    await assert.rejects(run('ens_latest', 1), (e: NereidError) => {
      assert.match(e.message, /ensemble 'ens_latest'/);
      assert.match(e.message, /TYPE_INT32/);
      assert.match(e.message, /a composing model changed since the ensemble loaded/);
      return true;
    });
    await server.loadModel('versioned', { config: baseJson() });
    assert.equal(await run('ens_latest', 1), 301);
  });

  it('steps with model_version -1 follow the composing model\'s version weights, each step one routed request', async () => {
    await server.loadModel('versioned', { config: baseJson(), versionWeights: { 1: 1, 2: 1 } });
    const outputs = [];
    for (let i = 0; i < 10; i++) outputs.push(await run('ens_latest', 1));
    assert.deepEqual(outputs, [101, 201, 101, 201, 101, 201, 101, 201, 101, 201]);
    assert.equal(await run('ens_v1', 1), 101, 'a pinned step keeps its version');
    // Two -1 steps of one request: the first takes version 1, the second version 2.
    assert.equal(await run('ens_chain', 1), 301);
    assert.equal(await run('ens_chain', 1), 301);
    await server.loadModel('versioned', { config: baseJson(), versionWeights: {} });
    assert.equal(await run('ens_latest', 1), 301, 'without weights, the highest version');
  });
});

/** The composing model's configuration as a load's `config` parameter (every version). */
function baseJson(): Record<string, unknown> {
  return {
    name: 'versioned',
    backend: 'versioned',
    max_batch_size: 0,
    version_policy: { all: {} },
    input: [{ name: 'IN', data_type: 'TYPE_FP32', dims: [1] }],
    output: [{ name: 'OUT', data_type: 'TYPE_FP32', dims: [1] }],
    instance_group: [{ count: 1, kind: 'KIND_CPU' }],
  };
}
