/**
 * Health, server metadata, model metadata and model readiness over real HTTP
 * (protocol.md §2.1, §2.5, §3.1–§3.5).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { NEREID_VERSION } from '@nereid/server';
import { fixedFirstDimModel, simpleModel, simpleStringModel, symbolicDimsModel } from '@nereid/testkit';
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

/** `multi` serves versions 1, 2 and 3 (directories written out of order). */
const MULTI_CONFIG = simpleModel({ name: 'multi' }).config + 'version_policy: { all: { } }\n';

let repo: string;
let srv: RunningServer;

before(async () => {
  const simple = simpleModel();
  const multi = simpleModel({ name: 'multi' });
  repo = await makeRepository({
    simple: { 'config.pbtxt': simple.config!, '1/model.onnx': simple.onnx.bytes },
    simple_string: { 'config.pbtxt': simpleStringModel().config!, '1/model.onnx': simpleStringModel().onnx.bytes },
    fixed_first_dim: { 'config.pbtxt': fixedFirstDimModel().config!, '1/model.onnx': fixedFirstDimModel().onnx.bytes },
    symbolic_dims: { 'config.pbtxt': symbolicDimsModel().config!, '1/model.onnx': symbolicDimsModel().onnx.bytes },
    multi: {
      'config.pbtxt': MULTI_CONFIG,
      '3/model.onnx': multi.onnx.bytes,
      '1/model.onnx': multi.onnx.bytes,
      '2/model.onnx': multi.onnx.bytes,
    },
  });
  srv = await startServer({ modelRepositories: [repo] });
});

after(async () => {
  await srv?.stop();
  await removeDir(repo);
});

describe('server health', () => {
  for (const which of ['live', 'ready']) {
    it(`GET /v2/health/${which} is 200 with an empty body and no content type`, async () => {
      const reply = await httpRequest(`${srv.url}/v2/health/${which}`);
      assert.equal(reply.status, 200);
      assert.equal(reply.text, '');
      assert.equal(reply.headers.get('content-type'), null);
      assert.equal(reply.headers.get('content-length'), '0');
    });

    it(`POST /v2/health/${which} is 405`, async () => {
      const reply = await httpRequest(`${srv.url}/v2/health/${which}`, { method: 'POST' });
      assert.equal(reply.status, 405);
      assert.deepEqual(jsonBody(reply), { error: 'Method Not Allowed' });
    });
  }

  it('does not accept a trailing slash or an unknown health path', async () => {
    for (const path of ['/v2/health/live/', '/v2/health/ready/', '/v2/health', '/v2/health/started']) {
      const reply = await httpRequest(srv.url + path);
      assert.equal(reply.status, 404, path);
      assert.deepEqual(jsonBody(reply), { error: 'Not Found' }, path);
    }
  });

  it('ignores the query string', async () => {
    const reply = await httpRequest(`${srv.url}/v2/health/ready?verbose=1`);
    assert.equal(reply.status, 200);
  });
});

describe('server metadata', () => {
  it("GET /v2 names the server 'triton' with a version and the implemented extensions, in Triton's order", async () => {
    const reply = await httpRequest(`${srv.url}/v2`);
    assert.equal(reply.status, 200);
    const body = jsonBody(reply) as { name: string; version: string; extensions: string[] };
    assert.deepEqual(Object.keys(body).sort(), ['extensions', 'name', 'version']);
    assert.equal(body.name, 'triton');
    assert.equal(body.version, NEREID_VERSION);
    assert.match(body.version, /^\d+\.\d+\.\d+$/);
    assert.deepEqual(body.extensions, [
      'classification',
      'sequence',
      'model_repository',
      'model_repository(unload_dependents)',
      'schedule_policy',
      'model_configuration',
      'system_shared_memory',
      'cuda_shared_memory',
      'binary_tensor_data',
      'parameters',
      'statistics',
      'trace',
      'logging',
    ]);
  });

  it('POST /v2 is 405', async () => {
    const reply = await httpRequest(`${srv.url}/v2`, { method: 'POST', body: '{}' });
    assert.equal(reply.status, 405);
    assert.deepEqual(jsonBody(reply), { error: 'Method Not Allowed' });
  });

  it('unknown paths are 404 Not Found', async () => {
    for (const path of ['/', '/v1', '/v2/', '/v2/models', '/v2/models/', '/v2/models/simple/', '/v2/models/simple/nothing']) {
      const reply = await httpRequest(srv.url + path);
      assert.equal(reply.status, 404, path);
      assert.deepEqual(jsonBody(reply), { error: 'Not Found' }, path);
    }
  });
});

describe('model metadata', () => {
  it('reports a batching model with a leading -1 and the onnxruntime_onnx platform', async () => {
    const reply = await httpRequest(`${srv.url}/v2/models/simple`);
    assert.equal(reply.status, 200);
    assert.deepEqual(jsonBody(reply), {
      name: 'simple',
      versions: ['1'],
      platform: 'onnxruntime_onnx',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [-1, 16] },
        { name: 'INPUT1', datatype: 'INT32', shape: [-1, 16] },
      ],
      outputs: [
        { name: 'OUTPUT0', datatype: 'INT32', shape: [-1, 16] },
        { name: 'OUTPUT1', datatype: 'INT32', shape: [-1, 16] },
      ],
    });
  });

  it('reports TYPE_STRING tensors as BYTES', async () => {
    const body = jsonBody(await httpRequest(`${srv.url}/v2/models/simple_string`)) as { inputs: { datatype: string }[]; outputs: { datatype: string }[] };
    assert.deepEqual([...body.inputs, ...body.outputs].map((t) => t.datatype), ['BYTES', 'BYTES', 'BYTES', 'BYTES']);
  });

  it('reports shapes without a batch dimension for max_batch_size 0', async () => {
    const reply = await httpRequest(`${srv.url}/v2/models/fixed_first_dim`);
    assert.equal(reply.status, 200);
    assert.deepEqual(jsonBody(reply), {
      name: 'fixed_first_dim',
      versions: ['1'],
      platform: 'onnxruntime_onnx',
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [2, 8] }],
      outputs: [{ name: 'OUTPUT0', datatype: 'FP32', shape: [2, 8] }],
    });
  });

  it('reports variable dimensions as -1 after the batch dimension', async () => {
    const body = jsonBody(await httpRequest(`${srv.url}/v2/models/symbolic_dims`)) as { inputs: unknown[] };
    assert.deepEqual(body.inputs, [{ name: 'INPUT0', datatype: 'FP32', shape: [-1, -1, -1, 3] }]);
  });

  it('lists every READY version, ascending, when no version is given', async () => {
    const body = jsonBody(await httpRequest(`${srv.url}/v2/models/multi`)) as { versions: string[] };
    assert.deepEqual(body.versions, ['1', '2', '3']);
  });

  it('lists exactly the version named in the URL', async () => {
    for (const v of ['1', '2', '3']) {
      const reply = await httpRequest(`${srv.url}/v2/models/multi/versions/${v}`);
      assert.equal(reply.status, 200);
      const body = jsonBody(reply) as { name: string; versions: string[] };
      assert.equal(body.name, 'multi');
      assert.deepEqual(body.versions, [v]);
    }
  });

  it('is 404 for an unknown model or version', async () => {
    let reply = await httpRequest(`${srv.url}/v2/models/nope`);
    assert.equal(reply.status, 404);
    assert.deepEqual(jsonBody(reply), { error: "Request for unknown model: 'nope' is not found" });
    reply = await httpRequest(`${srv.url}/v2/models/simple/versions/7`);
    assert.equal(reply.status, 404);
    assert.deepEqual(jsonBody(reply), { error: "Request for unknown model: 'simple' version 7 is not found" });
  });

  it('is 404 Not Found for a version that is not a number', async () => {
    for (const path of ['/v2/models/simple/versions/abc', '/v2/models/simple/versions/-1', '/v2/models/simple/versions/', '/v2/models/simple/versions']) {
      const reply = await httpRequest(srv.url + path);
      assert.equal(reply.status, 404, path);
      assert.deepEqual(jsonBody(reply), { error: 'Not Found' }, path);
    }
  });

  it('is 405 for POST', async () => {
    const reply = await httpRequest(`${srv.url}/v2/models/simple`, { method: 'POST' });
    assert.equal(reply.status, 405);
    assert.deepEqual(jsonBody(reply), { error: 'Method Not Allowed' });
  });
});

describe('model readiness', () => {
  it('is 200 with an empty body and no content type for a READY model, with or without a version', async () => {
    for (const path of ['/v2/models/simple/ready', '/v2/models/simple/versions/1/ready', '/v2/models/multi/versions/2/ready']) {
      const reply = await httpRequest(srv.url + path);
      assert.equal(reply.status, 200, path);
      assert.equal(reply.text, '', path);
      assert.equal(reply.headers.get('content-type'), null, path);
    }
  });

  it("is 400 'Model version not ready' for an unknown model, as Triton answers", async () => {
    const reply = await httpRequest(`${srv.url}/v2/models/x/ready`);
    assert.equal(reply.status, 400);
    assert.equal(reply.headers.get('content-type'), 'application/json');
    assert.equal(reply.text, `{"error":"Model version not ready"}`);
  });

  it("is 400 'Model version not ready' for an unknown version, as Triton answers", async () => {
    const reply = await httpRequest(`${srv.url}/v2/models/multi/versions/4/ready`);
    assert.equal(reply.status, 400);
    assert.deepEqual(jsonBody(reply), { error: 'Model version not ready' });
  });

  it('is 404 Not Found for /versions/abc/ready and 405 for POST', async () => {
    let reply = await httpRequest(`${srv.url}/v2/models/simple/versions/abc/ready`);
    assert.equal(reply.status, 404);
    assert.deepEqual(jsonBody(reply), { error: 'Not Found' });
    reply = await httpRequest(`${srv.url}/v2/models/simple/ready`, { method: 'POST' });
    assert.equal(reply.status, 405);
    assert.deepEqual(jsonBody(reply), { error: 'Method Not Allowed' });
  });

  it('infers on the version named in the URL and reports it', async () => {
    const c = simpleCase(1, 3);
    for (const v of ['1', '3']) {
      const reply = await inferJson(srv.url, 'multi', c.inputs, { version: v });
      assert.equal(reply.status, 200, reply.text);
      const body = jsonBody(reply) as JsonInferResponse;
      assert.equal(body.model_name, 'multi');
      assert.equal(body.model_version, v);
      assert.deepEqual(outputNamed(body, 'OUTPUT0').data, c.sum);
    }
    const body = jsonBody(await inferJson(srv.url, 'multi', c.inputs)) as JsonInferResponse;
    assert.equal(body.model_version, '3');
  });
});
