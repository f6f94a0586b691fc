import test from 'node:test';
import assert from 'node:assert/strict';
import { CONFIG_DATATYPES } from '@nereid/protocol';
import type {
  BatchInput,
  BatchOutput,
  EnsembleStep,
  GraphSpec,
  ModelConfig,
  ModelDynamicBatching,
  ModelInput,
  ModelInstanceGroup,
  ModelOptimizationPolicy,
  ModelOutput,
  ModelQueuePolicy,
  ModelSequenceBatching,
  ModelWarmup,
  ModelWarmupInput,
  SequenceControl,
  SequenceInitialState,
  SequenceState,
  SequenceStrategyOldest,
} from './index.js';
import { MODEL_CONFIG_SCHEMA, type MessageSchema, reachableMessages } from './index.js';

const byName = new Map(reachableMessages().map((m) => [m.name, m]));
const message = (name: string): MessageSchema => {
  const m = byName.get(name);
  assert.ok(m, `no message ${name} in the schema`);
  return m;
};
const fieldNames = (name: string): string[] => message(name).fields.map((f) => f.name).sort();
const keys = (obj: object): string[] => Object.keys(obj).sort();

test('ModelConfig field numbers are those of models-and-scheduling.md §2.4', () => {
  const numbers = Object.fromEntries(MODEL_CONFIG_SCHEMA.fields.map((f) => [f.name, f.number]));
  assert.deepEqual(numbers, {
    name: 1, platform: 2, version_policy: 3, max_batch_size: 4, input: 5, output: 6, instance_group: 7,
    default_model_filename: 8, cc_model_filenames: 9, metric_tags: 10, dynamic_batching: 11, optimization: 12,
    sequence_batching: 13, parameters: 14, ensemble_scheduling: 15, model_warmup: 16, backend: 17,
    model_operations: 18, model_transaction_policy: 19, batch_input: 20, batch_output: 21,
    model_repository_agents: 23, response_cache: 24, runtime: 25, model_metrics: 26,
  });
  assert.deepEqual(MODEL_CONFIG_SCHEMA.oneofs, ['scheduling_choice']);
  assert.equal(MODEL_CONFIG_SCHEMA.field('max_batch_size')?.jsonName, 'maxBatchSize');
  assert.equal(MODEL_CONFIG_SCHEMA.fieldByJsonName('ccModelFilenames')?.name, 'cc_model_filenames');
});

test('the DataType enum matches the protocol package', () => {
  const dt = message('ModelInput').field('data_type');
  assert.ok(dt?.type === 'enum');
  assert.deepEqual(dt.enum.values.map((v) => v.name), CONFIG_DATATYPES);
  assert.deepEqual(dt.enum.values.map((v) => v.number), CONFIG_DATATYPES.map((_, i) => i));
});

test('the TypeScript types of model-config.ts and the schema name the same fields', () => {
  // Each literal is checked by the compiler to list exactly the keys of its type.
  const types: Record<string, object> = {
    ModelConfig: {
      name: 1, platform: 1, backend: 1, runtime: 1, version_policy: 1, max_batch_size: 1, input: 1, output: 1,
      batch_input: 1, batch_output: 1, optimization: 1, dynamic_batching: 1, sequence_batching: 1,
      ensemble_scheduling: 1, instance_group: 1, default_model_filename: 1, cc_model_filenames: 1, metric_tags: 1,
      parameters: 1, model_warmup: 1, model_operations: 1, model_transaction_policy: 1, model_repository_agents: 1,
      response_cache: 1, model_metrics: 1,
    } satisfies Record<keyof ModelConfig, 1>,
    ModelInput: {
      name: 1, data_type: 1, format: 1, dims: 1, reshape: 1, is_shape_tensor: 1, allow_ragged_batch: 1, optional: 1,
      is_non_linear_format_io: 1,
    } satisfies Record<keyof ModelInput, 1>,
    ModelOutput: {
      name: 1, data_type: 1, dims: 1, reshape: 1, label_filename: 1, is_shape_tensor: 1, is_non_linear_format_io: 1,
    } satisfies Record<keyof ModelOutput, 1>,
    BatchInput: { kind: 1, target_name: 1, data_type: 1, source_input: 1 } satisfies Record<keyof BatchInput, 1>,
    BatchOutput: { target_name: 1, kind: 1, source_input: 1 } satisfies Record<keyof BatchOutput, 1>,
    ModelInstanceGroup: {
      name: 1, kind: 1, count: 1, rate_limiter: 1, gpus: 1, secondary_devices: 1, profile: 1, passive: 1, host_policy: 1,
    } satisfies Record<keyof ModelInstanceGroup, 1>,
    ModelOptimizationPolicy: {
      graph: 1, priority: 1, cuda: 1, execution_accelerators: 1, input_pinned_memory: 1, output_pinned_memory: 1,
      gather_kernel_buffer_threshold: 1, eager_batching: 1,
    } satisfies Record<keyof ModelOptimizationPolicy, 1>,
    'ModelOptimizationPolicy.Cuda.GraphSpec': { batch_size: 1, input: 1, graph_lower_bound: 1 } satisfies Record<keyof GraphSpec, 1>,
    ModelQueuePolicy: {
      timeout_action: 1, default_timeout_microseconds: 1, allow_timeout_override: 1, max_queue_size: 1,
    } satisfies Record<keyof ModelQueuePolicy, 1>,
    ModelDynamicBatching: {
      preferred_batch_size: 1, max_queue_delay_microseconds: 1, preserve_ordering: 1, priority_levels: 1,
      default_priority_level: 1, default_queue_policy: 1, priority_queue_policy: 1,
    } satisfies Record<keyof ModelDynamicBatching, 1>,
    ModelSequenceBatching: {
      direct: 1, oldest: 1, max_sequence_idle_microseconds: 1, control_input: 1, state: 1, iterative_sequence: 1,
    } satisfies Record<keyof ModelSequenceBatching, 1>,
    'ModelSequenceBatching.Control': {
      kind: 1, int32_false_true: 1, fp32_false_true: 1, bool_false_true: 1, data_type: 1,
    } satisfies Record<keyof SequenceControl, 1>,
    'ModelSequenceBatching.InitialState': {
      data_type: 1, dims: 1, zero_data: 1, data_file: 1, name: 1,
    } satisfies Record<keyof SequenceInitialState, 1>,
    'ModelSequenceBatching.State': {
      input_name: 1, output_name: 1, data_type: 1, dims: 1, initial_state: 1, use_same_buffer_for_input_output: 1,
      use_growable_memory: 1,
    } satisfies Record<keyof SequenceState, 1>,
    'ModelSequenceBatching.StrategyOldest': {
      max_candidate_sequences: 1, preferred_batch_size: 1, max_queue_delay_microseconds: 1, preserve_ordering: 1,
    } satisfies Record<keyof SequenceStrategyOldest, 1>,
    'ModelEnsembling.Step': {
      model_name: 1, model_version: 1, input_map: 1, output_map: 1, model_namespace: 1,
    } satisfies Record<keyof EnsembleStep, 1>,
    ModelWarmup: { name: 1, batch_size: 1, inputs: 1, count: 1 } satisfies Record<keyof ModelWarmup, 1>,
    'ModelWarmup.Input': {
      data_type: 1, dims: 1, zero_data: 1, random_data: 1, input_data_file: 1,
    } satisfies Record<keyof ModelWarmupInput, 1>,
  };
  for (const [name, literal] of Object.entries(types)) assert.deepEqual(fieldNames(name), keys(literal), name);
});

test('the 64-bit fields are exactly those of the reference (models-and-scheduling.md §2.2)', () => {
  const found: string[] = [];
  const walk = (m: MessageSchema, prefix: string, seen: Set<MessageSchema>): void => {
    if (seen.has(m)) return;
    for (const f of m.fields) {
      const path = `${prefix}::${f.name}`;
      if (f.type === 'int64' || f.type === 'uint64') found.push(path);
      if (f.type === 'map') {
        if (f.key === 'int64' || f.key === 'uint64') found.push(`${path}::key`);
        if (f.value.type === 'message') walk(f.value.message, `${path}::value`, new Set([...seen, m]));
      }
      if (f.type === 'message') walk(f.message, path, new Set([...seen, m]));
    }
  };
  walk(MODEL_CONFIG_SCHEMA, 'ModelConfig', new Set());
  assert.deepEqual(found.sort(), [
    'ModelConfig::dynamic_batching::default_priority_level',
    'ModelConfig::dynamic_batching::default_queue_policy::default_timeout_microseconds',
    'ModelConfig::dynamic_batching::max_queue_delay_microseconds',
    'ModelConfig::dynamic_batching::priority_levels',
    'ModelConfig::dynamic_batching::priority_queue_policy::key',
    'ModelConfig::dynamic_batching::priority_queue_policy::value::default_timeout_microseconds',
    'ModelConfig::ensemble_scheduling::step::model_version',
    'ModelConfig::input::dims',
    'ModelConfig::input::reshape::shape',
    'ModelConfig::instance_group::secondary_devices::device_id',
    'ModelConfig::model_warmup::inputs::value::dims',
    'ModelConfig::optimization::cuda::graph_spec::graph_lower_bound::input::value::dim',
    'ModelConfig::optimization::cuda::graph_spec::input::value::dim',
    'ModelConfig::output::dims',
    'ModelConfig::output::reshape::shape',
    'ModelConfig::sequence_batching::direct::max_queue_delay_microseconds',
    'ModelConfig::sequence_batching::max_sequence_idle_microseconds',
    'ModelConfig::sequence_batching::oldest::max_queue_delay_microseconds',
    'ModelConfig::sequence_batching::state::dims',
    'ModelConfig::sequence_batching::state::initial_state::dims',
    'ModelConfig::version_policy::specific::versions',
  ]);
});

test('oneofs and map entries', () => {
  assert.deepEqual(message('ModelVersionPolicy').oneofs, ['policy_choice']);
  assert.deepEqual(message('ModelSequenceBatching').oneofs, ['strategy_choice']);
  assert.deepEqual(message('ModelSequenceBatching.InitialState').oneofs, ['state_data']);
  assert.deepEqual(message('ModelWarmup.Input').oneofs, ['input_data_type']);
  assert.deepEqual(message('ModelMetrics.MetricControl').oneofs, ['metric_options']);
  const pqp = message('ModelDynamicBatching').field('priority_queue_policy');
  assert.ok(pqp?.type === 'map');
  assert.equal(pqp.key, 'uint64');
  assert.equal(pqp.entry.name, 'ModelDynamicBatching.PriorityQueuePolicyEntry');
  assert.ok(pqp.entry.mapEntry);
  assert.equal(reachableMessages().length, 46);
});
