/**
 * Config auto-complete at load (models-and-scheduling.md §1.5, §3.1, §3.4): models without a
 * config.pbtxt, or with an incomplete one, and what `autoCompleteConfig: false`
 * (`--disable-auto-complete-config`) does to them.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { fixedFirstDimModel, identityModel, modelConfigText, scalarOutputModel, simpleModel } from '@nereid/testkit';
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
  type ModelFiles,
  type RunningServer,
} from '../../helpers/harness.js';

const SIMPLE_OUTPUTS = [
  { name: 'OUTPUT0', dataType: 'INT32', dims: [16] },
  { name: 'OUTPUT1', dataType: 'INT32', dims: [16] },
] as const;

/** A config with outputs but no inputs: auto-complete fills the inputs in. */
const NO_INPUTS_CONFIG = modelConfigText({ name: 'no_inputs', maxBatchSize: 8, inputs: [], outputs: SIMPLE_OUTPUTS });

function modelOnly(bytes: Uint8Array): ModelFiles {
  return { '1/model.onnx': bytes };
}

let repo: string;

before(async () => {
  repo = await makeRepository({
    auto_simple: modelOnly(simpleModel().onnx.bytes),
    auto_fixed: modelOnly(fixedFirstDimModel().onnx.bytes),
    auto_scalar: modelOnly(scalarOutputModel().onnx.bytes),
    auto_scalar_batch: modelOnly(identityModel('FP32', [-1]).onnx.bytes),
    no_inputs: { 'config.pbtxt': NO_INPUTS_CONFIG, '1/model.onnx': simpleModel().onnx.bytes },
    complete: { 'config.pbtxt': simpleModel({ name: 'complete' }).config!, '1/model.onnx': simpleModel().onnx.bytes },
  });
});

after(async () => {
  await removeDir(repo);
});

async function configOf(srv: RunningServer, model: string): Promise<Record<string, unknown>> {
  const reply = await httpRequest(`${srv.url}/v2/models/${model}/config`);
  assert.equal(reply.status, 200, reply.text);
  return jsonBody(reply) as Record<string, unknown>;
}

function tensors(config: Record<string, unknown>, key: 'input' | 'output'): Record<string, unknown>[] {
  return config[key] as Record<string, unknown>[];
}

describe('auto-complete enabled (default)', () => {
  let srv: RunningServer;
  before(async () => {
    srv = await startServer({ modelRepositories: [repo] });
  });
  after(async () => {
    await srv?.stop();
  });

  it('loads every model, with or without a config.pbtxt', () => {
    assert.deepEqual(
      srv.server.modelStatuses().map((s) => [s.name, s.version, s.state, s.reason]),
      ['auto_fixed', 'auto_scalar', 'auto_scalar_batch', 'auto_simple', 'complete', 'no_inputs'].map((m) => [m, '1', 'READY', '']),
    );
  });

  it('completes a batchable model: max_batch_size 4 and dynamic batching preferring 4', async () => {
    const config = await configOf(srv, 'auto_simple');
    assert.equal(config.name, 'auto_simple');
    assert.equal(config.platform, 'onnxruntime_onnx');
    assert.equal(config.backend, 'onnxruntime');
    assert.equal(config.max_batch_size, 4);
    assert.deepEqual(config.dynamic_batching, {
      preferred_batch_size: [4],
      max_queue_delay_microseconds: 0,
      preserve_ordering: false,
      priority_levels: 0,
      default_priority_level: 0,
      priority_queue_policy: {},
    });
    assert.deepEqual(
      tensors(config, 'input').map((t) => [t.name, t.data_type, t.dims, t.format]),
      [
        ['INPUT0', 'TYPE_INT32', [16], 'FORMAT_NONE'],
        ['INPUT1', 'TYPE_INT32', [16], 'FORMAT_NONE'],
      ],
    );
    assert.deepEqual(
      tensors(config, 'output').map((t) => [t.name, t.data_type, t.dims, t.label_filename]),
      [
        ['OUTPUT0', 'TYPE_INT32', [16], ''],
        ['OUTPUT1', 'TYPE_INT32', [16], ''],
      ],
    );
    assert.deepEqual((config.instance_group as Record<string, unknown>[]).map((g) => [g.name, g.kind, g.count]), [['auto_simple', 'KIND_CPU', 2]]);
  });

  it('serves the completed model up to batch 4, and not beyond', async () => {
    const c = simpleCase(4, 9);
    let reply = await inferJson(srv.url, 'auto_simple', c.inputs);
    assert.equal(reply.status, 200, reply.text);
    const body = jsonBody(reply) as JsonInferResponse;
    assert.deepEqual(outputNamed(body, 'OUTPUT0').shape, [4, 16]);
    assert.deepEqual(outputNamed(body, 'OUTPUT0').data, c.sum);
    assert.deepEqual(outputNamed(body, 'OUTPUT1').data, c.difference);
    reply = await inferJson(srv.url, 'auto_simple', simpleCase(5).inputs);
    assert.equal(reply.status, 400);
    assert.match((jsonBody(reply) as { error: string }).error, /batch-size must be <= 4/);
  });

  it('gives a model with a fixed first dimension max_batch_size 0 and its full shape', async () => {
    const config = await configOf(srv, 'auto_fixed');
    assert.equal(config.max_batch_size, 0);
    assert.equal(config.dynamic_batching, undefined);
    assert.deepEqual(tensors(config, 'input').map((t) => [t.name, t.dims]), [['INPUT0', [2, 8]]]);
    assert.deepEqual(tensors(config, 'output').map((t) => [t.name, t.dims]), [['OUTPUT0', [2, 8]]]);
    const meta = jsonBody(await httpRequest(`${srv.url}/v2/models/auto_fixed`)) as { inputs: { shape: number[] }[] };
    assert.deepEqual(meta.inputs[0]!.shape, [2, 8]);

    const data = Array.from({ length: 16 }, (_, i) => i / 4 - 1);
    const reply = await inferJson(srv.url, 'auto_fixed', [{ name: 'INPUT0', datatype: 'FP32', shape: [2, 8], data }]);
    assert.equal(reply.status, 200, reply.text);
    const out = outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0');
    assert.deepEqual(out.shape, [2, 8]);
    assert.deepEqual(out.data, data.map((x) => 2 * x));
  });

  it('gives a scalar output of a non-batching model dims [1] without a reshape', async () => {
    const config = await configOf(srv, 'auto_scalar');
    assert.equal(config.max_batch_size, 0);
    const [output] = tensors(config, 'output');
    assert.deepEqual(output!.dims, [1]);
    assert.equal(output!.reshape, undefined);
    const reply = await inferJson(srv.url, 'auto_scalar', [{ name: 'INPUT0', datatype: 'FP32', shape: [4], data: [1, 2, 3, 4.5] }]);
    assert.equal(reply.status, 200, reply.text);
    const out = outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0');
    assert.deepEqual(out.shape, [1]);
    assert.deepEqual(out.data, [10.5]);
  });

  it('gives per-item scalars of a batching model dims [1] with reshape { shape: [] }, and serves them', async () => {
    const config = await configOf(srv, 'auto_scalar_batch');
    assert.equal(config.max_batch_size, 4);
    for (const t of [...tensors(config, 'input'), ...tensors(config, 'output')]) {
      assert.deepEqual(t.dims, [1]);
      assert.deepEqual(t.reshape, { shape: [] });
    }
    const meta = jsonBody(await httpRequest(`${srv.url}/v2/models/auto_scalar_batch`)) as { inputs: { shape: number[] }[] };
    assert.deepEqual(meta.inputs[0]!.shape, [-1, 1]);
    const reply = await inferJson(srv.url, 'auto_scalar_batch', [{ name: 'INPUT0', datatype: 'FP32', shape: [3, 1], data: [1.5, -2, 8] }]);
    assert.equal(reply.status, 200, reply.text);
    const out = outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0');
    assert.deepEqual(out.shape, [3, 1]);
    assert.deepEqual(out.data, [1.5, -2, 8]);
  });

  it('fills in the inputs a config leaves out, keeping what it gives', async () => {
    const config = await configOf(srv, 'no_inputs');
    assert.equal(config.max_batch_size, 8);
    assert.equal(config.dynamic_batching, undefined);
    assert.deepEqual(tensors(config, 'input').map((t) => [t.name, t.data_type, t.dims]), [
      ['INPUT0', 'TYPE_INT32', [16]],
      ['INPUT1', 'TYPE_INT32', [16]],
    ]);
    const c = simpleCase(8, 2);
    const reply = await inferJson(srv.url, 'no_inputs', c.inputs);
    assert.equal(reply.status, 200, reply.text);
    assert.deepEqual(outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT1').data, c.difference);
  });
});

describe('auto-complete disabled (autoCompleteConfig: false)', () => {
  let srv: RunningServer;
  before(async () => {
    srv = await startServer({ modelRepositories: [repo], autoCompleteConfig: false });
  });
  after(async () => {
    await srv?.stop();
  });

  it('fails every model without a config.pbtxt, saying auto-complete is disabled', () => {
    const statuses = new Map(srv.server.modelStatuses().map((s) => [s.name, s]));
    for (const name of ['auto_simple', 'auto_fixed', 'auto_scalar', 'auto_scalar_batch']) {
      const s = statuses.get(name)!;
      assert.equal(s.state, 'UNAVAILABLE', name);
      assert.match(s.reason, new RegExp(`^model '${name}': '.*config\\.pbtxt' does not exist, and auto-complete is disabled`), s.reason);
    }
  });

  it('fails a config without inputs, naming what is missing', () => {
    const s = srv.server.modelStatuses().find((x) => x.name === 'no_inputs')!;
    assert.equal(s.state, 'UNAVAILABLE');
    assert.match(s.reason, /'no_inputs', configuration expects 0 inputs, model provides 2: model input\(s\) 'INPUT0', 'INPUT1' are not in the configuration/);
  });

  it('still serves a complete config', async () => {
    const c = simpleCase(1);
    const reply = await inferJson(srv.url, 'complete', c.inputs);
    assert.equal(reply.status, 200, reply.text);
    assert.deepEqual(outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0').data, c.sum);
    assert.equal((await httpRequest(`${srv.url}/v2/models/auto_simple/ready`)).status, 400);
    const reason = await httpRequest(`${srv.url}/v2/models/auto_simple`);
    assert.equal(reason.status, 404);
    assert.match((jsonBody(reason) as { error: string }).error, /has no available versions.*auto-complete is disabled/);
  });
});
