/**
 * The model repository extension in control mode `explicit`, over HTTP and gRPC (protocol.md
 * §3.13, §4.8; models-and-scheduling.md §1.9–§1.10): index with states and reasons, load with a
 * configuration override and file overrides, unload, and every refusal — modes that do not allow
 * it, unknown models and parameters, override paths that would leave their directory — with
 * every other model serving throughout.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { status, type Client } from '@grpc/grpc-js';
import { GrpcClient, HttpClient, InferenceServerError } from '@nereid/client';
import { httpRequest, jsonBody, makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { assertStatus, inferenceClient, unary, unaryError } from '../../helpers/grpc.js';
import { TAGGED_WIDTH, taggedConfigJson, taggedFiles, taggedOnnx, waitFor } from '../../helpers/lifecycle.js';

const ONE_INSTANCE = 'instance_group [ { kind: KIND_CPU, count: 1 } ]\n';
const ONE = { instance_group: [{ kind: 'KIND_CPU', count: 1 }] };

let repo: string;
let srv: RunningGrpcServer;
let http: HttpClient;
let grpc: GrpcClient;
let raw: Client;

before(async () => {
  repo = await makeRepository({
    a: taggedFiles('a', { 1: 10 }, ONE_INSTANCE),
    b: taggedFiles('b', { 1: 20, 2: 21 }, ONE_INSTANCE),
    broken: { 'config.pbtxt': taggedFiles('broken', {}, ONE_INSTANCE)['config.pbtxt']!, '1/model.onnx': 'not an onnx model' },
  });
  srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', loadModels: ['a'], grpc: true });
  http = new HttpClient(srv.url);
  grpc = new GrpcClient(srv.grpcTarget);
  raw = inferenceClient(srv.grpcTarget);
});

after(async () => {
  grpc?.close();
  raw?.close();
  await srv?.stop();
  await removeDir(repo);
});

async function infer(model: string, version?: string): Promise<{ version: string; out: number[] }> {
  const row = Int32Array.from({ length: TAGGED_WIDTH }, (_, k) => k);
  const r = await http.infer({ model, ...(version ? { version } : {}), inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, TAGGED_WIDTH], data: row }] });
  return { version: r.version, out: [...(r.typed('OUTPUT0') as Int32Array)] };
}

function post(path: string, body?: unknown): ReturnType<typeof httpRequest> {
  return httpRequest(`${srv.url}${path}`, { method: 'POST', ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }) });
}

/** The override directories of this process's server that still exist. */
async function overrideDirs(): Promise<string[]> {
  return (await readdir(tmpdir())).filter((n) => n.startsWith('nereid-override-'));
}

describe('HTTP', () => {
  it('index: models loaded at start with their state, the others by name; an empty body is fine', async () => {
    const reply = await post('/v2/repository/index');
    assert.equal(reply.status, 200);
    assert.deepEqual(jsonBody(reply), [{ name: 'a', version: '1', state: 'READY' }, { name: 'b' }, { name: 'broken' }]);
    assert.deepEqual(jsonBody(await post('/v2/repository/index', { ready: true })), [{ name: 'a', version: '1', state: 'READY' }]);
    const bad = await post('/v2/repository/index', { ready: 'yes' });
    assert.equal(bad.status, 400);
    assert.match((jsonBody(bad) as { error: string }).error, /'ready' of a repository index request must be a bool/);
    assert.equal((await httpRequest(`${srv.url}/v2/repository/index`)).status, 405);
  });

  it('load: blocks until the model serves, answers 200 with an empty JSON body; the server stays ready meanwhile', async () => {
    const loading = post('/v2/repository/models/b/load');
    const readiness: number[] = [];
    let done = false;
    void loading.then(() => (done = true));
    while (!done) {
      readiness.push((await httpRequest(`${srv.url}/v2/health/ready`)).status);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    const reply = await loading;
    assert.equal(reply.status, 200);
    assert.equal(reply.text, '');
    assert.equal(reply.headers.get('content-type'), 'application/json');
    assert.ok(readiness.every((s) => s === 200), `readiness while loading: ${readiness.join(',')}`);
    assert.deepEqual(await infer('b'), { version: '2', out: [21, 22, 23, 24] });
    assert.deepEqual(await http.repositoryIndex({ ready: true }), [
      { name: 'a', version: '1', state: 'READY' },
      { name: 'b', version: '2', state: 'READY' },
    ]);
  });

  it('a request for a version that is not ready names the ready versions', async () => {
    await http.loadModel('b', { config: taggedConfigJson('b', { ...ONE, version_policy: { specific: { versions: [1] } } }) });
    assert.equal((await httpRequest(`${srv.url}/v2/models/b/versions/2/ready`)).status, 400);
    const reply = await httpRequest(`${srv.url}/v2/models/b/versions/2`);
    assert.equal(reply.status, 503);
    assert.equal((jsonBody(reply) as { error: string }).error, "Request for unknown model: 'b' version 2 is not at ready state; ready versions: 1");
    await http.loadModel('b');
    assert.equal((await httpRequest(`${srv.url}/v2/models/b/versions/2/ready`)).status, 200);
  });

  it('unload: the model stops serving; its versions read UNAVAILABLE "unloaded"; the server stays ready', async () => {
    const reply = await post('/v2/repository/models/b/unload', { parameters: { unload_dependents: false } });
    assert.equal(reply.status, 200);
    assert.equal(reply.text, '');
    // The call returns once no version is READY; each version is UNLOADING until its requests finish.
    const versionsOfB = async () =>
      (await http.repositoryIndex()).filter((e) => e.name === 'b').map((e) => `${e.version}:${e.state}:${e.reason ?? ''}`);
    assert.ok((await versionsOfB()).every((v) => /^\d:(UNLOADING:|UNAVAILABLE:unloaded)$/.test(v)));
    await waitFor('both versions unloaded', async () => (await versionsOfB()).join() === '1:UNAVAILABLE:unloaded,2:UNAVAILABLE:unloaded');
    const infer = await post('/v2/models/b/infer', { inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 4], data: [0, 1, 2, 3] }] });
    assert.equal(infer.status, 404);
    assert.match((jsonBody(infer) as { error: string }).error, /^Request for unknown model: 'b' has no available versions/);
    assert.equal(await http.isServerReady(), true);
    // Unloading what is not loaded succeeds.
    assert.equal((await post('/v2/repository/models/b/unload')).status, 200);
    assert.equal((await post('/v2/repository/models/never_heard_of/unload')).status, 200);
  });

  it('a load that fails is reported (400, state and reason), other models keep serving', async () => {
    const reply = await post('/v2/repository/models/broken/load');
    assert.equal(reply.status, 400);
    assert.match((jsonBody(reply) as { error: string }).error, /^load failed for model 'broken': version 1 is at UNAVAILABLE state: /);
    const entry = (await http.repositoryIndex()).find((e) => e.name === 'broken')!;
    assert.equal(entry.state, 'UNAVAILABLE');
    assert.ok(entry.reason && entry.reason.length > 0);
    assert.deepEqual(await infer('a'), { version: '1', out: [10, 11, 12, 13] });
    assert.equal(await http.isServerReady(), false, 'strict readiness: a model the server was asked to serve failed');
    await http.unloadModel('broken');
    assert.equal(await http.isServerReady(), true);
  });

  it('refusals: unknown model (500), bad names, unknown parameters, non-string values, bad JSON, a repository name (501)', async () => {
    let reply = await post('/v2/repository/models/nope/load');
    assert.equal(reply.status, 500);
    assert.match((jsonBody(reply) as { error: string }).error, /^failed to load 'nope', failed to poll from model repository/);

    // (`..` itself never reaches a server: URL parsers resolve it.)
    for (const [segment, name] of [['a%2Fb', 'a/b'], ['%20%20', '  ']]) {
      reply = await post(`/v2/repository/models/${segment}/load`);
      assert.equal(reply.status, 400, segment);
      assert.equal((jsonBody(reply) as { error: string }).error.startsWith(`invalid model name '${name}'`), true, segment);
    }

    reply = await post('/v2/repository/models/a/load', { parameters: { colour: 'blue' } });
    assert.equal(reply.status, 400);
    assert.match((jsonBody(reply) as { error: string }).error, /^Unrecognized load parameter 'colour'/);

    reply = await post('/v2/repository/models/a/load', { parameters: { config: { name: 'a' } } });
    assert.equal(reply.status, 400);
    assert.match((jsonBody(reply) as { error: string }).error, /'config' of model 'a' must be a string/);

    // A configuration override that is not JSON: Triton's repository poll fails (500).
    reply = await post('/v2/repository/models/a/load', { parameters: { config: '{"name": "a"', 'file:1/model.onnx': 'AAAA' } });
    assert.equal(reply.status, 500);
    assert.match((jsonBody(reply) as { error: string }).error, /^failed to load 'a', failed to poll from model repository: model configuration JSON: /);

    reply = await post('/v2/repository/models/a/load', '{"parameters": ');
    assert.equal(reply.status, 400);
    assert.match((jsonBody(reply) as { error: string }).error, /failed to parse the request JSON buffer/);

    reply = await post('/v2/repository/models/a/unload', { parameters: { unload_dependents: 'yes' } });
    assert.equal(reply.status, 400);

    for (const path of ['/v2/repository/main/index', '/v2/repository/main/models/a/load', '/v2/repository/main/models/a/unload']) {
      reply = await post(path);
      assert.equal(reply.status, 501, path);
      assert.deepEqual(jsonBody(reply), { error: "'repository_name' specification is not supported" });
    }
    assert.deepEqual(await infer('a'), { version: '1', out: [10, 11, 12, 13] });
  });

  it('config override: used instead of the file, for every load with it; the next load without it goes back', async () => {
    await http.loadModel('a', { config: taggedConfigJson('a', { ...ONE, parameters: { origin: { string_value: 'override' } } }) });
    const config = (await http.modelConfig('a')) as { parameters: Record<string, { string_value: string }> };
    assert.equal(config.parameters.origin!.string_value, 'override');
    const effective = jsonBody(await httpRequest(`${srv.url}/v2/models/a/config`)) as { parameters: Record<string, unknown> };
    assert.ok('origin' in effective.parameters);

    // A configuration the model does not fit: refused, and the override copy keeps serving.
    await assert.rejects(
      http.loadModel('a', { config: taggedConfigJson('a', { ...ONE, max_batch_size: 0 }) }),
      (err: InferenceServerError) => err.status === 400 && /load failed for model 'a'/.test(err.message),
    );
    assert.deepEqual(await infer('a'), { version: '1', out: [10, 11, 12, 13] });

    await http.loadModel('a');
    const back = (await http.modelConfig('a')) as { parameters: Record<string, unknown> };
    assert.equal('origin' in back.parameters, false);
  });

  it('file overrides: the model is loaded from the files sent, in a directory of the server own, removed once unloaded', async () => {
    const before = await overrideDirs();
    const files = { '1/model.onnx': taggedOnnx(77) };
    await assert.rejects(http.loadModel('sent', { files }), (err: InferenceServerError) => {
      // Triton's answer: its repository poll fails (500), Nereid's reason after its text.
      assert.equal(err.status, 500);
      assert.match(err.message, /^failed to load 'sent', failed to poll from model repository: Load parameter 'config' must be specified for model file override/);
      return true;
    });
    await http.loadModel('sent', { config: taggedConfigJson('sent', ONE), files });
    assert.deepEqual(await infer('sent'), { version: '1', out: [77, 78, 79, 80] });
    assert.equal((await overrideDirs()).length, before.length + 1);
    assert.equal(existsSync(join(repo, 'sent')), false, 'nothing is written into the repository');

    // Megabytes of override files in one JSON body (base64): a model's weights, say.
    await http.loadModel('sent', { config: taggedConfigJson('sent', ONE), files: { '1/model.onnx': taggedOnnx(66), '1/weights.bin': new Uint8Array(8 << 20).fill(7) } });
    assert.deepEqual(await infer('sent'), { version: '1', out: [66, 67, 68, 69] });

    // Replacing the files of a model that is in the repository.
    await http.loadModel('a', { config: taggedConfigJson('a', ONE), files: { '1/model.onnx': taggedOnnx(55) } });
    assert.deepEqual(await infer('a'), { version: '1', out: [55, 56, 57, 58] });
    await http.loadModel('a');
    assert.deepEqual(await infer('a'), { version: '1', out: [10, 11, 12, 13] });

    await http.unloadModel('sent');
    for (let i = 0; i < 100 && (await overrideDirs()).length > before.length; i++) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.deepEqual(await overrideDirs(), before);
  });

  it('file overrides that would leave their directory are refused, and nothing is written', async () => {
    const marker = `nereid-escape-${process.pid}`;
    const config = taggedConfigJson('sneaky', ONE);
    const before = await overrideDirs();
    for (const path of [`../${marker}`, `1/../../${marker}`, `/tmp/${marker}`, `1/./model.onnx`, `1\\..\\..\\${marker}`]) {
      const reply = await post('/v2/repository/models/sneaky/load', {
        parameters: { config, [`file:${path}`]: Buffer.from('x').toString('base64'), 'file:1/model.onnx': Buffer.from(taggedOnnx(1)).toString('base64') },
      });
      assert.equal(reply.status, 500, path);
      assert.match((jsonBody(reply) as { error: string }).error, /^failed to load 'sneaky', failed to poll from model repository: file override 'file:.*' is refused: /, path);
      assert.equal(existsSync(join(tmpdir(), marker)), false, path);
      assert.equal(existsSync(join('/tmp', marker)), false, path);
    }
    assert.deepEqual(await overrideDirs(), before, 'refused overrides leave no directory behind');
    assert.deepEqual(
      (await http.repositoryIndex()).filter((e) => e.name === 'sneaky'),
      [],
      'a refused override records nothing',
    );
    assert.deepEqual(await infer('a'), { version: '1', out: [10, 11, 12, 13] });
  });
});

describe('gRPC', () => {
  it('RepositoryIndex: one ModelIndex per version, empty strings for absent fields; ready filters', async () => {
    const r = await unary(raw, 'RepositoryIndex', { repository_name: '', ready: false });
    const b = r.models.find((m) => m.name === 'b' && m.version === '1')!;
    assert.deepEqual(b, { name: 'b', version: '1', state: 'UNAVAILABLE', reason: 'unloaded' });
    assert.deepEqual(
      (await grpc.repositoryIndex({ ready: true })).map((e) => `${e.name}/${e.version}`),
      ['a/1'],
    );
  });

  it('RepositoryModelLoad with config and raw file bytes, then RepositoryModelUnload', async () => {
    await grpc.loadModel('viagrpc', { config: taggedConfigJson('viagrpc', ONE), files: { '1/model.onnx': taggedOnnx(3) } });
    assert.deepEqual(await infer('viagrpc'), { version: '1', out: [3, 4, 5, 6] });
    await grpc.loadModel('b');
    assert.deepEqual(await infer('b'), { version: '2', out: [21, 22, 23, 24] });
    await grpc.unloadModel('viagrpc');
    await grpc.unloadModel('b', { unloadDependents: true });
    assert.deepEqual((await grpc.repositoryIndex({ ready: true })).map((e) => e.name), ['a']);
  });

  it('refusals: repository_name (UNIMPLEMENTED), wrong parameter choices and unknown keys (INVALID_ARGUMENT), unknown model (INTERNAL)', async () => {
    let err = await unaryError(raw, 'RepositoryIndex', { repository_name: 'main', ready: false });
    assertStatus(err, status.UNIMPLEMENTED, "'repository_name' specification is not supported");
    err = await unaryError(raw, 'RepositoryModelLoad', { repository_name: 'main', model_name: 'a', parameters: {} });
    assertStatus(err, status.UNIMPLEMENTED);
    err = await unaryError(raw, 'RepositoryModelUnload', { repository_name: 'main', model_name: 'a', parameters: {} });
    assertStatus(err, status.UNIMPLEMENTED);

    err = await unaryError(raw, 'RepositoryModelLoad', { repository_name: '', model_name: 'a', parameters: { config: { bytes_param: new Uint8Array(2) } } });
    assertStatus(err, status.INVALID_ARGUMENT, "load parameter 'config' of model 'a' must be a string");
    err = await unaryError(raw, 'RepositoryModelLoad', {
      repository_name: '',
      model_name: 'a',
      parameters: { config: { string_param: taggedConfigJson('a', ONE) }, 'file:1/model.onnx': { string_param: 'AAAA' } },
    });
    assertStatus(err, status.INVALID_ARGUMENT, 'must be bytes_param');
    err = await unaryError(raw, 'RepositoryModelLoad', { repository_name: '', model_name: 'a', parameters: { speed: { int64_param: 3n } } });
    assertStatus(err, status.INVALID_ARGUMENT, "Unrecognized load parameter 'speed'");
    err = await unaryError(raw, 'RepositoryModelLoad', {
      repository_name: '',
      model_name: 'x',
      parameters: { config: { string_param: taggedConfigJson('x', ONE) }, 'file:../x': { bytes_param: new Uint8Array(1) } },
    });
    assertStatus(err, status.INTERNAL, "failed to load 'x', failed to poll from model repository: file override 'file:../x' is refused");
    err = await unaryError(raw, 'RepositoryModelUnload', { repository_name: '', model_name: 'a', parameters: { unload_dependents: { string_param: 'true' } } });
    assertStatus(err, status.INVALID_ARGUMENT, 'must be a bool');
    err = await unaryError(raw, 'RepositoryModelLoad', { repository_name: '', model_name: 'nope', parameters: {} });
    assertStatus(err, status.INTERNAL, "failed to load 'nope', failed to poll from model repository");
    assert.deepEqual(await infer('a'), { version: '1', out: [10, 11, 12, 13] });
  });
});

describe('control mode none', () => {
  let none: RunningGrpcServer;
  let noneRaw: Client;
  before(async () => {
    none = await startServer({ modelRepositories: [repo], grpc: true, strictReadiness: false });
    noneRaw = inferenceClient(none.grpcTarget);
  });
  after(async () => {
    noneRaw?.close();
    await none?.stop();
  });

  it('the index works; load and unload are refused with 503 / UNAVAILABLE', async () => {
    const index = jsonBody(await httpRequest(`${none.url}/v2/repository/index`, { method: 'POST' })) as { name: string; state: string }[];
    assert.deepEqual(index.map((e) => `${e.name}:${e.state}`), ['a:READY', 'b:READY', 'broken:UNAVAILABLE']);
    for (const op of ['load', 'unload']) {
      const reply = await httpRequest(`${none.url}/v2/repository/models/a/${op}`, { method: 'POST' });
      assert.equal(reply.status, 503);
      assert.deepEqual(jsonBody(reply), { error: 'explicit model load / unload is not allowed if polling is enabled' });
    }
    const err = await unaryError(noneRaw, 'RepositoryModelLoad', { repository_name: '', model_name: 'a', parameters: {} });
    assertStatus(err, status.UNAVAILABLE, 'explicit model load / unload is not allowed if polling is enabled');
  });
});
