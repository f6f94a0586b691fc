/**
 * Version directories and version policies (models-and-scheduling.md §1.2, §1.7): which versions
 * are loaded and served.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { simpleModel } from '@nereid/testkit';
import {
  httpRequest,
  inferJson,
  jsonBody,
  makeRepository,
  removeDir,
  simpleCase,
  startServer,
  type JsonInferResponse,
  type ModelFiles,
  type RunningServer,
} from '../../helpers/harness.js';

const ONNX = simpleModel().onnx.bytes;

/** A `simple` model with `policy` (config text, may be empty) and these version directories. */
function versioned(name: string, policy: string, versions: readonly string[], extra: ModelFiles = {}): ModelFiles {
  const files: ModelFiles = {
    'config.pbtxt': `${simpleModel({ name }).config}instance_group [ { kind: KIND_CPU, count: 1 } ]\n${policy}\n`,
    ...extra,
  };
  for (const v of versions) files[`${v}/model.onnx`] = ONNX;
  return files;
}

let repo: string;
let srv: RunningServer;

before(async () => {
  repo = await makeRepository({
    latest_default: versioned('latest_default', '', ['1', '2', '10']),
    latest_two: versioned('latest_two', 'version_policy: { latest: { num_versions: 2 } }', ['1', '2', '3']),
    all: versioned('all', 'version_policy: { all: {} }', ['3', '1', '2']),
    specific: versioned('specific', 'version_policy: { specific: { versions: [ 3, 1, 7 ] } }', ['1', '2', '3']),
    latest_zero: versioned('latest_zero', 'version_policy: { latest: { num_versions: 0 } }', ['1', '2']),
    specific_none: versioned('specific_none', 'version_policy: { specific: { versions: [ 4 ] } }', ['1']),
    odd_dirs: versioned('odd_dirs', 'version_policy: { all: {} }', ['01', 'abc', '007', '2x', '5'], {
      'warmup/data.bin': 'w',
      'configs/other.pbtxt': 'name: "odd_dirs"',
      'initial_state/state.bin': 's',
      'notes.txt': 'a regular file is not a version',
    }),
    version_zero: versioned('version_zero', 'version_policy: { all: {} }', ['0', '1']),
  });
  srv = await startServer({ modelRepositories: [repo] });
});

after(async () => {
  await srv?.stop();
  await removeDir(repo);
});

/** `version:state` of every known version of `model`, ascending. */
function versionStates(model: string): string[] {
  return srv.server.modelStatuses().filter((s) => s.name === model).map((s) => `${s.version}:${s.state}`);
}

async function readyVersions(model: string): Promise<string[]> {
  const reply = await httpRequest(`${srv.url}/v2/models/${model}`);
  assert.equal(reply.status, 200, reply.text);
  return (jsonBody(reply) as { versions: string[] }).versions;
}

describe('version policies', () => {
  it('latest (default) loads only the numerically highest version', async () => {
    assert.deepEqual(versionStates('latest_default'), ['10:READY']);
    assert.deepEqual(await readyVersions('latest_default'), ['10']);
    const c = simpleCase(1);
    let reply = await inferJson(srv.url, 'latest_default', c.inputs);
    assert.equal(reply.status, 200, reply.text);
    assert.equal((jsonBody(reply) as JsonInferResponse).model_version, '10');
    reply = await inferJson(srv.url, 'latest_default', c.inputs, { version: '2' });
    assert.equal(reply.status, 404);
    assert.deepEqual(jsonBody(reply), { error: "Request for unknown model: 'latest_default' version 2 is not found" });
  });

  it('latest { num_versions: 2 } loads the two highest', async () => {
    assert.deepEqual(versionStates('latest_two'), ['2:READY', '3:READY']);
    assert.deepEqual(await readyVersions('latest_two'), ['2', '3']);
    assert.equal((await httpRequest(`${srv.url}/v2/models/latest_two/versions/1/ready`)).status, 400);
  });

  it('all loads every version', async () => {
    assert.deepEqual(versionStates('all'), ['1:READY', '2:READY', '3:READY']);
    assert.deepEqual(await readyVersions('all'), ['1', '2', '3']);
    for (const v of ['1', '2', '3']) {
      const reply = await inferJson(srv.url, 'all', simpleCase(2, Number(v)).inputs, { version: v });
      assert.equal(reply.status, 200, reply.text);
      assert.equal((jsonBody(reply) as JsonInferResponse).model_version, v);
    }
  });

  it('specific loads the listed versions that exist and skips a listed one without a directory', async () => {
    assert.deepEqual(versionStates('specific'), ['1:READY', '3:READY']);
    assert.deepEqual(await readyVersions('specific'), ['1', '3']);
    const reply = await httpRequest(`${srv.url}/v2/models/specific/versions/7/ready`);
    assert.equal(reply.status, 400);
    assert.equal((await httpRequest(`${srv.url}/v2/models/specific/versions/2/ready`)).status, 400);
  });

  it('num_versions: 0 fails: at least one version must be available', async () => {
    const [status] = srv.server.modelStatuses().filter((s) => s.name === 'latest_zero');
    assert.equal(status!.state, 'UNAVAILABLE');
    assert.match(status!.reason, /^at least one version must be available under the version policy of model 'latest_zero'/);
    assert.equal((await httpRequest(`${srv.url}/v2/models/latest_zero/ready`)).status, 400);
    const reply = await httpRequest(`${srv.url}/v2/models/latest_zero`);
    assert.equal(reply.status, 404);
    assert.match((jsonBody(reply) as { error: string }).error, /has no available versions/);
  });

  it('a specific policy whose only version has no directory fails the same way', () => {
    const [status] = srv.server.modelStatuses().filter((s) => s.name === 'specific_none');
    assert.equal(status!.state, 'UNAVAILABLE');
    assert.match(status!.reason, /at least one version must be available under the version policy of model 'specific_none'/);
  });

  it('ignores version directories with leading zeros or non-numeric names, and the reserved directories', async () => {
    assert.deepEqual(versionStates('odd_dirs'), ['5:READY']);
    assert.deepEqual(await readyVersions('odd_dirs'), ['5']);
  });

  it("accepts a directory named exactly '0' as version 0", async () => {
    assert.deepEqual(versionStates('version_zero'), ['0:READY', '1:READY']);
    const reply = await inferJson(srv.url, 'version_zero', simpleCase(1).inputs, { version: '0' });
    assert.equal(reply.status, 200, reply.text);
    assert.equal((jsonBody(reply) as JsonInferResponse).model_version, '0');
  });
});
