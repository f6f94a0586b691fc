// Our own corpus (fixtures/*.pbtxt): together the files set every field of every ModelConfig
// message; each must round-trip, and each has assertions on specific parsed values.
import test from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  MODEL_CONFIG_SCHEMA,
  type MessageSchema,
  type ModelConfig,
  type Sparse,
  modelConfigToJson,
  parseModelConfigText,
  printModelConfigText,
  reachableMessages,
  valueSchemaOf,
} from './index.js';
import { fixturesDir as fixturesPath } from './test-support.js';

const fixturesDir = fixturesPath();
const files = readdirSync(fixturesDir).filter((f) => f.endsWith('.pbtxt')).sort();
const parse = (file: string): Sparse<ModelConfig> =>
  parseModelConfigText(readFileSync(join(fixturesDir, file), 'utf8'), { fileName: file });

const CHECKS: Record<string, (c: Sparse<ModelConfig>) => void> = {
  '01-onnx-classifier.pbtxt': (c) => {
    assert.equal(c.max_batch_size, 16);
    assert.deepEqual(c.input?.[0]?.dims, [3, -1, -1]);
    assert.equal(c.output?.[0]?.label_filename, 'labels.txt');
    assert.deepEqual(c.dynamic_batching?.default_queue_policy, { max_queue_size: 64 });
    assert.deepEqual(c.dynamic_batching?.priority_queue_policy, {
      1: { timeout_action: 'DELAY', default_timeout_microseconds: 5000, allow_timeout_override: true },
    });
  },
  '02-stateful-direct.pbtxt': (c) => {
    assert.deepEqual(c.sequence_batching?.direct, {});
    assert.equal(c.sequence_batching?.max_sequence_idle_microseconds, 5000000);
    assert.deepEqual(c.sequence_batching?.control_input?.map((ci) => ci.name), ['START', 'READY', 'CORRID']);
    assert.deepEqual(c.sequence_batching?.control_input?.[2]?.control, [{ kind: 'CONTROL_SEQUENCE_CORRID', data_type: 'TYPE_UINT64' }]);
    assert.deepEqual(c.sequence_batching?.state?.[0]?.initial_state, [
      { data_type: 'TYPE_INT32', dims: [1], zero_data: true, name: 'zeros' },
    ]);
  },
  '03-ensemble-pipeline.pbtxt': (c) => {
    assert.equal(c.platform, 'ensemble');
    const steps = c.ensemble_scheduling?.step ?? [];
    assert.deepEqual(steps.map((s) => [s.model_name, s.model_version]), [['pre', -1], ['core', -1]]);
    assert.deepEqual(steps[1]?.input_map, { X: 'tensor_a' });
    assert.deepEqual(steps[0]?.output_map, { OUT: 'tensor_a' });
  },
  '04-version-policy-specific.pbtxt': (c) => {
    assert.deepEqual(c.version_policy, { specific: { versions: [1, 3] } });
    assert.equal(c.default_model_filename, 'resnet50.plan');
  },
  '05-version-policy-all.pbtxt': (c) => assert.deepEqual(c.version_policy, { all: {} }),
  '06-version-policy-latest.pbtxt': (c) => {
    assert.deepEqual(c.version_policy, { latest: { num_versions: 2 } });
    assert.deepEqual(c.input, [{ name: 'a', data_type: 'TYPE_UINT8', dims: [8] }]);
  },
  '07-image-formats.pbtxt': (c) => {
    assert.deepEqual(c.input?.map((i) => i.format), ['FORMAT_NHWC', 'FORMAT_NCHW', undefined, undefined, undefined]);
    assert.deepEqual(c.input?.[2]?.reshape, { shape: [] });
    assert.equal(c.input?.[3]?.allow_ragged_batch, true);
    assert.equal(c.input?.[4]?.optional, true);
    assert.deepEqual(c.output?.[0]?.reshape, { shape: [8, -1, 1, 6] });
  },
  '08-tensorrt-shape.pbtxt': (c) => {
    assert.deepEqual(c.input?.map((i) => i.is_shape_tensor ?? false), [false, true, false]);
    assert.equal(c.output?.[2]?.is_non_linear_format_io, true);
    assert.deepEqual(c.instance_group?.[0], {
      kind: 'KIND_GPU',
      count: 1,
      gpus: [0, 1],
      profile: ['0', '1'],
      secondary_devices: [{ kind: 'KIND_NVDLA', device_id: 0 }],
    });
  },
  '09-ragged-batching.pbtxt': (c) => {
    assert.equal(c.batch_input?.length, 6);
    assert.deepEqual(c.batch_input?.[4], { kind: 'BATCH_ITEM_SHAPE', target_name: ['SHAPE'], data_type: 'TYPE_INT32', source_input: ['TEXT'] });
    assert.deepEqual(c.batch_output, [{ target_name: ['OUT'], kind: 'BATCH_SCATTER_WITH_INPUT_SHAPE', source_input: ['TEXT'] }]);
    assert.deepEqual(c.dynamic_batching, {});
  },
  '10-instance-groups.pbtxt': (c) => {
    assert.deepEqual(c.instance_group?.[0]?.rate_limiter, {
      resources: [{ name: 'R1', global: true, count: 4 }, { name: 'R2', count: 2 }],
      priority: 2,
    });
    assert.equal(c.instance_group?.[0]?.host_policy, 'numa0');
    assert.equal(c.instance_group?.[1]?.passive, true);
    assert.deepEqual(c.instance_group?.[2], { kind: 'KIND_MODEL' });
  },
  '11-optimization-cuda.pbtxt': (c) => {
    const o = c.optimization;
    assert.deepEqual(o?.graph, { level: -1 });
    assert.equal(o?.priority, 'PRIORITY_MAX');
    assert.deepEqual(o?.cuda?.graph_spec?.[0], {
      batch_size: 4,
      input: { INPUT0: { dim: [16] } },
      graph_lower_bound: { batch_size: 1, input: { INPUT0: { dim: [8] } } },
    });
    assert.equal(o?.gather_kernel_buffer_threshold, 3);
    assert.equal(o?.eager_batching, true);
  },
  '12-execution-accelerators.pbtxt': (c) => {
    const ea = c.optimization?.execution_accelerators;
    assert.deepEqual(ea?.gpu_execution_accelerator?.[0]?.parameters, {
      precision_mode: 'FP16',
      max_workspace_size_bytes: '1073741824',
    });
    assert.deepEqual(ea?.cpu_execution_accelerator, [{ name: 'openvino' }]);
    assert.deepEqual(c.optimization?.input_pinned_memory, { enable: false });
  },
  '13-oldest-strategy.pbtxt': (c) => {
    assert.deepEqual(c.sequence_batching?.oldest, {
      max_candidate_sequences: 16,
      preferred_batch_size: [4, 8],
      max_queue_delay_microseconds: 1000,
      preserve_ordering: true,
    });
    assert.equal(c.sequence_batching?.iterative_sequence, true);
    assert.deepEqual(c.sequence_batching?.control_input?.[0]?.control?.[0]?.bool_false_true, [false, true]);
  },
  '14-sequence-controls.pbtxt': (c) => {
    assert.deepEqual(c.sequence_batching?.direct, { max_queue_delay_microseconds: 100, minimum_slot_utilization: 0.5 });
    assert.deepEqual(c.sequence_batching?.control_input?.[1]?.control?.[0]?.fp32_false_true, [0, 1]);
    assert.equal(c.sequence_batching?.control_input?.[3]?.control?.[0]?.data_type, 'TYPE_STRING');
  },
  '15-implicit-state.pbtxt': (c) => {
    const state = c.sequence_batching?.state?.[0];
    assert.deepEqual(state?.initial_state, [{ data_type: 'TYPE_FP32', dims: [2, 2], data_file: 'init.bin', name: 'from_file' }]);
    assert.equal(state?.use_same_buffer_for_input_output, true);
    assert.equal(state?.use_growable_memory, true);
  },
  '16-warmup.pbtxt': (c) => {
    const w = c.model_warmup?.[0];
    assert.equal(w?.batch_size, 2);
    assert.equal(w?.count, 3);
    assert.deepEqual(w?.inputs, {
      A: { data_type: 'TYPE_FP32', dims: [4], zero_data: true },
      B: { data_type: 'TYPE_INT32', dims: [2], random_data: true },
      C: { data_type: 'TYPE_STRING', dims: [1], input_data_file: 'c.bin' },
    });
  },
  '17-parameters.pbtxt': (c) => {
    assert.equal(c.runtime, 'model.py');
    assert.deepEqual(c.parameters, {
      EXECUTION_ENV_PATH: { string_value: '$$TRITON_MODEL_DIRECTORY/env.tar.gz' },
      threads: { string_value: '4' },
    });
    assert.deepEqual(c.metric_tags, { team: 'search', tier: 'gold' });
    assert.deepEqual(c.cc_model_filenames, { '7.5': 'model_sm75.plan', '8.0': 'model_sm80.plan' });
  },
  '18-python-decoupled.pbtxt': (c) => assert.deepEqual(c.model_transaction_policy, { decoupled: true }),
  '19-response-cache.pbtxt': (c) => assert.deepEqual(c.response_cache, { enable: true }),
  '20-model-operations.pbtxt': (c) =>
    assert.deepEqual(c.model_operations, { op_library_filename: ['libcustom_op.so', 'libother_op.so'] }),
  '21-repository-agents.pbtxt': (c) =>
    assert.deepEqual(c.model_repository_agents, {
      agents: [{ name: 'checksum', parameters: { 'MD5:model.onnx': '0123456789abcdef' } }, { name: 'decrypt' }],
    }),
  '22-model-metrics.pbtxt': (c) =>
    assert.deepEqual(c.model_metrics?.metric_control?.[0], {
      metric_identifier: { family: 'nv_inference_first_response_histogram_ms' },
      histogram_options: { buckets: [0.1, 0.001, 0.5, 2.5, 10, 100] },
    }),
  '23-ensemble-namespace.pbtxt': (c) => {
    assert.equal(c.ensemble_scheduling?.max_inflight_requests, 16);
    assert.equal(c.ensemble_scheduling?.step?.[0]?.model_namespace, 'team_a');
    assert.equal(c.ensemble_scheduling?.step?.[0]?.model_version, 2);
  },
  '24-priority-map-list.pbtxt': (c) => {
    assert.deepEqual(c.dynamic_batching?.priority_queue_policy, {
      1: { timeout_action: 'DELAY', default_timeout_microseconds: 200 },
      2: { max_queue_size: 7 },
    });
    assert.equal(c.dynamic_batching?.preserve_ordering, false);
  },
  '25-syntax-separators.pbtxt': (c) =>
    assert.deepEqual(c, {
      name: 'separators',
      backend: 'onnxruntime',
      max_batch_size: 2,
      input: [{ name: 'IN', data_type: 'TYPE_FP32', dims: [1] }],
      output: [{ name: 'OUT', data_type: 'TYPE_FP32', dims: [1] }],
      instance_group: [{ kind: 'KIND_CPU', count: 1 }],
    }),
  '26-syntax-strings.pbtxt': (c) => {
    assert.equal(c.name, 'single_quoted');
    assert.equal(c.parameters?.escapes?.string_value, 'tab\there\nnewline "quoted" back\\slash \'single\' ABé😀');
    assert.equal(c.parameters?.joined?.string_value, 'abcdefghi');
    assert.equal(c.parameters?.['utf8 ✓']?.string_value, 'naïve');
  },
  '27-syntax-numbers.pbtxt': (c) => {
    assert.equal(c.max_batch_size, 16);
    assert.deepEqual(c.input?.[0], {
      name: 'IN',
      data_type: 'TYPE_FP32',
      format: 'FORMAT_NONE',
      dims: [8, -1, 3],
      allow_ragged_batch: true,
      optional: false,
      is_shape_tensor: false,
      is_non_linear_format_io: false,
    });
    assert.deepEqual(c.instance_group, [{ kind: 'KIND_CPU', count: 1, passive: true }]);
    assert.equal(c.dynamic_batching?.max_queue_delay_microseconds, Number.MAX_SAFE_INTEGER);
  },
  '28-syntax-mixed-repeated.pbtxt': (c) => {
    assert.deepEqual(c.input?.map((i) => [i.name, i.dims]), [['A', [3, 224, 224]], ['B', [5]]]);
    assert.deepEqual(c.output?.[0]?.dims, [3, 224, 224]);
    assert.equal(c.output?.length, 1);
  },
  '29-empty-messages.pbtxt': (c) => {
    assert.deepEqual(c, {
      name: 'empties',
      backend: 'onnxruntime',
      version_policy: { all: {} },
      optimization: {},
      dynamic_batching: {},
      model_transaction_policy: {},
      response_cache: {},
      input: [],
    });
    assert.deepEqual(modelConfigToJson(c, { emitDefaults: false, int64AsString: true }), {
      name: 'empties',
      backend: 'onnxruntime',
      version_policy: { all: {} },
      optimization: {},
      dynamic_batching: {},
      model_transaction_policy: {},
      response_cache: {},
    });
  },
  '30-all-default.pbtxt': (c) => {
    assert.deepEqual(c, { name: '', max_batch_size: 0 });
    assert.deepEqual(modelConfigToJson(c, { emitDefaults: false, int64AsString: true }), {});
  },
  '31-float-specials.pbtxt': (c) => {
    assert.equal(c.sequence_batching?.direct?.minimum_slot_utilization, 0.1);
    const controls = c.sequence_batching?.control_input ?? [];
    assert.deepEqual(controls[0]?.control?.[0]?.fp32_false_true, [-Infinity, Infinity]);
    const end = controls[1]?.control?.[0]?.fp32_false_true ?? [];
    assert.ok(Number.isNaN(end[0]));
    assert.equal(end[1], Infinity, '1e39 overflows a float to inf');
    assert.ok(Object.is(c.model_metrics?.metric_control?.[0]?.histogram_options?.buckets?.[0], -0));
    assert.deepEqual(modelConfigToJson(c, { emitDefaults: false, int64AsString: false }).model_metrics, {
      metric_control: [{ metric_identifier: { family: 'custom' }, histogram_options: { buckets: [-0, 0.1, 1.5e300, 'Infinity'] } }],
    });
  },
  '32-tensorflow-savedmodel.pbtxt': (c) => {
    assert.equal(c.platform, 'tensorflow_savedmodel');
    assert.deepEqual(c.instance_group, [{ count: 2, kind: 'KIND_AUTO' }]);
  },
  '33-torch-aoti.pbtxt': (c) => {
    assert.equal(c.platform, 'torch_aoti');
    assert.deepEqual(c.instance_group, [{ kind: 'KIND_GPU', gpus: [0], host_policy: 'gpu_0' }]);
  },
};

test('hand corpus: at least 30 fixtures, each with value checks', () => {
  assert.ok(files.length >= 30, `expected at least 30 fixtures in ${fixturesDir}, found ${files.length}`);
  assert.deepEqual(files, Object.keys(CHECKS).sort(), 'every fixture has a check and every check a fixture');
});

for (const file of files) {
  test(`hand corpus: ${file} parses, has the expected values, and round-trips`, () => {
    const parsed = parse(file);
    CHECKS[file]?.(parsed);
    const printed = printModelConfigText(parsed);
    assert.deepStrictEqual(parseModelConfigText(printed, { fileName: `${file} (printed)` }), parsed, printed);
  });
}

/** `Message.field` for every field with a non-empty value somewhere in `value`. */
function collectSetFields(value: Record<string, unknown>, schema: MessageSchema, out: Set<string>): void {
  for (const field of schema.fields) {
    const v = value[field.name];
    if (v === undefined) continue;
    const element = valueSchemaOf(field);
    const items = field.type === 'map' ? Object.values(v as object) : field.repeated ? (v as unknown[]) : [v];
    if (items.length === 0) continue;
    out.add(`${schema.name}.${field.name}`);
    if (element.type === 'message') {
      for (const item of items) collectSetFields(item as Record<string, unknown>, element.message, out);
    }
  }
}

test('hand corpus: every field of every ModelConfig message is set by some fixture', () => {
  const set = new Set<string>();
  for (const file of files) collectSetFields(parse(file) as Record<string, unknown>, MODEL_CONFIG_SCHEMA, set);
  const all = reachableMessages(MODEL_CONFIG_SCHEMA).flatMap((m) => m.fields.map((f) => `${m.name}.${f.name}`));
  const missing = all.filter((f) => !set.has(f));
  assert.deepEqual(missing, [], `fields no fixture sets: ${missing.join(', ')}`);
  assert.ok(all.length > 150, `the schema walk found only ${all.length} fields`);
});
