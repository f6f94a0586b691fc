/**
 * The non-inference RPCs of the gRPC frontend over real sockets (protocol.md §4.2, §4.4, §4.8,
 * §7.4): health, readiness, server and model metadata, model configuration, grpc.health.v1.
 */
import assert from 'node:assert/strict';
import { status, type Client } from '@grpc/grpc-js';
import { after, before, describe, it } from 'node:test';
import { healthPb } from '@nereid/protocol';
import { NEREID_VERSION } from '@nereid/server';
import { simpleModel } from '@nereid/testkit';
import {
  assertStatus,
  collectStream,
  healthCheck,
  healthClient,
  inferenceClient,
  openStream,
  simpleRequest,
  unary,
  unaryError,
} from '../../helpers/grpc.js';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';

const NOT_ONNX = new TextEncoder().encode('this is not an ONNX model');

let repo: string;
let srv: RunningGrpcServer;
let client: Client;
let health: Client;

before(async () => {
  repo = await makeRepository({
    simple: modelFiles(simpleModel()),
    multi: modelFiles(simpleModel({ name: 'multi' }), {
      config: simpleModel({ name: 'multi' }).config + 'version_policy: { all: { } }\n',
      extra: { '2/model.onnx': simpleModel({ name: 'multi' }).onnx.bytes },
    }),
  });
  srv = await startServer({ modelRepositories: [repo], id: 'nereid-grpc', grpc: true });
  client = inferenceClient(srv.grpcTarget);
  health = healthClient(srv.grpcTarget);
});

after(async () => {
  client?.close();
  health?.close();
  await srv?.stop();
  if (repo) await removeDir(repo);
});

describe('health and readiness', () => {
  it('ServerLive and ServerReady are true', async () => {
    assert.deepEqual(await unary(client, 'ServerLive', {}), { live: true });
    assert.deepEqual(await unary(client, 'ServerReady', {}), { ready: true });
  });

  it('ModelReady is true for a ready model, with or without a version', async () => {
    assert.deepEqual(await unary(client, 'ModelReady', { name: 'simple', version: '' }), { ready: true });
    assert.deepEqual(await unary(client, 'ModelReady', { name: 'simple', version: '1' }), { ready: true });
    assert.deepEqual(await unary(client, 'ModelReady', { name: 'multi', version: '2' }), { ready: true });
  });

  it('ModelReady for a name no repository holds and for an absent version of a known model is ready=false, as Triton answers', async () => {
    assert.deepEqual(await unary(client, 'ModelReady', { name: 'nope', version: '' }), { ready: false });
    assert.deepEqual(await unary(client, 'ModelReady', { name: 'simple', version: '7' }), { ready: false });
  });

  it('a version that is not an integer, or is negative, is INVALID_ARGUMENT for ModelReady, ModelMetadata and ModelConfig', async () => {
    for (const version of ['one', '-1', '1.0']) {
      for (const rpc of ['ModelReady', 'ModelMetadata', 'ModelConfig'] as const) {
        const err = await unaryError(client, rpc, { name: 'simple', version });
        assertStatus(err, status.INVALID_ARGUMENT, `'${version}'`, 'integral value');
        // Triton's text first.
        const start = version === '-1' ? "invalid model version specified '-1'" : `failed to get model version from specified version string '${version}'`;
        assert.ok(err.details.startsWith(start), err.details);
      }
    }
  });

  it('grpc.health.v1.Health/Check is SERVING', async () => {
    assert.deepEqual(await healthCheck(health), { status: healthPb.HealthCheckResponse_ServingStatus.SERVING });
  });
});

describe('metadata', () => {
  it('ServerMetadata: name (the id option), version and extensions', async () => {
    const m = await unary(client, 'ServerMetadata', {});
    assert.equal(m.name, 'nereid-grpc');
    assert.equal(m.version, NEREID_VERSION);
    assert.deepEqual(m.extensions, srv.server.metadata().extensions);
    for (const ext of ['classification', 'model_configuration', 'binary_tensor_data', 'parameters']) {
      assert.ok(m.extensions.includes(ext), ext);
    }
  });

  it('ModelMetadata: versions, platform and shapes with a -1 batch dimension as int64', async () => {
    const m = await unary(client, 'ModelMetadata', { name: 'simple', version: '' });
    assert.deepEqual(m, {
      name: 'simple',
      versions: ['1'],
      platform: 'onnxruntime_onnx',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [-1n, 16n] },
        { name: 'INPUT1', datatype: 'INT32', shape: [-1n, 16n] },
      ],
      outputs: [
        { name: 'OUTPUT0', datatype: 'INT32', shape: [-1n, 16n] },
        { name: 'OUTPUT1', datatype: 'INT32', shape: [-1n, 16n] },
      ],
    });
  });

  it('ModelMetadata lists every ready version, as strings', async () => {
    const m = await unary(client, 'ModelMetadata', { name: 'multi', version: '' });
    assert.deepEqual([...m.versions].sort(), ['1', '2']);
    const err = await unaryError(client, 'ModelMetadata', { name: 'multi', version: '3' });
    assertStatus(err, status.NOT_FOUND, "'multi' version 3 is not found");
  });

  it('ModelConfig decodes to the normalised config', async () => {
    const { config } = await unary(client, 'ModelConfig', { name: 'simple', version: '' });
    assert.ok(config);
    assert.equal(config.name, 'simple');
    assert.equal(config.platform, 'onnxruntime_onnx');
    assert.equal(config.backend, 'onnxruntime');
    assert.equal(config.max_batch_size, 8);
    assert.deepEqual(
      config.input.map((t) => [t.name, t.data_type, t.dims]),
      [
        ['INPUT0', 'TYPE_INT32', [16]],
        ['INPUT1', 'TYPE_INT32', [16]],
      ],
    );
    assert.deepEqual(
      config.output.map((t) => [t.name, t.data_type, t.dims]),
      [
        ['OUTPUT0', 'TYPE_INT32', [16]],
        ['OUTPUT1', 'TYPE_INT32', [16]],
      ],
    );
    assert.equal(config.instance_group.length, 1);
    assert.equal(config.instance_group[0]!.kind, 'KIND_CPU');
    assert.equal(config.instance_group[0]!.count, 2);
    assert.equal(config.instance_group[0]!.name, 'simple');
    assert.equal(config.version_policy?.latest?.num_versions, 1);
    assert.equal(config.version_policy?.all, undefined);
    assert.equal(config.default_model_filename, 'model.onnx');
  });

  it('ModelConfig of an unknown model is NOT_FOUND', async () => {
    const err = await unaryError(client, 'ModelConfig', { name: 'nope', version: '' });
    assertStatus(err, status.NOT_FOUND, "Request for unknown model: 'nope' is not found");
  });
});

describe('strict readiness with a model that failed to load', () => {
  let failingRepo: string;
  let failing: RunningGrpcServer;
  let failingClient: Client;
  let failingHealth: Client;

  before(async () => {
    failingRepo = await makeRepository({
      simple: modelFiles(simpleModel()),
      broken: { 'config.pbtxt': simpleModel({ name: 'broken' }).config!, '1/model.onnx': NOT_ONNX },
    });
    failing = await startServer({ modelRepositories: [failingRepo], grpc: true });
    failingClient = inferenceClient(failing.grpcTarget);
    failingHealth = healthClient(failing.grpcTarget);
  });

  after(async () => {
    failingClient?.close();
    failingHealth?.close();
    await failing?.stop();
    if (failingRepo) await removeDir(failingRepo);
  });

  it('Health/Check is NOT_SERVING and ServerReady false, while ServerLive stays true', async () => {
    assert.deepEqual(await healthCheck(failingHealth), { status: healthPb.HealthCheckResponse_ServingStatus.NOT_SERVING });
    assert.deepEqual(await unary(failingClient, 'ServerReady', {}), { ready: false });
    assert.deepEqual(await unary(failingClient, 'ServerLive', {}), { live: true });
  });

  it('ModelReady: the good model is ready; the failed model and its failed version are not (OK status)', async () => {
    assert.deepEqual(await unary(failingClient, 'ModelReady', { name: 'simple', version: '' }), { ready: true });
    assert.deepEqual(await unary(failingClient, 'ModelReady', { name: 'broken', version: '1' }), { ready: false });
    assert.deepEqual(await unary(failingClient, 'ModelReady', { name: 'broken', version: '' }), { ready: false });
  });
});

describe('a frontend that stopped accepting (shutdown)', () => {
  let stoppingRepo: string;
  let stopping: RunningGrpcServer;
  let stoppingClient: Client;

  before(async () => {
    stoppingRepo = await makeRepository({ simple: modelFiles(simpleModel()) });
    stopping = await startServer({ modelRepositories: [stoppingRepo], grpc: true });
    stoppingClient = inferenceClient(stopping.grpcTarget);
    stopping.grpc.stopAccepting();
  });

  after(async () => {
    stoppingClient?.close();
    await stopping?.stop();
    if (stoppingRepo) await removeDir(stoppingRepo);
  });

  it('refuses ModelInfer and ModelStreamInfer with UNAVAILABLE; metadata RPCs still answer', async () => {
    const message = 'GRPC server is shutting down and has stopped accepting new requests.';
    const err = await unaryError(stoppingClient, 'ModelInfer', simpleRequest(1, 0).request);
    assertStatus(err, status.UNAVAILABLE, message);
    const stream = openStream(stoppingClient);
    const done = collectStream(stream);
    stream.write(simpleRequest(1, 0).request);
    stream.end();
    const result = await done;
    assertStatus(result.status, status.UNAVAILABLE, message);
    assert.deepEqual(result.responses, []);
    assert.deepEqual(await unary(stoppingClient, 'ServerLive', {}), { live: true });
    assert.equal((await unary(stoppingClient, 'ModelMetadata', { name: 'simple', version: '' })).name, 'simple');
  });
});

