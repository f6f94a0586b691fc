import test from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NereidError } from '@nereid/protocol';
import { completeModelConfig, modelConfigFromJson, modelConfigToJson, parseModelConfigText } from './index.js';
import { fixturesDir } from './test-support.js';

function jsonError(value: unknown): string {
  try {
    modelConfigFromJson(value);
  } catch (err) {
    assert.ok(err instanceof NereidError);
    assert.equal(err.code, 'CONFIG_PARSE');
    return err.message;
  }
  assert.fail(`expected modelConfigFromJson to fail for ${JSON.stringify(value)}`);
}

test('toJson: the example response of protocol.md §3.6, field for field and in order', () => {
  const config = completeModelConfig(
    parseModelConfigText(`
      name: "simple"
      backend: "onnxruntime"
      version_policy { latest { num_versions: 1 } }
      max_batch_size: 8
      input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
      output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
      optimization { input_pinned_memory { enable: true } output_pinned_memory { enable: true } }
      dynamic_batching { }
      instance_group [ { name: "simple_0" kind: KIND_CPU count: 1 } ]
      default_model_filename: "model.onnx"
    `),
  );
  const expected = {
    name: 'simple',
    platform: '',
    backend: 'onnxruntime',
    runtime: '',
    version_policy: { latest: { num_versions: 1 } },
    max_batch_size: 8,
    input: [
      {
        name: 'INPUT0',
        data_type: 'TYPE_INT32',
        format: 'FORMAT_NONE',
        dims: [16],
        is_shape_tensor: false,
        allow_ragged_batch: false,
        optional: false,
        is_non_linear_format_io: false,
      },
    ],
    output: [
      { name: 'OUTPUT0', data_type: 'TYPE_INT32', dims: [16], label_filename: '', is_shape_tensor: false, is_non_linear_format_io: false },
    ],
    batch_input: [],
    batch_output: [],
    optimization: {
      priority: 'PRIORITY_DEFAULT',
      input_pinned_memory: { enable: true },
      output_pinned_memory: { enable: true },
      gather_kernel_buffer_threshold: 0,
      eager_batching: false,
    },
    dynamic_batching: {
      preferred_batch_size: [],
      max_queue_delay_microseconds: 0,
      preserve_ordering: false,
      priority_levels: 0,
      default_priority_level: 0,
      priority_queue_policy: {},
    },
    instance_group: [
      { name: 'simple_0', kind: 'KIND_CPU', count: 1, gpus: [], secondary_devices: [], profile: [], passive: false, host_policy: '' },
    ],
    default_model_filename: 'model.onnx',
    cc_model_filenames: {},
    metric_tags: {},
    parameters: {},
    model_warmup: [],
  };
  const json = modelConfigToJson(config, { emitDefaults: true, int64AsString: false });
  assert.deepStrictEqual(json, expected);
  assert.equal(JSON.stringify(json), JSON.stringify(expected), 'same key order as the reference');
  // emitDefaults also works on a sparse config: the same output without completing first.
  assert.deepStrictEqual(modelConfigToJson(parseModelConfigText('name: "simple"'), { emitDefaults: true, int64AsString: false }).batch_input, []);
});

test('toJson: 64-bit integers as numbers or strings; map keys are always strings', () => {
  const c = parseModelConfigText(`
    input { name: "x" data_type: TYPE_FP32 dims: [ -1, 3 ] }
    dynamic_batching { max_queue_delay_microseconds: 100 priority_levels: 2 default_priority_level: 1
      priority_queue_policy { key: 2 value { default_timeout_microseconds: 7 max_queue_size: 3 } } }
  `);
  assert.deepEqual(modelConfigToJson(c, { emitDefaults: false, int64AsString: true }), {
    input: [{ name: 'x', data_type: 'TYPE_FP32', dims: ['-1', '3'] }],
    dynamic_batching: {
      max_queue_delay_microseconds: '100',
      priority_levels: '2',
      default_priority_level: '1',
      priority_queue_policy: { 2: { default_timeout_microseconds: '7', max_queue_size: 3 } },
    },
  });
  assert.deepEqual(modelConfigToJson(c, { emitDefaults: false, int64AsString: false }).dynamic_batching, {
    max_queue_delay_microseconds: 100,
    priority_levels: 2,
    default_priority_level: 1,
    priority_queue_policy: { 2: { default_timeout_microseconds: 7, max_queue_size: 3 } },
  });
});

test('toJson: an all-default config is {} without emitDefaults; oneof members print even when default', () => {
  assert.deepEqual(modelConfigToJson({}, { emitDefaults: false, int64AsString: false }), {});
  assert.deepEqual(modelConfigToJson(completeModelConfig({}), { emitDefaults: false, int64AsString: false }), {});
  assert.deepEqual(
    modelConfigToJson(parseModelConfigText('name: "" max_batch_size: 0 input [ ] parameters [ ] backend: ""'), {
      emitDefaults: false,
      int64AsString: true,
    }),
    {},
  );
  const c = parseModelConfigText('sequence_batching { state { initial_state { zero_data: false } } }');
  assert.deepEqual(modelConfigToJson(c, { emitDefaults: false, int64AsString: true }), {
    sequence_batching: { state: [{ initial_state: [{ zero_data: false }] }] },
  });
  const full = modelConfigToJson(c, { emitDefaults: true, int64AsString: false }) as {
    sequence_batching: { state: { initial_state: Record<string, unknown>[] }[] };
  };
  assert.deepEqual(full.sequence_batching.state[0]?.initial_state[0], { data_type: 'TYPE_INVALID', dims: [], zero_data: false, name: '' });
});

test('fromJson: lowerCamelCase and snake_case names, strings for 64-bit, enums by any case or number', () => {
  const c = modelConfigFromJson({
    name: 'm',
    maxBatchSize: 8,
    input: [{ name: 'x', dataType: 'type_fp32', format: 2, dims: ['-1', 3], isShapeTensor: false }],
    dynamicBatching: {
      maxQueueDelayMicroseconds: '100',
      priority_levels: 2,
      defaultPriorityLevel: '1',
      priorityQueuePolicy: { 2: { timeoutAction: 'delay', defaultTimeoutMicroseconds: '5' } },
    },
    sequence_batching: null,
    modelTransactionPolicy: { decoupled: true },
    model_metrics: { metricControl: [{ histogramOptions: { buckets: [0.5, '2', 'Infinity'] } }] },
    instanceGroup: [{ kind: 'KIND_CPU', count: '2', secondaryDevices: [{ deviceId: '7' }] }],
  });
  assert.deepEqual(c, {
    name: 'm',
    max_batch_size: 8,
    input: [{ name: 'x', data_type: 'TYPE_FP32', format: 'FORMAT_NCHW', dims: [-1, 3], is_shape_tensor: false }],
    dynamic_batching: {
      max_queue_delay_microseconds: 100,
      priority_levels: 2,
      default_priority_level: 1,
      priority_queue_policy: { 2: { timeout_action: 'DELAY', default_timeout_microseconds: 5 } },
    },
    model_transaction_policy: { decoupled: true },
    model_metrics: { metric_control: [{ histogram_options: { buckets: [0.5, 2, Infinity] } }] },
    instance_group: [{ kind: 'KIND_CPU', count: 2, secondary_devices: [{ device_id: 7 }] }],
  });
  assert.deepEqual(modelConfigFromJson('{"name":"from-text","version_policy":{"all":{}}}'), { name: 'from-text', version_policy: { all: {} } });
});

test('fromJson: errors', () => {
  assert.equal(jsonError({ name: 'm', maxBatch: 1 }), "model configuration JSON at 'maxBatch': unknown field 'maxBatch' in message ModelConfig");
  assert.equal(
    jsonError({ input: [{ name: 'x', shape: [1] }] }),
    "model configuration JSON at 'input[0].shape': unknown field 'shape' in message ModelInput",
  );
  assert.equal(
    jsonError({ dynamic_batching: {}, sequenceBatching: {} }),
    "model configuration JSON at 'sequenceBatching': fields 'dynamic_batching' and 'sequence_batching' are members of the same oneof 'scheduling_choice'; only one may be set",
  );
  assert.equal(
    jsonError({ version_policy: { latest: {}, specific: { versions: [1] } } }),
    "model configuration JSON at 'version_policy.specific': fields 'latest' and 'specific' are members of the same oneof 'policy_choice'; only one may be set",
  );
  assert.equal(
    jsonError({ max_batch_size: 1, maxBatchSize: 2 }),
    "model configuration JSON at 'maxBatchSize': field 'max_batch_size' is given twice (as 'max_batch_size' and 'maxBatchSize')",
  );
  assert.equal(jsonError({ max_batch_size: 1.5 }), "model configuration JSON at 'max_batch_size': expected an integer (int32), got 1.5");
  assert.equal(jsonError({ max_batch_size: '1e99x' }), `model configuration JSON at 'max_batch_size': expected an integer (int32), got "1e99x"`);
  assert.equal(
    jsonError({ max_batch_size: 2 ** 31 }),
    "model configuration JSON at 'max_batch_size': value 2147483648 is out of range for int32 (-2147483648 to 2147483647)",
  );
  assert.equal(
    jsonError({ input: [{ dims: ['9007199254740993'] }] }),
    "model configuration JSON at 'input[0].dims[0]': value 9007199254740993 (int64) cannot be represented exactly; Nereid accepts 64-bit integers only up to magnitude 9007199254740991 (2^53-1)",
  );
  assert.equal(
    jsonError({ input: [{ data_type: 'FLOAT32' }] }),
    `model configuration JSON at 'input[0].data_type': unknown value "FLOAT32" of enum DataType`,
  );
  assert.equal(jsonError({ instance_group: [{ kind: 9 }] }), "model configuration JSON at 'instance_group[0].kind': unknown number 9 of enum ModelInstanceGroup.Kind");
  assert.equal(jsonError({ input: {} }), "model configuration JSON at 'input': expected an array for repeated field 'input', got {}");
  assert.equal(jsonError({ parameters: { k: 'v' } }), `model configuration JSON at 'parameters["k"]': expected an object for message ModelParameter, got "v"`);
  assert.equal(
    jsonError({ dynamic_batching: { priority_queue_policy: { one: {} } } }),
    `model configuration JSON at 'dynamic_batching.priority_queue_policy["one"]': expected an integer (uint64), got "one"`,
  );
  assert.equal(jsonError({ response_cache: { enable: 'true' } }), `model configuration JSON at 'response_cache.enable': expected true or false, got "true"`);
  assert.equal(jsonError([]), 'model configuration JSON: expected an object for message ModelConfig, got []');
  assert.match(jsonError('{"name": '), /^model configuration JSON: /);
});

test('JSON round trip of every hand-corpus fixture, sparse and complete', () => {
  const dir = fixturesDir();
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.pbtxt'))) {
    const parsed = parseModelConfigText(readFileSync(join(dir, file), 'utf8'));
    for (const int64AsString of [true, false]) {
      const sparse = modelConfigToJson(parsed, { emitDefaults: false, int64AsString });
      // As text (JSON.stringify writes -0 as 0, so compare with what the text carries) ...
      const text = JSON.stringify(sparse);
      assert.deepStrictEqual(modelConfigToJson(modelConfigFromJson(text), { emitDefaults: false, int64AsString }), JSON.parse(text), file);
      // ... and as a value, which is exact.
      assert.deepStrictEqual(modelConfigToJson(modelConfigFromJson(sparse), { emitDefaults: false, int64AsString }), sparse, file);
      const complete = completeModelConfig(parsed);
      const full = modelConfigToJson(complete, { emitDefaults: true, int64AsString });
      assert.deepStrictEqual(completeModelConfig(modelConfigFromJson(full)), complete, file);
    }
  }
});

test('completeModelConfig: fills scalars, lists and maps recursively; sub-messages and oneof members stay absent', () => {
  const input = parseModelConfigText('input { name: "x" } sequence_batching { state { initial_state { } } } parameters { key: "k" value { } }');
  const snapshot = structuredClone(input);
  const c = completeModelConfig(input);
  assert.deepStrictEqual(input, snapshot, 'input is not modified');
  assert.equal(c.max_batch_size, 0);
  assert.equal(c.platform, '');
  assert.deepEqual(c.instance_group, []);
  assert.deepEqual(c.cc_model_filenames, {});
  assert.equal(c.version_policy, undefined);
  assert.equal(c.dynamic_batching, undefined);
  assert.equal(c.optimization, undefined);
  assert.deepEqual(c.input[0], {
    name: 'x',
    data_type: 'TYPE_INVALID',
    format: 'FORMAT_NONE',
    dims: [],
    is_shape_tensor: false,
    allow_ragged_batch: false,
    optional: false,
    is_non_linear_format_io: false,
  });
  assert.ok(!('reshape' in c.input[0]!));
  assert.deepEqual(c.sequence_batching?.state[0]?.initial_state[0], { data_type: 'TYPE_INVALID', dims: [], name: '' });
  assert.equal(c.sequence_batching?.direct, undefined);
  assert.equal(c.sequence_batching?.max_sequence_idle_microseconds, 0);
  assert.deepEqual(c.parameters, { k: { string_value: '' } });
});
