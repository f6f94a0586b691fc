/**
 * Models that fail to load, and why (models-and-scheduling.md §1.1, §1.4, §1.6, §3.4, §3.6): every
 * failure is recorded with a reason that names the model and the offending tensor or field, and
 * the models that did load keep serving.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { ModelVersionStatus } from '@nereid/server';
import { fixedFirstDimModel, modelConfigText, simpleModel, type ConfigTensor } from '@nereid/testkit';
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

const ONNX = simpleModel().onnx.bytes;
const INT32_16 = (name: string): ConfigTensor => ({ name, dataType: 'INT32', dims: [16] });
const INPUTS = [INT32_16('INPUT0'), INT32_16('INPUT1')];
const OUTPUTS = [INT32_16('OUTPUT0'), INT32_16('OUTPUT1')];
/** One instance per model keeps the load light. */
const ONE_INSTANCE = 'instance_group [ { kind: KIND_CPU, count: 1 } ]';

/** A `simple` config whose OUTPUT0 names `labels` as its label file. */
function withLabelFile(name: string, labels: string): string {
  return modelConfigText({ name, maxBatchSize: 8, inputs: INPUTS, outputs: OUTPUTS, extra: ONE_INSTANCE }).replace(
    '    name: "OUTPUT0"\n',
    `    name: "OUTPUT0"\n    label_filename: "${labels}"\n`,
  );
}

/** A `simple` model directory whose config has the given tensors (and extra text). */
function simpleWith(
  name: string,
  options: { inputs?: readonly ConfigTensor[]; outputs?: readonly ConfigTensor[]; extra?: string; maxBatchSize?: number } = {},
): ModelFiles {
  const config = modelConfigText({
    name,
    maxBatchSize: options.maxBatchSize ?? 8,
    inputs: options.inputs ?? INPUTS,
    outputs: options.outputs ?? OUTPUTS,
    extra: options.extra ?? ONE_INSTANCE,
  });
  return { 'config.pbtxt': config, '1/model.onnx': ONNX };
}

let repo: string;
let srv: RunningServer;
let statuses: Map<string, ModelVersionStatus>;

before(async () => {
  repo = await makeRepository({
    good: simpleWith('good'),
    wrong_datatype: simpleWith('wrong_datatype', { inputs: [{ name: 'INPUT0', dataType: 'FP32', dims: [16] }, INT32_16('INPUT1')] }),
    wrong_output_datatype: simpleWith('wrong_output_datatype', { outputs: [INT32_16('OUTPUT0'), { name: 'OUTPUT1', dataType: 'INT64', dims: [16] }] }),
    wrong_dims: simpleWith('wrong_dims', { inputs: [INT32_16('INPUT0'), { name: 'INPUT1', dataType: 'INT32', dims: [8] }] }),
    wrong_output_dims: simpleWith('wrong_output_dims', { outputs: [{ name: 'OUTPUT0', dataType: 'INT32', dims: [4, 4] }, INT32_16('OUTPUT1')] }),
    batch_in_dims: simpleWith('batch_in_dims', {
      inputs: [{ name: 'INPUT0', dataType: 'INT32', dims: [-1, 16] }, INT32_16('INPUT1')],
    }),
    unknown_input: simpleWith('unknown_input', { inputs: [...INPUTS, INT32_16('INPUT2')] }),
    unknown_output: simpleWith('unknown_output', { outputs: [...OUTPUTS, INT32_16('OUTPUT9')] }),
    missing_input: simpleWith('missing_input', { inputs: [INT32_16('INPUT0')] }),
    renamed_input: simpleWith('renamed_input', { inputs: [INT32_16('INPUT0'), INT32_16('INPUT_B')] }),
    fixed_batching: {
      'config.pbtxt': 'name: "fixed_batching"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n',
      '1/model.onnx': fixedFirstDimModel().onnx.bytes,
    },
    wrong_name: { 'config.pbtxt': simpleModel({ name: 'another_name' }).config!, '1/model.onnx': ONNX },
    unparsable: { 'config.pbtxt': 'name: "unparsable"\nmax_batch_size: 8\ninput [\n  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 }\n]\n', '1/model.onnx': ONNX },
    unknown_field: { 'config.pbtxt': 'name: "unknown_field"\nplatform: "onnxruntime_onnx"\nmax_batch_sizes: 8\n', '1/model.onnx': ONNX },
    unknown_backend: { 'config.pbtxt': 'name: "unknown_backend"\nbackend: "mybackend"\nmax_batch_size: 8\n', '1/model.mybackend': 'x' },
    gpu_group: simpleWith('gpu_group', { extra: 'instance_group [ { kind: KIND_GPU, count: 1 } ]' }),
    label_outside: {
      'config.pbtxt': withLabelFile('label_outside', '../labels.txt'),
      '1/model.onnx': ONNX,
    },
    label_missing: { 'config.pbtxt': withLabelFile('label_missing', 'labels.txt'), '1/model.onnx': ONNX },
    no_version: { 'config.pbtxt': simpleModel({ name: 'no_version' }).config! },
    missing_file: { 'config.pbtxt': simpleModel({ name: 'missing_file' }).config!, '1/other.onnx': ONNX },
    no_backend: { '1/weights.bin': 'x' },
  });
  // A label file just outside the model directory, which the config must not reach.
  await writeFile(join(repo, 'labels.txt'), 'a\nb\n');
  srv = await startServer({ modelRepositories: [repo] });
  statuses = new Map(srv.server.modelStatuses().map((s) => [s.name, s]));
});

after(async () => {
  await srv?.stop();
  await removeDir(repo);
});

/** The reason a model failed; asserts it did. */
function failure(name: string): string {
  const s = statuses.get(name);
  assert.ok(s, `no status for '${name}'`);
  assert.equal(s.state, 'UNAVAILABLE', `${name}: ${s.reason}`);
  assert.ok(s.reason.length > 0, `${name} has no reason`);
  return s.reason;
}

describe('load failures', () => {
  it('the good model loads and serves while all the others fail', async () => {
    assert.equal(statuses.get('good')!.state, 'READY');
    const failed = [...statuses.values()].filter((s) => s.state !== 'READY').map((s) => s.name);
    assert.equal(failed.length, statuses.size - 1, `not failed: ${[...statuses.keys()].filter((n) => !failed.includes(n)).join(', ')}`);
    const c = simpleCase(3, 1);
    const reply = await inferJson(srv.url, 'good', c.inputs);
    assert.equal(reply.status, 200, reply.text);
    assert.deepEqual(outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0').data, c.sum);
    assert.deepEqual(
      srv.server.startReport.failures.map((f) => f.name),
      [...statuses.keys()].filter((n) => n !== 'good'),
    );
  });

  it('a wrong input data type names the tensor and both types', () => {
    const reason = failure('wrong_datatype');
    assert.match(reason, /'wrong_datatype'/);
    assert.match(reason, /input 'INPUT0'/);
    assert.match(reason, /TYPE_FP32/);
    assert.match(reason, /TYPE_INT32/);
  });

  it('a wrong output data type names the tensor', () => {
    const reason = failure('wrong_output_datatype');
    assert.match(reason, /output 'OUTPUT1'/);
    assert.match(reason, /TYPE_INT64/);
  });

  it('wrong dims name the tensor, the dims and the model shape', () => {
    const reason = failure('wrong_dims');
    assert.match(reason, /input 'INPUT1'/);
    assert.match(reason, /\[8\]/);
    assert.match(reason, /\[-1,16\]/);
    assert.match(failure('wrong_output_dims'), /output 'OUTPUT0'.*\[4,4\]/);
  });

  it('dims that include the batch dimension are explained', () => {
    const reason = failure('batch_in_dims');
    assert.match(reason, /input 'INPUT0'/);
    assert.match(reason, /exclude the batch dimension/);
  });

  it('an input the model does not have is named, with the allowed ones', () => {
    const reason = failure('unknown_input');
    assert.match(reason, /'INPUT2' is not an input of the model/);
    assert.match(reason, /INPUT0, INPUT1/);
    assert.match(failure('unknown_output'), /'OUTPUT9' is not an output of the model/);
  });

  it('a model input missing from the config is named', () => {
    const reason = failure('missing_input');
    assert.match(reason, /configuration expects 1 inputs, model provides 2/);
    assert.match(reason, /'INPUT1'/);
  });

  it('an input named differently in the config and the model names the tensors on both sides', () => {
    const reason = failure('renamed_input');
    assert.match(reason, /model input\(s\) 'INPUT1' are not in the configuration/);
    assert.match(reason, /configuration input\(s\) 'INPUT_B' are not inputs of the model/);
    assert.match(reason, /the configuration has 'INPUT0', 'INPUT_B', the model has 'INPUT0', 'INPUT1'/);
  });

  it('a non-zero max_batch_size for a model that cannot batch fails at auto-complete', () => {
    assert.match(failure('fixed_batching'), /model does not support batching while non-zero max_batch_size is specified/);
  });

  it("a config name that differs from the directory fails, naming both", () => {
    const reason = failure('wrong_name');
    assert.match(reason, /another_name/);
    assert.match(reason, /must equal the model directory name 'wrong_name'/);
  });

  it('an unparsable config reports file, line and column', () => {
    const reason = failure('unparsable');
    assert.match(reason, /config\.pbtxt:4:\d+: /);
    assert.match(failure('unknown_field'), /config\.pbtxt:3:\d+: .*max_batch_sizes/);
  });

  it('an unknown backend fails naming the available backends', () => {
    const reason = failure('unknown_backend');
    assert.match(reason, /'mybackend'/);
    assert.match(reason, /available backends: onnxruntime/);
  });

  it('a KIND_GPU instance group fails: the server does not support GPUs', () => {
    assert.match(failure('gpu_group'), /KIND_GPU but server does not support GPUs/);
  });

  it('a label file outside the model directory is refused', () => {
    const reason = failure('label_outside');
    assert.match(reason, /output 'OUTPUT0' label_filename '\.\.\/labels\.txt' is refused: a '\.\.' segment would leave the model directory/);
    assert.match(failure('label_missing'), /label file 'labels\.txt' cannot be read/);
  });

  it('a model without version directories fails: at least one version must be available', () => {
    assert.match(failure('no_version'), /at least one version must be available under the version policy of model 'no_version'/);
  });

  it('a version without its model file names the missing path', () => {
    assert.match(failure('missing_file'), /model\.onnx' does not exist/);
  });

  it('a directory whose backend cannot be derived fails', () => {
    assert.match(failure('no_backend'), /Could not determine backend for model 'no_backend'/);
  });

  it('model-level failures are part of the "no available versions" answer', async () => {
    assert.equal((await httpRequest(`${srv.url}/v2/models/wrong_name/ready`)).status, 400);
    const reply = await httpRequest(`${srv.url}/v2/models/wrong_name`);
    assert.equal(reply.status, 404);
    assert.match((jsonBody(reply) as { error: string }).error, /^Request for unknown model: 'wrong_name' has no available versions/);
  });
});
