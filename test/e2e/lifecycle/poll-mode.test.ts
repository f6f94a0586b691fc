/**
 * Control mode `poll` (models-and-scheduling.md §1.9): changes to the repository are picked up by
 * the next poll — an added version, a removed version, a changed configuration, a new model, a
 * removed model — and bad changes (a half-copied model directory, a configuration that does not
 * parse) are reported as states and reasons while every other model keeps serving. Versions a
 * change does not touch keep their copy (their statistics go on counting).
 */
import assert from 'node:assert/strict';
import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { HttpClient, type RepositoryIndexEntry } from '@nereid/client';
import { addModels, httpRequest, jsonBody, makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { TAGGED_WIDTH, taggedConfig, taggedFiles, taggedOnnx, waitFor } from '../../helpers/lifecycle.js';

const ONE_INSTANCE = 'instance_group [ { kind: KIND_CPU, count: 1 } ]\n';
const ALL_VERSIONS = 'version_policy: { all: { } }\n';

let repo: string;
let staging: string;
let srv: RunningServer;
let client: HttpClient;

before(async () => {
  repo = await makeRepository({ m: taggedFiles('m', { 1: 100 }, ALL_VERSIONS + ONE_INSTANCE), other: taggedFiles('other', { 1: 7 }, ONE_INSTANCE) });
  staging = await mkdtemp(join(tmpdir(), 'nereid-staging-'));
  srv = await startServer({ modelRepositories: [repo], modelControlMode: 'poll', repositoryPollSecs: 0.05 });
  client = new HttpClient(srv.url);
});

after(async () => {
  await srv?.stop();
  await removeDir(repo);
  await removeDir(staging);
});

/** `name/version:STATE` of every index entry. */
async function states(): Promise<string[]> {
  return (await client.repositoryIndex()).map((e) => `${e.name}/${e.version ?? ''}:${e.state ?? ''}`);
}

async function entry(name: string, version: string): Promise<RepositoryIndexEntry | undefined> {
  return (await client.repositoryIndex()).find((e) => e.name === name && e.version === version);
}

/** Writes a version directory elsewhere and moves it in whole, as a careful deployment does. */
async function addVersion(model: string, version: number, tag: number): Promise<void> {
  const dir = await mkdtemp(join(staging, 'v-'));
  await writeFile(join(dir, 'model.onnx'), taggedOnnx(tag));
  await rename(dir, join(repo, model, String(version)));
}

async function infer(model: string, version?: string): Promise<{ version: string; out: number[] }> {
  const row = Int32Array.from({ length: TAGGED_WIDTH }, (_, k) => k);
  const r = await client.infer({ model, ...(version ? { version } : {}), inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, TAGGED_WIDTH], data: row }] });
  return { version: r.version, out: [...(r.typed('OUTPUT0') as Int32Array)] };
}

async function inferenceCount(model: string, version: string): Promise<number> {
  const body = jsonBody(await httpRequest(`${srv.url}/v2/models/${model}/versions/${version}/stats`)) as { model_stats: { inference_count: number }[] };
  return body.model_stats[0]!.inference_count;
}

describe('poll mode', () => {
  it('serves what the repository holds at start, and refuses load and unload with 503', async () => {
    assert.deepEqual(await states(), ['m/1:READY', 'other/1:READY']);
    for (const op of ['load', 'unload']) {
      const reply = await httpRequest(`${srv.url}/v2/repository/models/m/${op}`, { method: 'POST' });
      assert.equal(reply.status, 503, op);
      assert.deepEqual(jsonBody(reply), { error: 'explicit model load / unload is not allowed if polling is enabled' });
    }
  });

  it('picks up an added version; the version already serving keeps its copy', async () => {
    for (let i = 0; i < 3; i++) await infer('m', '1');
    await addVersion('m', 2, 200);
    await waitFor('version 2 ready', async () => (await entry('m', '2'))?.state === 'READY');
    assert.deepEqual(await infer('m'), { version: '2', out: [200, 201, 202, 203] });
    assert.equal(await inferenceCount('m', '1'), 3, 'version 1 was not reloaded');
  });

  it('picks up a removed version', async () => {
    await rm(join(repo, 'm', '2'), { recursive: true });
    await waitFor('version 2 unloaded', async () => (await entry('m', '2'))?.state === 'UNAVAILABLE');
    assert.equal((await entry('m', '2'))!.reason, 'unloaded');
    assert.deepEqual(await infer('m'), { version: '1', out: [100, 101, 102, 103] });
    assert.equal(await inferenceCount('m', '1'), 4, 'version 1 was not reloaded');
    assert.equal(await client.isServerReady(), true);
  });

  it('picks up a changed configuration', async () => {
    await writeFile(join(repo, 'm', 'config.pbtxt'), taggedConfig('m', ALL_VERSIONS + ONE_INSTANCE + 'parameters { key: "stage" value: { string_value: "two" } }\n'));
    await waitFor('the new configuration', async () => {
      const config = (await client.modelConfig('m')) as { parameters?: Record<string, { string_value: string }> };
      return config.parameters?.stage?.string_value === 'two';
    });
    assert.deepEqual(await infer('m'), { version: '1', out: [100, 101, 102, 103] });
  });

  it('picks up a new model, and a removed one', async () => {
    await addModels(staging, { fresh: taggedFiles('fresh', { 1: 5 }, ONE_INSTANCE) });
    await rename(join(staging, 'fresh'), join(repo, 'fresh'));
    await waitFor('model fresh ready', async () => (await entry('fresh', '1'))?.state === 'READY');
    assert.deepEqual(await infer('fresh'), { version: '1', out: [5, 6, 7, 8] });

    await rm(join(repo, 'fresh'), { recursive: true });
    await waitFor('model fresh unloaded', async () => (await entry('fresh', '1'))?.state === 'UNAVAILABLE');
    const reply = await httpRequest(`${srv.url}/v2/models/fresh/ready`);
    assert.equal(reply.status, 400);
    assert.equal(await client.isServerReady(), true);
  });

  it('a half-copied model directory is reported, then loaded once complete; the others keep serving', async () => {
    const bytes = taggedOnnx(9);
    await addModels(staging, { late: { 'config.pbtxt': taggedConfig('late', ONE_INSTANCE), '1/model.onnx': bytes.subarray(0, bytes.length >> 1) } });
    await rename(join(staging, 'late'), join(repo, 'late'));
    await waitFor('the half-copied model to fail', async () => (await entry('late', '1'))?.state === 'UNAVAILABLE');
    assert.match((await entry('late', '1'))!.reason!, /late/);
    assert.equal(await client.isServerReady(), false, 'strict readiness: a model failed');
    assert.deepEqual(await infer('other'), { version: '1', out: [7, 8, 9, 10] });
    assert.deepEqual(await infer('m'), { version: '1', out: [100, 101, 102, 103] });

    await writeFile(join(repo, 'late', '1', 'model.onnx'), bytes);
    await waitFor('the completed model', async () => (await entry('late', '1'))?.state === 'READY');
    assert.deepEqual(await infer('late'), { version: '1', out: [9, 10, 11, 12] });
    assert.equal(await client.isServerReady(), true);
  });

  it('a configuration that does not parse leaves the serving copy, with file, line and column in the reason', async () => {
    await writeFile(join(repo, 'other', 'config.pbtxt'), 'name: "other"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8 {\n');
    await waitFor('the parse failure', async () => /reload failed/.test((await entry('other', '1'))?.reason ?? ''));
    const e = (await entry('other', '1'))!;
    assert.equal(e.state, 'READY');
    assert.ok(e.reason!.includes(`${join(repo, 'other', 'config.pbtxt')}:3:`), e.reason);
    assert.deepEqual(await infer('other'), { version: '1', out: [7, 8, 9, 10] });
    assert.equal(await client.isServerReady(), true);

    await writeFile(join(repo, 'other', 'config.pbtxt'), taggedConfig('other', ONE_INSTANCE));
    await waitFor('the fixed configuration', async () => (await entry('other', '1'))?.reason === undefined);
  });
});
