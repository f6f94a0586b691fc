/**
 * Repository layout (models-and-scheduling.md §1.1, §1.3, §1.5): a `model.onnx` directory with
 * external data, `--model-config-name`, and a model name present in two repositories.
 */
import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { mlpModel, Prng, simpleModel, writeModelToRepository, type MlpModel } from '@nereid/testkit';
import {
  httpRequest,
  inferJson,
  jsonBody,
  makeRepository,
  outputNamed,
  removeDir,
  simpleCase,
  startServer,
  type JsonInferResponse,
  type RunningServer,
} from '../../helpers/harness.js';

const ONE_INSTANCE = 'instance_group [ { kind: KIND_CPU, count: 1 } ]\n';

function smallMlp(name: string): MlpModel {
  return mlpModel({ name, externalData: true, inputSize: 8, hiddenSizes: [32], outputSize: 4, configExtra: ONE_INSTANCE });
}

function assertClose(got: readonly number[], want: Float32Array): void {
  assert.equal(got.length, want.length);
  for (let i = 0; i < want.length; i++) {
    assert.ok(Math.abs(got[i]! - want[i]!) <= 1e-4 + 1e-4 * Math.abs(want[i]!), `element ${i}: ${got[i]} vs ${want[i]}`);
  }
}

describe('ONNX models with external data', () => {
  let repo: string;
  let srv: RunningServer;
  const inDirectory = smallMlp('in_directory');
  const beside = smallMlp('beside');

  before(async () => {
    repo = await makeRepository({});
    await writeModelToRepository(repo, inDirectory, { asDirectory: true });
    await writeModelToRepository(repo, beside);
    srv = await startServer({ modelRepositories: [repo] });
  });
  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  it('the repository holds a model.onnx directory with the model and its data file', async () => {
    assert.deepEqual((await readdir(join(repo, 'in_directory', '1', 'model.onnx'))).sort(), ['model.onnx', 'model.onnx.data']);
    assert.deepEqual((await readdir(join(repo, 'beside', '1'))).sort(), ['model.onnx', 'model.onnx.data']);
  });

  for (const model of [inDirectory, beside]) {
    it(`loads and infers '${model.name}' with the weights of the data file`, async () => {
      assert.deepEqual(srv.server.modelStatuses().find((s) => s.name === model.name)?.state, 'READY');
      const batch = 3;
      const input = new Prng(7).float32Array(batch * 8);
      const reply = await inferJson(srv.url, model.name, [{ name: 'INPUT0', datatype: 'FP32', shape: [batch, 8], data: Array.from(input) }]);
      assert.equal(reply.status, 200, reply.text);
      const out = outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0');
      assert.deepEqual(out.shape, [batch, 4]);
      assertClose(out.data as number[], model.compute(input, batch));
    });
  }
});

describe('modelConfigName (--model-config-name)', () => {
  let repo: string;
  let srv: RunningServer;

  before(async () => {
    const onnx = simpleModel().onnx.bytes;
    const picky = simpleModel({ name: 'picky' }).config!;
    repo = await makeRepository({
      picky: {
        'config.pbtxt': picky,
        'configs/small.pbtxt': picky.replace('max_batch_size: 8', 'max_batch_size: 2') + ONE_INSTANCE,
        'configs/other.pbtxt': 'this is not read',
        '1/model.onnx': onnx,
      },
      plain: { 'config.pbtxt': simpleModel({ name: 'plain' }).config!, '1/model.onnx': onnx },
      auto: { 'configs/small.pbtxt': 'max_batch_size: 3\n', '1/model.onnx': onnx },
    });
    srv = await startServer({ modelRepositories: [repo], modelConfigName: 'small' });
  });
  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  async function config(model: string): Promise<Record<string, unknown>> {
    const reply = await httpRequest(`${srv.url}/v2/models/${model}/config`);
    assert.equal(reply.status, 200, reply.text);
    return jsonBody(reply) as Record<string, unknown>;
  }

  it('uses configs/<name>.pbtxt when the model has one', async () => {
    const c = await config('picky');
    assert.equal(c.max_batch_size, 2);
    assert.deepEqual((c.instance_group as { count: number }[]).map((g) => g.count), [1]);
    let reply = await inferJson(srv.url, 'picky', simpleCase(2).inputs);
    assert.equal(reply.status, 200, reply.text);
    reply = await inferJson(srv.url, 'picky', simpleCase(3).inputs);
    assert.equal(reply.status, 400);
  });

  it('falls back to config.pbtxt otherwise', async () => {
    assert.equal((await config('plain')).max_batch_size, 8);
  });

  it('auto-completes what the chosen file leaves out', async () => {
    const c = await config('auto');
    assert.equal(c.max_batch_size, 3);
    assert.deepEqual((c.input as { name: string }[]).map((t) => t.name), ['INPUT0', 'INPUT1']);
  });

  it('never takes configs/ for a version directory', () => {
    assert.deepEqual(
      srv.server.modelStatuses().map((s) => `${s.name}/${s.version}:${s.state}`),
      ['auto/1:READY', 'picky/1:READY', 'plain/1:READY'],
    );
  });
});

describe('a model name in two repositories', () => {
  let repoA: string;
  let repoB: string;
  let srv: RunningServer;

  before(async () => {
    const onnx = simpleModel().onnx.bytes;
    const files = (name: string) => ({ 'config.pbtxt': simpleModel({ name }).config!, '1/model.onnx': onnx });
    repoA = await makeRepository({ dup: files('dup'), only_a: files('only_a') });
    repoB = await makeRepository({ dup: files('dup'), only_b: files('only_b') });
    srv = await startServer({ modelRepositories: [repoA, repoB] });
  });
  after(async () => {
    await srv?.stop();
    await removeDir(repoA);
    await removeDir(repoB);
  });

  it('is not loaded: UNAVAILABLE, "appears in two or more repositories"', async () => {
    const dup = srv.server.modelStatuses().filter((s) => s.name === 'dup');
    assert.equal(dup.length, 1);
    assert.equal(dup[0]!.state, 'UNAVAILABLE');
    assert.equal(dup[0]!.version, '');
    assert.match(dup[0]!.reason, /model appears in two or more repositories/);
    assert.ok(dup[0]!.reason.includes(repoA) && dup[0]!.reason.includes(repoB), dup[0]!.reason);
    assert.equal((await httpRequest(`${srv.url}/v2/models/dup/ready`)).status, 400);
    const reply = await httpRequest(`${srv.url}/v2/models/dup`);
    assert.equal(reply.status, 404);
    assert.match((jsonBody(reply) as { error: string }).error, /^Request for unknown model: 'dup' has no available versions.*two or more repositories/);
  });

  it('the models of both repositories serve', async () => {
    for (const model of ['only_a', 'only_b']) {
      const c = simpleCase(1, model.length);
      const reply = await inferJson(srv.url, model, c.inputs);
      assert.equal(reply.status, 200, reply.text);
      assert.deepEqual(outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT1').data, c.difference);
    }
    assert.equal((await httpRequest(`${srv.url}/v2/health/ready`)).status, 400);
  });
});
