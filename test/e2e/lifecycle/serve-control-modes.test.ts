/**
 * The control-mode options of `nereid serve` as a real process (protocol.md §6.1): explicit mode
 * with `--load-model`, load and unload over HTTP, a `--load-model` found in no repository with
 * `--exit-on-error` both ways, and poll mode with `--repository-poll-secs`.
 */
import assert from 'node:assert/strict';
import { rename } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { HttpClient } from '@nereid/client';
import { addModels, makeRepository, removeDir } from '../../helpers/harness.js';
import { LOCAL_ENDPOINTS, NereidProcess, startNereidServe, stopAllNereid } from '../../helpers/cli.js';
import { taggedFiles, waitFor } from '../../helpers/lifecycle.js';

const ONE_INSTANCE = 'instance_group [ { kind: KIND_CPU, count: 1 } ]\n';

let repo: string;

before(async () => {
  repo = await makeRepository({ a: taggedFiles('a', { 1: 1 }, ONE_INSTANCE), b: taggedFiles('b', { 1: 2 }, ONE_INSTANCE) });
});

after(async () => {
  await stopAllNereid();
  await removeDir(repo);
});

describe('nereid serve --model-control-mode', () => {
  it('explicit: loads the --load-model models, then loads and unloads on request', async () => {
    const server = await startNereidServe([`--model-repository=${repo}`, '--model-control-mode=explicit', '--load-model=a', '--allow-metrics=false']);
    try {
      const client = new HttpClient(server.url);
      assert.deepEqual(await client.repositoryIndex(), [{ name: 'a', version: '1', state: 'READY' }, { name: 'b' }]);
      await client.loadModel('b');
      await client.unloadModel('a');
      await waitFor('a unloaded', async () => (await client.repositoryIndex()).some((e) => e.name === 'a' && e.state === 'UNAVAILABLE'));
      assert.deepEqual(await client.repositoryIndex({ ready: true }), [{ name: 'b', version: '1', state: 'READY' }]);
      assert.equal(await client.isServerReady(), true);
    } finally {
      const exit = await server.process.stop();
      assert.equal(exit.code, 0);
    }
  });

  it('explicit: a --load-model in no repository fails start-up, or is reported with --exit-on-error=false', async () => {
    const failing = new NereidProcess(['serve', `--model-repository=${repo}`, '--model-control-mode=explicit', '--load-model=nope', ...LOCAL_ENDPOINTS]);
    const exit = await failing.waitForExit();
    assert.equal(exit.code, 1, failing.output);
    assert.match(failing.stderr, /failed to load 'nope', failed to poll from model repository/);

    const server = await startNereidServe([
      `--model-repository=${repo}`,
      '--model-control-mode=explicit',
      '--load-model=nope',
      '--load-model=b',
      '--exit-on-error=false',
      '--allow-metrics=false',
    ]);
    try {
      const client = new HttpClient(server.url);
      assert.deepEqual(await client.repositoryIndex({ ready: true }), [{ name: 'b', version: '1', state: 'READY' }]);
    } finally {
      await server.process.stop();
    }
  });

  it('poll: a model moved into the repository is served after the next poll', async () => {
    const server = await startNereidServe([`--model-repository=${repo}`, '--model-control-mode=poll', '--repository-poll-secs=1', '--allow-metrics=false']);
    const staging = await makeRepository({});
    try {
      const client = new HttpClient(server.url);
      await addModels(staging, { c: taggedFiles('c', { 1: 3 }, ONE_INSTANCE) });
      await rename(join(staging, 'c'), join(repo, 'c'));
      await waitFor('model c', async () => (await client.repositoryIndex({ ready: true })).some((e) => e.name === 'c'));
      const reply = await fetch(`${server.url}/v2/repository/models/c/unload`, { method: 'POST' });
      assert.equal(reply.status, 503);
    } finally {
      await server.process.stop();
      await removeDir(staging);
      await removeDir(join(repo, 'c'));
    }
  });
});
