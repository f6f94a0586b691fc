/**
 * Readiness with failed models (protocol.md §3.3, §2.1): strict readiness makes the server
 * unready while the good models keep serving; a version that failed to load is "not at ready
 * state".
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { simpleModel } from '@nereid/testkit';
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

const NOT_ONNX = new TextEncoder().encode('this is not an ONNX model');

let repo: string;

before(async () => {
  const simple = simpleModel();
  const partly = simpleModel({ name: 'partly' });
  repo = await makeRepository({
    simple: { 'config.pbtxt': simple.config!, '1/model.onnx': simple.onnx.bytes },
    broken: { 'config.pbtxt': simpleModel({ name: 'broken' }).config!, '1/model.onnx': NOT_ONNX },
    // Version 1 loads, version 2 does not: the load is all or nothing (models-and-scheduling.md §1.10).
    partly: {
      'config.pbtxt': partly.config + 'version_policy: { all: { } }\n',
      '1/model.onnx': partly.onnx.bytes,
      '2/model.onnx': NOT_ONNX,
    },
  });
});

after(async () => {
  await removeDir(repo);
});

describe('strict readiness (default)', () => {
  let srv: RunningServer;
  before(async () => {
    srv = await startServer({ modelRepositories: [repo], id: 'nereid-e2e' });
  });
  after(async () => {
    await srv?.stop();
  });

  it('/v2/health/ready is 400 with an empty body while a model failed', async () => {
    const reply = await httpRequest(`${srv.url}/v2/health/ready`);
    assert.equal(reply.status, 400);
    assert.equal(reply.text, '');
    assert.equal(reply.headers.get('content-type'), null);
  });

  it('/v2/health/live is still 200', async () => {
    assert.equal((await httpRequest(`${srv.url}/v2/health/live`)).status, 200);
  });

  it('the good model still serves inference', async () => {
    const c = simpleCase(2, 5);
    const reply = await inferJson(srv.url, 'simple', c.inputs);
    assert.equal(reply.status, 200, reply.text);
    const body = jsonBody(reply) as JsonInferResponse;
    assert.deepEqual(outputNamed(body, 'OUTPUT0').data, c.sum);
    assert.deepEqual(outputNamed(body, 'OUTPUT1').data, c.difference);
    assert.equal((await httpRequest(`${srv.url}/v2/models/simple/ready`)).status, 200);
  });

  it('server metadata uses the id option', async () => {
    const body = jsonBody(await httpRequest(`${srv.url}/v2`)) as { name: string };
    assert.equal(body.name, 'nereid-e2e');
  });

  it('a version that failed to load is 503 "is not at ready state"; its ready check is 400, as in Triton', async () => {
    const ready = await httpRequest(`${srv.url}/v2/models/broken/versions/1/ready`);
    assert.equal(ready.status, 400);
    assert.deepEqual(jsonBody(ready), { error: 'Model version not ready' });
    for (const path of ['/v2/models/broken/versions/1', '/v2/models/broken/versions/1/config']) {
      const reply = await httpRequest(srv.url + path);
      assert.equal(reply.status, 503, path);
      const { error } = jsonBody(reply) as { error: string };
      assert.ok(error.startsWith("Request for unknown model: 'broken' version 1 is not at ready state"), error);
    }
    const reply = await inferJson(srv.url, 'broken', simpleCase(1).inputs, { version: '1' });
    assert.equal(reply.status, 503);
  });

  it('a model without a READY version is 404 "has no available versions"; its ready check is 400', async () => {
    assert.equal((await httpRequest(`${srv.url}/v2/models/broken/ready`)).status, 400);
    const reply = await httpRequest(`${srv.url}/v2/models/broken`);
    assert.equal(reply.status, 404);
    const { error } = jsonBody(reply) as { error: string };
    assert.ok(error.startsWith("Request for unknown model: 'broken' has no available versions"), error);
  });

  it('one failed version makes the whole load fail; both versions are not ready', async () => {
    for (const v of ['1', '2']) {
      assert.equal((await httpRequest(`${srv.url}/v2/models/partly/versions/${v}/ready`)).status, 400, v);
      const reply = await httpRequest(`${srv.url}/v2/models/partly/versions/${v}`);
      assert.equal(reply.status, 503, v);
      const { error } = jsonBody(reply) as { error: string };
      assert.ok(error.startsWith(`Request for unknown model: 'partly' version ${v} is not at ready state`), error);
    }
  });

  it('modelStatuses() reports each failure with its reason', () => {
    const byKey = new Map(srv.server.modelStatuses().map((s) => [`${s.name}/${s.version}`, s]));
    assert.deepEqual([...byKey.keys()], ['broken/1', 'partly/1', 'partly/2', 'simple/1']);
    assert.equal(byKey.get('simple/1')!.state, 'READY');
    for (const key of ['broken/1', 'partly/1', 'partly/2']) assert.equal(byKey.get(key)!.state, 'UNAVAILABLE', key);
    assert.match(byKey.get('broken/1')!.reason, /broken/);
    assert.match(byKey.get('partly/2')!.reason, /partly/);
    assert.match(byKey.get('partly/1')!.reason, /another version/);
    assert.deepEqual(srv.server.startReport.failures.map((f) => `${f.name}/${f.version}`), ['broken/1', 'partly/1', 'partly/2']);
  });
});

describe('strictReadiness: false', () => {
  let srv: RunningServer;
  before(async () => {
    srv = await startServer({ modelRepositories: [repo], strictReadiness: false });
  });
  after(async () => {
    await srv?.stop();
  });

  it('/v2/health/ready is 200 although a model failed', async () => {
    const reply = await httpRequest(`${srv.url}/v2/health/ready`);
    assert.equal(reply.status, 200);
    assert.equal(reply.text, '');
    assert.equal((await httpRequest(`${srv.url}/v2/models/broken/versions/1/ready`)).status, 400);
  });
});

describe('a stopped server', () => {
  it('is neither live nor ready once stopped, and its health checks say it is exiting', async () => {
    const srv = await startServer({ modelRepositories: [repo], strictReadiness: false });
    try {
      assert.equal(srv.server.isReady(), true);
      assert.equal(srv.server.isLive(), true);
      await srv.server.stop();
      assert.equal(srv.server.isReady(), false);
      assert.equal(srv.server.isLive(), false);
      // The HTTP frontend still answers while its own close is pending: health checks fail as
      // Triton's do while it exits, 503 "Server exiting" (protocol.md §3.3).
      for (const which of ['live', 'ready']) {
        const reply = await httpRequest(`${srv.url}/v2/health/${which}`);
        assert.equal(reply.status, 503, which);
        assert.deepEqual(jsonBody(reply), { error: 'Server exiting' });
      }
      const reply = await httpRequest(`${srv.url}/v2/models/simple/ready`);
      assert.equal(reply.status, 503);
      assert.deepEqual(jsonBody(reply), { error: 'Server not ready' });
    } finally {
      await srv.stop();
    }
  });
});
