/**
 * The model configuration endpoint (protocol.md §3.6): the complete normalised config as JSON,
 * every scalar, repeated and map field present, 64-bit integers as numbers.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { simpleModel } from '@nereid/testkit';
import { httpRequest, jsonBody, makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';

/** Top-level keys of protocol.md §3.6's example, less `dynamic_batching` (a sub-message, set there). */
const TOP_LEVEL_KEYS = [
  'name', 'platform', 'backend', 'runtime', 'version_policy', 'max_batch_size', 'input', 'output', 'batch_input',
  'batch_output', 'optimization', 'instance_group', 'default_model_filename', 'cc_model_filenames', 'metric_tags',
  'parameters', 'model_warmup',
];

const BATCHING_CONFIG =
  simpleModel({ name: 'batching' }).config +
  `dynamic_batching {
  max_queue_delay_microseconds: 100
}
version_policy: { specific: { versions: [ 1, 2 ] } }
instance_group [ { kind: KIND_CPU, count: 1 } ]
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
`;

let repo: string;
let srv: RunningServer;

before(async () => {
  const simple = simpleModel();
  const batching = simpleModel({ name: 'batching' });
  repo = await makeRepository({
    simple: { 'config.pbtxt': simple.config!, '1/model.onnx': simple.onnx.bytes },
    batching: { 'config.pbtxt': BATCHING_CONFIG, '1/model.onnx': batching.onnx.bytes, '2/model.onnx': batching.onnx.bytes },
  });
  srv = await startServer({ modelRepositories: [repo] });
});

after(async () => {
  await srv?.stop();
  await removeDir(repo);
});

async function config(path: string): Promise<Record<string, unknown>> {
  const reply = await httpRequest(srv.url + path);
  assert.equal(reply.status, 200, reply.text);
  return jsonBody(reply) as Record<string, unknown>;
}

describe('model config endpoint', () => {
  it('returns exactly the complete normalised config of a small batching model', async () => {
    const body = await config('/v2/models/simple/config');
    assert.deepEqual(Object.keys(body), TOP_LEVEL_KEYS);
    const tensorIn = (name: string) => ({
      name,
      data_type: 'TYPE_INT32',
      format: 'FORMAT_NONE',
      dims: [16],
      is_shape_tensor: false,
      allow_ragged_batch: false,
      optional: false,
      is_non_linear_format_io: false,
    });
    const tensorOut = (name: string) => ({
      name,
      data_type: 'TYPE_INT32',
      dims: [16],
      label_filename: '',
      is_shape_tensor: false,
      is_non_linear_format_io: false,
    });
    assert.deepEqual(body, {
      name: 'simple',
      platform: 'onnxruntime_onnx',
      backend: 'onnxruntime',
      runtime: '',
      version_policy: { latest: { num_versions: 1 } },
      max_batch_size: 8,
      input: [tensorIn('INPUT0'), tensorIn('INPUT1')],
      output: [tensorOut('OUTPUT0'), tensorOut('OUTPUT1')],
      batch_input: [],
      batch_output: [],
      optimization: {
        priority: 'PRIORITY_DEFAULT',
        input_pinned_memory: { enable: true },
        output_pinned_memory: { enable: true },
        gather_kernel_buffer_threshold: 0,
        eager_batching: false,
      },
      // §3.3: an unspecified group on a CPU-only server, 2 instances for onnxruntime.
      instance_group: [
        { name: 'simple', kind: 'KIND_CPU', count: 2, gpus: [], secondary_devices: [], profile: [], passive: false, host_policy: '' },
      ],
      default_model_filename: 'model.onnx',
      cc_model_filenames: {},
      metric_tags: {},
      parameters: {},
      model_warmup: [],
    });
  });

  it('has application/json as content type, and 405 for POST', async () => {
    let reply = await httpRequest(`${srv.url}/v2/models/simple/config`);
    assert.equal(reply.headers.get('content-type'), 'application/json');
    reply = await httpRequest(`${srv.url}/v2/models/simple/config`, { method: 'POST', body: '{}' });
    assert.equal(reply.status, 405);
  });

  it('emits set sub-messages with all their fields, and 64-bit fields as JSON numbers', async () => {
    const body = await config('/v2/models/batching/config');
    assert.deepEqual(Object.keys(body), [...TOP_LEVEL_KEYS.slice(0, 11), 'dynamic_batching', ...TOP_LEVEL_KEYS.slice(11)]);
    assert.deepEqual(body.dynamic_batching, {
      preferred_batch_size: [8],
      max_queue_delay_microseconds: 100,
      preserve_ordering: false,
      priority_levels: 0,
      default_priority_level: 0,
      priority_queue_policy: {},
    });
    assert.deepEqual(body.version_policy, { specific: { versions: [1, 2] } });
    assert.deepEqual(body.instance_group, [
      { name: 'batching_0', kind: 'KIND_CPU', count: 1, gpus: [], secondary_devices: [], profile: [], passive: false, host_policy: '' },
    ]);
    assert.deepEqual(body.parameters, { intra_op_thread_count: { string_value: '1' } });
    const input = (body.input as { dims: unknown[] }[])[0]!;
    assert.equal(typeof input.dims[0], 'number');
  });

  it('serves the config of a named version, and 404s for unknown ones', async () => {
    const v2 = await config('/v2/models/batching/versions/2/config');
    assert.equal(v2.name, 'batching');
    let reply = await httpRequest(`${srv.url}/v2/models/batching/versions/3/config`);
    assert.equal(reply.status, 404);
    assert.deepEqual(jsonBody(reply), { error: "Request for unknown model: 'batching' version 3 is not found" });
    reply = await httpRequest(`${srv.url}/v2/models/none/config`);
    assert.equal(reply.status, 404);
    assert.deepEqual(jsonBody(reply), { error: "Request for unknown model: 'none' is not found" });
    reply = await httpRequest(`${srv.url}/v2/models/batching/versions/abc/config`);
    assert.equal(reply.status, 404);
    assert.deepEqual(jsonBody(reply), { error: 'Not Found' });
  });
});
